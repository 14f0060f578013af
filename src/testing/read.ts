/**
 * The read API on every driver: `read`, `readText`, `openRead`, `exists`, now and at a pin,
 * offline at a pin, a range at a pin read as exactly that range, and `fetch(uri, {to})`.
 *
 * @module
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { mkdir, readFile, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import type { ByteRange, GetOptions } from '../contract/primitives.js';
import type { Progress } from '../contract/store-context.js';
import { InvalidArgument, NotFound, OfflineMiss, StoreError, UriError } from '../core/errors.js';
import { InvalidRange } from '../lake/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import { forbidPrimitives, readTree } from './fetch.js';
import { rejection } from './rejection.js';
import type { ConformanceTarget } from './target.js';
import { seededStore, tempCache } from './temp-cache.js';

const CSV = 'city,temp\noslo,3\nlima,19\nperth,24\n';

/** Every byte of a stream. */
async function drain(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body as AsyncIterable<Buffer>) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/** Record the ranges asked of `_get`/`_getVersion` and the bytes each answer declared. */
function watchRanged(store: ObjectStore) {
  const asked: { range: ByteRange | undefined; bytes: number }[] = [];
  // A driver's `_getVersion` may be its `_get` with a version: only the outer call counts.
  let depth = 0;
  for (const name of ['_get', '_getVersion'] as const) {
    const real = store[name].bind(store) as (...a: unknown[]) => ReturnType<ObjectStore['_get']>;
    vi.spyOn(store, name).mockImplementation(async (...args: unknown[]) => {
      depth++;
      try {
        const res = await real(...args);
        const options = args[name === '_get' ? 2 : 3] as GetOptions | undefined;
        if (depth === 1) asked.push({ range: options?.range, bytes: res.contentLength });
        return res;
      } finally {
        depth--;
      }
    });
  }
  return asked;
}

/** Register the read API's part of the conformance suite. */
export function readSuite(target: ConformanceTarget): void {
  describe('read API (read, readText, openRead, exists, fetch --to)', () => {
    const setup = (files: Record<string, string>) => seededStore(target, files);

    it('reads a file whole, as text, as a stream and by range; exists; a folder is refused', async () => {
      const { store, url } = await setup({ 'data/a.csv': CSV, 'data/sub/b.txt': 'b' });
      expect((await store.read(url('data/a.csv'))).toString()).toBe(CSV);
      // Read once: the second read finds the cached version current (a HEAD, no GET).
      const get = vi.spyOn(store, '_get');
      expect(await store.readText(url('data/a.csv'))).toBe(CSV);
      expect((await drain(await store.openRead(url('data/a.csv')))).toString()).toBe(CSV);
      expect(get).not.toHaveBeenCalled();
      // A range of the current version, which the cache holds: a HEAD, no GET.
      const range = { start: 5, end: 14 };
      expect((await store.read(url('data/a.csv'), { range })).toString()).toBe(CSV.slice(5, 14));
      expect((await drain(await store.openRead(url('data/a.csv'), { range }))).toString()).toBe(
        CSV.slice(5, 14),
      );
      expect(get).not.toHaveBeenCalled();
      vi.restoreAllMocks();
      // Not cached: one ranged GET of exactly the range.
      const other = target.store({ cache: tempCache() });
      const asked = watchRanged(other);
      expect((await other.read(url('data/a.csv'), { range })).toString()).toBe(CSV.slice(5, 14));
      expect(asked).toEqual([{ range, bytes: 9 }]);
      expect(await store.exists(url('data/a.csv'))).toBe(true);
      expect(await store.exists(url('data/'))).toBe(true);
      expect(await store.exists(url('data/none.csv'))).toBe(false);
      expect(await rejection(store.read(url('data/')))).toBeInstanceOf(UriError);
      expect(await rejection(store.read(url('data')))).toBeInstanceOf(UriError);
      expect(await rejection(store.read(url('data/none.csv')))).toBeInstanceOf(NotFound);
      expect(
        await rejection(store.read(url('data/a.csv'), { range: { start: 0, end: 999 } })),
      ).toBeInstanceOf(InvalidRange);
    });

    it.runIf(target.flags.versions)(
      'reads a file at ?at=version:, then offline with no store call',
      async () => {
        const { cache, store, p, url } = await setup({ 'v.csv': CSV });
        const id = await store._versionOf(target.bucket, `${p}v.csv`);
        await store.put(url('v.csv'), Buffer.from('changed'));
        const pinned = `${url('v.csv')}?at=version:${encodeURIComponent(id)}`;
        expect(await store.readText(pinned)).toBe(CSV);
        expect(await store.readText(url('v.csv'))).toBe('changed');
        const offline = target.store({ cache, offline: true });
        const spies = forbidPrimitives(offline);
        expect(await offline.readText(pinned)).toBe(CSV);
        expect((await offline.read(pinned)).toString()).toBe(CSV);
        expect((await drain(await offline.openRead(pinned))).toString()).toBe(CSV);
        const range = { start: 10, end: 16 };
        expect((await offline.read(pinned, { range })).toString()).toBe(CSV.slice(10, 16));
        expect(await offline.exists(pinned)).toBe(true);
        for (const spy of spies) expect(spy).not.toHaveBeenCalled();
        expect(await rejection(offline.read(url('never.csv?at=version:x')))).toBeInstanceOf(
          OfflineMiss,
        );
        const notCached = target.store({ cache: tempCache(), offline: true });
        const spies2 = forbidPrimitives(notCached);
        expect(await rejection(notCached.read(pinned, { range }))).toBeInstanceOf(OfflineMiss);
        for (const spy of spies2) expect(spy).not.toHaveBeenCalled();
      },
    );

    it.runIf(target.flags.versions && target.flags.ranges)(
      'a range at a pin not cached reads exactly that range, checked before any byte is asked',
      async () => {
        const { p, url } = await setup({ 'r.csv': CSV });
        const probe = target.store({ cache: tempCache() });
        const id = await probe._versionOf(target.bucket, `${p}r.csv`);
        const pinned = `${url('r.csv')}?at=version:${encodeURIComponent(id)}`;
        const store = target.store({ cache: tempCache() });
        const asked = watchRanged(store);
        const range = { start: 3, end: 17 };
        expect((await store.read(pinned, { range })).toString()).toBe(CSV.slice(3, 17));
        expect((await drain(await store.openRead(pinned, { range }))).toString()).toBe(
          CSV.slice(3, 17),
        );
        // Two ranged requests of 14 bytes: nothing else was downloaded.
        expect(asked).toEqual([
          { range, bytes: 14 },
          { range, bytes: 14 },
        ]);
        for (const bad of [
          { start: 4, end: 4 },
          { start: 9, end: 2 },
          { start: 0, end: CSV.length + 1 },
          { start: -1, end: 3 },
          { start: 0.5, end: 3 },
        ]) {
          const error = await rejection(store.read(pinned, { range: bad }));
          expect(error, JSON.stringify(bad)).toBeInstanceOf(InvalidRange);
        }
        expect(asked).toHaveLength(2);
        // Read whole once, the pin's ranges come from the cache.
        expect(await store.readText(pinned)).toBe(CSV);
        const before = asked.length;
        expect((await store.read(pinned, { range })).toString()).toBe(CSV.slice(3, 17));
        expect(asked).toHaveLength(before);
      },
    );

    it.runIf(target.flags.versions && target.flags.createMode !== 'none')(
      'reads a file at ?at=commit:, a range of it as one ranged request, offline once read',
      async () => {
        const { cache, store, url } = await setup({ 'c/a.csv': CSV, 'c/b.txt': 'b' });
        const at = await store.commit(url('c/'), 'for reads');
        const file = `${url('c/a.csv')}${at.toString().slice(at.toString().indexOf('?'))}`;
        await store.put(url('c/a.csv'), Buffer.from('later'));
        const fresh = target.store({ cache: tempCache() });
        const asked = watchRanged(fresh);
        const range = { start: 1, end: 9 };
        expect((await fresh.read(file, { range })).toString()).toBe(CSV.slice(1, 9));
        expect(asked.filter((a) => a.range !== undefined)).toEqual([{ range, bytes: 8 }]);
        expect(await store.readText(file)).toBe(CSV);
        const offline = target.store({ cache, offline: true });
        const spies = forbidPrimitives(offline);
        expect(await offline.readText(file)).toBe(CSV);
        expect(await offline.exists(file)).toBe(true);
        for (const spy of spies) expect(spy).not.toHaveBeenCalled();
      },
    );

    it('fetch --to: exact independent copies, reruns write nothing, edits restored, delete', async () => {
      const files = { 'a.csv': CSV, 'sub/b.txt': 'bee', 'sub/deep/c.bin': 'sea' };
      const { store, url } = await setup(files);
      const dir = path.join(mkdtempSync(path.join(tmpdir(), 'provcat-to-')), 'out');
      const heard: Progress[] = [];
      const first = await store.fetch(url(''), { to: dir, onProgress: (e) => heard.push(e) });
      expect(first).toEqual({ path: dir, files: 3, written: 3, deleted: 0, bytes: CSV.length + 6 });
      // The fetch into the cache is reported, then the copies out of it.
      expect(heard.some((e) => e.operation === 'fetch')).toBe(true);
      expect(heard.at(-1)).toMatchObject({ operation: 'copy', bytes: first.bytes, files: 3 });
      expect(await readTree(dir)).toEqual(files);
      const again = await store.fetch(url(''), { to: dir });
      expect(again).toMatchObject({ files: 3, written: 0, deleted: 0, bytes: 0 });
      // An edited local file is restored; the cache's copy never saw the edit.
      const cached = (await store.fetch(url(''))).path;
      const local = path.join(dir, 'sub', 'b.txt');
      expect((await stat(local)).ino).not.toBe((await stat(path.join(cached, 'sub/b.txt'))).ino);
      await writeFile(local, 'edited');
      expect(await readFile(path.join(cached, 'sub/b.txt'), 'utf8')).toBe('bee');
      const restored = await store.fetch(url(''), { to: dir });
      expect(restored).toMatchObject({ written: 1, bytes: 3 });
      expect(await readFile(local, 'utf8')).toBe('bee');
      // An edit of the same size is restored; a file only touched is not written again.
      await writeFile(local, 'BEE');
      expect(await store.fetch(url(''), { to: dir })).toMatchObject({ written: 1, bytes: 3 });
      expect(await readFile(local, 'utf8')).toBe('bee');
      await utimes(local, new Date(2001, 1, 1), new Date(2001, 1, 1));
      expect(await store.fetch(url(''), { to: dir })).toMatchObject({ written: 0, bytes: 0 });
      expect(await store.fetch(url(''), { to: dir })).toMatchObject({ written: 0, bytes: 0 });
      // Local extras stay unless `delete`.
      await writeFile(path.join(dir, 'extra.txt'), 'x');
      await store.delete(url('sub/deep/c.bin'));
      expect(await store.fetch(url(''), { to: dir })).toMatchObject({ files: 2, deleted: 0 });
      expect(Object.keys(await readTree(dir))).toContain('extra.txt');
      const pruned = await store.fetch(url(''), { to: dir, delete: true });
      expect(pruned).toMatchObject({ files: 2, written: 0, deleted: 2 });
      expect(await readTree(dir)).toEqual({ 'a.csv': CSV, 'sub/b.txt': 'bee' });
      // One file goes into the folder under its own name.
      const one = await store.fetch(url('a.csv'), { to: path.join(dir, 'one') });
      expect(one).toMatchObject({ files: 1, written: 1 });
      expect(await readFile(path.join(dir, 'one', 'a.csv'), 'utf8')).toBe(CSV);
    });

    it('fetch --to refuses a folder holding a link, or a folder where a file goes, writing nothing', async () => {
      const { store, url } = await setup({ 'a.csv': CSV, 'sub/b.txt': 'b' });
      const base = mkdtempSync(path.join(tmpdir(), 'provcat-to-'));
      const withLink = path.join(base, 'linked');
      const outside = path.join(base, 'outside');
      await writeFile(outside, 'keep');
      await mkdir(withLink);
      await symlink(outside, path.join(withLink, 'a.csv'));
      expect(await rejection(store.fetch(url(''), { to: withLink }))).toBeInstanceOf(
        InvalidArgument,
      );
      expect(await readFile(outside, 'utf8')).toBe('keep');
      expect(await readTree(withLink)).toEqual({});
      const asLink = path.join(base, 'dir-link');
      await symlink(base, asLink);
      expect(await rejection(store.fetch(url(''), { to: asLink }))).toBeInstanceOf(InvalidArgument);
      const shaped = path.join(base, 'shaped');
      await mkdir(path.join(shaped, 'a.csv'), { recursive: true });
      expect(await rejection(store.fetch(url(''), { to: shaped }))).toBeInstanceOf(InvalidArgument);
      expect(await readTree(shaped)).toEqual({});
      // A local name one disk would take for a fetched one: refused, nothing written or deleted.
      const twins = path.join(base, 'twins');
      await mkdir(twins);
      await writeFile(path.join(twins, 'A.CSV'), 'mine');
      const twin = await rejection(store.fetch(url(''), { to: twins, delete: true }));
      expect(twin).toBeInstanceOf(InvalidArgument);
      expect(await readTree(twins)).toEqual({ 'A.CSV': 'mine' });
    });

    it('fetch --to refuses folders no disk could hold before anything is written', async () => {
      const { store, url } = await setup({ 'Dir/a': '1', 'dir/a': '2' });
      const to = path.join(mkdtempSync(path.join(tmpdir(), 'provcat-to-')), 'out');
      expect(await rejection(store.fetch(url(''), { to }))).toBeInstanceOf(StoreError);
      expect(existsSync(to)).toBe(false);
    });

    it.runIf(target.flags.hostileKeys)(
      'fetch --to refuses keys no URI can name before anything is written',
      async () => {
        const { store, p, url } = await setup({ 'ok.txt': 'ok' });
        await store._put(target.bucket, `${p}x/../../escape`, Buffer.from('evil'));
        const to = path.join(mkdtempSync(path.join(tmpdir(), 'provcat-to-')), 'out');
        expect(await rejection(store.fetch(url(''), { to }))).toBeInstanceOf(UriError);
        expect(existsSync(to)).toBe(false);
      },
    );
  });
}
