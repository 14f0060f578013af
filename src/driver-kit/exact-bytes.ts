/**
 * The byte counts every driver holds a transfer to, written once: a byte range is a well-formed
 * `[start, end)` before any request goes out, and a put's source is exactly its declared size.
 *
 * A source that is longer or shorter than it said would make the store keep an object of some
 * other size (or wait for bytes that never come), so the check sits between the source and the
 * request: the request fails with {@link SourceError} and no object is written. A failure of the
 * source itself is the caller's, not the store's: it is a SourceError too, so it is never
 * retried (src/core/retry.ts) nor reported as the store's fault.
 *
 * @module
 */
import type { ByteRange } from '../contract/primitives.js';
import { isAbort, ProvcatError, SourceError } from '../core/errors.js';

/**
 * Throw RangeError unless `range` (when given) is whole numbers with `0 ≤ start < end`. A driver
 * calls it first in `_get`, so a bad range sends nothing.
 */
export function checkByteRange(range: ByteRange | undefined): void {
  if (
    range &&
    !(
      Number.isSafeInteger(range.start) &&
      Number.isSafeInteger(range.end) &&
      range.start >= 0 &&
      range.end > range.start
    )
  ) {
    throw new RangeError(`bad byte range [${range.start}, ${range.end})`);
  }
}

/**
 * The chunks of `source`, counted: when `size` is given, SourceError as soon as it is exceeded
 * (the excess chunk is not passed on) and at the end when it was not reached. A failing source
 * is a SourceError with the failure as `cause` (aborts and provcat errors pass unchanged).
 * `onProgress` gets the bytes passed on so far, after each chunk is taken.
 */
export async function* exactBytes(
  source: AsyncIterable<Uint8Array>,
  size: number | undefined,
  onProgress?: (bytes: number) => void,
): AsyncIterable<Uint8Array> {
  let seen = 0;
  try {
    for await (const chunk of source) {
      seen += chunk.byteLength;
      if (size !== undefined && seen > size) break;
      yield chunk;
      onProgress?.(seen);
    }
  } catch (cause) {
    if (isAbort(cause) || cause instanceof ProvcatError) throw cause;
    throw new SourceError(`the source failed: ${(cause as Error).message}`, { cause });
  }
  if (size !== undefined && seen > size) {
    throw new SourceError(`the source is longer than its declared size of ${size} bytes`);
  }
  if (size !== undefined && seen < size) {
    throw new SourceError(`the source ended after ${seen} of its declared ${size} bytes`);
  }
}
