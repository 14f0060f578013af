/**
 * The part pipeline of an S3 multipart upload, independent of S3 itself.
 *
 * One reader fills part buffers from the source strictly in order, hashing every byte into the
 * whole-object SHA-256 as it goes; each filled part is handed to `sendPart` while the reader
 * goes on with the next one. At most `window` parts are in memory at once — a part holds its
 * buffer from the moment it is read until its response arrives — so memory is bounded by
 * `window` × `partSize` whatever the object's size. Responses may arrive in any order: each
 * ETag is stored under its part number, and the completed list is sorted by number, so neither
 * the part order nor the digest can depend on timing.
 *
 * Parts are numbered 1..`maxParts` (10,000 on S3). After a full last-allowed part the reader
 * reads once more: end of input completes normally, while data means the object does not fit —
 * {@link PartLimitExceeded}, before that part is sent.
 *
 * A resumed upload passes the parts it may trust (acknowledged in the checkpoint and still listed
 * by S3): each is re-read and its SHA-256 compared; a match is kept without sending, a mismatch
 * is sent again.
 *
 * On the first failure (a part refused, the source failing, the signal aborting) no new part
 * starts, the parts in flight are cancelled through the shared signal, and once every one has
 * settled the first error is thrown — so nothing keeps running behind a failed upload.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { debuglog } from 'node:util';
import { raceAbort } from './abort.js';
import type { BufferSlots } from './buffer-pool.js';
import { PartLimitExceeded, SourceChanged } from './errors.js';
import type { ChunkSource } from './source.js';

const debug = debuglog('provcat:lake');

/** A part that may be kept without sending it again. */
export interface TrustedPart {
  etag: string;
  sha256: string;
}

/** What {@link runParts} needs. */
export interface PartsOptions {
  source: ChunkSource;
  slots: BufferSlots;
  partSize: number;
  /** Highest part number allowed (10,000 on S3). */
  maxParts: number;
  /** Aborting it stops the pipeline; it is aborted by the pipeline on the first failure. */
  controller: AbortController;
  /** Send one part; resolve with its ETag. Must honour `signal`. */
  sendPart(number: number, bytes: Buffer, signal: AbortSignal): Promise<string>;
  /** Compute each part's SHA-256 (needed for checkpoints and trusted parts). */
  partDigests: boolean;
  /** Parts already acknowledged, by number (a resumed upload). */
  trusted?: ReadonlyMap<number, TrustedPart> | undefined;
  /** Called after a part is acknowledged (or a trusted part verified), before its bytes count as done. */
  onPart?:
    | ((part: {
        number: number;
        etag: string;
        sha256: string | undefined;
        sent: boolean;
      }) => Promise<void>)
    | undefined;
  /** Called with the cumulative bytes acknowledged. */
  onBytes?: ((bytes: number) => void) | undefined;
  /** For a path source of known size: the source must have exactly this many bytes. */
  expectedSize?: number | undefined;
  /** A label for messages (the destination URI). */
  uri: string;
}

/** What {@link runParts} produced. */
export interface PartsResult {
  /** `{ number, etag }` for parts 1..n in order; empty for an empty source. */
  parts: Array<{ number: number; etag: string }>;
  /** Bytes read from the source. */
  size: number;
  /** SHA-256 (hex) of every byte read, in order. */
  sha256: string;
  /** Parts actually sent (trusted parts are not). */
  sent: number;
}

/** Run the pipeline; see the module comment. */
export async function runParts(options: PartsOptions): Promise<PartsResult> {
  const { source, slots, partSize, maxParts, controller, uri, expectedSize } = options;
  const signal = controller.signal;
  const hash = createHash('sha256');
  const etags = new Map<number, string>();
  const inflight = new Set<Promise<void>>();
  let failure: { error: unknown } | undefined;
  let size = 0;
  let done = 0;
  let sent = 0;
  let count = 0;

  const fail = (error: unknown) => {
    if (!failure) failure = { error };
    if (!signal.aborted) controller.abort(error);
  };
  const acknowledge = async (
    number: number,
    etag: string,
    sha256: string | undefined,
    n: number,
    sent: boolean,
  ) => {
    etags.set(number, etag);
    await options.onPart?.({ number, etag, sha256, sent });
    done += n;
    options.onBytes?.(done);
  };

  try {
    for (let number = 1; ; number++) {
      if (failure) break;
      const buffer = await slots.acquire(signal);
      let n: number;
      try {
        n = await raceAbort(source.fill(buffer, partSize), signal);
      } catch (error) {
        slots.release(buffer);
        throw error;
      }
      if (n === 0) {
        slots.release(buffer);
        break;
      }
      if (number > maxParts) {
        slots.release(buffer);
        throw new PartLimitExceeded(
          `${uri}: the source needs more than ${maxParts} parts of ${partSize} bytes (at most ${maxParts * partSize} bytes)`,
          { uri },
        );
      }
      if (expectedSize !== undefined && size + n > expectedSize) {
        slots.release(buffer);
        throw new SourceChanged(
          `${uri}: the source grew beyond ${expectedSize} bytes while it was read`,
          { uri },
        );
      }
      const bytes = buffer.subarray(0, n);
      hash.update(bytes);
      size += n;
      count = number;
      const partSha = options.partDigests
        ? createHash('sha256').update(bytes).digest('hex')
        : undefined;
      const trusted = options.trusted?.get(number);
      if (trusted !== undefined && trusted.sha256 === partSha) {
        slots.release(buffer);
        await acknowledge(number, trusted.etag, partSha, n, false);
      } else {
        if (trusted !== undefined)
          debug('%s: part %d differs from the checkpoint; sending it again', uri, number);
        sent++;
        const task = (async () => {
          try {
            const etag = await options.sendPart(number, bytes, signal);
            await acknowledge(number, etag, partSha, n, true);
          } catch (error) {
            fail(error);
          } finally {
            slots.release(buffer);
          }
        })();
        inflight.add(task);
        void task.finally(() => inflight.delete(task));
      }
      if (n < partSize) break;
    }
  } catch (error) {
    fail(error);
  }
  await Promise.allSettled([...inflight]);
  if (failure) throw failure.error;
  if (expectedSize !== undefined && size !== expectedSize) {
    throw new SourceChanged(
      `${uri}: the source had ${size} bytes, not the ${expectedSize} it had when the upload began`,
      { uri },
    );
  }
  const parts: Array<{ number: number; etag: string }> = [];
  for (let number = 1; number <= count; number++) {
    const etag = etags.get(number);
    if (etag === undefined) throw new Error(`internal: part ${number} of ${uri} has no ETag`);
    parts.push({ number, etag });
  }
  return { parts, size, sha256: hash.digest('hex'), sent };
}
