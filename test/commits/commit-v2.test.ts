/**
 * `provcat.commit/2` (issue 27) on the in-memory test driver, which counts primitive calls: the
 * page tree and its content-defined boundaries, format 1 and format 2 commits side by side
 * (log, stat, list, fetch, diff, branch), a tampered or missing page failing closed, pages shared
 * between a commit and its child (objects written are counted), reads that touch O(log N)
 * pages, and pins of format 2 commits offline.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
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
import { TreeBuilder } from '../../src/commits/pages/build.js';
import { diffTrees } from '../../src/commits/pages/diff-trees.js';
import {
  keyLevel,
  leafBytes,
  PAGE_FORMAT,
  pageBytes,
  pageKey,
  parsePage,
  recordJson,
} from '../../src/commits/pages/page-format.js';
import { pagePath } from '../../src/commits/pages/page-store.js';
import { loadCommit, openCommit } from '../../src/commits/read.js';
import { ObjectIntegrityError, OfflineMiss, StoreError } from '../../src/core/errors.js';
import { Uri } from '../../src/core/uri.js';
import { canonicalJson } from '../../src/logs/canonical-json.js';
import { rejection } from '../../src/testing/rejection.js';
import { MemoryBackend, MemoryStore, type MemoryStoreOptions } from '../support/memory-store.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-commit-v2-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let caches = 0;
const cacheDir = () => path.join(work, `cache-${++caches}`);
const B = 'bkt';
const mem = (options: MemoryStoreOptions = {}) =>
  new MemoryStore({ cache: cacheDir(), ...options });
const put = (s: MemoryStore, key: string, body: string) => s._put(B, key, Buffer.from(body));

/** `n` files spread over ten subfolders of `data/`. */
async function fill(s: MemoryStore, n: number, body = 'x'): Promise<void> {
  for (let i = 0; i < n; i++) {
    await put(s, `data/d${i % 10}/f${String(i).padStart(5, '0')}.txt`, body);
  }
}

/** Every key under `.provcat/pages/` in the store. */
async function pageKeys(s: MemoryStore): Promise<Set<string>> {
  const out = new Set<string>();
  for await (const page of s._pages(B, '.provcat/pages/')) {
    for (const o of page.objects) out.add(o.key);
  }
  return out;
}

const idOf = (u: Uri) => u.at?.id as string;

/** Write a format 1 commit of `folder` as commit `number` by hand (what older provcat wrote). */
async function writeV1(
  s: MemoryStore,
  folder: string,
  number: number,
  parent: string | null,
): Promise<string> {
  const files: CommitFile[] = [];
  for await (const r of s._history(B, folder)) {
    if (r.current && r.size !== null && !r.key.startsWith('.provcat/')) {
      files.push({ key: r.key, versionId: r.versionId, size: r.size, etag: r.etag });
    }
  }
  const body: CommitBody = {
    format: COMMIT_FORMAT,
    folder,
    parent,
    number,
    message: `v1 commit ${number}`,
    metadata: {},
    time: new Date().toISOString(),
    files: files.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)),
  };
  const bytes = commitBytes(body);
  const id = sha256Hex(bytes);
  await s._create(B, commitKey(id), bytes);
  await s._create(B, logKey(folder, number), Buffer.from(id));
  return id;
}

describe('the page tree', () => {
  const files = (n: number, from = 0): CommitFile[] =>
    Array.from({ length: n }, (_, i) => ({
      key: `k/${String(i + from).padStart(6, '0')}`,
      versionId: 'v',
      size: 1,
    }));
  const build = async (list: CommitFile[]) => {
    const pages = new Map<string, Buffer>();
    const builder = new TreeBuilder(async (hash, bytes) => {
      pages.set(hash, bytes);
    });
    for (const f of list) await builder.add(f);
    return { root: await builder.finish(), pages };
  };

  it('splits at content-defined boundaries: one inserted file changes one page per height', async () => {
    const base = files(20_000);
    const { root, pages } = await build(base);
    expect(root.count).toBe(20_000);
    expect(root.height).toBeGreaterThanOrEqual(1);
    // About one key in 256 ends a leaf.
    expect(pages.size).toBeGreaterThan(20_000 / 1024);
    expect(pages.size).toBeLessThan(20_000 / 64);
    const inserted = [...base.slice(0, 7000), { key: 'k/006999x', versionId: 'v', size: 1 }];
    inserted.push(...base.slice(7000));
    const next = await build(inserted);
    const fresh = [...next.pages.keys()].filter((h) => !pages.has(h));
    expect(fresh.length).toBeLessThanOrEqual(next.root.height + 2);
    expect(fresh.length).toBeGreaterThanOrEqual(1);
    // The same files give the same root, whatever was built before.
    expect((await build(base)).root).toEqual(root);
  });

  /** Records of every shape a commit writes: unicode keys, ETags, SHA-256s, other fields, long keys. */
  const varied = (): CommitFile[] => {
    const md5 = (i: number) => createHash('md5').update(String(i)).digest('hex');
    const out: CommitFile[] = [];
    for (let i = 0; i < 30_000; i++) {
      const dir = i % 7 === 0 ? 'é/' : 'a/';
      const f: CommitFile = {
        key: `data/${dir}${String(i).padStart(6, '0')}${i % 11 === 0 ? '✓' : ''}`,
        versionId: `v${i % 13}`,
        size: i,
      };
      if (i % 3 === 0) f.etag = `"${md5(i)}"`;
      if (i % 5 === 0) f.sha256 = createHash('sha256').update(String(i)).digest('hex');
      if (i % 17 === 0) f.extra = { b: [1, 'x'], a: null };
      out.push(f);
    }
    // Keys of 900 bytes and more: leaves end at MAX_LEAF_BYTES before MAX_PAGE_ENTRIES.
    for (let i = 0; i < 3000; i++) {
      out.push({
        key: `data/z/${String(i).padStart(5, '0')}${'L'.repeat(900)}`,
        versionId: 'v',
        size: 1,
      });
    }
    return out.sort((x, y) => Buffer.compare(Buffer.from(x.key), Buffer.from(y.key)));
  };

  it('writes the pages of format 2 byte for byte: every page canonical, the root of a fixed folder unchanged', async () => {
    const list = varied();
    const { root, pages } = await build(list);
    // The root of this folder as the format's first builder wrote it (2026-12): a builder that
    // writes other bytes would share no page with commits made before it.
    expect(root).toEqual({
      root: '9bfef17c5a328dc48ba9157d90122bf23c2755d0f765c32359c1d851edce4293',
      height: 1,
      count: 33_000,
    });
    expect(pages.size).toBe(136);
    let leaves = 0;
    for (const [hash, bytes] of pages) {
      expect(sha256Hex(bytes)).toBe(hash);
      const height = JSON.parse(bytes.toString('utf8')).height as number;
      const page = parsePage(bytes, height, 'data/', hash);
      expect(pageBytes(page).equals(bytes)).toBe(true);
      if (height === 0) leaves++;
    }
    expect(leaves).toBeGreaterThan(100);
    // The fast writers agree with the canonical writer on every record and on a leaf.
    for (const f of [
      ...list.slice(0, 2000),
      { key: 'k', versionId: 'v', size: 0, etag: undefined },
    ]) {
      expect(recordJson(f)).toBe(canonicalJson(f));
    }
    const files = list.slice(0, 50);
    expect(
      leafBytes(files.map(recordJson)).equals(pageBytes({ format: PAGE_FORMAT, height: 0, files })),
    ).toBe(true);
    expect(() => recordJson({ key: 'k', versionId: 'v', size: 1.5 })).toThrow(TypeError);
  });

  it('refuses keys out of order', async () => {
    const b = new TreeBuilder(async () => {});
    await b.add({ key: 'b', versionId: 'v', size: 1 });
    await expect(b.add({ key: 'a', versionId: 'v', size: 1 })).rejects.toThrow(/does not follow/);
  });

  it('a key level is the count of leading zero bytes of its SHA-256', () => {
    const levels = files(5000).map((f) => keyLevel(f.key));
    const boundaries = levels.filter((l) => l > 0).length;
    expect(boundaries).toBeGreaterThan(5);
    expect(boundaries).toBeLessThan(60);
  });
});

describe('provcat.commit/2 on the store', () => {
  it('writes format 2 and reads it and format 1 side by side (log, stat, list, fetch, diff, branch)', async () => {
    const backend = new MemoryBackend();
    const s = mem({ backend });
    await put(s, 'data/a.txt', 'a1');
    await put(s, 'data/sub/b.txt', 'b1');
    const v1 = await writeV1(s, 'data/', 1, null);
    await put(s, 'data/a.txt', 'a2');
    await put(s, 'data/c.txt', 'c');
    const c2 = await s.commit(`mem://${B}/data/`, 'second');
    const v2 = idOf(c2);
    const raw = JSON.parse(
      (
        await s._get(B, commitKey(v2)).then(async (r) => {
          const chunks: Buffer[] = [];
          for await (const c of r.body) chunks.push(c as Buffer);
          return Buffer.concat(chunks);
        })
      ).toString('utf8'),
    );
    expect(raw).toMatchObject({ format: COMMIT_FORMAT_2, parent: v1, number: 2, count: 3 });
    expect(raw.files).toBeUndefined();

    const reader = mem({ backend });
    const log = await reader.log(`mem://${B}/data/`);
    expect(log.map((e) => [e.number, e.id, e.files])).toEqual([
      [2, v2, 3],
      [1, v1, 2],
    ]);
    const at1 = Uri.parse(`mem://${B}/data/?at=commit:${v1}`);
    expect((await reader.stat(at1.join('a.txt'))).size).toBe(2);
    expect((await reader.stat(c2.join('c.txt'))).size).toBe(1);
    expect((await reader.list(at1)).map((e) => e.uri.key)).toEqual(['data/a.txt', 'data/sub']);
    expect((await reader.list(c2)).map((e) => e.uri.key)).toEqual([
      'data/a.txt',
      'data/c.txt',
      'data/sub',
    ]);
    const f1 = await reader.fetch(at1);
    const f2 = await reader.fetch(c2);
    expect(readFileSync(path.join(f1.path, 'a.txt'), 'utf8')).toBe('a1');
    expect(readFileSync(path.join(f2.path, 'a.txt'), 'utf8')).toBe('a2');
    expect(readFileSync(path.join(f2.path, 'sub/b.txt'), 'utf8')).toBe('b1');

    const d = await reader.diff(at1, c2);
    expect(d.added.map((f) => f.path)).toEqual(['c.txt']);
    expect(d.changed.map((f) => f.path)).toEqual(['a.txt']);
    expect(d.removed).toEqual([]);
    const back = await reader.diff(c2, at1);
    expect(back.removed.map((f) => f.path)).toEqual(['c.txt']);

    await reader.branch(`mem://${B}/old/`, v1);
    await reader.branch(`mem://${B}/new/`, v2);
    expect((await reader.walk(`mem://${B}/old/`)).map((e) => e.uri.key)).toEqual([
      'old/a.txt',
      'old/sub/b.txt',
    ]);
    expect((await reader.walk(`mem://${B}/new/`)).map((e) => e.uri.key)).toEqual([
      'new/a.txt',
      'new/c.txt',
      'new/sub/b.txt',
    ]);
    // loadCommit reads a format 2 commit whole, as it reads format 1.
    const whole = await loadCommit(reader, B, v2);
    expect(whole.files.map((f) => f.key)).toEqual(['data/a.txt', 'data/c.txt', 'data/sub/b.txt']);
    expect((await loadCommit(reader, B, v1)).files.length).toBe(2);
  });

  it('a child commit writes only the pages that changed (objects written counted)', async () => {
    const s = mem();
    await fill(s, 3000);
    const before = await pageKeys(s);
    const c1 = await s.commit(`mem://${B}/data/`, 'one');
    const first = await pageKeys(s);
    const tree = await openCommit(s, B, idOf(c1));
    const height = tree.head.tree?.height as number;
    expect(before.size).toBe(0);
    expect(first.size).toBeGreaterThan(5);
    await put(s, 'data/d3/f01503.txt', 'changed');
    s.resetCalls();
    const c2 = await s.commit(`mem://${B}/data/`, 'two');
    const second = await pageKeys(s);
    const added = [...second].filter((k) => !first.has(k));
    // One leaf and one page per height above it: everything else is shared with the parent.
    expect(added.length).toBeGreaterThanOrEqual(1);
    expect(added.length).toBeLessThanOrEqual(height + 1);
    // Objects written: the new pages, the commit object, the log entry (create or put).
    const writes = (s.calls._create ?? 0) + (s.calls._put ?? 0);
    expect(writes).toBe(added.length + 2);
    const d = await s.diff(c1, c2);
    expect(d.changed.map((f) => f.path)).toEqual(['d3/f01503.txt']);
    expect(d.added.length + d.removed.length).toBe(0);
  });

  it('ls at a commit skips subfolders by seeking, and agrees across formats', async () => {
    const s = mem();
    for (const k of ['a-b', 'a/x', 'a/y/z', 'a0', 'b', 'é/1', '\u{1F600}'])
      await put(s, `data/${k}`, k);
    const v1 = await writeV1(s, 'data/', 1, null);
    const c2 = await s.commit(`mem://${B}/data/`, 'two', { allowEmpty: true });
    const at1 = Uri.parse(`mem://${B}/data/?at=commit:${v1}`);
    const keys = async (u: Uri) => (await s.list(u)).map((e) => [e.kind, e.uri.key]);
    const expected = [
      ['folder', 'data/a'],
      ['file', 'data/a-b'],
      ['file', 'data/a0'],
      ['file', 'data/b'],
      ['folder', 'data/é'],
      ['file', 'data/\u{1F600}'],
    ];
    expect(await keys(c2)).toEqual(expected);
    expect(await keys(at1)).toEqual(expected);
    expect(await keys(c2.join('a/'))).toEqual([
      ['file', 'data/a/x'],
      ['folder', 'data/a/y'],
    ]);
  });

  it('a page that cannot be written fails the commit, and nothing names it', async () => {
    const s = mem();
    await fill(s, 1500);
    const create = s._create.bind(s);
    let pages = 0;
    s._create = async (bucket, key, ...rest) => {
      if (key.startsWith('.provcat/pages/') && ++pages === 3) throw new StoreError('disk full');
      return create(bucket, key, ...rest);
    };
    await expect(s.commit(`mem://${B}/data/`, 'one')).rejects.toThrow(/disk full/);
    expect(await s.log(`mem://${B}/data/`)).toEqual([]);
    let commits = 0;
    for await (const page of s._pages(B, '.provcat/commits/')) commits += page.objects.length;
    expect(commits).toBe(0);
  });

  it('stat and diff read O(log N) pages, not the folder', async () => {
    const backend = new MemoryBackend();
    const s = mem({ backend });
    await fill(s, 3000);
    const c1 = await s.commit(`mem://${B}/data/`, 'one');
    await put(s, 'data/d7/f00007.txt', 'changed');
    const c2 = await s.commit(`mem://${B}/data/`, 'two');
    const all = (await pageKeys(s)).size;
    const height = (await openCommit(s, B, idOf(c2))).head.tree?.height as number;
    const fresh = mem({ backend });
    expect((await fresh.stat(c2.join('d5/f00015.txt'))).size).toBe(1);
    // The commit object and one page per height.
    expect(fresh.calls._get).toBe(1 + height + 1);
    // A read of a range of one file at the commit: the same pages, then one ranged GET.
    const reader = mem({ backend });
    const bytes = await reader.read(c2.join('d7/f00007.txt'), { range: { start: 1, end: 4 } });
    expect(Buffer.from(bytes).toString()).toBe('han');
    expect((reader.calls._get ?? 0) + (reader.calls._getVersion ?? 0)).toBe(1 + height + 1 + 1);
    const other = mem({ backend });
    const d = await other.diff(c1, c2);
    expect(d.changed.map((f) => f.path)).toEqual(['d7/f00007.txt']);
    // Two commit objects, two roots, then only pages that differ (a few per height).
    expect(other.calls._get).toBeLessThanOrEqual(2 + 3 * (height + 1));
    expect(other.calls._get).toBeLessThan(all / 2);
  });

  it('a tampered page is ObjectIntegrityError and nothing is served', async () => {
    const backend = new MemoryBackend();
    const s = mem({ backend });
    await put(s, 'data/a.txt', 'a');
    await put(s, 'data/b.txt', 'b');
    const c = await s.commit(`mem://${B}/data/`, 'one');
    const root = (await openCommit(s, B, idOf(c))).head.tree?.root as string;
    const original = await (async () => {
      const r = await s._get(B, pageKey(root));
      const chunks: Buffer[] = [];
      for await (const x of r.body) chunks.push(x as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    })();
    await put(s, pageKey(root), original.replace('"size":1', '"size":9'));
    for (const read of [
      (r: MemoryStore) => r.stat(c.join('a.txt')),
      (r: MemoryStore) => r.list(c),
      (r: MemoryStore) => r.fetch(c),
      (r: MemoryStore) => loadCommit(r, B, idOf(c)),
    ]) {
      const fresh = mem({ backend });
      const error = await rejection(read(fresh));
      expect(error).toBeInstanceOf(ObjectIntegrityError);
      expect((error as ObjectIntegrityError).kind).toBe('DigestMismatch');
    }
    // A corrupt cached copy is dropped and read again from the store.
    await put(s, pageKey(root), original);
    const cache = cacheDir();
    const r = mem({ backend, cache });
    await r.stat(c.join('a.txt'));
    const file = pagePath(r, B, root);
    writeFileSync(file, original.replace('"size":1', '"size":9'));
    const again = mem({ backend, cache });
    expect((await again.stat(c.join('a.txt'))).size).toBe(1);
    expect(readFileSync(file, 'utf8')).toBe(original);
  });

  it('a missing page fails closed', async () => {
    const backend = new MemoryBackend();
    const s = mem({ backend });
    await fill(s, 1500);
    const c = await s.commit(`mem://${B}/data/`, 'one');
    const tree = await openCommit(s, B, idOf(c));
    const hashes = [...(await tree.pageHashes())].filter((h) => h !== tree.head.tree?.root);
    expect(hashes.length).toBeGreaterThan(0);
    for (const h of hashes) await s._delete(B, pageKey(h));
    for (const read of [
      (r: MemoryStore) => r.stat(c.join('d1/f00001.txt')),
      (r: MemoryStore) => r.list(c.join('d1/')),
      (r: MemoryStore) => r.fetch(c),
      (r: MemoryStore) => r.walk(c),
      (r: MemoryStore) => r.diff(c),
    ]) {
      const fresh = mem({ backend });
      const error = await rejection(read(fresh));
      expect(error).toBeInstanceOf(StoreError);
      expect((error as Error).message).toMatch(/incomplete: its page .* is missing/);
    }
  });

  it('pins of a format 2 commit work offline once read', async () => {
    const backend = new MemoryBackend();
    const s = mem({ backend });
    await fill(s, 1500);
    const c1 = await s.commit(`mem://${B}/data/`, 'one');
    await put(s, 'data/d2/f00002.txt', 'changed');
    const c2 = await s.commit(`mem://${B}/data/`, 'two');
    const cache = cacheDir();
    const online = mem({ backend, cache });
    await online.fetch(c1);
    await online.fetch(c2);
    const offline = mem({ backend, cache, offline: true });
    expect((await offline.pin(c2)).toString()).toBe(c2.toString());
    expect((await offline.stat(c2.join('d2/f00002.txt'))).size).toBe(7);
    expect((await offline.list(c2.join('d4/'))).length).toBe(150);
    expect((await offline.diff(c1, c2)).changed.map((f) => f.path)).toEqual(['d2/f00002.txt']);
    expect((await offline.fetch(c2)).downloaded).toBe(0);
    expect(offline.totalCalls).toBe(0);
    // Not read before and offline: OfflineMiss, no store call.
    const empty = mem({ backend, offline: true });
    await expect(empty.stat(c2.join('d2/f00002.txt'))).rejects.toBeInstanceOf(OfflineMiss);
    expect(empty.totalCalls).toBe(0);
  });

  it('diffTrees skips equal pages and merges a format 1 side by key', async () => {
    const s = mem();
    await fill(s, 1200);
    const v1 = await writeV1(s, 'data/', 1, null);
    await put(s, 'data/d0/f00000.txt', 'changed');
    const c2 = await s.commit(`mem://${B}/data/`, 'two');
    const a = await openCommit(s, B, v1);
    const b = await openCommit(s, B, idOf(c2));
    const changes = [];
    for await (const ch of diffTrees(a, b, 'data/')) changes.push(ch.key);
    expect(changes).toEqual(['data/d0/f00000.txt']);
    const under = [];
    for await (const ch of diffTrees(b, a, 'data/d1/')) under.push(ch.key);
    expect(under).toEqual([]);
  });
});
