/**
 * Branch records that do not list the files (`provcat.branch/2`, issue 27), on the in-memory test
 * driver (which counts primitive calls): the record names a commit, or the page tree of a live
 * folder's snapshot, and stays small whatever the number of files; the copy walks the pages and
 * is complete; an interrupted branch resumes copying only what is missing, from the recorded
 * state; a `provcat.branch/1` record (every file listed) still resumes; branches of format 1
 * and format 2 commits; a tampered page of a recorded tree fails closed before any copy.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseBranchRecord } from '../../src/commits/branch-record.js';
import {
  BRANCH_FORMAT,
  BRANCH_FORMAT_2,
  COMMIT_FORMAT,
  type CommitBody,
  type CommitFile,
  canonicalJson,
  commitBytes,
  commitKey,
  logKey,
  sha256Hex,
} from '../../src/commits/format.js';
import { pageKey } from '../../src/commits/pages/page-format.js';
import { ObjectIntegrityError, StoreError } from '../../src/core/errors.js';
import type { Uri } from '../../src/core/uri.js';
import { Interposer } from '../../src/testing/interposer.js';
import { rejection } from '../../src/testing/rejection.js';
import { MemoryBackend, MemoryStore } from '../support/memory-store.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-branch-v2-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let caches = 0;
const B = 'bkt';
const idOf = (u: Uri) => u.at?.id as string;

function setup() {
  const backend = new MemoryBackend();
  const store = (): MemoryStore =>
    new MemoryStore({ backend, cache: path.join(work, `cache-${++caches}`) });
  return { backend, store, s: store() };
}

const keyOf = (folder: string, i: number) =>
  `${folder}d${i % 7}/f${String(i).padStart(5, '0')}.txt`;

async function fill(s: MemoryStore, folder: string, n: number, body = (i: number) => `f${i}`) {
  for (let i = 0; i < n; i++) await s._put(B, keyOf(folder, i), Buffer.from(body(i)));
}

async function text(s: MemoryStore, key: string): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of (await s._get(B, key)).body) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Every file under `prefix`, relative path -> text. */
async function contents(s: MemoryStore, prefix: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for await (const page of s._pages(B, prefix)) {
    for (const o of page.objects) out[o.key.slice(prefix.length)] = await text(s, o.key);
  }
  return out;
}

async function record(s: MemoryStore, name: string) {
  const r = await s._get(B, `.provcat/branches/${name}.json`);
  const chunks: Buffer[] = [];
  for await (const c of r.body) chunks.push(c as Buffer);
  const bytes = Buffer.concat(chunks);
  return { bytes, intent: parseBranchRecord(bytes, name) };
}

/** A store whose copies fail after the first `k` (an interrupted branch). */
function dying(inner: MemoryStore, k: number): Interposer {
  let copies = 0;
  return new Interposer(inner, {
    before: (name) => {
      if (name === '_copy' && ++copies > k) throw new StoreError('injected: connection lost');
    },
  });
}

describe('provcat.branch/2', () => {
  it('a branch of a commit records the commit, not the files: small whatever N, copy complete', async () => {
    const sizes: number[] = [];
    for (const n of [5, 3000]) {
      const { s } = setup();
      await fill(s, 'main/', n);
      const c = await s.commit(`mem://${B}/main/`, 'one');
      const copy = await s.branch(`mem://${B}/copy/`, idOf(c));
      expect(copy.toString()).toBe(`mem://${B}/copy/`);
      const { bytes, intent } = await record(s, 'copy');
      expect(intent).toMatchObject({
        format: BRANCH_FORMAT_2,
        branch: 'copy/',
        source: { commit: idOf(c), folder: 'main/' },
      });
      expect('files' in intent).toBe(false);
      expect(bytes.length).toBeLessThan(400);
      sizes.push(bytes.length);
      expect(await contents(s, 'copy/')).toEqual(await contents(s, 'main/'));
      expect(Object.keys(await contents(s, 'copy/'))).toHaveLength(n);
      // Done: marked with the record's digest, and a rerun is an existing branch.
      expect(await text(s, '.provcat/branches/copy.done')).toBe(sha256Hex(bytes));
      expect(await rejection(s.branch(`mem://${B}/copy/`, idOf(c)))).toBeInstanceOf(StoreError);
    }
    expect(sizes[1]).toBe(sizes[0]);
  });

  it('a branch of a live folder records its snapshot as pages, and resumes from them', async () => {
    const { s, store } = setup();
    const n = 1200;
    await fill(s, 'main/', n);
    const half = dying(store(), 500);
    const failed = await rejection(half.branch(`mem://${B}/work/`, 'main', { concurrency: 4 }));
    expect((failed as Error).message).toMatch(/injected/);
    const { bytes, intent } = await record(s, 'work');
    expect(bytes.length).toBeLessThan(400);
    expect(intent).toMatchObject({
      format: BRANCH_FORMAT_2,
      source: { commit: null, folder: 'main/' },
      tree: { count: n },
    });
    const root = (intent as { tree: { root: string } }).tree.root;
    expect((await s._head(B, pageKey(root))).size).toBeGreaterThan(0);
    const copied = Object.keys(await contents(s, 'work/')).length;
    expect(copied).toBeGreaterThan(400);
    expect(copied).toBeLessThan(n);

    // The source moves on; the rerun copies the recorded versions, only those missing.
    await s._put(B, keyOf('main/', n - 1), Buffer.from('changed'));
    await s._put(B, 'main/added.txt', Buffer.from('new'));
    const rerun = new Interposer(store());
    const progress: number[] = [];
    await rerun.branch(`mem://${B}/work/`, 'main', {
      onProgress: (p) => progress.push(p.files ?? -1),
    });
    expect(rerun.calls._copy).toBe(n - copied);
    expect(progress.at(-1)).toBe(n - copied);
    const got = await contents(s, 'work/');
    expect(Object.keys(got)).toHaveLength(n);
    expect(got[keyOf('', n - 1)]).toBe(`f${n - 1}`);
    expect(got['added.txt']).toBeUndefined();
    expect(await rejection(s.branch(`mem://${B}/work/`, 'main'))).toBeInstanceOf(StoreError);
  });

  it("a live folder's snapshot shares the pages of its newest commit", async () => {
    const { s, store } = setup();
    await fill(s, 'main/', 600);
    await s.commit(`mem://${B}/main/`, 'one');
    const pageWrites = () => {
      let n = 0;
      const counting = new Interposer(store(), {
        before: (name, args) => {
          if (
            (name === '_create' || name === '_put') &&
            String(args[1]).startsWith('.provcat/pages/')
          )
            n++;
        },
      });
      return { counting, written: () => n };
    };
    const same = pageWrites();
    await same.counting.branch(`mem://${B}/same/`, 'main');
    expect(same.written()).toBe(0);
    await s._put(B, keyOf('main/', 7), Buffer.from('changed'));
    const other = pageWrites();
    await other.counting.branch(`mem://${B}/other/`, 'main');
    // The changed file's leaf and the pages above it.
    expect(other.written()).toBeGreaterThan(0);
    expect(other.written()).toBeLessThan(5);
    expect((await contents(s, 'other/'))[keyOf('', 7)]).toBe('changed');
    expect(Object.keys(await contents(s, 'same/'))).toHaveLength(600);
  });

  it('a resumed branch refuses a file that is not part of it, or differs, before copying', async () => {
    const { s, store } = setup();
    await fill(s, 'main/', 40);
    const c = await s.commit(`mem://${B}/main/`, 'one');
    await rejection(dying(store(), 10).branch(`mem://${B}/b/`, idOf(c), { concurrency: 1 }));
    await s._put(B, 'b/zz-stray.txt', Buffer.from('not from the source'));
    const counting = new Interposer(store());
    const stray = await rejection(counting.branch(`mem://${B}/b/`, idOf(c)));
    expect(stray).toBeInstanceOf(StoreError);
    expect((stray as Error).message).toMatch(/not part of it/);
    expect(counting.calls._copy ?? 0).toBe(0);
    await s._delete(B, 'b/zz-stray.txt');
    await s._put(B, `b/${keyOf('', 0)}`, Buffer.from('tampered, and longer'));
    const differs = await rejection(counting.branch(`mem://${B}/b/`, idOf(c)));
    expect((differs as Error).message).toMatch(/differs/);
    expect(counting.calls._copy ?? 0).toBe(0);
    expect(await text(s, `b/${keyOf('', 0)}`)).toBe('tampered, and longer');
  });

  it('a tampered page of a recorded tree fails closed, and nothing is copied', async () => {
    const { s, store } = setup();
    await fill(s, 'main/', 30);
    await rejection(dying(store(), 0).branch(`mem://${B}/t/`, 'main'));
    const { intent } = await record(s, 't');
    const root = (intent as { tree: { root: string } }).tree.root;
    const page = await text(s, pageKey(root));
    await s._put(B, pageKey(root), Buffer.from(page.replace('"size":3', '"size":4')));
    const counting = new Interposer(store());
    const error = await rejection(counting.branch(`mem://${B}/t/`, 'main'));
    expect(error).toBeInstanceOf(ObjectIntegrityError);
    expect(counting.calls._copy ?? 0).toBe(0);
  });

  it('a provcat.branch/1 record (every file listed) still resumes', async () => {
    const { s, store } = setup();
    await fill(s, 'main/', 20);
    const files: CommitFile[] = [];
    for await (const r of s._history(B, 'main/')) {
      if (r.current && r.size !== null) {
        files.push({ key: r.key, versionId: r.versionId, size: r.size, etag: r.etag });
      }
    }
    const v1 = {
      format: BRANCH_FORMAT,
      branch: 'old/',
      source: { commit: null, folder: 'main/' },
      time: new Date().toISOString(),
      files,
    };
    const bytes = Buffer.from(canonicalJson(v1), 'utf8');
    await s._create(B, '.provcat/branches/old.json', bytes);
    // What an older provcat had copied before it was interrupted.
    for (const f of files.slice(0, 8)) {
      await s._copy(B, f.key, f.versionId, `old/${f.key.slice('main/'.length)}`);
    }
    await s._put(B, keyOf('main/', 19), Buffer.from('changed since'));
    const counting = new Interposer(store());
    await counting.branch(`mem://${B}/old/`, 'main');
    expect(counting.calls._copy).toBe(12);
    const got = await contents(s, 'old/');
    expect(Object.keys(got)).toHaveLength(20);
    expect(got[keyOf('', 19)]).toBe('f19');
    expect(await text(s, '.provcat/branches/old.done')).toBe(sha256Hex(canonicalJson(v1)));
    // The record stays as it was.
    expect((await record(s, 'old')).intent.format).toBe(BRANCH_FORMAT);
  });

  it('branches of a format 1 commit and of a format 2 commit, and of a folder below one', async () => {
    const { s } = setup();
    await fill(s, 'main/', 12);
    const files: CommitFile[] = [];
    for await (const r of s._history(B, 'main/')) {
      if (r.current && r.size !== null) {
        files.push({ key: r.key, versionId: r.versionId, size: r.size, etag: r.etag });
      }
    }
    const body: CommitBody = {
      format: COMMIT_FORMAT,
      folder: 'main/',
      parent: null,
      number: 1,
      message: 'v1',
      metadata: {},
      time: new Date().toISOString(),
      files,
    };
    const v1 = sha256Hex(commitBytes(body));
    await s._put(B, commitKey(v1), commitBytes(body));
    await s._put(B, logKey('main/', 1), Buffer.from(v1));
    await s._put(B, keyOf('main/', 3), Buffer.from('after v1'));
    const v2 = idOf(await s.commit(`mem://${B}/main/`, 'two'));
    await s.branch(`mem://${B}/from1/`, v1);
    await s.branch(`mem://${B}/from2/`, v2);
    expect((await record(s, 'from1')).intent).toMatchObject({
      format: BRANCH_FORMAT_2,
      source: { commit: v1, folder: 'main/' },
    });
    const one = await contents(s, 'from1/');
    const two = await contents(s, 'from2/');
    expect(one[keyOf('', 3)]).toBe('f3');
    expect(two[keyOf('', 3)]).toBe('after v1');
    expect(Object.keys(one)).toEqual(Object.keys(two));
    await s.branch(`mem://${B}/sub/`, `mem://${B}/main/d2/?at=commit:${v2}`);
    const sub = await contents(s, 'sub/');
    expect(Object.keys(sub).sort()).toEqual(['f00002.txt', 'f00009.txt']);
  });

  it('refuses a format 2 record that names its files both ways, or neither', () => {
    const base = { format: BRANCH_FORMAT_2, branch: 'b/', time: new Date().toISOString() };
    const tree = { count: 1, height: 0, root: 'a'.repeat(64) };
    for (const bad of [
      { ...base, source: { commit: 'a'.repeat(64), folder: 'm/' }, tree },
      { ...base, source: { commit: null, folder: 'm/' } },
      { ...base, source: { commit: null, folder: 'm/' }, tree: { ...tree, count: 0 } },
      { ...base, source: { commit: null, folder: 'm/' }, tree, files: [] },
    ]) {
      const bytes = Buffer.from(canonicalJson(bad), 'utf8');
      expect(() => parseBranchRecord(bytes, 'b')).toThrow(StoreError);
    }
    const ok = { ...base, source: { commit: null, folder: 'm/' }, tree };
    expect(parseBranchRecord(Buffer.from(canonicalJson(ok)), 'b')).toEqual(ok);
    // Not canonical (whitespace): refused too.
    expect(() => parseBranchRecord(Buffer.from(JSON.stringify(ok, null, 1)), 'b')).toThrow(
      StoreError,
    );
  });
});
