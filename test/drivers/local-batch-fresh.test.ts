/**
 * A batch's first versions of fresh keys (drivers/local/publish.ts `publishFresh`) and the
 * name-only entries made as hard links (drivers/local/entry-link.ts): two inodes per fresh key,
 * exactly one winner when another writer reaches the key first, the pending marker always
 * completed, and nothing of a dead batch's stage left behind.
 */
import { spawnSync } from 'node:child_process';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BATCHES_DIR,
  type BatchMarker,
  markerName,
  STAGE_SUFFIX,
} from '../../drivers/local/batch-marker.js';
import { linkEntrySync } from '../../drivers/local/entry-link.js';
import { LocalStore } from '../../drivers/local/index.js';
import { keyPath } from '../../drivers/local/key-paths.js';
import {
  indexName,
  nextVersionId,
  parseVersionFile,
  pendingName,
  type VersionFile,
  versionFileName,
} from '../../drivers/local/layout.js';
import { publishFresh } from '../../drivers/local/publish.js';
import { NotFound } from '../../src/core/errors.js';
import { hostTag } from '../../src/core/fs-atomic.js';
import { text } from '../../src/testing/versions.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-batch-fresh-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let n = 0;

function newStore() {
  const root = path.join(work, `root-${n++}`);
  return { root, store: new LocalStore({ root, cache: path.join(work, `cache-${n++}`) }) };
}

/** Every inode below `dir` (itself included), and the paths of the files with more than one link. */
function inodes(dir: string, seen = new Set<number>(), linked: string[] = []) {
  const st = lstatSync(dir);
  seen.add(st.ino);
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    const s = lstatSync(p);
    if (s.isDirectory()) inodes(p, seen, linked);
    else {
      seen.add(s.ino);
      if (s.nlink > 1) linked.push(p);
    }
  }
  return { seen, linked };
}

/** A version staged as a batch stages it: its final name, in a directory outside the bucket. */
function stage(root: string, bytes: string): { dir: string; version: VersionFile } {
  const dir = path.join(root, 'stage', `s${n++}`);
  mkdirSync(dir, { recursive: true });
  const md5 = '0'.repeat(32);
  const version = parseVersionFile(
    versionFileName(nextVersionId(undefined), Buffer.byteLength(bytes), md5),
  ) as VersionFile;
  writeFileSync(path.join(dir, version.name), bytes);
  return { dir, version };
}

/** A file to stand for a batch's marker (the pending markers link to it). */
function markerFile(root: string): string {
  mkdirSync(root, { recursive: true });
  const file = path.join(root, `marker-${n++}`);
  writeFileSync(file, '{}');
  return file;
}

describe('local store: a batch’s fresh keys', () => {
  it('cost two inodes each (directory and version); index entries are links of the versions', async () => {
    const { root, store } = newStore();
    const batch = store.batchPuts('b', 'f/');
    for (let i = 0; i < 100; i++) await batch.put(`f/k${i}`, Buffer.from(`bytes ${i}`));
    await batch.close();
    const bucket = path.join(root, 'b');
    const { seen, linked } = inodes(bucket);
    // The bucket, its folder f/, and per key its directory and its one version.
    expect(seen.size).toBe(2 + 2 * 100);
    // Each version is linked once more, by its index entry, and nothing else is a link.
    expect(linked.length).toBe(200);
    const folder = path.join(bucket, 'd.f');
    expect(readdirSync(folder).filter((e) => e.startsWith('p'))).toEqual([]);
    expect(readdirSync(path.join(root, BATCHES_DIR))).toEqual([]);
    for (let i = 0; i < 100; i += 33) {
      expect(await text((await store._get('b', `f/k${i}`)).body)).toBe(`bytes ${i}`);
    }
    const keys: string[] = [];
    for await (const page of store._pages('b', 'f/')) keys.push(...page.objects.map((o) => o.key));
    expect(keys.length).toBe(100);
    // A second batch over the same keys takes the locked path: a new version after the first.
    const again = store.batchPuts('b', 'f/');
    await again.put('f/k1', Buffer.from('second'));
    await again.close();
    const history: string[] = [];
    for await (const v of store._history('b', 'f/k1')) {
      if (v.key === 'f/k1') history.push(`${v.size} ${v.current}`);
    }
    expect(history).toEqual(['6 true', '7 false']);
    await store.close();
  });

  it('another writer’s version of the key first: the rename fails and the stage is kept', async () => {
    const { root, store } = newStore();
    await store._put('b', 'k', Buffer.from('first'));
    const where = keyPath(root, 'b', 'k', 'write');
    const staged = stage(root, 'staged');
    const marker = markerFile(root);
    expect(publishFresh(where, staged.dir, staged.version, marker)).toBeUndefined();
    expect(readFileSync(path.join(staged.dir, staged.version.name), 'utf8')).toBe('staged');
    expect(await text((await store._get('b', 'k')).body)).toBe('first');
    // The pending marker it left is completed by the next writer of the key (here a plain put).
    expect(existsSync(path.join(where.folder, pendingName(where.ref)))).toBe(true);
    await store._put('b', 'k', Buffer.from('third'));
    expect(existsSync(path.join(where.folder, pendingName(where.ref)))).toBe(false);
    const history: string[] = [];
    for await (const v of store._history('b', 'k')) history.push(String(v.size));
    expect(history).toEqual(['5', '5']);
    await store.close();
  });

  it('an empty key directory another writer just made is taken over, and read after', async () => {
    const { root, store } = newStore();
    await store._put('b', 'other', Buffer.from('x')); // the bucket exists
    const where = keyPath(root, 'b', 'k', 'write');
    mkdirSync(where.dir);
    const staged = stage(root, 'staged');
    const published = publishFresh(where, staged.dir, staged.version, markerFile(root));
    expect(published?.versionId).toBe(staged.version.versionId);
    expect(existsSync(staged.dir)).toBe(false);
    expect(existsSync(path.join(where.folder, indexName(where.ref, staged.version.name)))).toBe(
      true,
    );
    expect(existsSync(path.join(where.folder, pendingName(where.ref)))).toBe(false);
    expect(await text((await store._get('b', 'k')).body)).toBe('staged');
    // A writer that made the directory and locks it now finds the version and numbers after it.
    const next = await store._put('b', 'k', Buffer.from('next'));
    expect((next.versionId ?? '') > staged.version.versionId).toBe(true);
    await store.close();
  });

  it('another writer’s pending marker: nothing is renamed, the key is left to it', async () => {
    const { root, store } = newStore();
    await store._put('b', 'other', Buffer.from('x'));
    const where = keyPath(root, 'b', 'k', 'write');
    const pending = path.join(where.folder, pendingName(where.ref));
    writeFileSync(pending, '');
    const staged = stage(root, 'staged');
    expect(publishFresh(where, staged.dir, staged.version, markerFile(root))).toBeUndefined();
    expect(existsSync(where.dir)).toBe(false);
    expect(existsSync(path.join(staged.dir, staged.version.name))).toBe(true);
    expect(statSync(pending).size).toBe(0); // theirs, untouched
    await expect(store._head('b', 'k')).rejects.toBeInstanceOf(NotFound);
    await store.close();
  });

  it('the stage of a dead batch is removed with its marker by the next instance', async () => {
    const { root, store } = newStore();
    await store._put('b', 'f/old', Buffer.from('old'));
    await store.close();
    const child = spawnSync(process.execPath, ['-e', ''], { stdio: 'ignore' });
    const m: BatchMarker = {
      bucket: 'b',
      prefix: 'f/',
      pid: child.pid as number,
      host: hostname(),
      tag: hostTag(),
      start: Date.now(),
    };
    const marker = path.join(root, BATCHES_DIR, markerName(m, 'aaaaaaaa'));
    mkdirSync(path.dirname(marker), { recursive: true });
    writeFileSync(marker, JSON.stringify(m));
    // What the batch died with: a fresh key's version staged, never renamed into the bucket.
    const left = path.join(`${marker}${STAGE_SUFFIX}`, 'x');
    mkdirSync(left, { recursive: true });
    writeFileSync(path.join(left, `${nextVersionId(undefined)}.3`), 'new');
    const again = new LocalStore({ root, cache: path.join(work, `cache-${n++}`) });
    expect(await text((await again._get('b', 'f/old')).body)).toBe('old');
    expect(readdirSync(path.join(root, BATCHES_DIR))).toEqual([]);
    await again.close();
  });
});

describe('name-only entries as links', () => {
  it('a link of the target where the file system allows, else an empty file; false when it exists', () => {
    const dir = path.join(work, `entries-${n++}`);
    mkdirSync(dir);
    const target = path.join(dir, 'target');
    writeFileSync(target, 'bytes');
    const entry = path.join(dir, 'entry');
    expect(linkEntrySync(target, entry)).toBe(true);
    expect(statSync(entry).ino).toBe(statSync(target).ino);
    expect(linkEntrySync(target, entry)).toBe(false);
    // A directory cannot be hard-linked (EPERM): the entry is an empty file of its own.
    const plain = path.join(dir, 'plain');
    expect(linkEntrySync(dir, plain)).toBe(true);
    expect(statSync(plain).isFile()).toBe(true);
    expect(statSync(plain).size).toBe(0);
    expect(linkEntrySync(dir, plain)).toBe(false);
  });
});
