import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { NotFound, OfflineMiss, StoreError, UriError } from '../core/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import { type ConformanceTarget, randomPrefix } from './target.js';
import { seededStore, tempCache } from './temp-cache.js';

/** The primitives a store may call; offline tests make each of them fail. */
export const PRIMITIVES = [
  '_head',
  '_pages',
  '_get',
  '_put',
  '_delete',
  '_versionOf',
  '_history',
  '_headVersion',
  '_getVersion',
  '_create',
  '_copy',
  '_createMode',
] as const;

/** Make every primitive of `store` throw, and return the spies (to assert none was called). */
export function forbidPrimitives(store: ObjectStore) {
  return PRIMITIVES.map((name) =>
    vi.spyOn(store, name).mockImplementation(() => {
      throw new Error(`offline store called ${name}`);
    }),
  );
}

/** The error a call fails with; a call that succeeds fails the test. */
async function failure(call: Promise<unknown>): Promise<Error> {
  return call.then(
    (value) => {
      throw new Error(`expected a failure, got ${String(value)}`);
    },
    (error: Error) => error,
  );
}

/** Every file below `dir` with its contents, relative paths with '/'. */
export async function readTree(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const full = path.join(e.parentPath, e.name);
    out[path.relative(dir, full).split(path.sep).join('/')] = await readFile(full, 'utf8');
  }
  return out;
}

/**
 * Watch a store's GETs: how many were in flight at most (a streamed body counts until it
 * closes; a body read whole, `bytes`, or given as a local `file` is over when `_get` returns),
 * and how many came whole.
 */
export function watchGets(store: ObjectStore): { readonly most: number; readonly whole: number } {
  let inFlight = 0;
  const seen = { most: 0, whole: 0 };
  const real = store._get.bind(store);
  vi.spyOn(store, '_get').mockImplementation(async (...args) => {
    inFlight++;
    seen.most = Math.max(seen.most, inFlight);
    try {
      const res = await real(...args);
      if (res.bytes || res.file) {
        // Nothing is left in flight: the body is in memory, or a local file the cache copies.
        if (res.bytes) seen.whole++;
        inFlight--;
      } else {
        res.body.once('close', () => inFlight--);
      }
      return res;
    } catch (error) {
      inFlight--;
      throw error;
    }
  });
  return seen;
}

/** The cache and fetch: folder refetch from one listing, offline mode, pins, hostile names. */
export function fetchSuite(target: ConformanceTarget): void {
  describe('fetch and the cache', () => {
    const setup = (files: Record<string, string>) => seededStore(target, files);

    it('fetches a folder, refetches nothing unchanged from one listing, then exactly what changed', async () => {
      const files = { 'a.txt': 'A', 'b.txt': 'B', 'sub/c.txt': 'C', 'sub/d/e.txt': 'E' };
      const { store, url } = await setup(files);
      const first = await store.fetch(url(''));
      expect(first).toMatchObject({ files: 4, downloaded: 4, bytes: 4 });
      expect(await readTree(first.path)).toEqual(files);

      const pages = vi.spyOn(store, '_pages');
      const head = vi.spyOn(store, '_head');
      const get = vi.spyOn(store, '_get');
      const again = await store.fetch(url(''));
      expect(again).toEqual({ path: first.path, files: 4, downloaded: 0, bytes: 0 });
      expect(pages).toHaveBeenCalledTimes(1);
      expect(head).not.toHaveBeenCalled();
      expect(get).not.toHaveBeenCalled();

      await store.put(url('b.txt'), Buffer.from('B2'));
      const changed = await store.fetch(url(''));
      expect(changed).toMatchObject({ files: 4, downloaded: 1, bytes: 2 });
      expect(await readFile(path.join(changed.path, 'b.txt'), 'utf8')).toBe('B2');

      await store.delete(url('sub/c.txt'));
      await store.put(url('new.txt'), Buffer.from('N'));
      const third = await store.fetch(url(''));
      expect(third).toMatchObject({ files: 4, downloaded: 1 });
      expect(await readTree(third.path)).toEqual({
        'a.txt': 'A',
        'b.txt': 'B2',
        'new.txt': 'N',
        'sub/d/e.txt': 'E',
      });
    });

    it('fetches a single file, refetches it only when its version changed', async () => {
      const { store, url } = await setup({ 'f.bin': 'one' });
      const head = vi.spyOn(store, '_head');
      const get = vi.spyOn(store, '_get');
      const r = await store.fetch(url('f.bin'));
      expect(r).toMatchObject({ files: 1, downloaded: 1, bytes: 3 });
      expect(path.basename(r.path)).toBe('f.bin');
      expect(await readFile(r.path, 'utf8')).toBe('one');
      // Nothing cached: the GET alone is the fetch.
      expect([head.mock.calls.length, get.mock.calls.length]).toEqual([0, 1]);
      expect(await store.fetch(url('f.bin'))).toMatchObject({ downloaded: 0, bytes: 0 });
      // Cached: one HEAD says the version is unchanged.
      expect([head.mock.calls.length, get.mock.calls.length]).toEqual([1, 1]);
      await store.put(url('f.bin'), Buffer.from('three'));
      const r3 = await store.fetch(url('f.bin'));
      expect(r3).toMatchObject({ downloaded: 1, bytes: 5, path: r.path });
      expect(await readFile(r.path, 'utf8')).toBe('three');
      await expect(store.fetch(url('missing.bin'))).rejects.toBeInstanceOf(NotFound);
    });

    it('a folder named without its trailing slash fetches as the folder', async () => {
      const { store, url } = await setup({ 'd/x.txt': 'x' });
      const r = await store.fetch(url('d'));
      expect(await readTree(r.path)).toEqual({ 'x.txt': 'x' });
    });

    it('a single-file fetch of bytes a folder fetch cached links them, downloading nothing', async () => {
      const { store, url } = await setup({ 'd/x.txt': 'xx' });
      await store.fetch(url('d/'));
      const r = await store.fetch(url('d/x.txt'));
      expect(r).toMatchObject({ files: 1, downloaded: 0, bytes: 0 });
      expect(await readFile(r.path, 'utf8')).toBe('xx');
      // The view is recorded: the next fetch is a HEAD that finds it current.
      const get = vi.spyOn(store, '_get');
      expect(await store.fetch(url('d/x.txt'))).toMatchObject({ downloaded: 0, path: r.path });
      expect(get).not.toHaveBeenCalled();
    });

    it('keeps downloads within the concurrency bound and reports progress', async () => {
      const files = Object.fromEntries(
        Array.from({ length: 40 }, (_, i) => [`f${i}.txt`, 'x'.repeat(i)]),
      );
      const { cache, url } = await setup(files);
      const seen: number[] = [];
      const store = target.store({ cache, concurrency: 3, onProgress: (p) => seen.push(p.bytes) });
      const gets = watchGets(store);
      const r = await store.fetch(url(''));
      expect(r.downloaded).toBe(40);
      expect(gets.most).toBeGreaterThan(1);
      expect(gets.most).toBeLessThanOrEqual(3);
      expect(seen.at(-1)).toBe(r.bytes);
    });

    it('offline: fetch serves the cache with no store call; stat/list raise OfflineMiss', async () => {
      const { cache, store, url } = await setup({ 'a.txt': 'A', 'sub/b.txt': 'B' });
      await store.fetch(url(''));
      await store.fetch(url('a.txt'));
      const offline = target.store({ cache, offline: true });
      const spies = forbidPrimitives(offline);
      const r = await offline.fetch(url(''));
      expect(await readTree(r.path)).toEqual({ 'a.txt': 'A', 'sub/b.txt': 'B' });
      expect(await readFile((await offline.fetch(url('a.txt'))).path, 'utf8')).toBe('A');
      // A file inside a fetched folder, and a sub-folder of it, are in the cache too.
      expect(await readFile((await offline.fetch(url('sub/b.txt'))).path, 'utf8')).toBe('B');
      expect(await readTree((await offline.fetch(url('sub/'))).path)).toEqual({ 'b.txt': 'B' });
      await expect(offline.stat(url('a.txt'))).rejects.toBeInstanceOf(OfflineMiss);
      await expect(offline.list(url(''))).rejects.toBeInstanceOf(OfflineMiss);
      await expect(offline.walk(url(''))).rejects.toBeInstanceOf(OfflineMiss);
      await expect(offline.fetch(url('never.txt'))).rejects.toBeInstanceOf(OfflineMiss);
      await expect(offline.fetch(url('never/'))).rejects.toBeInstanceOf(OfflineMiss);
      await expect(offline.put(url('x'), Buffer.from('x'))).rejects.toBeInstanceOf(OfflineMiss);
      for (const spy of spies) expect(spy).not.toHaveBeenCalled();
    });

    it('an aborted folder fetch leaves no copy that offline mode takes as complete', async () => {
      const files = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`f${i}`, `${i}`]));
      const { cache, store, url } = await setup(files);
      const ac = new AbortController();
      let n = 0;
      const real = store._get.bind(store);
      vi.spyOn(store, '_get').mockImplementation(async (...args) => {
        if (++n === 5) ac.abort(new Error('stop'));
        return real(...args);
      });
      await expect(store.fetch(url(''), { signal: ac.signal, concurrency: 2 })).rejects.toThrow();
      const offline = target.store({ cache, offline: true });
      await expect(offline.fetch(url(''))).rejects.toBeInstanceOf(OfflineMiss);
      vi.restoreAllMocks();
      const done = await store.fetch(url(''));
      expect(Object.keys(await readTree(done.path))).toHaveLength(30);
    });

    it('refuses folders whose names one disk would store as one', async () => {
      const a = await setup({ 'Dir/a': '1', 'dir/a': '2' });
      await expect(a.store.fetch(a.url(''))).rejects.toBeInstanceOf(StoreError);
      const b = await setup({ 'x/y': '1', 'caf\u00e9': '1', 'cafe\u0301': '2' });
      await expect(b.store.fetch(b.url(''))).rejects.toBeInstanceOf(StoreError);
      // The fetch is refused as a whole: nothing is marked complete.
      const offline = target.store({ cache: a.cache, offline: true });
      await expect(offline.fetch(a.url(''))).rejects.toBeInstanceOf(OfflineMiss);
    });

    it.runIf(target.flags.hostileKeys)(
      'refuses keys no URI can name, and writes nothing outside the cache',
      async () => {
        for (const bad of ['a//b', '../../escape', 'x/./y', 'x/../../y']) {
          const { cache, store, p, url } = await setup({ 'ok.txt': 'ok' });
          await store._put(target.bucket, `${p}${bad}`, Buffer.from('evil'));
          await expect(store.walk(url('')), bad).rejects.toBeInstanceOf(UriError);
          await expect(store.fetch(url('')), bad).rejects.toBeInstanceOf(UriError);
          const outside = await readdir(path.dirname(cache));
          expect(outside.filter((n) => n === 'escape' || n === 'y')).toEqual([]);
        }
      },
    );

    it.runIf(target.flags.versions)(
      'fetches a file at ?at=version:, online and offline',
      async () => {
        const { cache, store, p, url } = await setup({ 'v.txt': 'old bytes' });
        const id = await store._versionOf(target.bucket, `${p}v.txt`);
        await store.put(url('v.txt'), Buffer.from('new'));
        const pinned = `${url('v.txt')}?at=version:${encodeURIComponent(id)}`;
        const r = await store.fetch(pinned);
        expect(await readFile(r.path, 'utf8')).toBe('old bytes');
        expect(path.basename(r.path)).toBe('v.txt');
        expect((await store.stat(pinned)).size).toBe(9);
        const offline = target.store({ cache, offline: true });
        const spies = forbidPrimitives(offline);
        expect(await readFile((await offline.fetch(pinned)).path, 'utf8')).toBe('old bytes');
        expect((await offline.stat(pinned)).size).toBe(9);
        for (const spy of spies) expect(spy).not.toHaveBeenCalled();
        await expect(store.fetch(`${url('v.txt')}?at=version:nope`)).rejects.toBeInstanceOf(
          NotFound,
        );
      },
    );
  });
}

/**
 * The one key-set rule at commit (src/core/keys.ts `checkFolderKeys`): a folder a fetch would refuse
 * is refused by commit too, before anything is written. Registered by the versions suite, which
 * also runs with a store whose commits work where the target's do not (S3 on Ceph).
 */
export function commitKeySetCase(target: ConformanceTarget): void {
  it.runIf(target.flags.versions && target.flags.createMode !== 'none')(
    'commit refuses a folder no fetch could hold (NFC and NFD, case, file and folder), writing nothing',
    async () => {
      const sets: Record<string, string>[] = [
        { 'caf\u00e9.txt': 'nfc', 'cafe\u0301.txt': 'nfd' },
        { 'Dir/a': '1', 'dir/a': '2' },
        { d: '1', 'd/x': '2' },
      ];
      for (const files of sets) {
        const store = target.store({ cache: tempCache() });
        const p = randomPrefix();
        const url = (rel: string) => `${store.scheme}://${target.bucket}/${p}${rel}`;
        for (const [k, v] of Object.entries(files)) await store.put(url(k), Buffer.from(v));
        // How the bucket keeps "create only if absent" is probed once per bucket (S3 writes a
        // probe object); the commit itself must write nothing.
        await store._createMode(target.bucket);
        const writes = (['_put', '_create'] as const).map((m) => vi.spyOn(store, m));
        const error = await failure(store.commit(url(''), 'one folder, two names'));
        expect(error, String(error)).toBeInstanceOf(StoreError);
        expect(error.message).toMatch(
          /one file on a case-insensitive disk|two Unicode spellings|both a file and a folder/,
        );
        for (const spy of writes) expect(spy).not.toHaveBeenCalled();
        vi.restoreAllMocks();
        expect(await store.log(url(''))).toEqual([]);
      }
    },
  );
}
