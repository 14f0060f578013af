/**
 * Racing a pending call against an AbortSignal.
 *
 * Some calls cannot be interrupted themselves (a read from a stream that never produces data);
 * the caller still has to be able to give up. {@link raceAbort} rejects as soon as the signal
 * aborts and leaves the abandoned call to settle on its own — the caller then closes whatever
 * that call was reading, which makes it settle.
 *
 * @module
 */
import { debuglog } from 'node:util';
import { abortError } from './errors.js';

const debug = debuglog('provcat:lake');

function abandon(promise: Promise<unknown>): void {
  // The abort is the outcome the caller gets; the abandoned call's own failure is only logged.
  promise.catch((error: unknown) => debug('call abandoned after abort failed: %s', String(error)));
}

/** Resolve with `promise`, or reject with an AbortError as soon as `signal` aborts. */
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
