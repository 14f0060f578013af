/**
 * The everyday folder flows — push, commit --from, diff, rm -r — as one suite that a driver's
 * test file runs against its store (test/folders/folders-local.test.ts, test/drivers/s3-folders.test.ts). Every
 * test works under its own random prefix of the target's (versioned) bucket.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { loadCommit } from '../../src/commits/read.js';
import {
  InvalidArgument,
  NotCommitted,
  NotFound,
  OfflineMiss,
  SourceError,
  StoreError,
  UriError,
} from '../../src/core/errors.js';
import type { ObjectStore } from '../../src/store/object-store.js';
import type { StoreOptions } from '../../src/store/store.js';
import { rejection } from '../../src/testing/rejection.js';
import { randomPrefix } from '../../src/testing/target.js';

/** A store under test. */
export interface FolderFlowsTarget {
  name: string;
  /** A new store; tests pass their own `cache`. Commits must work on `bucket`. */
  store(options?: StoreOptions): ObjectStore;
  /** A versioned bucket the tests write to, each under a random prefix. */
  bucket: string;
  scheme: string;
  /** A prefix every test's folder lies under (`''`: the bucket). */
  root?: string | undefined;
}

/** Write `files` (relative path → content) under `dir`. */
export function writeTree(dir: string, files: Record<string, string | Buffer>): void {
  for (const [rel, body] of Object.entries(files)) {
    const file = path.join(dir, ...rel.split('/'));
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, body);
  }
}

/** Every file under `dir` (relative path → bytes). */
export async function readTree(dir: string): Promise<Record<string, Buffer>> {
  const out: Record<string, Buffer> = {};
  const names = await readdir(dir, { recursive: true, withFileTypes: true });
  for (const d of names) {
    if (!d.isFile()) continue;
    const full = path.join(d.parentPath, d.name);
    out[path.relative(dir, full).split(path.sep).join('/')] = await readFile(full);
  }
  return out;
}

/** Names a URI must encode, and non-ASCII ones. */
export const ODD_NAMES = [
  'sp ace.txt',
  'plus+and%percent.txt',
  'hash#and?query.txt',
  'quote\'and"double.txt',
  'ünïcödé.txt',
  '日本語/ファイル.txt',
  'emoji 🎉.txt',
  'semi;colon=equals&amp.txt',
];

/** A nested folder of `n` small files plus {@link ODD_NAMES}. */
export function sampleTree(n: number): Record<string, string> {
  const files: Record<string, string> = {};
  for (let i = 0; i < n; i++) files[`d${i % 10}/e${i % 3}/f${i}.txt`] = `file ${i}\n`;
  for (const name of ODD_NAMES) files[`odd/${name}`] = `odd ${name}\n`;
  return files;
}

function tmp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-${label}-`));
}

/** Spies on every primitive that writes or reads an object. */
function watchCalls(store: ObjectStore) {
  // `put` counts every object written: by `_put`, or by a batch where the store batches
  // durability (the local store's push of small files).
  const put = vi.fn();
  const single = store._put.bind(store);
  vi.spyOn(store, '_put').mockImplementation((...args) => {
    put(...args);
    return single(...args);
  });
  const batchPuts = store.batchPuts.bind(store);
  vi.spyOn(store, 'batchPuts').mockImplementation((bucket, prefix) => {
    const batch = batchPuts(bucket, prefix);
    if (batch === undefined) return undefined;
    return {
      put: (...args) => {
        put(...args);
        return batch.put(...args);
      },
      close: () => batch.close(),
    };
  });
  return {
    pages: vi.spyOn(store, '_pages'),
    put,
    del: vi.spyOn(store, '_delete'),
    head: vi.spyOn(store, '_head'),
    get: vi.spyOn(store, '_get'),
  };
}

/** The store folder's files as fetched into a fresh cache (relative path → bytes). */
async function storeTree(target: FolderFlowsTarget, uri: string): Promise<Record<string, Buffer>> {
  const store = target.store({ cache: tmp('ff-cache') });
  try {
    return await readTree((await store.fetch(uri)).path);
  } finally {
    await store.close();
  }
}

/** Register the suite for `target`. */
export function folderFlows(target: FolderFlowsTarget): void {
  const base = (label: string) =>
    `${target.scheme}://${target.bucket}/${target.root ?? ''}${randomPrefix(label)}`;

  describe(`folder flows on ${target.name}`, () => {
    it('push: a nested folder of 1,000 files and odd names; a second push sends nothing; one changed file sends one; --dry-run changes nothing; --delete removes exactly the missing ones', async () => {
      const dir = tmp('ff-push');
      const files = sampleTree(1000);
      writeTree(dir, files);
      const uri = base('push');
      const store = target.store({ cache: tmp('ff-cache'), concurrency: 8 });
      let inFlight = 0;
      let most = 0;
      const put = store._put.bind(store);
      const counted = async <T>(send: () => Promise<T>): Promise<T> => {
        most = Math.max(most, ++inFlight);
        try {
          return await send();
        } finally {
          inFlight--;
        }
      };
      vi.spyOn(store, '_put').mockImplementation((...args) => counted(() => put(...args)));
      // A store that batches durability (the local store) gets the small files by its batch.
      const batchPuts = store.batchPuts.bind(store);
      vi.spyOn(store, 'batchPuts').mockImplementation((bucket, prefix) => {
        const batch = batchPuts(bucket, prefix);
        if (batch === undefined) return undefined;
        return {
          put: (...args) => counted(() => batch.put(...args)),
          close: () => batch.close(),
        };
      });
      const progress: number[] = [];
      const first = await store.push(dir, uri, {
        onProgress: (p) => {
          expect(p.operation).toBe('push');
          progress.push(p.files ?? 0);
        },
      });
      const total = Object.values(files).reduce((n, b) => n + Buffer.byteLength(b), 0);
      expect(first).toMatchObject({ uploaded: 1008, skipped: 0, deleted: 0, bytes: total });
      expect(most).toBeGreaterThan(1);
      expect(most).toBeLessThanOrEqual(8);
      expect(progress.at(-1)).toBe(1008);
      const pushed = await storeTree(target, uri);
      expect(Object.keys(pushed).sort()).toEqual(Object.keys(files).sort());
      for (const [rel, body] of Object.entries(files)) {
        expect(pushed[rel]?.toString(), rel).toBe(body);
      }
      vi.restoreAllMocks();

      // Unchanged: one listing, nothing else.
      const again = target.store({ cache: tmp('ff-cache') });
      let calls = watchCalls(again);
      expect(await again.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 1008, bytes: 0 });
      expect(calls.pages).toHaveBeenCalledTimes(1);
      for (const spy of [calls.put, calls.del, calls.head, calls.get]) {
        expect(spy).not.toHaveBeenCalled();
      }

      // One file changed, same size: its MD5 differs, so it alone is sent.
      writeTree(dir, { 'd3/e0/f3.txt': 'FILE 3\n' });
      vi.restoreAllMocks();
      calls = watchCalls(again);
      const one = await again.push(dir, uri);
      expect(one).toMatchObject({ uploaded: 1, skipped: 1007, deleted: 0, bytes: 7 });
      expect(one.actions).toEqual([{ action: 'upload', path: 'd3/e0/f3.txt', size: 7 }]);
      expect(calls.put).toHaveBeenCalledTimes(1);

      // A dry run reports the plan and writes nothing.
      await rm(path.join(dir, 'd1/e1/f1.txt'));
      await rm(path.join(dir, 'd2/e2/f2.txt'));
      await rm(path.join(dir, 'odd', 'sp ace.txt'));
      writeTree(dir, { 'new/added.txt': 'added\n', 'd4/e1/f4.txt': 'changed four\n' });
      const before = await storeTree(target, uri);
      vi.restoreAllMocks();
      calls = watchCalls(again);
      const plan = await again.push(dir, uri, { delete: true, dryRun: true });
      expect(plan).toMatchObject({ uploaded: 2, skipped: 1004, deleted: 3, dryRun: true });
      expect(plan.actions).toEqual([
        { action: 'upload', path: 'd4/e1/f4.txt', size: 13 },
        { action: 'upload', path: 'new/added.txt', size: 6 },
        { action: 'delete', path: 'd1/e1/f1.txt', size: 7 },
        { action: 'delete', path: 'd2/e2/f2.txt', size: 7 },
        { action: 'delete', path: 'odd/sp ace.txt', size: 15 },
      ]);
      expect(calls.put).not.toHaveBeenCalled();
      expect(calls.del).not.toHaveBeenCalled();
      expect(await storeTree(target, uri)).toEqual(before);

      // For real: exactly those.
      const done = await again.push(dir, uri, { delete: true });
      expect(done.actions).toEqual(plan.actions);
      expect(done).toMatchObject({ uploaded: 2, skipped: 1004, deleted: 3, dryRun: false });
      expect(await storeTree(target, uri)).toEqual(await readTree(dir));
      await again.close();
      await store.close();
    }, 300_000);

    it('commit --from: the commit holds exactly the local folder, byte for byte', async () => {
      const dir = tmp('ff-commit');
      writeTree(dir, { ...sampleTree(20), 'bin/blob.bin': Buffer.from([0, 1, 2, 255, 254]) });
      const uri = base('commit');
      const store = target.store({ cache: tmp('ff-cache') });
      // Something already there that the local folder lacks.
      await store.put(`${uri}stale.txt`, Buffer.from('stale\n'));
      const kept = await store.commit(uri, 'keep the stale file', { from: dir });
      expect(await storeTree(target, kept.toString())).toEqual({
        ...(await readTree(dir)),
        'stale.txt': Buffer.from('stale\n'),
      });
      writeTree(dir, { 'odd/ünïcödé.txt': 'rewritten\n' });
      const exact = await store.commit(uri, 'the folder as it is', { from: dir, delete: true });
      expect(exact.at?.kind).toBe('commit');
      expect(await storeTree(target, exact.toString())).toEqual(await readTree(dir));
      const log = await store.log(uri);
      expect(log.map((c) => c.message)).toEqual(['the folder as it is', 'keep the stale file']);
      // Each file's record carries the SHA-256 of its bytes, which the push knew.
      const local = await readTree(dir);
      for (const f of (await loadCommit(store, exact.bucket, exact.at?.id as string)).files) {
        const bytes = local[f.key.slice(exact.prefix.length)] as Buffer;
        expect(f.sha256, f.key).toBe(createHash('sha256').update(bytes).digest('hex'));
      }
      await store.close();
    }, 120_000);

    it('commit --from: a commit that fails after the push leaves the pushed files and says no commit was made', async () => {
      const dir = tmp('ff-nocommit');
      writeTree(dir, { 'a.txt': 'a\n', 'b/c.txt': 'c\n' });
      const uri = base('nocommit');
      const store = target.store({ cache: tmp('ff-cache') });
      await store.commit(uri, 'first', { from: dir });

      // Nothing changed: the push sends nothing, and the commit refuses.
      const same = await rejection(store.commit(uri, 'again', { from: dir }));
      expect(same).toBeInstanceOf(NotCommitted);
      expect((same as NotCommitted).cause).toBeInstanceOf(StoreError);
      expect((same as Error).message).toMatch(/no commit was made: StoreError: .*no change/);
      expect((same as NotCommitted).pushed).toEqual({
        uploaded: 0,
        skipped: 2,
        deleted: 0,
        bytes: 0,
      });

      // A failure of the snapshot after files were sent: they stay.
      writeTree(dir, { 'new.txt': 'new\n' });
      vi.spyOn(store, '_history').mockImplementation(() => {
        throw new StoreError('the version listing failed (injected)');
      });
      const failed = await rejection(store.commit(uri, 'second', { from: dir }));
      vi.restoreAllMocks();
      expect(failed).toBeInstanceOf(NotCommitted);
      expect((failed as NotCommitted).pushed.uploaded).toBe(1);
      expect((failed as Error).message).toMatch(/injected/);
      expect(Object.keys(await storeTree(target, uri)).sort()).toEqual([
        'a.txt',
        'b/c.txt',
        'new.txt',
      ]);
      expect((await store.log(uri)).map((c) => c.message)).toEqual(['first']);

      // An empty message is refused before anything is sent.
      writeTree(dir, { 'later.txt': 'later\n' });
      const put = vi.spyOn(store, '_put');
      expect(await rejection(store.commit(uri, ' ', { from: dir }))).toBeInstanceOf(
        InvalidArgument,
      );
      expect(put).not.toHaveBeenCalled();
      vi.restoreAllMocks();
      await store.close();
    }, 120_000);

    it('diff: between two commits and between a commit and now, exact; offline for cached commits', async () => {
      const dir = tmp('ff-diff');
      writeTree(dir, {
        'keep.txt': 'keep\n',
        'same-bytes.txt': 'same\n',
        'change.txt': 'v1\n',
        'gone/old.txt': 'old\n',
      });
      const uri = base('diff');
      const store = target.store({ cache: tmp('ff-cache') });
      const c1 = await store.commit(uri, 'one', { from: dir });
      await rm(path.join(dir, 'gone'), { recursive: true });
      writeTree(dir, { 'change.txt': 'version 2\n', 'added/new.txt': 'new\n' });
      // Rewritten with the same bytes: a new version, but not a change.
      await store.put(`${uri}same-bytes.txt`, Buffer.from('same\n'));
      const c2 = await store.commit(uri, 'two', { from: dir, delete: true });

      const files1 = await store.walk(c1);
      const files2 = await store.walk(c2);
      const v = (files: typeof files1, rel: string) =>
        files.find((e) => e.uri.key === `${c1.prefix}${rel}`)?.version;
      const expected = {
        added: [{ path: 'added/new.txt', size: 4, version: v(files2, 'added/new.txt') }],
        removed: [{ path: 'gone/old.txt', size: 4, version: v(files1, 'gone/old.txt') }],
        changed: [
          {
            path: 'change.txt',
            from: { size: 3, version: v(files1, 'change.txt') },
            to: { size: 10, version: v(files2, 'change.txt') },
          },
        ],
      };
      expect(v(files1, 'same-bytes.txt')).not.toBe(v(files2, 'same-bytes.txt'));
      const d = await store.diff(c1, c2);
      expect({ added: d.added, removed: d.removed, changed: d.changed }).toEqual(expected);
      expect(d.from.toString()).toBe(c1.toString());
      // B as a commit ID of A's folder.
      const byId = await store.diff(c1, c2.at?.id);
      expect(byId.changed).toEqual(expected.changed);
      // The other way round.
      const back = await store.diff(c2, c1);
      expect(back.added).toEqual(expected.removed);
      expect(back.removed).toEqual(expected.added);

      // A commit and the folder now.
      await store.put(`${uri}now.txt`, Buffer.from('now\n'));
      await store.delete(`${uri}keep.txt`);
      await store.put(`${uri}added/new.txt`, Buffer.from('newer\n'));
      const now = await store.diff(c2);
      expect(now.to.toString()).toBe(uri);
      expect(now.added.map((f) => [f.path, f.size])).toEqual([['now.txt', 4]]);
      expect(now.removed).toEqual([{ path: 'keep.txt', size: 5, version: v(files2, 'keep.txt') }]);
      expect(now.changed.map((c) => [c.path, c.from.size, c.to.size])).toEqual([
        ['added/new.txt', 4, 6],
      ]);
      expect(now.changed[0]?.from.version).toBe(v(files2, 'added/new.txt'));

      // Offline, from a cache that read the two commits once.
      const cache = tmp('ff-cache');
      const reader = target.store({ cache });
      expect((await reader.diff(c1, c2)).changed).toEqual(expected.changed);
      await reader.close();
      const offline = target.store({ cache, offline: true });
      const calls = watchCalls(offline);
      const off = await offline.diff(c1, c2);
      expect({ added: off.added, removed: off.removed, changed: off.changed }).toEqual(expected);
      for (const spy of Object.values(calls)) expect(spy).not.toHaveBeenCalled();
      expect(await rejection(offline.diff(c1))).toBeInstanceOf(OfflineMiss);
      await offline.close();

      // Two folders now with the same bytes: no differences.
      const twin = base('twin');
      await store.push(dir, twin);
      const copy = base('copy');
      await store.push(dir, copy);
      const t = await store.diff(twin, copy);
      expect([t.added, t.removed, t.changed]).toEqual([[], [], []]);
      await store.close();
    }, 120_000);

    it('rm -r removes every object under a folder and leaves .provcat/ intact; a bucket root needs force', async () => {
      const dir = tmp('ff-rm');
      writeTree(dir, sampleTree(30));
      const uri = base('rm');
      const store = target.store({ cache: tmp('ff-cache') });
      const pinned = await store.commit(uri, 'before rm', { from: dir });
      const other = base('rm-other');
      await store.push(dir, other);
      const del = vi.spyOn(store, '_delete');
      const root = `${target.scheme}://${target.bucket}/`;
      expect(await rejection(store.deleteFolder(root))).toBeInstanceOf(UriError);
      expect(await rejection(store.deleteFolder(`${root}.provcat/`))).toBeInstanceOf(UriError);
      expect(del).not.toHaveBeenCalled();
      vi.restoreAllMocks();

      expect(await store.deleteFolder(uri)).toMatchObject({ deleted: 38 });
      // Nothing is left: walk says so as ls does (NotFound), and so does a second rm -r.
      expect(await rejection(store.walk(uri))).toBeInstanceOf(NotFound);
      expect(await rejection(store.deleteFolder(uri))).toBeInstanceOf(NotFound);
      // The other folder is untouched, and the commit (its log and its versions) still reads.
      expect(await store.walk(other)).toHaveLength(38);
      expect((await store.log(uri)).map((c) => c.message)).toEqual(['before rm']);
      expect(await storeTree(target, pinned.toString())).toEqual(await readTree(dir));
      await store.close();
    }, 120_000);

    it('push refuses before anything is sent: names no URI can name, names one disk would merge, names both file and folder, links to folders, .provcat/ at a bucket root', async () => {
      const store = target.store({ cache: tmp('ff-cache') });
      const uri = base('refuse');
      const refused = async (files: (dir: string) => void, error: unknown, at = uri) => {
        const dir = tmp('ff-refuse');
        files(dir);
        const calls = watchCalls(store);
        const got = await rejection(store.push(dir, at));
        expect(got, String(got)).toBeInstanceOf(error as never);
        expect(calls.put).not.toHaveBeenCalled();
        expect(calls.del).not.toHaveBeenCalled();
        vi.restoreAllMocks();
        return got as Error;
      };
      const ok = (dir: string) => writeTree(dir, { 'fine.txt': 'fine\n' });
      const control = await refused((d) => {
        ok(d);
        writeTree(d, { 'bad\u0001name.txt': 'x' });
      }, UriError);
      expect(control.message).toMatch(/no URI can name/);
      const latin1 = await refused((d) => {
        ok(d);
        writeFileSync(Buffer.concat([Buffer.from(`${d}/`), Buffer.from([0x66, 0xff, 0x2e])]), 'x');
      }, UriError);
      expect(latin1.message).toMatch(/not UTF-8/);
      const cased = await refused(
        (d) => writeTree(d, { 'Data.csv': 'a', 'data.csv': 'b' }),
        StoreError,
      );
      expect(cased.message).toMatch(/would not fetch back.*case-insensitive/);
      await refused(
        (d) => writeTree(d, { 'caf\u00e9.txt': 'nfc', 'cafe\u0301.txt': 'nfd' }),
        StoreError,
      );
      await refused((d) => {
        ok(d);
        mkdirSync(path.join(d, 'real'));
        symlinkSync(path.join(d, 'real'), path.join(d, 'link'));
      }, SourceError);
      await refused((d) => {
        ok(d);
        symlinkSync(path.join(d, 'nowhere'), path.join(d, 'dangling'));
      }, SourceError);
      await refused(
        (d) => writeTree(d, { 'fine.txt': 'x', '.provcat/commits/x.json': '{}' }),
        UriError,
        `${target.scheme}://${target.bucket}/`,
      );
      // A local file where the store folder has a file of a folder's name.
      await store.put(`${uri}a`, Buffer.from('a file\n'));
      const clash = await refused((d) => writeTree(d, { 'a/b.txt': 'b' }), StoreError);
      expect(clash.message).toMatch(/both a file and a folder/);
      // With --delete the clash goes away with the file.
      const dir = tmp('ff-refuse');
      writeTree(dir, { 'a/b.txt': 'b' });
      expect(await store.push(dir, uri, { delete: true })).toMatchObject({
        uploaded: 1,
        deleted: 1,
      });
      await store.close();
    }, 120_000);

    it('push follows links to files: the object holds the target bytes under the link name', async () => {
      const dir = tmp('ff-link');
      const blobs = tmp('ff-blobs');
      writeTree(blobs, { 'blob-1': 'weights\n' });
      mkdirSync(path.join(dir, 'snapshot'));
      symlinkSync(path.join(blobs, 'blob-1'), path.join(dir, 'snapshot', 'model.bin'));
      const uri = base('link');
      const store = target.store({ cache: tmp('ff-cache') });
      expect(await store.push(dir, uri)).toMatchObject({ uploaded: 1, bytes: 8 });
      expect(await storeTree(target, uri)).toEqual({
        'snapshot/model.bin': Buffer.from('weights\n'),
      });
      expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 1 });
      await store.close();
    });
  });
}
