/**
 * The rules drivers share from src/, without a store: version histories from listings without
 * delete markers (markers, order, a listing out of key order refused), exact put sources and
 * byte ranges, per-bucket answers, token paging (a missing bucket against one that vanishes),
 * environment settings, SDKs and clients made once, the bucket stage kind's shape, and listings
 * put into UTF-8 byte order (random names served in UTF-16 or UTF-8 order with random page cuts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ListPage, ObjectInfo } from '../../src/contract/primitives.js';
import { NotFound, ProvcatError, SourceError, StoreError } from '../../src/core/errors.js';
import { lazy, lazyModule } from '../../src/core/lazy-module.js';
import {
  BucketMemo,
  requireVersioning,
  versioningMemo,
} from '../../src/driver-kit/bucket-state.js';
import { envSwitch, envText } from '../../src/driver-kit/env-settings.js';
import { checkByteRange, exactBytes } from '../../src/driver-kit/exact-bytes.js';
import { inUtf8Order, Utf8Order, utf8Pages } from '../../src/driver-kit/listing-order.js';
import { pageSize, tokenPages } from '../../src/driver-kit/paging.js';
import { StageConfigError } from '../../src/lake/errors.js';
import { stageKind } from '../../src/lake/stage-kinds.js';
import '../../src/store/registry.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { historyOf, type ListedVersion } from '../../src/driver-kit/version-history.js';

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

async function* from<T>(items: T[]): AsyncIterable<T> {
  yield* items;
}

const v = (key: string, versionId: string, deletedAt?: string): ListedVersion => ({
  key,
  versionId,
  size: 1,
  current: deletedAt === undefined,
  deletedAt: deletedAt === undefined ? undefined : new Date(deletedAt),
});

describe('version histories from listings without delete markers', () => {
  it('sorts each key newest first and puts a marker before a key with no current version', async () => {
    const listing = [
      v('a', '9', '2024-01-01T00:00:00Z'),
      v('a', '10', '2024-01-02T00:00:00Z'),
      v('b', '5'),
      v('b', '12', '2024-01-03T00:00:00Z'),
    ];
    const records = await collect(historyOf(from(listing)));
    expect(records.map((r) => [r.key, r.versionId, r.size, r.current])).toEqual([
      ['a', 'deleted@10', null, true],
      ['a', '10', 1, false],
      ['a', '9', 1, false],
      ['b', '12', 1, false],
      ['b', '5', 1, true],
    ]);
    expect(records[0]?.lastModified).toEqual(new Date('2024-01-02T00:00:00Z'));
    expect(records.some((r) => 'deletedAt' in r)).toBe(false);
  });

  it('orders fixed-width timestamps as IDs, and refuses a key that comes back', async () => {
    const stamps = [v('k', '2024-01-01T00:00:00.1000000Z'), v('k', '2024-03-01T00:00:00.0000000Z')];
    const sorted = await collect(historyOf(from(stamps)));
    expect(sorted.map((r) => r.versionId)).toEqual([
      '2024-03-01T00:00:00.0000000Z',
      '2024-01-01T00:00:00.1000000Z',
    ]);
    const cut = historyOf(from([v('a', '1'), v('b', '2'), v('a', '3')]));
    await expect(collect(cut)).rejects.toThrow(StoreError);
    // UTF-8 byte order, not UTF-16: U+FFFF sorts before an astral character.
    const utf8 = await collect(historyOf(from([v('\uffff', '1'), v('😀', '1')])));
    expect(utf8.map((r) => r.key)).toEqual(['\uffff', '😀']);
  });
});

describe('exact sizes and ranges', () => {
  it('passes a source of exactly its size, and refuses longer, shorter and failing ones', async () => {
    const chunks = [Buffer.from('abc'), Buffer.from('de')];
    const seen: number[] = [];
    expect(await collect(exactBytes(from(chunks), 5, (n) => seen.push(n)))).toEqual(chunks);
    expect(seen).toEqual([3, 5]);
    // The chunk that goes past the size is never passed on.
    const passed: Uint8Array[] = [];
    const long = (async () => {
      for await (const c of exactBytes(from(chunks), 4)) passed.push(c);
    })();
    await expect(long).rejects.toThrow(/longer than its declared size of 4/);
    expect(passed).toEqual([chunks[0]]);
    await expect(collect(exactBytes(from(chunks), 6))).rejects.toThrow(/after 5 of its declared 6/);
    async function* failing() {
      yield Buffer.from('x');
      throw new Error('disk gone');
    }
    const error = await collect(exactBytes(failing(), undefined)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SourceError);
    expect((error as SourceError).cause).toBeInstanceOf(Error);
    expect(await collect(exactBytes(from(chunks), undefined))).toHaveLength(2);
  });

  it('takes only whole ranges with 0 ≤ start < end', () => {
    expect(() => checkByteRange(undefined)).not.toThrow();
    expect(() => checkByteRange({ start: 0, end: 1 })).not.toThrow();
    for (const range of [
      { start: 1, end: 1 },
      { start: -1, end: 2 },
      { start: 0.5, end: 2 },
      { start: 0, end: Number.POSITIVE_INFINITY },
    ]) {
      expect(() => checkByteRange(range)).toThrow(RangeError);
    }
  });
});

describe('per-bucket answers', () => {
  it('asks once per bucket, shared by concurrent callers; failures and passing answers are asked again', async () => {
    const asked: string[] = [];
    let fail = true;
    const memo = new BucketMemo(
      async (bucket: string) => {
        asked.push(bucket);
        if (bucket === 'flaky' && fail) throw new Error('503');
        return bucket === 'new' ? 'missing' : 'enabled';
      },
      (answer) => answer !== 'missing',
    );
    expect(await Promise.all([memo.get('a'), memo.get('a')])).toEqual(['enabled', 'enabled']);
    await expect(memo.get('flaky')).rejects.toThrow('503');
    fail = false;
    expect(await memo.get('flaky')).toBe('enabled');
    expect(await memo.get('new')).toBe('missing');
    expect(await memo.get('new')).toBe('missing');
    memo.forget('a');
    await memo.get('a');
    expect(asked).toEqual(['a', 'flaky', 'flaky', 'new', 'new', 'a']);
  });

  it('reads NotFound as a missing bucket, and refuses version primitives without versioning', async () => {
    const memo = versioningMemo(async (bucket) => {
      if (bucket === 'gone') throw new NotFound('no bucket');
      return bucket === 'plain' ? 'off' : 'enabled';
    });
    expect(await memo.get('gone')).toBe('missing');
    expect(() => requireVersioning('enabled', 'pin', 'gs://b/')).not.toThrow();
    expect(() => requireVersioning('missing', 'pin', 'gs://b/')).toThrow(NotFound);
    const plain = await memo.get('plain');
    expect(plain).toBe('off');
    expect(() => requireVersioning(plain, 'pin', 'gs://b/')).toThrow(
      /keeps no versions \(versioning is off\)/,
    );
  });
});

describe('token paging', () => {
  it('follows tokens to the end; a missing bucket fails the first page, one that vanishes fails', async () => {
    const pages = ['p1', 'p2', 'p3'];
    const tokens: (string | undefined)[] = [];
    const all = tokenPages(
      async (token) => {
        tokens.push(token);
        return pages[token === undefined ? 0 : Number(token)] as string;
      },
      (page) => (page === 'p3' ? undefined : String(pages.indexOf(page) + 1)),
    );
    expect(await collect(all)).toEqual(pages);
    expect(tokens).toEqual([undefined, '1', '2']);
    const missing = tokenPages(
      async () => {
        throw new NotFound('no bucket');
      },
      () => 'x',
    );
    await expect(collect(missing)).rejects.toThrow(NotFound);
    const vanishing = tokenPages(
      async (token) => {
        if (token) throw new NotFound('no bucket');
        return 'p1';
      },
      () => 'next',
    );
    await expect(collect(vanishing)).rejects.toThrow(NotFound);
    expect([
      pageSize(undefined, 1000),
      pageSize(0, 1000),
      pageSize(2.7, 1000),
      pageSize(5000, 1000),
    ]).toEqual([1000, 1, 2, 1000]);
  });
});

describe('environment settings', () => {
  it('takes the first value set, trimmed; switches only on known words', () => {
    expect(envText(undefined, ' ', ' b ', 'c')).toBe('b');
    expect(envText('', undefined)).toBeUndefined();
    expect(['1', 'TRUE', 'yes', 'On'].map((w) => envSwitch(w, false))).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect(['0', 'false', 'No', 'OFF'].map((w) => envSwitch(w, true))).toEqual([
      false,
      false,
      false,
      false,
    ]);
    expect([envSwitch(undefined, true), envSwitch('maybe', false), envSwitch(' ', true)]).toEqual([
      true,
      false,
      true,
    ]);
  });
});

describe('things made once', () => {
  it('shares the first call, and makes again after a failure', async () => {
    let calls = 0;
    const value = lazy(async () => {
      calls += 1;
      if (calls === 1) throw new Error('first fails');
      return calls;
    });
    expect(value.made).toBe(false);
    await expect(value()).rejects.toThrow('first fails');
    expect(value.made).toBe(false);
    expect(await Promise.all([value(), value()])).toEqual([2, 2]);
    expect(value.made).toBe(true);
    const sdk = lazyModule('demo', 'no-such-package', () => import('no-such-package' as string));
    const error = await sdk().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProvcatError);
    expect((error as Error).message).toMatch(/the demo driver needs no-such-package.*npm install/);
  });
});

describe('bucket stage kinds', () => {
  it('parse strictly, read stage strings, and keep their identities', () => {
    const gs = stageKind('gs');
    if (!gs) throw new Error('no gs kind');
    const d = gs.parse({ version: 1, kind: 'gs', bucket: 'lake', prefix: 'a/b/' }, 'acme');
    expect(d).toEqual({ version: 1, kind: 'gs', bucket: 'lake', prefix: 'a/b', tenant: 'acme' });
    expect(gs.identity(d)).toBe('gs||lake|a/b/acme');
    expect(gs.locations(d).keyPrefix).toBe('a/b/acme');
    expect(() => gs.parse({ version: 1, kind: 'gs', bucket: 'x', prefix: '' }, undefined)).toThrow(
      /bucket must be a GCS bucket name/,
    );
    expect(() =>
      gs.parse({ version: 1, kind: 'gs', bucket: 'lake', prefix: '', key: 'secret' }, undefined),
    ).toThrow(StageConfigError);
    const env = { STORAGE_EMULATOR_HOST: 'http://127.0.0.1:4443' };
    expect(gs.fromString?.('gs://lake/p%20q/', env)).toEqual({
      version: 1,
      kind: 'gs',
      bucket: 'lake',
      prefix: 'p q',
      endpoint: 'http://127.0.0.1:4443',
    });
    expect(gs.fromString?.('s3://lake/p/', env)).toBeUndefined();
    // A bad environment is the stage's configuration error, naming the stage string.
    expect(() => gs.fromString?.('gs://lake/', { STORAGE_EMULATOR_HOST: 'http://[nope' })).toThrow(
      /the stage gs:\/\/lake\/: /,
    );
  });
});

const object = (key: string): ObjectInfo => ({ key, size: 1, version: '"v"' });

describe('listings in UTF-8 byte order', () => {
  it('orders pages that come in UTF-16 or UTF-8 order into UTF-8 order, holding back only what must wait', () => {
    const alphabet = ['a', 'b', '/', '\uff61', '\ue000', '\u{1F600}', '\u{10000}', 'é'];
    const name = fc
      .array(fc.constantFrom(...alphabet), { minLength: 1, maxLength: 5 })
      .map((cs) => `p/${cs.join('')}`);
    fc.assert(
      fc.property(
        fc.uniqueArray(name, { maxLength: 40 }),
        fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 20 }),
        fc.boolean(),
        (names, cuts, utf16) => {
          const served = [...names].sort(utf16 ? undefined : compareUtf8);
          const order = new Utf8Order<string>(2, (s) => s);
          const out: string[] = [];
          let at = 0;
          for (let i = 0; at < served.length; i++) {
            const size = cuts[i % cuts.length] as number;
            // Within a page the service may put entries in any order (Azurite: prefixes first).
            out.push(...order.push(served.slice(at, at + size).reverse()));
            at += size;
          }
          out.push(...order.end());
          expect(out).toEqual([...names].sort(compareUtf8));
        },
      ),
      { numRuns: 300 },
    );
    // Names without astral characters pass at once.
    expect(new Utf8Order<string>(0, (s) => s).push(['b', 'a'])).toEqual(['a', 'b']);
    // An astral name waits while later names could still sort before it...
    const held = new Utf8Order<string>(0, (s) => s);
    expect(held.push(['a', '\u{1F600}x'])).toEqual(['a']);
    expect(held.push(['\u{1F600}y', '\uff61'])).toEqual(['\uff61']);
    expect(held.end()).toEqual(['\u{1F600}x', '\u{1F600}y']);
    // ...and goes once the service listed past every name sharing what comes before it.
    const released = new Utf8Order<string>(0, (s) => s);
    expect(released.push(['k\u{1F600}a'])).toEqual([]);
    expect(released.push(['m'])).toEqual(['k\u{1F600}a', 'm']);
  });

  it('inUtf8Order releases batches as they become final and never yields an empty one', async () => {
    const batches = [['p/b', 'p/a'], ['p/\u{1F600}'], [], ['p/\uff61', 'p/z']];
    const out = await collect(inUtf8Order(from(batches), 2, (s: string) => s));
    expect(out).toEqual([['p/a', 'p/b'], ['p/z', 'p/\uff61'], ['p/\u{1F600}']]);
    expect(await collect(inUtf8Order(from<string[]>([[], []]), 0, (s: string) => s))).toEqual([]);
  });

  it('utf8Pages orders prefixes and objects together, in pages of at most the limit', async () => {
    // As Azurite serves them: UTF-16 order across pages, folder prefixes first within a page.
    const served: ListPage[] = [
      { prefixes: ['p/\uff61/'], objects: [object('p/a'), object('p/\u{1F600}')] },
      { prefixes: [], objects: [object('p/\u{1F600}2'), object('p/\uff62')] },
      { prefixes: ['p/\uffff/'], objects: [] },
    ];
    const pages = await collect(utf8Pages(from(served), 2, 2));
    expect(pages.every((p) => p.prefixes.length + p.objects.length <= 2)).toBe(true);
    // Each page's entries, in order; the pages one after another.
    const names = pages.flatMap((p) =>
      [...p.prefixes, ...p.objects.map((o) => o.key)].sort(compareUtf8),
    );
    const expected = ['p/a', 'p/\uff61/', 'p/\uff62', 'p/\uffff/', 'p/\u{1F600}', 'p/\u{1F600}2'];
    expect(names).toEqual(expected);
    expect([...names].sort(compareUtf8)).toEqual(names);
    expect(pages.flatMap((p) => p.prefixes)).toEqual(['p/\uff61/', 'p/\uffff/']);
    expect(await collect(utf8Pages(from<ListPage>([{ prefixes: [], objects: [] }]), 0, 5))).toEqual(
      [],
    );
  });
});
