/**
 * The parallel listing (src/folders/parallel-listing.ts) gives exactly what one sequential
 * listing gives: same entries, same order, every version and delete marker, whatever the cuts
 * and the timing; with bounded memory; failing, never short, when a range fails.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { VersionRecord } from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';
import { compareUtf8 } from '../../src/core/keys.js';
import {
  historyListing,
  type ListingStats,
  parallelListing,
  type RangeSource,
} from '../../src/folders/parallel-listing.js';
import { KeySpace, subfolderCuts } from '../../src/folders/range-splits.js';
import { MemoryStore } from '../support/memory-store.js';

const B = 'bkt';
const cache = () => mkdtempSync(path.join(tmpdir(), 'provcat-parlist-'));

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

/** A source over a store's `_history` of `prefix`. */
function historySource(store: MemoryStore, prefix: string): RangeSource<VersionRecord> {
  return {
    list: (startAfter, signal) => store._history(B, prefix, { startAfter, signal }),
    keyOf: (r) => r.key,
  };
}

/** Characters that make edge cases: the delimiter, bytes around it, accents, astral, U+FF5A. */
const CHARS = ['a', 'b', '/', '-', '.', '0', '9', 'é', 'ｚ', '😀', '\u{10000}', ' '];
const arbName = fc
  .array(fc.constantFrom(...CHARS), { minLength: 1, maxLength: 6 })
  .map((cs) => cs.join(''));

/** A history: per key, writes and deletes in order (`null` a delete). */
const arbFolder = fc.uniqueArray(
  fc.record({
    name: arbName,
    writes: fc.array(fc.boolean(), { minLength: 1, maxLength: 3 }),
  }),
  { selector: (f) => f.name, minLength: 0, maxLength: 60 },
);

async function seed(
  store: MemoryStore,
  prefix: string,
  folder: { name: string; writes: boolean[] }[],
): Promise<string[]> {
  const keys: string[] = [];
  for (const { name, writes } of folder) {
    const key = `${prefix}${name}`;
    keys.push(key);
    await store._put(B, key, Buffer.from(key));
    let present = true;
    for (const put of writes) {
      if (put || !present) await store._put(B, key, Buffer.from(`${key}!`));
      else await store._delete(B, key);
      present = put || !present;
    }
  }
  return keys;
}

describe('parallelListing', () => {
  it('equals the sequential listing on random folders, cuts and timings', async () => {
    await fc.assert(
      fc.asyncProperty(
        arbFolder,
        fc.record({
          concurrency: fc.integer({ min: 2, max: 8 }),
          firstPage: fc.integer({ min: 1, max: 6 }),
          buffered: fc.integer({ min: 1, max: 12 }),
          pageSize: fc.integer({ min: 1, max: 5 }),
          cutWhileListing: fc.boolean(),
          // Cuts: listed keys exactly, a key's prefix, a key with more after it, any name.
          cuts: fc.array(
            fc.oneof(
              fc.record({ kind: fc.constant('key' as const), i: fc.nat() }),
              fc.record({ kind: fc.constant('shorter' as const), i: fc.nat() }),
              fc.record({ kind: fc.constant('longer' as const), i: fc.nat() }),
              fc.record({ kind: fc.constant('any' as const), name: arbName }),
            ),
            { maxLength: 8 },
          ),
        }),
        async (folder, o) => {
          const store = new MemoryStore({
            cache: cache(),
            pageSize: o.pageSize,
            latency: () => (Math.random() < 0.3 ? 1 : 0),
          });
          const prefix = 'f/';
          const keys = await seed(store, prefix, folder);
          await store._put(B, 'f-outside', Buffer.from('x'));
          await store._put(B, 'g/outside', Buffer.from('x'));
          const sequential = await collect(store._history(B, prefix));
          const cuts = o.cuts.map((c) => {
            if (c.kind === 'any') return `${prefix}${c.name}`;
            const key = keys.length > 0 ? (keys[c.i % keys.length] as string) : prefix;
            if (c.kind === 'key') return key;
            // Cuts are whole code points (a lone surrogate is no key a store could list).
            if (c.kind === 'shorter')
              return `${prefix}${[...key.slice(prefix.length)].slice(0, -1).join('')}`;
            return `${key}/`;
          });
          const stats: ListingStats = { ranges: 0, cuts: 0 };
          const parallel = await collect(
            parallelListing(historySource(store, prefix), {
              concurrency: o.concurrency,
              firstPage: o.firstPage,
              buffered: o.buffered,
              prefix,
              cutWhileListing: o.cutWhileListing,
              stats,
              plan: async () => cuts,
            }),
          );
          expect(parallel).toEqual(sequential);
          if (sequential.length <= o.firstPage) expect(stats.ranges).toBe(1);
        },
      ),
      { numRuns: 150 },
    );
  }, 120_000);

  it('lists a folder no longer than its first page with one listing and no plan', async () => {
    const store = new MemoryStore({ cache: cache() });
    for (let i = 0; i < 10; i++) await store._put(B, `f/${i}`, Buffer.from('x'));
    store.resetCalls();
    let planned = false;
    const got = await collect(
      parallelListing(historySource(store, 'f/'), {
        firstPage: 10,
        plan: async () => {
          planned = true;
          return [];
        },
      }),
    );
    expect(got.map((r) => r.key)).toEqual(Array.from({ length: 10 }, (_, i) => `f/${i}`));
    expect(store.calls).toEqual({ _history: 1 });
    expect(planned).toBe(false);
  });

  it('fails, never short, when one range fails', async () => {
    const store = new MemoryStore({ cache: cache(), pageSize: 2 });
    for (let i = 0; i < 40; i++)
      await store._put(B, `f/${String(i).padStart(2, '0')}`, Buffer.from('x'));
    const inner = historySource(store, 'f/');
    const source: RangeSource<VersionRecord> = {
      keyOf: inner.keyOf,
      async *list(startAfter, signal) {
        let n = 0;
        for await (const r of inner.list(startAfter, signal)) {
          if (startAfter === 'f/20' && ++n === 3) throw new StoreError('range broke');
          yield r;
        }
      },
    };
    await expect(
      collect(
        parallelListing(source, { firstPage: 4, plan: async () => ['f/10', 'f/20', 'f/30'] }),
      ),
    ).rejects.toThrow('range broke');
  });

  it('refuses a range whose listing does not start after its cut', async () => {
    const store = new MemoryStore({ cache: cache() });
    for (let i = 0; i < 20; i++)
      await store._put(B, `f/${String(i).padStart(2, '0')}`, Buffer.from('x'));
    const source: RangeSource<VersionRecord> = {
      keyOf: (r) => r.key,
      list: (_startAfter, signal) => store._history(B, 'f/', { signal }),
    };
    await expect(
      collect(parallelListing(source, { firstPage: 4, plan: async () => ['f/10'] })),
    ).rejects.toThrow(StoreError);
  });

  it('holds at most `buffered` entries beyond the first range while the merge waits', async () => {
    const store = new MemoryStore({ cache: cache(), pageSize: 5 });
    const keys = Array.from({ length: 400 }, (_, i) => `f/${String(i).padStart(3, '0')}`);
    for (const k of keys) await store._put(B, k, Buffer.from('x'));
    const inner = historySource(store, 'f/');
    let listed = 0;
    const source: RangeSource<VersionRecord> = {
      keyOf: inner.keyOf,
      async *list(startAfter, signal) {
        for await (const r of inner.list(startAfter, signal)) {
          listed++;
          yield r;
        }
      },
    };
    const firstPage = 10;
    const buffered = 30;
    let consumed = 0;
    let most = 0;
    const got: string[] = [];
    const stats: ListingStats = { ranges: 0, cuts: 0 };
    for await (const r of parallelListing(source, {
      stats,
      firstPage,
      buffered,
      concurrency: 8,
      prefix: 'f/',
      plan: async () => keys.filter((_, i) => i % 20 === 0),
    })) {
      consumed++;
      got.push(r.key);
      // A slow consumer: every range has time to fill what it may.
      if (consumed % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 2));
      most = Math.max(most, listed - consumed);
    }
    expect(got).toEqual(keys);
    // The first range's entries (at most 2 × firstPage buffered and a batch of as many in the
    // merge's hands), `buffered` after it and one in flight per listing, and the one entry each
    // range's listing reads past its end (counted as listed, never handed on).
    expect(most).toBeLessThanOrEqual(2 * 2 * firstPage + buffered + 8 + stats.ranges);
  });

  it('stops every range when the caller stops', async () => {
    const store = new MemoryStore({ cache: cache(), pageSize: 3, latency: 1 });
    for (let i = 0; i < 200; i++)
      await store._put(B, `f/${String(i).padStart(3, '0')}`, Buffer.from('x'));
    let open = 0;
    const inner = historySource(store, 'f/');
    const source: RangeSource<VersionRecord> = {
      keyOf: inner.keyOf,
      async *list(startAfter, signal) {
        open++;
        try {
          yield* inner.list(startAfter, signal);
        } finally {
          open--;
        }
      },
    };
    let n = 0;
    for await (const _ of parallelListing(source, {
      firstPage: 5,
      prefix: 'f/',
      plan: async () => ['f/050', 'f/100', 'f/150'],
    })) {
      if (++n === 20) break;
    }
    expect(open).toBe(0);
  });
});

describe('historyListing', () => {
  it('fans a large folder out over its subfolders and lists what _history lists', async () => {
    const store = new MemoryStore({ cache: cache(), pageSize: 100 });
    for (let s = 0; s < 12; s++) {
      for (let i = 0; i < 120; i++) await store._put(B, `f/s${s}/${i}`, Buffer.from('x'));
    }
    await store._delete(B, 'f/s3/7');
    const sequential = await collect(store._history(B, 'f/'));
    store.resetCalls();
    const stats: ListingStats = { ranges: 0, cuts: 0 };
    const got = await collect(
      historyListing(store, B, 'f/', { stats, firstPage: 100, buffered: 1600 }),
    );
    expect(got).toEqual(sequential);
    // s1..s11 from the delimiter listing (the first page ends in s0), some cut further.
    expect(stats.ranges - stats.cuts).toBe(12);
    expect(store.calls._pages).toBe(1);
    expect(store.calls._history).toBe(stats.ranges);
  });

  it('cuts a flat folder by key space', async () => {
    const store = new MemoryStore({ cache: cache(), pageSize: 50 });
    const hex = (i: number) => ((i * 2654435761) % 2 ** 32).toString(16).padStart(8, '0');
    for (let i = 0; i < 3000; i++) await store._put(B, `flat/${hex(i)}`, Buffer.from('x'));
    const sequential = await collect(store._history(B, 'flat/'));
    const stats: ListingStats = { ranges: 0, cuts: 0 };
    store.resetCalls();
    const got = await collect(
      historyListing(store, B, 'flat/', { stats, firstPage: 50, buffered: 8 * 250 }),
    );
    expect(got).toEqual(sequential);
    // Uniform names: cut to about 250 entries a range (5 pages), a few more for the ends.
    expect(stats.cuts).toBeGreaterThan(3000 / 250 / 2);
    expect(stats.ranges).toBeLessThan((3000 / 250) * 2);
    expect(store.calls._history).toBe(stats.ranges);
  });

  it('lists sequentially on a driver that cannot start after a key', async () => {
    const store = new MemoryStore({ cache: cache(), pageSize: 10 });
    Object.assign(store, { capabilities: { ...store.capabilities, startAfter: false } });
    for (let i = 0; i < 30; i++) await store._put(B, `f/${i}`, Buffer.from('x'));
    store.resetCalls();
    const got = await collect(historyListing(store, B, 'f/'));
    expect(got).toHaveLength(30);
    expect(store.calls).toEqual({ _history: 1 });
  });
});

describe('range cuts', () => {
  it('finds a cut strictly inside any two keys that have one', () => {
    const space = new KeySpace('p/', ['p/0a', 'p/ff', 'p/é😀']);
    fc.assert(
      fc.property(arbName, fc.option(arbName, { nil: undefined }), (a, b) => {
        const lo = `p/${a}`;
        const hi = b === undefined ? undefined : `p/${b}`;
        if (hi !== undefined && compareUtf8(lo, hi) >= 0) return;
        const cut = space.midpoint(lo, hi);
        if (cut === undefined) return;
        expect(compareUtf8(lo, cut)).toBeLessThan(0);
        if (hi !== undefined) expect(compareUtf8(cut, hi)).toBeLessThan(0);
        expect(cut.startsWith('p/')).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('cuts uniform names near the middle and open ends', () => {
    const space = new KeySpace('', ['0123456789abcdef']);
    const mid = space.midpoint('0', 'f') as string;
    expect(mid >= '6' && mid <= '9').toBe(true);
    expect(space.midpoint('f0', undefined)).toBeDefined();
    expect(space.midpoint('a', 'a\u0000')).toBeUndefined();
  });

  it('makes subfolder cuts after the last key listed, spread and in order', () => {
    const prefixes = Array.from({ length: 100 }, (_, i) => `f/${String(i).padStart(2, '0')}/`);
    const cuts = subfolderCuts(prefixes, '/', 'f/10/x', 8);
    expect(cuts).toHaveLength(8);
    expect([...cuts].sort(compareUtf8)).toEqual(cuts);
    expect(cuts.every((c) => compareUtf8(c, 'f/10/x') > 0 && !c.endsWith('/'))).toBe(true);
    expect(subfolderCuts(['f/a/', 'f/b/'], '/', 'f/a/zz', 8)).toEqual(['f/b']);
  });
});
