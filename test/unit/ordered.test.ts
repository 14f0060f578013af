/**
 * forEachInOrder (src/core/ordered.ts): outcomes come out in item order whatever order the items
 * finish in, no more than `limit` run and no more than `window` wait, and after a failure every
 * item is still emitted (those that ran with their outcome, the rest with none) before the first
 * error is thrown.
 */
import { describe, expect, it } from 'vitest';
import { forEachInOrder, type Outcome } from '../../src/core/ordered.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function* batches<T>(items: T[], size: number): AsyncGenerator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size);
}

describe('forEachInOrder', () => {
  it('emits every outcome in item order, with at most `limit` running and `window` waiting', async () => {
    const items = Array.from({ length: 300 }, (_, i) => i);
    let running = 0;
    let most = 0;
    let started = 0;
    let emitted = 0;
    let mostWaiting = 0;
    const order: number[] = [];
    await forEachInOrder(
      batches(items, 7),
      5,
      async (i) => {
        started++;
        mostWaiting = Math.max(mostWaiting, started - emitted);
        running++;
        most = Math.max(most, running);
        // Item 3 is slow: everything after it finishes first.
        await sleep(i === 3 ? 60 : i % 3);
        running--;
        return i * 2;
      },
      (i, outcome) => {
        emitted++;
        order.push(i);
        expect(outcome).toEqual({ value: i * 2 });
        return i % 50 === 0 ? sleep(1) : undefined;
      },
      { window: 20 },
    );
    expect(order).toEqual(items);
    expect(most).toBe(5);
    expect(mostWaiting).toBeLessThanOrEqual(20);
  });

  it('after a failure, emits every item and throws the first error', async () => {
    const items = Array.from({ length: 100 }, (_, i) => i);
    const seen: [number, Outcome<number>][] = [];
    const ran = new Set<number>();
    const failure = new Error('item 10 failed');
    await expect(
      forEachInOrder(
        batches(items, 16),
        4,
        async (i, signal) => {
          ran.add(i);
          if (i === 10) throw failure;
          await sleep(5);
          if (signal.aborted) throw new Error('aborted');
          return i;
        },
        (i, outcome) => {
          seen.push([i, outcome]);
          return undefined;
        },
      ),
    ).rejects.toBe(failure);
    expect(seen.map(([i]) => i)).toEqual(items);
    expect(seen[10]?.[1]).toEqual({ error: failure });
    for (const [i, outcome] of seen) {
      if (!ran.has(i)) expect(outcome).toBeUndefined();
      else expect(outcome).toBeDefined();
    }
    expect(ran.size).toBeLessThan(20); // nothing new started after the failure
  });

  it('an aborted signal stops it with an AbortError; a bad limit is refused before any item', async () => {
    const controller = new AbortController();
    const items = Array.from({ length: 50 }, (_, i) => i);
    let ran = 0;
    const run = forEachInOrder(
      batches(items, 5),
      2,
      async (i) => {
        ran++;
        if (i === 4) controller.abort();
        await sleep(1);
        return i;
      },
      () => undefined,
      { signal: controller.signal },
    );
    await expect(run).rejects.toMatchObject({ name: 'AbortError' });
    expect(ran).toBeLessThan(10);
    await expect(
      forEachInOrder(
        batches(items, 5),
        0,
        async () => 1,
        () => undefined,
      ),
    ).rejects.toMatchObject({ name: 'InvalidArgument' });
  });

  it('takes a `quick` value at once, in order among the others, outside the limit', async () => {
    const items = Array.from({ length: 200 }, (_, i) => i);
    const order: number[] = [];
    let ranSlow = 0;
    let running = 0;
    let most = 0;
    await forEachInOrder(
      batches(items, 9),
      2,
      async (i) => {
        ranSlow++;
        running++;
        most = Math.max(most, running);
        await sleep(i % 4);
        running--;
        return -i;
      },
      (i, outcome) => {
        order.push(i);
        // Every fifth item is slow (its `fn` ran); the rest were quick.
        expect(outcome).toEqual({ value: i % 5 === 0 ? -i : i });
        return i % 40 === 1 ? sleep(1) : undefined;
      },
      { quick: (i) => (i % 5 === 0 ? undefined : i) },
    );
    expect(order).toEqual(items);
    expect(ranSlow).toBe(40);
    expect(most).toBe(2);
  });

  it('a `quick` that throws fails the run like `fn`, and every item is still emitted', async () => {
    const items = Array.from({ length: 30 }, (_, i) => i);
    const seen: [number, Outcome<number>][] = [];
    const failure = new Error('quick 7 failed');
    await expect(
      forEachInOrder(
        batches(items, 4),
        3,
        async (i) => {
          await sleep(2);
          return i;
        },
        (i, outcome) => {
          seen.push([i, outcome]);
          return undefined;
        },
        {
          quick: (i) => {
            if (i === 7) throw failure;
            return i % 2 === 0 ? i : undefined;
          },
        },
      ),
    ).rejects.toBe(failure);
    expect(seen.map(([i]) => i)).toEqual(items);
    expect(seen[7]?.[1]).toEqual({ error: failure });
    expect(seen[6]?.[1]).toEqual({ value: 6 });
    for (const [i, outcome] of seen.slice(8)) expect(outcome, `item ${i}`).toBeUndefined();
  });
});
