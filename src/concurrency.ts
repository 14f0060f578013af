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
