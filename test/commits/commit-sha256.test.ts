/**
 * SHA-256 in the file records of `commit --from` (issue 27): the push knows each file's SHA-256
 * and the version holding it, and the commit records it for exactly that version; a fetch at the
 * commit then checks the bytes against it (tampered bytes of the same size under the recorded
 * version: `ObjectIntegrityError`, nothing cached or served); `stat` and `list` at the commit
 * report it; a commit from a listing, and format 1 commits, are as before. On the embedded local
 * store and the in-memory test driver.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { chmod, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { DigestsDiffer } from '../../src/cache/content-digest.js';
import { commitFolder } from '../../src/commits/commit.js';
import {
  COMMIT_FORMAT,
  COMMIT_FORMAT_2,
  type CommitBody,
  type CommitFile,
  commitBytes,
  commitKey,
  logKey,
  sha256Hex,
} from '../../src/commits/format.js';
import { loadCommit, openCommit } from '../../src/commits/read.js';
import type { ObjectInfo } from '../../src/contract/primitives.js';
import { ObjectIntegrityError } from '../../src/core/errors.js';
import type { Uri } from '../../src/core/uri.js';
import { commitFrom } from '../../src/folders/commit-from.js';
import { PushedDigests } from '../../src/folders/pushed-digests.js';
import type { ObjectStore } from '../../src/store/object-store.js';
import { rejection } from '../../src/testing/rejection.js';
import { writeTree } from '../support/folder-flows.js';
import { MemoryBackend, MemoryStore } from '../support/memory-store.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-commit-sha256-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let dirs = 0;
const dir = (label: string) => path.join(work, `${label}-${++dirs}`);
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
const idOf = (u: Uri) => u.at?.id as string;

/** Files of a local folder: small ones, and (with a 1 KiB multipart threshold) large ones sent from disk. */
function sample(): Record<string, Buffer> {
  return {
    'a.txt': Buffer.from('alpha\n'),
    'sub/b.txt': Buffer.from('bravo\n'),
    'sub/deep/c.bin': Buffer.from([0, 1, 2, 3, 255]),
    'big/d.bin': Buffer.alloc(5000, 7),
    'empty.txt': Buffer.alloc(0),
  };
}

/** Every file record of a commit, by key. */
async function records(store: ObjectStore, bucket: string, id: string) {
  const out = new Map<string, CommitFile>();
  for (const f of (await loadCommit(store, bucket, id)).files) out.set(f.key, f);
  return out;
}

interface Target {
  name: string;
  bucket: string;
  scheme: string;
  /** A store (a fresh one shares the objects, not the cache). */
  store: (cache: string) => ObjectStore;
  /** Replace the bytes of `versionId` of `key` in place with `bytes` (same size). */
  tamper: (key: string, versionId: string, bytes: Buffer) => Promise<void>;
}

const localRoot = dir('local-root');
const backend = new MemoryBackend();
const targets: Target[] = [
  {
    name: 'local store',
    bucket: 'shas',
    scheme: 'local',
    store: (cache) => new LocalStore({ root: localRoot, cache, multipartThreshold: 1024 }),
    async tamper(_key, versionId, bytes) {
      // The version's file, `<versionId>.<size>[.<md5>]`, and every link to it (one inode).
      const found: string[] = [];
      const walk = (d: string) => {
        for (const name of readdirSync(d)) {
          const p = path.join(d, name);
          if (statSync(p).isDirectory()) walk(p);
          else if (name.startsWith(`${versionId}.`)) found.push(p);
        }
      };
      walk(localRoot);
      expect(found.length).toBeGreaterThan(0);
      const file = found[0] as string;
      expect(statSync(file).size).toBe(bytes.length);
      await chmod(file, 0o644);
      await writeFile(file, bytes);
    },
  },
  {
    name: 'memory store',
    bucket: 'shas',
    scheme: 'mem',
    store: (cache) => new MemoryStore({ backend, cache, multipartThreshold: 1024 }),
    async tamper(key, versionId, bytes) {
      const v = backend
        .bucket('shas')
        .keys.get(key)
        ?.find((x) => x.versionId === versionId);
      expect(v?.data?.length).toBe(bytes.length);
      (v as { data: Buffer }).data = bytes;
    },
  },
];

describe.each(targets)('commit --from records SHA-256s ($name)', (t) => {
  const folderUri = (name: string) => `${t.scheme}://${t.bucket}/${name}/`;
  const open = async () => {
    const store = t.store(dir('cache'));
    await store.makeBucket(t.bucket);
    return store;
  };

  it('records the SHA-256 of every pushed file, and stat and list report it', async () => {
    const local = dir('tree');
    const tree = sample();
    writeTree(local, tree);
    const store = await open();
    const uri = folderUri('every');
    await store.put(`${uri}already.txt`, Buffer.from('there before\n'));
    const made = await commitFrom(store, local, uri, 'one');
    // The commit's file the local folder lacks, found as the records streamed into pages.
    expect(made.extra).toEqual(['already.txt']);
    const c1 = made.uri;
    const files = await records(store, t.bucket, idOf(c1));
    expect([...files.keys()].sort()).toEqual(
      [...Object.keys(tree), 'already.txt'].map((rel) => `every/${rel}`).sort(),
    );
    for (const [rel, bytes] of Object.entries(tree)) {
      expect(files.get(`every/${rel}`)?.sha256, rel).toBe(sha(bytes));
    }
    // A file the push did not send or compare has no digest the commit could know.
    expect(files.get('every/already.txt')?.sha256).toBeUndefined();
    // stat and list at the commit answer from the records, with the digest.
    const fresh = t.store(dir('cache'));
    expect((await fresh.stat(c1.join('sub/b.txt'))).sha256).toBe(sha(tree['sub/b.txt'] as Buffer));
    const listed = await fresh.list(c1.join('sub/'));
    const b = listed.find((e) => e.uri.key === 'every/sub/b.txt');
    expect(b?.sha256).toBe(sha(tree['sub/b.txt'] as Buffer));
    // A fetch at the commit checks them and serves the bytes.
    const got = (await fresh.fetch(c1)).path;
    for (const [rel, bytes] of Object.entries(tree)) {
      expect(statSync(path.join(got, rel)).size).toBe(bytes.length);
    }

    // Again after one change: the unchanged files (found by the push index and the listing,
    // neither read nor sent) keep their digests, the changed one gets its new one.
    const changed = Buffer.from('alpha, changed\n');
    await writeFile(path.join(local, 'a.txt'), changed);
    const c2 = await store.commit(uri, 'two', { from: local });
    const again = await records(store, t.bucket, idOf(c2));
    expect(again.get('every/a.txt')?.sha256).toBe(sha(changed));
    for (const [rel, bytes] of Object.entries(tree)) {
      if (rel !== 'a.txt') expect(again.get(`every/${rel}`)?.sha256, rel).toBe(sha(bytes));
    }
    expect((await openCommit(store, t.bucket, idOf(c2))).head.format).toBe(COMMIT_FORMAT_2);
  });

  it('a tampered version of the same size is ObjectIntegrityError, and nothing is served', async () => {
    const local = dir('tree');
    const tree = sample();
    writeTree(local, tree);
    const store = await open();
    const uri = folderUri('tamper');
    const c = await store.commit(uri, 'one', { from: local });
    const files = await records(store, t.bucket, idOf(c));
    for (const rel of ['sub/b.txt', 'big/d.bin']) {
      const f = files.get(`tamper/${rel}`) as CommitFile;
      const original = tree[rel] as Buffer;
      const forged = Buffer.from(original);
      forged[0] = (forged[0] as number) ^ 0xff;
      await t.tamper(f.key, f.versionId, forged);
      for (const read of [
        (s: ObjectStore) => s.fetch(c.join(rel)),
        (s: ObjectStore) => s.fetch(c),
        (s: ObjectStore) => s.read(c.join(rel)),
      ]) {
        const cache = dir('cache');
        const fresh = t.store(cache);
        const error = await rejection(read(fresh));
        expect(error, rel).toBeInstanceOf(ObjectIntegrityError);
        expect((error as ObjectIntegrityError).kind).toBe('DigestMismatch');
        // The SHA-256 the commit records is what refused the bytes.
        const cause = (error as ObjectIntegrityError).cause as DigestsDiffer;
        expect(cause).toBeInstanceOf(DigestsDiffer);
        expect(cause.algorithm).toBe('sha256');
        expect(cause.expected).toBe(sha(original));
        // Nothing of the file appeared in the commit's copy.
        const copy = fresh.cache.commitTreePath(t.scheme, t.bucket, idOf(c), f.key);
        expect(existsSync(copy)).toBe(false);
      }
      await t.tamper(f.key, f.versionId, original);
    }
    const ok = (await t.store(dir('cache')).fetch(c)).path;
    expect(statSync(path.join(ok, 'big/d.bin')).size).toBe(5000);
  });

  it('a record gets a digest only for the exact version the push knew', async () => {
    const store = await open();
    const uri = folderUri('exact');
    const first = await store._put(t.bucket, 'exact/x.txt', Buffer.from('one'));
    await store._put(t.bucket, 'exact/y.txt', Buffer.from('why'));
    const y = await store._head(t.bucket, 'exact/y.txt');
    // What a push tells, in key order, in a file of its own.
    const told = async (files: [string, ObjectInfo?, string?][]) => {
      const d = await PushedDigests.create(
        'exact/',
        path.join(mkdtempSync(path.join(tmpdir(), 'provcat-digests-')), 'd'),
      );
      for (const [rel, info, sha256] of files) await d.file(rel, info, sha256);
      await d.seal();
      return d;
    };
    // y.txt: learnt for a size it does not have.
    const digests = await told([
      ['x.txt', first, sha('one')],
      ['y.txt', { ...y, size: 4 }, sha('why')],
    ]);
    // Another writer replaces x.txt between the push and the commit's snapshot.
    await store._put(t.bucket, 'exact/x.txt', Buffer.from('two'));
    const c = await commitFolder(store, uri, 'one', {}, digests);
    const files = await records(store, t.bucket, idOf(c));
    expect(files.get('exact/x.txt')?.sha256).toBeUndefined();
    expect(files.get('exact/y.txt')?.sha256).toBeUndefined();
    // An entry without a version ID (an S3 listing): its ETag stands for the version.
    const none = await told([
      ['x.txt', first, 'z'.repeat(64)],
      ['y.txt', { ...y, versionId: undefined }, sha('why')],
    ]);
    const yRecord = { key: 'exact/y.txt', versionId: 'another', size: 3 };
    expect(
      none.sha256Of({ key: 'exact/x.txt', versionId: first.versionId as string, size: 3 }),
    ).toBe(undefined);
    expect(none.sha256Of({ ...yRecord, etag: y.etag })).toBe(sha('why'));
    expect(none.sha256Of({ ...yRecord, etag: '"0123"' })).toBeUndefined();
    expect(none.sha256Of({ ...yRecord, etag: y.etag, size: 4 })).toBeUndefined();
    expect(none.sha256Of({ key: 'exact/y.txt', versionId: y.versionId as string, size: 3 })).toBe(
      undefined,
    );
    // Asked out of key order: the file is read again, never a wrong answer.
    expect(none.sha256Of({ ...yRecord, etag: y.etag })).toBe(sha('why'));
    expect(none.hasFile('exact/x.txt')).toBe(true);
    expect(none.hasFile('exact/w.txt')).toBe(false);
    await none.dispose();
    await digests.dispose();
    // The version it knew: recorded (the files are those of commit 1: only a digest is added).
    const x = await store._head(t.bucket, 'exact/x.txt');
    const known = await told([['x.txt', x, sha('two')], ['y.txt']]);
    const c2 = await commitFolder(store, uri, 'two', { allowEmpty: true }, known);
    expect((await records(store, t.bucket, idOf(c2))).get('exact/x.txt')?.sha256).toBe(sha('two'));
    await known.dispose();
  });

  it('a commit from a listing records none, and format 1 commits read as before', async () => {
    const store = await open();
    const uri = folderUri('plain');
    await store.put(`${uri}p.txt`, Buffer.from('plain'));
    const c = await store.commit(uri, 'from the listing');
    const files = await records(store, t.bucket, idOf(c));
    expect(files.get('plain/p.txt')?.sha256).toBeUndefined();

    // A format 1 commit (what older provcat wrote) as the parent of a commit --from.
    const v1Folder = 'old/';
    await store.put(`${t.scheme}://${t.bucket}/${v1Folder}o.txt`, Buffer.from('old'));
    const list: CommitFile[] = [];
    for await (const r of store._history(t.bucket, v1Folder)) {
      if (r.current && r.size !== null) {
        list.push({ key: r.key, versionId: r.versionId, size: r.size, etag: r.etag });
      }
    }
    const body: CommitBody = {
      format: COMMIT_FORMAT,
      folder: v1Folder,
      parent: null,
      number: 1,
      message: 'v1',
      metadata: {},
      time: new Date().toISOString(),
      files: list,
    };
    const bytes = commitBytes(body);
    const id = sha256Hex(bytes);
    await store._put(t.bucket, commitKey(id), bytes);
    await store._put(t.bucket, logKey(v1Folder, 1), Buffer.from(id));
    const v1 = (await store.pin(`${t.scheme}://${t.bucket}/${v1Folder}`)) as Uri;
    expect(idOf(v1)).toBe(id);
    const fresh = t.store(dir('cache'));
    expect((await fresh.stat(v1.join('o.txt'))).sha256).toBeUndefined();
    expect(statSync(path.join((await fresh.fetch(v1)).path, 'o.txt')).size).toBe(3);
    const local = dir('tree');
    writeTree(local, { 'o.txt': Buffer.from('new!') });
    const c2 = await store.commit(`${t.scheme}://${t.bucket}/${v1Folder}`, 'v2 on v1', {
      from: local,
    });
    const head = (await openCommit(store, t.bucket, idOf(c2))).head;
    expect([head.format, head.parent, head.number]).toEqual([COMMIT_FORMAT_2, id, 2]);
    const files2 = await records(store, t.bucket, idOf(c2));
    expect(files2.get('old/o.txt')?.sha256).toBe(sha('new!'));
    const d = await fresh.diff(v1, c2);
    expect(d.changed.map((x) => x.path)).toEqual(['o.txt']);
  });
});
