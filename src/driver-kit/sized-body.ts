/**
 * Bodies of a declared length on the wire, for SDKs that stream them: a put sent as one request,
 * and a download's body.
 *
 * The rule of every `_put`: a source that is not exactly its declared size fails with
 * `SourceError` and nothing is written (src/driver-kit/exact-bytes.ts counts the bytes). With one request
 * that is not enough: a request of `Content-Length: size` whose body ends short waits for the
 * missing bytes, and SDKs read a stream body with `pipe()`, which leaves the stream's errors to
 * its owner. So {@link sendSized} also aborts the request when the source fails or runs short,
 * and the source's error wins over the request's (the caller's abort excepted). The rule of every
 * `_get`: a body never comes back short; an SDK that reports a dropped connection as an
 * AbortError (Azure's on Node 20) or ends early gets {@link exactDownload}.
 *
 * @module
 */
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import type { PutSource } from '../contract/primitives.js';
import { asAbort, SourceError, StoreError } from '../core/errors.js';
import { exactBytes } from './exact-bytes.js';

/** What {@link sendSized} hands the request: bytes, or a factory of the checked stream. */
export type SizedBody = Buffer | (() => Readable);

/**
 * Run `send` (one request) with `source` as a body of exactly `size` bytes. Bytes go as they are;
 * a file as a fresh checked stream per call of the factory (an SDK may retry); a stream once (a
 * second call throws `SourceError`). The request's signal aborts with `signal` and when the source
 * fails; a failure of the source rejects with its `SourceError` rather than the request's error.
 */
export async function sendSized<T>(
  source: PutSource,
  size: number,
  signal: AbortSignal | undefined,
  send: (body: SizedBody, signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const request = new AbortController();
  const onAbort = () => request.abort(signal?.reason);
  if (signal?.aborted) onAbort();
  signal?.addEventListener('abort', onAbort, { once: true });
  let failed: unknown;
  const checked = (input: Readable) =>
    Readable.from(exactBytes(input, size), { objectMode: false, signal }).on('error', (error) => {
      failed ??= error;
      request.abort(error);
    });
  let sent = false;
  const body: SizedBody =
    source instanceof Uint8Array
      ? Buffer.from(source.buffer, source.byteOffset, source.byteLength)
      : typeof source === 'string'
        ? () => checked(createReadStream(source))
        : () => {
            if (sent) throw new SourceError('a stream source cannot be sent twice');
            sent = true;
            return checked(source);
          };
  try {
    return await send(body, request.signal);
  } catch (error) {
    if (signal?.aborted) throw asAbort(error, signal);
    throw failed ?? error;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * `source`, a download body that must be exactly `size` bytes, as a Readable that fails with a
 * `StoreError` naming `what` (the operation and URI) when it ends short, runs long or drops,
 * unless `signal` aborted it (then the abort stands).
 */
export function exactDownload(
  source: Readable,
  size: number,
  signal: AbortSignal | undefined,
  what: { op: string; uri: string },
): Readable {
  async function* checked() {
    try {
      yield* exactBytes(source, size);
    } catch (cause) {
      if (signal?.aborted) throw asAbort(cause, signal);
      const message = `${what.op} ${what.uri}: the download failed (${(cause as Error).message})`;
      throw new StoreError(message, { uri: what.uri, cause });
    }
  }
  return Readable.from(checked(), { objectMode: false, signal });
}
