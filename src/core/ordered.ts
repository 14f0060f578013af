/**
 * {@link forEachInOrder}: bounded concurrency whose results come out in the order of the items,
 * for work whose bookkeeping is a file written in key order (a push writes its index and the
 * digests it hands a commit as its files are done: src/folders/push.ts).
 *
 * Items come in batches from an async source (a file read a chunk at a time), at most `limit`
 * run at once, and each item's outcome is handed to `emit` in item order, as soon as it and every
 * item before it have settled. At most `window` items wait between start and `emit`, so one slow
 * item (a large upload) holds back that many finished ones, not the rest of the source. An item
 * whose value is known at once (`quick`: a file a second push finds unchanged) takes no slot and
 * no promise; most items of a second push are such (docs/performance.md, "Unchanged files found
 * at once").
 *
 * On the first failure no new item starts, the shared signal aborts the ones in flight, and once
 * they have settled, every item is still emitted — those that ran with their outcome, the rest of
 * the source with none — before the first error is thrown: a writer of bookkeeping keeps what it
 * learnt and carries the rest over.
 *
 * @module
 */
import { setMaxListeners } from 'node:events';
import { checkConcurrency } from './concurrency.js';
import { abortError } from './errors.js';

/** How an item ended: its value, its error, or `undefined` when it did not run (after a failure). */
export type Outcome<R> = { value: R } | { error: unknown } | undefined;

/** Options of {@link forEachInOrder}. */
export interface InOrderOptions<T, R> {
  /** Most items between start and `emit` (default 4,096). */
  window?: number | undefined;
  signal?: AbortSignal | undefined;
  /**
   * An item's value when it can be had at once, without `fn` (else `undefined`, and `fn` runs):
   * the item takes no slot of `limit` and no promise. Exceptions fail the run as `fn`'s do.
   */
  quick?: ((item: T) => R | undefined) | undefined;
}

interface Slot<T, R> {
  item: T;
  done: boolean;
  outcome: Outcome<R>;
}

/**
 * Run `fn(item, signal)` for every item of `batches`, at most `limit` at a time
 * (1..MAX_CONCURRENCY, else `InvalidArgument` before anything runs), and `emit(item, outcome)`
 * for every item in order; see the module comment. `emit` may return a promise (awaited before
 * the next item is emitted). Throws the first error of `fn`, or of `emit` or the source.
 */
export async function forEachInOrder<T, R>(
  batches: AsyncIterable<readonly T[]>,
  limit: number,
  fn: (item: T, signal: AbortSignal) => Promise<R>,
  emit: (item: T, outcome: Outcome<R>) => Promise<void> | undefined,
  options: InOrderOptions<T, R> = {},
): Promise<void> {
  checkConcurrency(limit);
  const window = Math.max(limit, options.window ?? 4096);
  const { signal, quick } = options;
  const inner = new AbortController();
  setMaxListeners(Math.max(10, limit * 2 + 4), inner.signal);
  const onAbort = () => inner.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const queue: Slot<T, R>[] = [];
  let head = 0;
  let running = 0;
  let failure: { error: unknown } | undefined;
  let wake: (() => void) | undefined;
  const settled = () =>
    new Promise<void>((resolve) => {
      wake = resolve;
    });
  // Emits what is ready; a promise only when an `emit` returned one (no tick an item).
  const flush = (): Promise<void> | undefined => {
    for (let s = queue[head]; s?.done === true; s = queue[head]) {
      queue[head++] = undefined as unknown as Slot<T, R>;
      const p = emit(s.item, s.outcome);
      if (p !== undefined) return p.then(flush);
    }
    if (head > 1024 && head * 2 > queue.length) {
      queue.splice(0, head);
      head = 0;
    }
    return undefined;
  };
  const start = (item: T) => {
    if (quick !== undefined) {
      let value: R | undefined;
      try {
        value = quick(item);
      } catch (error) {
        queue.push({ item, done: true, outcome: { error } });
        failure ??= { error };
        inner.abort(error);
        return;
      }
      if (value !== undefined) {
        queue.push({ item, done: true, outcome: { value } });
        return;
      }
    }
    const slot: Slot<T, R> = { item, done: false, outcome: undefined };
    queue.push(slot);
    running++;
    let run: Promise<R>;
    try {
      run = fn(item, inner.signal);
    } catch (error) {
      run = Promise.reject(error);
    }
    run
      .then(
        (value) => {
          slot.outcome = { value };
        },
        (error: unknown) => {
          slot.outcome = { error };
          failure ??= { error };
          inner.abort(error);
        },
      )
      .finally(() => {
        slot.done = true;
        running--;
        const w = wake;
        wake = undefined;
        w?.();
      });
  };
  const drain = async () => {
    while (running > 0) await settled();
    await flush();
  };
  try {
    for await (const batch of batches) {
      for (const item of batch) {
        if (failure === undefined && signal?.aborted === true) {
          failure = { error: abortError(signal) };
        }
        if (failure === undefined) {
          const ready = flush();
          if (ready !== undefined) await ready;
          while (failure === undefined && (running >= limit || queue.length - head >= window)) {
            await settled();
            await flush();
          }
        }
        if (failure === undefined) {
          start(item);
          continue;
        }
        await drain();
        const p = emit(item, undefined);
        if (p !== undefined) await p;
      }
    }
  } catch (error) {
    failure ??= { error };
    inner.abort(error);
  } finally {
    await drain().catch((error: unknown) => {
      failure ??= { error };
    });
    signal?.removeEventListener('abort', onAbort);
  }
  if (failure !== undefined) throw failure.error;
}
