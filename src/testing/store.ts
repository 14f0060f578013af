import { mkdtempSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { InvalidArgument, NotFound, UriError } from '../core/errors.js';
import { Uri } from '../core/uri.js';
import type { ObjectStore } from '../store/object-store.js';
import { forbidPrimitives } from './fetch.js';
import { rejection } from './rejection.js';
import { type ConformanceTarget, randomBucket, randomPrefix } from './target.js';
import { tempCache } from './temp-cache.js';

/** The error a call fails with; a call that succeeds fails the test. */
async function failure(call: Promise<unknown>, what: string): Promise<Error> {
  return call.then(
    (value) => {
      throw new Error(`${what}: expected a failure, got ${JSON.stringify(value)}`);
    },
    (error: Error) => error,
  );
}

export { tempCache } from './temp-cache.js';

/** The store methods: stat, list, walk, put, delete. */
export function storeSuite(target: ConformanceTarget): void {
  describe('store methods', () => {
    let store: ObjectStore;
    const url = (p: string, rel: string) => `${store.scheme}://${target.bucket}/${p}${rel}`;
    beforeAll(() => {
      store = target.store({ cache: tempCache() });
    });

    it('puts from a path, a stream and bytes, and stats files, folders and the bucket', async () => {
      const p = randomPrefix();
      const local = path.join(tempCache(), 'x.bin');
      await writeFile(local, 'from a path');
      const a = await store.put(url(p, 'a.txt'), local);
      expect(a).toMatchObject({ kind: 'file', size: 11 });
      expect(a.version).toBeTruthy();
      const b = await store.put(url(p, 'sub/b.txt'), Readable.from([Buffer.from('from a stream')]));
      expect(b.size).toBe(13);
      await store.put(url(p, 'sub/c.txt'), Buffer.from('bytes'));

      const sa = await store.stat(url(p, 'a.txt'));
      expect(sa).toMatchObject({ kind: 'file', size: 11, version: a.version });
      expect(sa.uri.toString()).toBe(url(p, 'a.txt'));
      for (const folder of [url(p, 'sub/'), url(p, 'sub')]) {
        const sf = await store.stat(folder);
        expect(sf.kind).toBe('folder');
        expect(sf.uri.toString()).toBe(url(p, 'sub/'));
      }
      expect((await store.stat(`${store.scheme}://${target.bucket}`)).kind).toBe('folder');
      await expect(store.stat(url(p, 'nope.txt'))).rejects.toBeInstanceOf(NotFound);
      await expect(store.stat(url(p, 'nope/'))).rejects.toBeInstanceOf(NotFound);
      await expect(store.stat(url(p, 'a.txt/'))).rejects.toBeInstanceOf(NotFound);
    });

    it('lists one level in key order, and walks every file with globs', async () => {
      const p = randomPrefix();
      for (const k of ['b.csv', 'a.csv', 'z/1.txt', 'z/deep/2.csv', 'm/3.csv']) {
        await store.put(url(p, k), Buffer.from(k));
      }
      // A folder marker (a key ending '/', as S3 consoles make) is not a file.
      if (target.flags.hostileKeys) await store._put(target.bucket, `${p}z/`, Buffer.alloc(0));
      const level = await store.list(url(p, ''));
      expect(level.map((e) => [e.kind, e.uri.toString()])).toEqual([
        ['file', url(p, 'a.csv')],
        ['file', url(p, 'b.csv')],
        ['folder', url(p, 'm/')],
        ['folder', url(p, 'z/')],
      ]);
      const zl = await store.list(url(p, 'z/'));
      expect(zl.map((e) => e.uri.toString())).toEqual([url(p, 'z/1.txt'), url(p, 'z/deep/')]);
      await expect(store.list(url(p, 'none/'))).rejects.toBeInstanceOf(NotFound);
      await expect(store.list(url(p, 'a.csv'))).rejects.toBeInstanceOf(NotFound);

      if (target.flags.hostileKeys) {
        // A marker with nothing below is an empty folder: listed, and so stat and list say.
        await store._put(target.bucket, `${p}m/empty/`, Buffer.alloc(0));
        const ml = await store.list(url(p, 'm/'));
        expect(ml.map((e) => [e.kind, e.uri.toString()])).toEqual([
          ['file', url(p, 'm/3.csv')],
          ['folder', url(p, 'm/empty/')],
        ]);
        expect((await store.stat(url(p, 'm/empty/'))).kind).toBe('folder');
        expect((await store.stat(url(p, 'm/empty'))).uri.toString()).toBe(url(p, 'm/empty/'));
        expect(await store.list(url(p, 'm/empty/'))).toEqual([]);
      }
      const all = await store.walk(url(p, ''));
      expect(all.map((e) => e.uri.key.slice(p.length))).toEqual([
        'a.csv',
        'b.csv',
        'm/3.csv',
        'z/1.txt',
        'z/deep/2.csv',
      ]);
      const csv = await store.walk(url(p, ''), { include: '**/*.csv', exclude: 'z/**' });
      expect(csv.map((e) => e.uri.key.slice(p.length))).toEqual(['a.csv', 'b.csv', 'm/3.csv']);
    });

    it('refuses to write buckets, folders, pinned URIs and provcat metadata', async () => {
      const p = randomPrefix();
      const bad = [
        url(p, 'folder/'),
        `${store.scheme}://${target.bucket}/`,
        `${url(p, 'x')}?at=version:1`,
        `${store.scheme}://${target.bucket}/.provcat/x`,
      ];
      for (const u of bad) {
        await expect(store.put(u, Buffer.from('x')), u).rejects.toBeInstanceOf(UriError);
        await expect(store.delete(u), u).rejects.toBeInstanceOf(UriError);
      }
      await expect(store.stat(url(p, 'folder/'))).rejects.toBeInstanceOf(NotFound);
    });

    it('deletes one object; deleting a missing one is NotFound', async () => {
      const p = randomPrefix();
      await store.put(url(p, 'gone.txt'), Buffer.from('x'));
      await store.delete(url(p, 'gone.txt'));
      await expect(store.stat(url(p, 'gone.txt'))).rejects.toBeInstanceOf(NotFound);
      await expect(store.delete(url(p, 'gone.txt'))).rejects.toBeInstanceOf(NotFound);
    });

    it('refuses a concurrency outside 1..256 and an empty commit message before any store call', async () => {
      const p = randomPrefix();
      const folder = url(p, 'd/');
      const local = tempCache();
      await writeFile(path.join(local, 'f.txt'), 'x');
      for (const concurrency of [0, 257, 99_999_999, 1.5, Number.NaN]) {
        expect(() => target.store({ cache: tempCache(), concurrency })).toThrow(InvalidArgument);
      }
      const guarded = target.store({ cache: tempCache() });
      const spies = forbidPrimitives(guarded);
      const calls: [string, () => Promise<unknown>][] = [];
      for (const concurrency of [0, 257, 10_000_000, 99_999_999, 2.5]) {
        const c = { concurrency };
        calls.push(
          [`fetch ${concurrency}`, () => guarded.fetch(folder, c)],
          [`push ${concurrency}`, () => guarded.push(local, folder, c)],
          [`deleteFolder ${concurrency}`, () => guarded.deleteFolder(folder, c)],
          [
            `commit --from ${concurrency}`,
            () => guarded.commit(folder, 'm', { from: local, ...c }),
          ],
          [`branch ${concurrency}`, () => guarded.branch(url(randomPrefix('b'), ''), 'main', c)],
        );
      }
      for (const message of ['', '  \n']) {
        calls.push(
          [`commit '${message}'`, () => guarded.commit(folder, message)],
          [`commit --from '${message}'`, () => guarded.commit(folder, message, { from: local })],
        );
      }
      for (const [what, call] of calls) {
        const error = await rejection(call());
        expect(error, what).toBeInstanceOf(InvalidArgument);
      }
      for (const spy of spies) expect(spy).not.toHaveBeenCalled();
    });

    it('keeps keys with %, +, spaces and non-ASCII exact through put, walk and stat', async () => {
      const p = randomPrefix();
      const names = ['100%.csv', 'a+b.csv', 'my file.csv', 'café/日本.txt', '%2e%2e'];
      for (const n of names) {
        const u = Uri.fromKey(store.scheme, target.bucket, `${p}${n}`);
        await store.put(u, Buffer.from(n));
        expect((await store.stat(Uri.parse(u.toString()))).size).toBe(Buffer.byteLength(n));
      }
      const keys = (await store.walk(url(p, ''))).map((e) => e.uri.key.slice(p.length));
      expect([...keys].sort()).toEqual([...names].sort());
    });

    it('a missing bucket is NotFound naming it (stat, list, walk, fetch); an empty one is an empty folder', async () => {
      const missing = randomBucket('nob');
      const root = `${store.scheme}://${missing}/`;
      const calls: Array<[string, () => Promise<unknown>]> = [
        ['stat', () => store.stat(root)],
        ['list', () => store.list(root)],
        ['walk', () => store.walk(root)],
        ['fetch', () => store.fetch(root)],
        ['stat of a folder', () => store.stat(`${root}a/`)],
        ['list of a folder', () => store.list(`${root}a/`)],
        ['walk of a folder', () => store.walk(`${root}a/`)],
        ['fetch of a file', () => store.fetch(`${root}a.txt`)],
      ];
      for (const [what, call] of calls) {
        const error = await failure(call(), what);
        expect(error, `${what}: ${error}`).toBeInstanceOf(NotFound);
        expect(error.message, what).toContain(missing);
      }
      // A folder with nothing in it, in a bucket that exists: list and walk agree.
      const p = randomPrefix();
      await expect(store.list(url(p, ''))).rejects.toBeInstanceOf(NotFound);
      await expect(store.walk(url(p, ''))).rejects.toBeInstanceOf(NotFound);
      // A bucket that exists and holds nothing is an empty folder.
      const empty = randomBucket('emp');
      await store.makeBucket(empty);
      const top = `${store.scheme}://${empty}/`;
      expect((await store.stat(top)).kind).toBe('folder');
      expect(await store.list(top)).toEqual([]);
      expect(await store.walk(top)).toEqual([]);
      expect(await store.fetch(top)).toMatchObject({ files: 0 });
      // The check costs nothing on a folder that lists something: one listing, no other call.
      await store.put(url(p, 'a.txt'), Buffer.from('a'));
      const pages = vi.spyOn(store, '_pages');
      const head = vi.spyOn(store, '_head');
      expect(await store.list(url(p, ''))).toHaveLength(1);
      expect(await store.walk(url(p, ''))).toHaveLength(1);
      expect([pages.mock.calls.length, head.mock.calls.length]).toEqual([2, 0]);
      vi.restoreAllMocks();
    });

    it.runIf(target.foreignPut !== undefined)(
      'a key with a leading / at a bucket root (written by another client) is refused, never listed as the bucket',
      async () => {
        const bucket = randomBucket('lead');
        await store.makeBucket(bucket);
        const root = `${store.scheme}://${bucket}/`;
        await store.put(`${root}ok.txt`, Buffer.from('ok'));
        await target.foreignPut?.(bucket, '/lead.txt', Buffer.from('lead'));
        try {
          // The listing names a folder '/' that no URI can name (an empty segment): it would read
          // as the bucket itself, a folder inside itself.
          const listed = await failure(store.list(root), 'list');
          expect(listed, String(listed)).toBeInstanceOf(UriError);
          expect(listed.message).toMatch(/empty path segment/);
          await expect(store.walk(root)).rejects.toBeInstanceOf(UriError);
          await expect(store.fetch(root)).rejects.toBeInstanceOf(UriError);
        } finally {
          await store._delete(bucket, '/lead.txt');
        }
        expect((await store.list(root)).map((e) => e.uri.toString())).toEqual([`${root}ok.txt`]);
      },
    );

    it('a name the store cannot hold exactly is refused before any request; one it can round-trips through put and push', async () => {
      const p = randomPrefix();
      const name = 'back\\slash.txt';
      const local = mkdtempSync(path.join(tmpdir(), 'provcat-names-'));
      await writeFile(path.join(local, name), 'bs');
      const problem = store.capabilities.keyProblem?.(`${p}${name}`);
      const u = Uri.fromKey(store.scheme, target.bucket, `${p}${name}`);
      if (problem !== undefined) {
        const spies = (['_put', '_pages', '_head', '_create'] as const).map((m) =>
          vi.spyOn(store, m),
        );
        const put = await failure(store.put(u, Buffer.from('bs')), 'put');
        expect(put, String(put)).toBeInstanceOf(UriError);
        expect(put.message).toContain(problem);
        const pushed = await failure(store.push(local, url(p, '')), 'push');
        expect(pushed, String(pushed)).toBeInstanceOf(UriError);
        const committed = await failure(store.commit(url(p, ''), 'm', { from: local }), 'commit');
        expect(committed, String(committed)).toBeInstanceOf(UriError);
        for (const spy of spies) expect(spy).not.toHaveBeenCalled();
        vi.restoreAllMocks();
        return;
      }
      await store.put(u, Buffer.from('bs'));
      expect((await store.walk(url(p, ''))).map((e) => e.uri.key)).toEqual([`${p}${name}`]);
      const dest = url(p, 'pushed/');
      expect(await store.push(local, dest)).toMatchObject({ uploaded: 1 });
      expect(await store.push(local, dest, { delete: true })).toMatchObject({
        uploaded: 0,
        skipped: 1,
        deleted: 0,
      });
      expect((await store.walk(dest)).map((e) => e.uri.key)).toEqual([`${p}pushed/${name}`]);
    });
  });
}
