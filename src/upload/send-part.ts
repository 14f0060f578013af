/**
 * Sending one part of an upload for the upload engine (engine.ts): its attempts, its resends, and
 * what of it counts as progress for the stall watchdog.
 *
 * **Retries** follow the one policy (src/core/retry.ts). A part in memory is retried by the
 * driver's SDK; a file part, whose body is a stream the SDK cannot rewind, is sent again from here
 * with a fresh stream of its range — but never once the stall watchdog fired (its abort cancels
 * the attempts). An SDK that resends a body itself (Azure's) is given a body factory instead
 * (`restream`), which reads the range from disk again for each of its attempts: every part body,
 * on every driver, can be sent again.
 *
 * **Progress.** A part moves when its request reads body bytes beyond what any earlier attempt of
 * that part had read (a resend is not progress), and when the store acknowledges it. A body that
 * fails (the file cannot be read, or changed) also ends its request, whose server would otherwise
 * wait for the missing bytes.
 *
 * @module
 */
import type { Readable } from 'node:stream';
import { RETRY_ATTEMPTS, withRetries } from '../core/retry.js';
import type { Part } from './part-source.js';
import { linkedController, type UploadTarget } from './requests.js';
import type { Watchdog } from './watchdog.js';

/** Options of {@link sendPart}. */
export interface SendPartOptions {
  /** Where the part goes. */
  target: UploadTarget;
  /** The protocol's reference to the upload. */
  upload: string;
  /** Offset of the part's first byte in the object. */
  offset: number;
  /** Aborts every attempt (the upload failed, stalled or was cancelled). */
  signal: AbortSignal;
  /** The upload's stall clock: told when the part starts, moves and ends. */
  watchdog: Watchdog;
}

/**
 * Send one part; resolve with its token once the store acknowledged it and the source confirmed
 * what was sent. A resendable part is sent again after a retryable failure, unless `signal`
 * aborted. Progress goes to `watchdog`: bytes read by the request beyond the furthest any attempt
 * reached, and the acknowledgement. See the module comment.
 */
export async function sendPart(part: Part, options: SendPartOptions): Promise<string> {
  const { target, upload, offset, signal, watchdog } = options;
  // The furthest byte of the part any request has read.
  let reached = 0;
  watchdog.begin(part.number);
  try {
    return await withRetries(
      async () => {
        const body = await part.body(signal, (position) => {
          if (position > reached) {
            reached = position;
            watchdog.moved();
          }
        });
        // A body that fails (the file cannot be read, or changed) must also end its request:
        // the server would wait for the missing bytes.
        const request = linkedController(signal);
        let bodyError: { error: unknown } | undefined;
        const stream = body.body;
        const watch = (readable: Readable) => {
          readable.once('error', (error) => {
            bodyError ??= { error };
            request.abort(error);
          });
          return readable;
        };
        // A file range's stream (and each fresh one an SDK's own retry asks for) is watched.
        const file = !(stream instanceof Uint8Array);
        if (file) watch(stream);
        const again = body.restream;
        const restream =
          again === undefined
            ? undefined
            : file
              ? () => {
                  const next = again();
                  return next === stream ? next : watch(next);
                }
              : again;
        try {
          let token: string;
          try {
            token = await target.protocol.putPart(target.key, upload, {
              number: part.number,
              offset,
              size: part.size,
              body: stream,
              restream,
              signal: request.signal,
            });
            watchdog.moved();
          } catch (error) {
            throw bodyError ? bodyError.error : error;
          }
          await body.sent(signal);
          return token;
        } finally {
          body.dispose();
          request.dispose();
        }
      },
      {
        attempts: part.resendable ? RETRY_ATTEMPTS : 1,
        signal,
        onRetry: (error, attempt, delay) =>
          target.debug(
            `upload of ${target.uri}: part ${part.number} failed (${String(error)}), sending it again in ${Math.round(delay)} ms (attempt ${attempt + 1} of ${RETRY_ATTEMPTS})`,
          ),
      },
    );
  } finally {
    watchdog.end(part.number);
  }
}
