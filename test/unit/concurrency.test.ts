/**
 * The adaptive window of folder fetches (src/core/concurrency.ts): it climbs when round trips bound
 * the run (each item waits the same time, whatever else is in flight), stays put when something
 * shared bounds it (items queue on one resource), never passes its maximum, and keeps the
 * failure rules of a fixed window.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { forEachAdaptive, forEachLimit } from '../../src/core/concurrency.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Run `items` tasks through `run`, recording the most in flight at once. */
async function measure(
  items: number,
  window: { start: number; max: number },
  task: () => Promise<void>,
): Promise<{ most: number; grown: number[] }> {
  let inFlight = 0;
  let most = 0;
  const grown: number[] = [];
  await forEachAdaptive(
    Array.from({ length: items }, (_, i) => i),
    // Fake timers (below) make the clock and every sleep exact, whatever the machine's load.
    { ...window, onGrow: (w) => grown.push(w), now: () => Date.now() },
    async () => {
      inFlight++;
      most = Math.max(most, inFlight);
      try {
        await task();
      } finally {
        inFlight--;
      }
    },
  );
  return { most, grown };
}

describe('forEachAdaptive', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Drive the fake clock until `run` settles. */
  async function settle<T>(run: Promise<T>): Promise<T> {
    let outcome: { value: T } | { error: unknown } | undefined;
    run.then(
      (value) => {
        outcome = { value };
      },
      (error: unknown) => {
        outcome = { error };
      },
    );
    while (outcome === undefined) await vi.advanceTimersByTimeAsync(1);
    if ('error' in outcome) throw outcome.error;
    return outcome.value;
  }
  it('climbs to its maximum when every item waits a round trip', async () => {
    const { most, grown } = await settle(measure(600, { start: 4, max: 32 }, () => sleep(15)));
    expect(most).toBe(32);
    expect(grown).toEqual([8, 16, 32]);
  });

  it('stops within two doublings when a shared resource bounds the rate', async () => {
    // One "CPU": every item holds it for 3 ms, so more in flight only queues.
    let busy: Promise<void> = Promise.resolve();
    const shared = () => {
      const turn = busy.then(() => sleep(3));
      busy = turn;
      return turn;
    };
    const { most, grown } = await settle(measure(150, { start: 4, max: 64 }, shared));
    // The first doubling is always tried, and one more after a round without gain.
    expect(grown).toEqual([8, 16]);
    expect(most).toBe(16);
  });

  it('does not judge growth against a slow first round (connections being made)', async () => {
    let busy: Promise<void> = Promise.resolve();
    let started = 0;
    const task = () => {
      // The first round waits on its connections; after that one shared resource bounds the rate.
      if (started++ < 4) return sleep(60);
      const turn = busy.then(() => sleep(3));
      busy = turn;
      return turn;
    };
    const { most, grown } = await settle(measure(150, { start: 4, max: 64 }, task));
    expect(grown).toEqual([8, 16]);
    expect(most).toBe(16);
  });

  it('one slow round (noise on a busy machine) does not stop the climb', async () => {
    let started = 0;
    // Items 13–20 (the round at 8 in flight) are slowed down, the rest wait one round trip.
    const task = () => {
      started++;
      return sleep(started > 12 && started <= 20 ? 40 : 15);
    };
    const { most } = await settle(measure(600, { start: 4, max: 64 }, task));
    expect(most).toBe(64);
  });

  it('a fixed window (start = max, and forEachLimit) never grows', async () => {
    const fixed = await settle(measure(200, { start: 5, max: 5 }, () => sleep(5)));
    expect(fixed.most).toBe(5);
    expect(fixed.grown).toEqual([]);
    let inFlight = 0;
    let most = 0;
    await settle(
      forEachLimit(Array.from({ length: 100 }), 3, async () => {
        inFlight++;
        most = Math.max(most, inFlight);
        await sleep(2);
        inFlight--;
      }),
    );
    expect(most).toBe(3);
  });

  it('on the first failure nothing new starts, everything in flight settles, the error is thrown', async () => {
    let started = 0;
    let settled = 0;
    const run = forEachAdaptive(
      Array.from({ length: 1000 }, (_, i) => i),
      { start: 4, max: 32 },
      async (i, signal) => {
        started++;
        try {
          if (i === 300) throw new Error('item 300 failed');
          await sleep(5);
          expect(signal.aborted).toBe(false);
        } finally {
          settled++;
        }
      },
    );
    await expect(settle(run)).rejects.toThrow('item 300 failed');
    expect(settled).toBe(started);
    expect(started).toBeLessThan(400);
  });
});
