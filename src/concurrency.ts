/**
 * Bounded concurrency: run `fn` over items with at most `limit` in flight.
 *
 * On the first failure no new item starts, the shared signal aborts the ones in flight, and,
 * once they have settled, the first error is thrown — so nothing is left running behind a
 * failed call.
 *
 * @module
 */
import { setMaxListeners } from 'node:events';
import { debuglog } from 'node:util';
import { abortError } from './errors.js';

/** Run `fn(item, signal)` for every item, at most `limit` at a time. */
export async function forEachLimit<T>(
  items: Iterable<T>,
  limit: number,
  fn: (item: T, signal: AbortSignal) => Promise<void>,
  signal?: AbortSignal,
): Promise<void> {
  const inner = new AbortController();
  // Every task in flight may listen for the abort (an SDK call, a stream): allow that many.
  setMaxListeners(Math.max(10, limit * 2 + 4), inner.signal);
  const onAbort = () => inner.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const iterator = items[Symbol.iterator]();
  let failure: { error: unknown } | undefined;
  const worker = async () => {
    for (;;) {
      if (failure || inner.signal.aborted) return;
      const next = iterator.next();
      if (next.done) return;
      try {
        await fn(next.value, inner.signal);
      } catch (error) {
        if (!failure) failure = { error };
        inner.abort(error);
        return;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, limit) }, worker));
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
  if (failure) throw failure.error;
  signal?.throwIfAborted();
}

const debug = debuglog('provcat:abort');

/** The abort is the outcome the caller gets; the abandoned call's own failure is only logged. */
function abandon(promise: Promise<unknown>): void {
  promise.catch((error: unknown) => debug('call abandoned after abort failed: %s', String(error)));
}

/**
 * Resolve with `promise`, or reject with an AbortError ({@link abortError}) as soon as `signal`
 * aborts. For calls that cannot be interrupted themselves (a read from a stream that never
 * produces data, a wait for a free slot): the abandoned call settles on its own, once the
 * caller closes whatever it was reading.
 */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) {
    abandon(promise);
    return Promise.reject(abortError(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      abandon(promise);
      reject(abortError(signal));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
