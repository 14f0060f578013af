/**
 * The versions part of the conformance suite: commit, log, pin and branch on a driver's
 * versioned bucket (run only when `flags.versions`).
 *
 * Every test works under a random prefix (and random top-level branch names), and each builds
 * its own stores over the target with a fresh cache, so a commit is read from the store the
 * first time. Faults (a writer racing a commit, a branch copy that dies halfway) are injected
 * with {@link Interposer}, a store that delegates every primitive to the driver under test, so
 * the tests need nothing from the driver beyond the primitives.
 *
 * @module
 */
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { branchFrom } from '../commits/branch.js';
import { commitFolder } from '../commits/commit.js';
import { commitKey, logKey } from '../commits/format.js';
import { logFolder } from '../commits/log.js';
import { pinUri } from '../commits/pin.js';
import { filesUnder, loadCommit } from '../commits/read.js';
import {
  exitCodeOf,
  InvalidArgument,
  NotCommitted,
  NotFound,
  NotSupported,
  ObjectIntegrityError,
  OfflineMiss,
  StoreError,
  UriError,
} from '../core/errors.js';
import { Uri } from '../core/uri.js';
import type { ObjectStore } from '../store/object-store.js';
import { commitKeySetCase, forbidPrimitives, readTree } from './fetch.js';
import { Interposer } from './interposer.js';
import { rejection } from './rejection.js';
import { type ConformanceTarget, randomPrefix } from './target.js';
import { tempCache } from './temp-cache.js';

/** Read a whole body as text. */
export async function text(body: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * The no-versions part of the suite, on a bucket that keeps no versions (`target.bucket` when
 * `flags.versions` is false, else `target.unversionedBucket`): pin, commit, log and branch are
 * `NotSupported` (CLI exit 11) on every driver, and nothing is written.
 */
export function noVersionsSuite(target: ConformanceTarget): void {
  const bucket = target.flags.versions ? target.unversionedBucket : target.bucket;
  describe.runIf(bucket !== undefined)('no versions: pin, commit, log, branch', () => {
    it('are NotSupported on a bucket without versions, and write nothing', async () => {
      const b = bucket as string;
      const store = target.store({ cache: tempCache() });
      const p = randomPrefix();
      const url = (key: string) => `${store.scheme}://${b}/${key}`;
      await store._put(b, `${p}f.txt`, Buffer.from('x'));
      const local = tempCache();
      await writeFile(path.join(local, 'g.txt'), 'y');
      const refusals: [string, () => Promise<unknown>][] = [
        ['pin', () => pinUri(store, url(`${p}f.txt`))],
        ['commit', () => commitFolder(store, url(p), 'first')],
        ['log', () => logFolder(store, url(p))],
        ['branch', () => branchFrom(store, url(randomPrefix('br')), p.slice(0, -1))],
        ['stat at a version', () => store.stat(`${url(`${p}f.txt`)}?at=version:1`)],
        ['fetch at a version', () => store.fetch(`${url(`${p}f.txt`)}?at=version:1`)],
      ];
      for (const [what, call] of refusals) {
        const error = await rejection(call());
        expect(error, what).toBeInstanceOf(NotSupported);
        expect(exitCodeOf(error), what).toBe(11);
      }
      // commit --from pushes, then the commit fails: NotCommitted, with the exit of its cause.
      const after = await rejection(store.commit(url(p), 'from', { from: local }));
      expect(after).toBeInstanceOf(NotCommitted);
      expect((after as NotCommitted).cause).toBeInstanceOf(NotSupported);
      expect(exitCodeOf(after)).toBe(11);
      await expect(store._head(b, logKey(p, 1))).rejects.toBeInstanceOf(NotFound);
    });
  });
}

/** The versions part of the conformance suite. */
export function versionsSuite(target: ConformanceTarget): void {
  describe.runIf(target.flags.versions)('versions: commit, log, pin, branch', () => {
    const bucket = target.bucket;
    let store: ObjectStore;
    /** A store over the target with a cache of its own (a "new process"). */
    const fresh = (offline = false) => target.store({ cache: tempCache(), offline });
    const url = (key: string) => `${store.scheme}://${bucket}/${key}`;
    const write = (key: string, body: string) => store._put(bucket, key, Buffer.from(body));
    beforeAll(() => {
      store = fresh();
    });
    const atomicish = target.flags.createMode !== 'none';
    commitKeySetCase(target);

    it.runIf(atomicish)(
      'a commit keeps the committed versions while files change, are deleted and are added',
      async () => {
        const p = randomPrefix();
        await write(`${p}a.txt`, 'a1');
        await write(`${p}sub/b.txt`, 'b1');
        await write(`${p}sub/c.txt`, 'c1');
        const pinned = await commitFolder(store, url(p), 'first', { metadata: { run: '7' } });
        expect(pinned.at?.kind).toBe('commit');
        expect(pinned.toString().startsWith(`${url(p)}?at=commit:`)).toBe(true);
        const id = pinned.at?.id as string;

        await write(`${p}a.txt`, 'a2');
        await store._delete(bucket, `${p}sub/b.txt`);
        await write(`${p}d.txt`, 'd1');

        const reader = fresh();
        const commit = await loadCommit(reader, bucket, id);
        expect(commit).toMatchObject({ id, number: 1, parent: null, folder: p, message: 'first' });
        expect(commit.metadata).toEqual({ run: '7' });
        expect(commit.files.map((f) => f.key)).toEqual([
          `${p}a.txt`,
          `${p}sub/b.txt`,
          `${p}sub/c.txt`,
        ]);
        const want: Record<string, string> = {
          'a.txt': 'a1',
          'sub/b.txt': 'b1',
          'sub/c.txt': 'c1',
        };
        for (const f of commit.files) {
          const got = await reader._getVersion(bucket, f.key, f.versionId);
          expect(await text(got.body)).toBe(want[f.key.slice(p.length)]);
          expect(f.size).toBe(2);
        }
        // The same through the store API at the commit: stat and walk from the manifest.
        const b = await reader.stat(pinned.join('sub/b.txt'));
        expect(b).toMatchObject({ kind: 'file', size: 2 });
        expect(b.versionId).toBe(commit.files[1]?.versionId);
        const walked = await reader.walk(pinned);
        expect(walked.map((e) => e.uri.key.slice(p.length))).toEqual(Object.keys(want));
        await expect(reader.stat(pinned.join('d.txt'))).rejects.toBeInstanceOf(NotFound);
      },
    );

    it.runIf(atomicish)(
      'fetch at a commit gives the committed bytes',
      { timeout: 20_000 },
      async () => {
        const p = randomPrefix();
        await write(`${p}a.txt`, 'old a');
        await write(`${p}x/y.txt`, 'old y');
        const pinned = await commitFolder(store, url(p), 'snapshot');
        await write(`${p}a.txt`, 'new a');
        await store._delete(bucket, `${p}x/y.txt`);
        const reader = fresh();
        const folder = await reader.fetch(pinned);
        expect(await readFile(path.join(folder.path, 'a.txt'), 'utf8')).toBe('old a');
        expect(await readFile(path.join(folder.path, 'x/y.txt'), 'utf8')).toBe('old y');
        const file = await reader.fetch(pinned.join('a.txt'));
        expect(await readFile(file.path, 'utf8')).toBe('old a');
      },
    );

    it.runIf(atomicish)('logs commits newest first, each naming its parent', async () => {
      const p = randomPrefix();
      await write(`${p}f.txt`, '1');
      const c1 = await commitFolder(store, url(p), 'one');
      await write(`${p}f.txt`, '2');
      const c2 = await commitFolder(store, url(p), 'two', { metadata: { k: 'v' } });
      await write(`${p}g.txt`, '3');
      const c3 = await commitFolder(store, url(p), 'three');
      const log = await logFolder(fresh(), url(p));
      expect(log.map((e) => [e.number, e.id, e.parent, e.message, e.files])).toEqual([
        [3, c3.at?.id, c2.at?.id, 'three', 2],
        [2, c2.at?.id, c1.at?.id, 'two', 1],
        [1, c1.at?.id, null, 'one', 1],
      ]);
      expect(log[1]?.metadata).toEqual({ k: 'v' });
      expect(Date.parse(log[0]?.time as string)).toBeGreaterThan(0);
      expect(await logFolder(store, url(randomPrefix()))).toEqual([]);
    });

    it.runIf(atomicish)(
      'refuses empty messages, empty folders, no change, pins and .provcat/',
      async () => {
        const p = randomPrefix();
        await expect(commitFolder(store, url(p), 'x')).rejects.toBeInstanceOf(StoreError);
        await write(`${p}f.txt`, '1');
        for (const message of ['', '  \n']) {
          await expect(commitFolder(store, url(p), message)).rejects.toBeInstanceOf(
            InvalidArgument,
          );
        }
        const c1 = await commitFolder(store, url(p), 'one');
        const same = await rejection(commitFolder(store, url(p), 'again'));
        expect(same).toBeInstanceOf(StoreError);
        expect(String((same as Error).message)).toMatch(/no change/);
        const c2 = await commitFolder(store, url(p), 'again', { allowEmpty: true });
        const c2commit = await loadCommit(store, bucket, c2.at?.id as string);
        expect(c2commit.parent).toBe(c1.at?.id);
        expect(c2commit.files).toEqual(
          (await loadCommit(store, bucket, c1.at?.id as string)).files,
        );
        await expect(commitFolder(store, c1, 'pinned')).rejects.toBeInstanceOf(UriError);
        await expect(commitFolder(store, url('.provcat/'), 'meta')).rejects.toBeInstanceOf(
          UriError,
        );
        // Deleting every file leaves nothing to commit.
        await store._delete(bucket, `${p}f.txt`);
        await expect(commitFolder(store, url(p), 'gone')).rejects.toBeInstanceOf(StoreError);
        expect((await logFolder(store, url(p))).length).toBe(2);
      },
    );

    it.runIf(atomicish)(
      'pins files to versions and folders to the commit that holds them',
      async () => {
        const p = randomPrefix();
        const info = await write(`${p}data/x.csv`, 'x1');
        await write(`${p}data/deep/y.csv`, 'y1');

        const pf = await pinUri(store, url(`${p}data/x.csv`));
        expect(pf.toString()).toBe(
          `${url(`${p}data/x.csv`)}?at=version:${encodeURIComponent(info.versionId as string)}`,
        );
        await write(`${p}data/x.csv`, 'x2');
        expect(await pinUri(store, pf)).toEqual(pf); // still names a real version

        const none = await rejection(pinUri(store, url(`${p}data/`)));
        expect(none).toBeInstanceOf(StoreError);
        const c = await commitFolder(store, url(p), 'top');
        const id = c.at?.id as string;
        // The folder itself, a folder below it (and the file-form of it) pin to the commit above.
        expect((await pinUri(store, url(p))).at?.id).toBe(id);
        expect((await pinUri(store, url(`${p}data/deep/`))).at?.id).toBe(id);
        expect((await pinUri(store, url(`${p}data/deep`))).toString()).toBe(
          `${url(`${p}data/deep/`)}?at=commit:${id}`,
        );
        // A folder committed itself wins over the commit above it.
        const own = await commitFolder(store, url(`${p}data/`), 'own');
        expect((await pinUri(store, url(`${p}data/`))).at?.id).toBe(own.at?.id);
        // A folder made after the commit above it is not held by it.
        await write(`${p}later/z.csv`, 'z');
        await expect(pinUri(store, url(`${p}later/`))).rejects.toBeInstanceOf(StoreError);

        // Pinned URIs are checked.
        await expect(
          pinUri(store, url(`${p}data/deep/y.csv?at=commit:${id}`)),
        ).resolves.toBeDefined();
        await expect(
          pinUri(store, url(`${p}data/nope.csv?at=commit:${id}`)),
        ).rejects.toBeInstanceOf(NotFound);
        await expect(pinUri(store, url(`${p}later/?at=commit:${id}`))).rejects.toBeInstanceOf(
          NotFound,
        );
        await expect(pinUri(store, url(`${p}?at=commit:${'0'.repeat(64)}`))).rejects.toBeInstanceOf(
          NotFound,
        );
        // A real version ID, but of another key.
        const other = await store._versionOf(bucket, `${p}data/deep/y.csv`);
        await expect(
          pinUri(store, url(`${p}data/x.csv?at=version:${encodeURIComponent(other)}`)),
        ).rejects.toBeInstanceOf(NotFound);
        await expect(pinUri(store, url(`${p}nothing.csv`))).rejects.toBeInstanceOf(NotFound);
        // Offline, a commit pin is checked from the cache (it was read above), nothing else is.
        const offline = target.store({ cache: store.cache, offline: true });
        await expect(pinUri(offline, c)).resolves.toEqual(c);
        await expect(pinUri(offline, url(p))).rejects.toBeInstanceOf(OfflineMiss);
      },
    );

    it('an error about a version names the URI the caller gave, ?at=version: and all', async () => {
      const p = randomPrefix();
      await write(`${p}a.txt`, 'a');
      // A real version ID, of another key: no driver can tell it from a version of this one.
      const other = (await write(`${p}b.txt`, 'b')).versionId as string;
      const pinned = `${url(`${p}a.txt`)}?at=version:${encodeURIComponent(other)}`;
      for (const [what, call] of [
        ['stat', () => fresh().stat(pinned)],
        ['fetch', () => fresh().fetch(pinned)],
        ['pin', () => pinUri(fresh(), pinned)],
      ] as const) {
        const error = await rejection(call());
        expect(error, what).toBeInstanceOf(NotFound);
        const message = (error as Error).message;
        expect(message, what).toContain(url(`${p}a.txt`));
        const named = message.includes(other) || message.includes(encodeURIComponent(other));
        expect(named, `${what}: ${message}`).toBe(true);
        // Never the version ID taken for a key: `scheme://bucket/<version ID>`.
        expect(message, what).not.toContain(`${store.scheme}://${bucket}/${other}`);
      }
    });

    it.runIf(atomicish)('refuses a tampered commit object on read', async () => {
      const p = randomPrefix();
      await write(`${p}f.txt`, 'data');
      const c = await commitFolder(store, url(p), 'honest');
      const id = c.at?.id as string;
      const key = commitKey(id);
      const original = await text((await store._get(bucket, key)).body);
      const forged = original.replace('"message":"honest"', '"message":"forged"');
      expect(forged).not.toBe(original);
      await store._put(bucket, key, Buffer.from(forged));
      const error = await rejection(loadCommit(fresh(), bucket, id));
      expect(error).toBeInstanceOf(ObjectIntegrityError);
      expect((error as ObjectIntegrityError).kind).toBe('DigestMismatch');
      await expect(logFolder(fresh(), url(p))).rejects.toBeInstanceOf(ObjectIntegrityError);
      await expect(fresh().stat(c.join('f.txt'))).rejects.toBeInstanceOf(ObjectIntegrityError);
    });

    it.runIf(atomicish)(
      'a commit is one snapshot even while a writer keeps changing the folder',
      async () => {
        const p = randomPrefix();
        let generation = 0;
        const writeGeneration = async () => {
          generation += 1;
          await store._put(bucket, `${p}a.txt`, Buffer.from(`gen ${generation}`));
          await store._put(bucket, `${p}b.txt`, Buffer.from(`gen ${generation}`));
        };
        await writeGeneration();
        // Writes land after the first three listings of the folder, then stop.
        let listings = 0;
        const racing = new Interposer(fresh(), {
          afterHistory: async (_b, prefix) => {
            if (prefix !== p) return;
            listings += 1;
            if (listings <= 3) await writeGeneration();
          },
        });
        const c = await commitFolder(racing, url(p), 'settled');
        expect(listings).toBeGreaterThanOrEqual(4);
        const commit = await loadCommit(store, bucket, c.at?.id as string);
        const contents = await Promise.all(
          commit.files.map(async (f) =>
            text((await store._getVersion(bucket, f.key, f.versionId)).body),
          ),
        );
        expect(contents).toEqual([`gen ${generation}`, `gen ${generation}`]);

        // A writer that never stops: a StoreError after the bounded retries, and no commit.
        const q = randomPrefix();
        await store._put(bucket, `${q}a.txt`, Buffer.from('0'));
        let n = 0;
        const endless = new Interposer(fresh(), {
          afterHistory: async (_b, prefix) => {
            if (prefix === q) await store._put(bucket, `${q}a.txt`, Buffer.from(String(++n)));
          },
        });
        const error = await rejection(commitFolder(endless, url(q), 'never'));
        expect(error).toBeInstanceOf(StoreError);
        expect((error as Error).message).toMatch(/kept changing/);
        expect(await logFolder(store, url(q))).toEqual([]);
      },
    );

    it.runIf(atomicish)(
      'concurrent commits of one folder get distinct, gapless numbers',
      async () => {
        const p = randomPrefix();
        await write(`${p}f.txt`, 'x');
        const committers = Array.from({ length: 6 }, () => fresh());
        const made = await Promise.all(
          committers.map((s, i) => commitFolder(s, url(p), `c${i}`, { allowEmpty: true })),
        );
        const log = await logFolder(fresh(), url(p));
        expect(log.map((e) => e.number)).toEqual([6, 5, 4, 3, 2, 1]);
        expect(new Set(log.map((e) => e.id))).toEqual(new Set(made.map((u) => u.at?.id)));
        for (let i = 0; i + 1 < log.length; i++) expect(log[i]?.parent).toBe(log[i + 1]?.id);
      },
    );

    it.runIf(target.flags.createMode === 'none')(
      'fails closed without create-if-absent',
      async () => {
        const p = randomPrefix();
        await write(`${p}f.txt`, 'x');
        const error = await rejection(commitFolder(store, url(p), 'unsafe'));
        // The store cannot do this: NotSupported (exit 11), before anything is written.
        expect(error).toBeInstanceOf(NotSupported);
        await expect(store._head(bucket, logKey(p, 1))).rejects.toBeInstanceOf(NotFound);
      },
    );

    it.runIf(atomicish)(
      'branches from a branch and from a commit, refusing existing ones',
      async () => {
        const main = randomPrefix('main').slice(0, -1);
        await write(`${main}/a.txt`, 'a1');
        await write(`${main}/d/b.txt`, 'b1');
        const c = await commitFolder(store, url(`${main}/`), 'base');
        await write(`${main}/a.txt`, 'a2');
        await write(`${main}/new.txt`, 'n');

        const fromBranch = randomPrefix('br').slice(0, -1);
        const made = await branchFrom(store, url(fromBranch), main);
        expect(made.toString()).toBe(url(`${fromBranch}/`));
        const fromCommit = randomPrefix('bc').slice(0, -1);
        await branchFrom(store, url(`${fromCommit}/`), c.at?.id as string);
        const fromUri = randomPrefix('bu').slice(0, -1);
        await branchFrom(store, url(`${fromUri}/`), url(`${main}/d/?at=commit:${c.at?.id}`));

        const contents = async (folder: string) => {
          const out: Record<string, string> = {};
          for await (const page of store._pages(bucket, `${folder}/`)) {
            for (const o of page.objects) {
              out[o.key.slice(folder.length + 1)] = await text(
                (await store._get(bucket, o.key)).body,
              );
            }
          }
          return out;
        };
        expect(await contents(fromBranch)).toEqual({
          'a.txt': 'a2',
          'd/b.txt': 'b1',
          'new.txt': 'n',
        });
        expect(await contents(fromCommit)).toEqual({ 'a.txt': 'a1', 'd/b.txt': 'b1' });
        expect(await contents(fromUri)).toEqual({ 'b.txt': 'b1' });
        // A branch of a branch (of a branch) is a branch too.
        const second = randomPrefix('b2').slice(0, -1);
        await branchFrom(store, url(second), fromCommit);
        expect(await contents(second)).toEqual({ 'a.txt': 'a1', 'd/b.txt': 'b1' });

        for (const existing of [fromBranch, main]) {
          await expect(branchFrom(store, url(existing), c.at?.id as string)).rejects.toBeInstanceOf(
            StoreError,
          );
        }
        await expect(branchFrom(store, url(`${main}/d/`), main)).rejects.toBeInstanceOf(UriError);
        // A source folder that does not exist is NotFound (exit 3), like any missing folder.
        await expect(
          branchFrom(store, url(randomPrefix('e')), randomPrefix('nothing')),
        ).rejects.toBeInstanceOf(NotFound);
      },
    );

    it.runIf(atomicish)(
      'an interrupted branch completes on rerun, copying only what is missing',
      async () => {
        const main = randomPrefix('main').slice(0, -1);
        const n = 7;
        for (let i = 0; i < n; i++) await write(`${main}/f${i}.txt`, `file ${i}`);
        const branch = url(randomPrefix('half'));
        const k = 3;
        let copies = 0;
        const dying = new Interposer(fresh(), {
          before: (name) => {
            if (name === '_copy' && ++copies > k) throw new StoreError('injected: connection lost');
          },
        });
        const failed = await rejection(branchFrom(dying, branch, main, { concurrency: 1 }));
        expect((failed as Error).message).toMatch(/injected/);

        // Meanwhile the source moves on: the rerun still copies the recorded versions.
        await write(`${main}/f0.txt`, 'changed');
        const counting = new Interposer(fresh());
        const progress: number[] = [];
        await branchFrom(counting, branch, main, {
          onProgress: (p) => progress.push(p.files ?? -1),
        });
        expect(counting.calls._copy).toBe(n - k);
        expect(progress.at(-1)).toBe(n - k);
        const b = Uri.parse(branch);
        for (let i = 0; i < n; i++) {
          const got = await text((await store._get(bucket, `${b.prefix}f${i}.txt`)).body);
          expect(got).toBe(`file ${i}`);
        }
        // Complete now: a third run is an existing branch.
        await expect(branchFrom(store, branch, main)).rejects.toBeInstanceOf(StoreError);
      },
    );

    it.runIf(atomicish)('a rerun refuses when a copied file differs from its source', async () => {
      const main = randomPrefix('main').slice(0, -1);
      for (let i = 0; i < 4; i++) await write(`${main}/f${i}.txt`, `file ${i}`);
      const branch = randomPrefix('half');
      let copies = 0;
      const dying = new Interposer(fresh(), {
        before: (name) => {
          if (name === '_copy' && ++copies > 2) throw new StoreError('injected');
        },
      });
      await rejection(branchFrom(dying, url(branch), main, { concurrency: 1 }));
      await write(`${branch}f0.txt`, 'tampered, and longer');
      const error = await rejection(branchFrom(store, url(branch), main));
      expect(error).toBeInstanceOf(StoreError);
      expect((error as Error).message).toMatch(/differs/);
      // A different source for the unfinished branch is refused too.
      await expect(branchFrom(store, url(branch), randomPrefix('x'))).rejects.toBeInstanceOf(
        StoreError,
      );
      // Nothing was overwritten.
      expect(await text((await store._get(bucket, `${branch}f0.txt`)).body)).toBe(
        'tampered, and longer',
      );
    });

    it.runIf(atomicish)('finds the committed files below any folder of a commit', async () => {
      const p = randomPrefix();
      await write(`${p}a/1`, '1');
      await write(`${p}a/2`, '2');
      await write(`${p}ab`, '3');
      const c = await commitFolder(store, url(p), 'tree');
      const commit = await loadCommit(store, bucket, c.at?.id as string);
      const keys = (u: string) =>
        filesUnder(commit, Uri.parse(url(u))).map((f) => f.key.slice(p.length));
      expect(keys(p)).toEqual(['a/1', 'a/2', 'ab']);
      expect(keys(`${p}a/`)).toEqual(['a/1', 'a/2']);
      expect(keys(`${p}a`)).toEqual([]);
      expect(keys(`${p}ab`)).toEqual(['ab']);
      expect(keys(randomPrefix())).toEqual([]);
    });

    it.runIf(atomicish)(
      'pinned commits read offline byte for byte with no store call, sharing cached bytes',
      { timeout: 30_000 },
      async () => {
        const p = randomPrefix();
        await write(`${p}same.txt`, 'unchanged');
        await write(`${p}sub/v.txt`, 'v1');
        const c1 = await commitFolder(store, url(p), 'one');
        await write(`${p}sub/v.txt`, 'v2');
        await write(`${p}added.txt`, 'new');
        const c2 = await commitFolder(store, url(p), 'two');
        await write(`${p}same.txt`, 'changed after both commits');
        await store._delete(bucket, `${p}sub/v.txt`);

        const cache = tempCache();
        const online = target.store({ cache });
        const f1 = await online.fetch(c1);
        expect(f1).toMatchObject({ files: 2, downloaded: 2 });
        const f2 = await online.fetch(c2);
        // Only the version c1 did not hold is transferred; the unchanged one is shared on disk.
        expect(f2).toMatchObject({ files: 3, downloaded: 2 });
        const ino = async (dir: string) => (await stat(path.join(dir, 'same.txt'))).ino;
        expect(await ino(f2.path)).toBe(await ino(f1.path));
        expect(await online.fetch(c1)).toMatchObject({ downloaded: 0, bytes: 0 });
        const file = await online.fetch(c1.join('sub/v.txt'));
        expect(await readFile(file.path, 'utf8')).toBe('v1');

        const offline = target.store({ cache, offline: true });
        const spies = forbidPrimitives(offline);
        expect(await readTree((await offline.fetch(c1)).path)).toEqual({
          'same.txt': 'unchanged',
          'sub/v.txt': 'v1',
        });
        expect(await readTree((await offline.fetch(c2)).path)).toEqual({
          'added.txt': 'new',
          'same.txt': 'unchanged',
          'sub/v.txt': 'v2',
        });
        expect(await readFile((await offline.fetch(c2.join('sub/v.txt'))).path, 'utf8')).toBe('v2');
        // stat, list and walk at a cached commit are answered from its manifest.
        expect(await offline.stat(c1.join('sub/v.txt'))).toMatchObject({ kind: 'file', size: 2 });
        expect((await offline.stat(c1.join('sub/'))).kind).toBe('folder');
        const listed = await offline.list(c2);
        expect(listed.map((e) => [e.kind, e.uri.key.slice(p.length)])).toEqual([
          ['file', 'added.txt'],
          ['file', 'same.txt'],
          ['folder', 'sub'],
        ]);
        expect(listed.every((e) => e.uri.at?.id === c2.at?.id)).toBe(true);
        expect((await offline.walk(c1)).map((e) => e.uri.key.slice(p.length))).toEqual([
          'same.txt',
          'sub/v.txt',
        ]);
        await expect(offline.stat(c1.join('added.txt'))).rejects.toBeInstanceOf(NotFound);
        for (const spy of spies) expect(spy).not.toHaveBeenCalled();
      },
    );
  });
}
