/**
 * Bounded concurrency: run `fn` over items with at most `limit` in flight ({@link forEachLimit}),
 * or with a window that grows while growing it pays ({@link forEachAdaptive}).
 *
 * On the first failure no new item starts, the shared signal aborts the ones in flight, and,
 * once they have settled, the first error is thrown — so nothing is left running behind a
 * failed call.
 *
 * Why adaptive: a folder fetch of small objects is bound by CPU on a local network (more in
 * flight only adds contention) and by round trips on a real one (at 20 ms a round trip, 1,000
 * GETs at 16 in flight need at least 1.25 s, at 64 a quarter of that). Which one holds is not
 * known before the first requests come back, so the window starts where the local network wants
 * it and grows only while a round at the larger window completes items measurably faster.
 *
 * Every `concurrency` a caller gives (the store's, a call's, a CLI `--concurrency`) passes
 * {@link checkConcurrency}: a whole number in 1..{@link MAX_CONCURRENCY}, else
 * {@link InvalidArgument} before any I/O. A window is a worker per slot, so a limit of millions
 * would exhaust the heap or spin for minutes before the first request; the bound keeps that out.
 *
 * @module
 */
import { setMaxListeners } from 'node:events';
import { debuglog } from 'node:util';
import { abortError, InvalidArgument } from './errors.js';

/** The most transfers or requests in flight any `concurrency` option accepts. */
export const MAX_CONCURRENCY = 256;

/**
 * `value` when it is a whole number in `min..max` (`undefined` passes through: the default
 * applies); {@link InvalidArgument} naming `name` otherwise. Makes no I/O.
 */
export function checkInteger(
  value: unknown,
  name: string,
  min: number,
  max: number,
): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    const shown = typeof value === 'string' ? `'${value}'` : String(value);
    throw new InvalidArgument(`${name} takes a whole number in ${min}..${max}, not ${shown}`);
  }
  return value;
}

/**
 * A `concurrency` option: a whole number in 1..{@link MAX_CONCURRENCY}, or `undefined` (the
 * default). {@link InvalidArgument} otherwise, before any I/O.
 */
export function checkConcurrency(value: unknown, name = 'concurrency'): number | undefined {
  return checkInteger(value, name, 1, MAX_CONCURRENCY);
}

/**
 * The number a command-line option's text names: decimal digits only (no sign, exponent,
 * fraction or spaces), then {@link checkInteger}. {@link InvalidArgument} (CLI exit 2) otherwise.
 */
export function parseInteger(text: string, name: string, min: number, max: number): number {
  if (!/^\d+$/.test(text)) {
    throw new InvalidArgument(`${name} takes a whole number in ${min}..${max}, not '${text}'`);
  }
  return checkInteger(Number(text), name, min, max) as number;
}

/**
 * Run `fn(item, signal)` for every item, at most `limit` at a time (1..{@link MAX_CONCURRENCY},
 * else {@link InvalidArgument} before `fn` runs).
 */
export async function forEachLimit<T>(
  items: Iterable<T>,
  limit: number,
  fn: (item: T, signal: AbortSignal) => Promise<void>,
  signal?: AbortSignal,
): Promise<void> {
  return forEachAdaptive(items, { start: limit, max: limit }, fn, signal);
}

/** The window of {@link forEachAdaptive}. */
export interface AdaptiveWindow {
  /** Items in flight at first. */
  start: number;
  /** Items in flight at most. */
  max: number;
  /** Growth that counts as paying: a round at the larger window at least this much faster (default 1.15). */
  gain?: number | undefined;
  /** Told each time the window grows, for debug logs. */
  onGrow?: ((window: number, rate: number) => void) | undefined;
  /** The clock (milliseconds); for tests. */
  now?: (() => number) | undefined;
}

/**
 * Run `fn(item, signal)` for every item, starting with `start` in flight. After each round (as
 * many completions as the window holds; the first round is a warm-up and only starts the clock)
 * the completion rate is compared with the previous round's: while it rose by at least `gain`, the window doubles (up to `max`); after two rounds
 * in a row without gain (one may be noise, so the window still doubles after it) it stays where
 * it is. So a run bound by CPU or by the server stays near
 * `start`, and a run bound by round trips climbs to `max` within a few rounds. `start` and `max`
 * are checked as {@link checkConcurrency} does, before any item starts.
 */
export async function forEachAdaptive<T>(
  items: Iterable<T>,
  window: AdaptiveWindow,
  fn: (item: T, signal: AbortSignal) => Promise<void>,
  signal?: AbortSignal,
): Promise<void> {
  const limit = checkConcurrency(window.max ?? Number.NaN) as number;
  checkConcurrency(window.start, 'the starting window');
  const inner = new AbortController();
  // Every task in flight may listen for the abort (an SDK call, a stream): allow that many.
  setMaxListeners(Math.max(10, limit * 2 + 4), inner.signal);
  const onAbort = () => inner.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const iterator = items[Symbol.iterator]();
  let failure: { error: unknown } | undefined;
  let exhausted = false;
  const now = window.now ?? (() => performance.now());
  const gain = window.gain ?? 1.15;
  let size = Math.max(1, Math.min(window.start, limit));
  let growing = size < limit;
  let roundDone = 0;
  let roundStart = now();
  let lastRate = 0;
  let misses = 0;
  // The first round pays for connections, compilation and the first file-system calls: it only
  // starts the clock, so that no growth is judged against it.
  let warmingUp = true;
  const workers: Promise<void>[] = [];
  const grow = () => {
    const rate = (roundDone * 1000) / Math.max(1e-3, now() - roundStart);
    if (warmingUp) {
      warmingUp = false;
      roundDone = 0;
      roundStart = now();
      return;
    }
    // One round without gain may be noise (a busy machine): probe once more, stop at the second.
    if (lastRate > 0 && rate < lastRate * gain) {
      misses++;
      if (misses >= 2) growing = false;
    } else {
      misses = 0;
    }
    lastRate = rate;
    roundDone = 0;
    roundStart = now();
    if (!growing || exhausted) return;
    const next = Math.min(limit, size * 2);
    for (let i = size; i < next; i++) workers.push(worker());
    size = next;
    growing = size < limit;
    window.onGrow?.(size, rate);
  };
  async function worker(): Promise<void> {
    for (;;) {
      if (failure || inner.signal.aborted) return;
      const next = iterator.next();
      if (next.done) {
        exhausted = true;
        return;
      }
      try {
        await fn(next.value, inner.signal);
      } catch (error) {
        if (!failure) failure = { error };
        inner.abort(error);
        return;
      }
      if (growing && ++roundDone >= size) grow();
    }
  }
  try {
    for (let i = 0; i < size; i++) workers.push(worker());
    // Workers added while waiting are waited for too.
    for (let waited = 0; waited < workers.length; ) {
      const end = workers.length;
      await Promise.all(workers.slice(waited, end));
      waited = end;
    }
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
