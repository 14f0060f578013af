/**
 * The cache serves only what it verified: no symlink planted in it is followed (a blob, a view
 * file, a view folder or a blob folder replaced by a link to something outside), a truncated,
 * edited or deleted file is never served as current or as pinned, and bytes read at a commit or
 * a version are checked against the ETag (MD5) the record holds before anything is cached.
 */
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { exitCodeOf, ObjectIntegrityError, OfflineMiss } from '../../src/core/errors.js';

function temp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-trust-${label}-`));
}

/** A local store and its cache, plus an offline view of the same cache. */
function stores() {
  const root = temp('root');
  const cache = temp('cache');
  return {
    root,
    cache,
    store: new LocalStore({ root, cache }),
    offline: () => new LocalStore({ root, cache, offline: true }),
  };
}

/** Every regular file below `dir` with its text (no link followed). */
function tree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const full = path.join(e.parentPath, e.name);
    if (e.isFile()) out[path.relative(dir, full)] = readFileSync(full, 'utf8');
    else if (!e.isDirectory())
      out[path.relative(dir, full)] = `<${e.isSymbolicLink() ? 'link' : 'special'}>`;
  }
  return out;
}

/** Flip one byte of `file` in place (as root: its read-only mode does not stop the write). */
function flipByte(file: string, at = 0): void {
  const fd = openSync(file, 'r+');
  try {
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, at);
    b[0] = (b[0] as number) ^ 0x20;
    writeSync(fd, b, 0, 1, at);
  } finally {
    closeSync(fd);
  }
}

/** Replace `target` (a file or a folder) by a symlink to `to`. */
function replaceByLink(target: string, to: string): void {
  rmSync(target, { recursive: true, force: true });
  symlinkSync(to, target);
}

/** An outside folder holding one unrelated file, and a check that it is untouched. */
function outsideFolder(): { dir: string; untouched(): void } {
  const dir = temp('outside');
  writeFileSync(path.join(dir, 'unrelated.txt'), 'not the cache');
  return {
    dir,
    untouched() {
      expect(readdirSync(dir)).toEqual(['unrelated.txt']);
      expect(readFileSync(path.join(dir, 'unrelated.txt'), 'utf8')).toBe('not the cache');
    },
  };
}

/** The one version file of `key` in the local store's bucket folder `b` (its bytes). */
function storedVersionFile(root: string, key: string): string {
  let dir = path.join(root, 'b');
  const parts = key.split('/');
  for (const p of parts.slice(0, -1)) dir = path.join(dir, `d.${p}`);
  dir = path.join(dir, `o.${parts.at(-1)}`);
  const versions = readdirSync(dir).filter((n) => /^\d{17}-[0-9a-f]+\.\d+\./.test(n));
  expect(versions).toHaveLength(1);
  return path.join(dir, versions[0] as string);
}

const md5 = (s: string) => createHash('md5').update(s).digest('hex');

const FILES = { 'x.txt': 'the x file\n', 'sub/y.txt': 'the y file, a bit longer\n' };

async function seeded() {
  const s = stores();
  for (const [k, v] of Object.entries(FILES))
    await s.store.put(`local://b/data/${k}`, Buffer.from(v));
  return s;
}

describe('bit rot in the store is refused at a commit and at a version', () => {
  it('a flipped byte in a stored version: DigestMismatch (exit 6), nothing cached', async () => {
    const s = await seeded();
    const pinned = await s.store.commit('local://b/data/', 'one');
    const commitId = (pinned.at as { id: string }).id;
    // The premise: the commit records each file's ETag, and the local store's ETag is its MD5.
    const entry = await s.store.stat(`local://b/data/x.txt?at=commit:${commitId}`);
    expect(entry.etag).toBe(`"${md5(FILES['x.txt'])}"`);
    flipByte(storedVersionFile(s.root, 'data/x.txt'), 3);

    const error = await s.store.fetch(pinned).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ObjectIntegrityError);
    expect((error as ObjectIntegrityError).kind).toBe('DigestMismatch');
    expect(exitCodeOf(error)).toBe(6);
    // Nothing of x was cached: no blob of its version, no view file, no done mark.
    const xVersion = entry.versionId as string;
    expect(existsSync(s.store.cache.blobPath('local', 'b', 'data/x.txt', xVersion))).toBe(false);
    expect(existsSync(s.store.cache.commitTreePath('local', 'b', commitId, 'data/x.txt'))).toBe(
      false,
    );
    expect((await s.store.cache.readState(`commit:${pinned}`))?.done).not.toBe(true);
    await expect(s.offline().fetch(pinned)).rejects.toBeInstanceOf(OfflineMiss);
  });

  it('a flipped byte in a stored version read at ?at=version: is refused too', async () => {
    const s = await seeded();
    const pin = await s.store.pin('local://b/data/x.txt');
    flipByte(storedVersionFile(s.root, 'data/x.txt'));
    const error = await s.store.fetch(pin).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ObjectIntegrityError);
    expect((error as ObjectIntegrityError).kind).toBe('DigestMismatch');
    const versionId = (pin.at as { id: string }).id;
    expect(existsSync(s.store.cache.blobPath('local', 'b', 'data/x.txt', versionId))).toBe(false);
    await expect(s.offline().fetch(pin)).rejects.toBeInstanceOf(OfflineMiss);
  });
});

describe('symlinks planted in the cache are never followed', () => {
  it('a blob replaced by a link to a file outside is fetched again, not linked into the folder', async () => {
    const s = await seeded();
    const first = await s.store.fetch('local://b/data/');
    const secret = path.join(temp('secret'), 'passwd');
    writeFileSync(secret, 'root:x:0:0:secret\n');
    const version = (await s.store.stat('local://b/data/x.txt')).versionId as string;
    replaceByLink(s.store.cache.blobPath('local', 'b', 'data/x.txt', version), secret);
    // The user deleted the fetched file: the next fetch must link it again from its blob.
    rmSync(path.join(first.path, 'x.txt'));
    const again = await s.store.fetch('local://b/data/');
    expect(again.downloaded).toBe(1);
    expect(lstatSync(path.join(again.path, 'x.txt')).isFile()).toBe(true);
    expect(tree(again.path)).toEqual(FILES);
    expect(readFileSync(secret, 'utf8')).toBe('root:x:0:0:secret\n');
  });

  it('a folder copy replaced by a link to an outside folder: nothing written or deleted there', async () => {
    const s = await seeded();
    const first = await s.store.fetch('local://b/data/');
    for (const which of [first.path, path.join(first.path, 'sub')]) {
      const outside = outsideFolder();
      replaceByLink(which, outside.dir);
      await expect(s.offline().fetch('local://b/data/')).rejects.toBeInstanceOf(OfflineMiss);
      const again = await s.store.fetch('local://b/data/');
      outside.untouched();
      expect(lstatSync(which).isDirectory()).toBe(true);
      expect(tree(again.path)).toEqual(FILES);
      expect(tree((await s.offline().fetch('local://b/data/')).path)).toEqual(FILES);
    }
  });

  it('a blob folder replaced by a link to an outside folder receives no blob', async () => {
    const s = await seeded();
    await s.store.fetch('local://b/data/sub/');
    const bucketBlobs = path.dirname(
      path.dirname(s.store.cache.blobPath('local', 'b', 'data/x.txt', 'any')),
    );
    const outside = outsideFolder();
    replaceByLink(bucketBlobs, outside.dir);
    const r = await s.store.fetch('local://b/data/');
    outside.untouched();
    expect(tree(r.path)).toEqual(FILES);
    expect(lstatSync(bucketBlobs).isDirectory()).toBe(true);
  });

  it('a commit copy: a file or a folder replaced by a link is fetched again, the outside untouched', async () => {
    const s = await seeded();
    const pinned = await s.store.commit('local://b/data/', 'one');
    const first = await s.store.fetch(pinned);
    expect(tree(first.path)).toEqual(FILES);
    const secret = path.join(temp('secret'), 'x.txt');
    writeFileSync(secret, 'SECRET SECRET\n');
    replaceByLink(path.join(first.path, 'x.txt'), secret);
    const outside = outsideFolder();
    replaceByLink(path.join(first.path, 'sub'), outside.dir);
    const again = await s.store.fetch(pinned);
    expect(tree(again.path)).toEqual(FILES);
    outside.untouched();
    expect(readFileSync(secret, 'utf8')).toBe('SECRET SECRET\n');
    // The whole commit folder replaced by a link: offline too, nothing goes through it.
    const outside2 = outsideFolder();
    replaceByLink(first.path, outside2.dir);
    const offline = await s.offline().fetch(pinned);
    expect(tree(offline.path)).toEqual(FILES);
    outside2.untouched();
  });

  it('a pinned copy replaced by a link, or its folder by a link to an outside folder', async () => {
    const s = await seeded();
    const pin = await s.store.pin('local://b/data/x.txt');
    const first = await s.store.fetch(pin);
    const secret = path.join(temp('secret'), 'x.txt');
    writeFileSync(secret, 'SECRET\n');
    replaceByLink(first.path, secret);
    const again = await s.offline().fetch(pin);
    expect(lstatSync(again.path).isFile()).toBe(true);
    expect(readFileSync(again.path, 'utf8')).toBe(FILES['x.txt']);
    const outside = outsideFolder();
    replaceByLink(path.dirname(first.path), outside.dir);
    const third = await s.store.fetch(pin);
    outside.untouched();
    expect(readFileSync(third.path, 'utf8')).toBe(FILES['x.txt']);
    expect(lstatSync(path.dirname(third.path)).isDirectory()).toBe(true);
  });
});

describe('corrupt cached bytes are never served as current or pinned', () => {
  it('a truncated file in a fetched folder: offline refuses the folder, online fetches it again', async () => {
    const s = await seeded();
    const first = await s.store.fetch('local://b/data/');
    truncateSync(path.join(first.path, 'x.txt'), 3);
    await expect(s.offline().fetch('local://b/data/')).rejects.toBeInstanceOf(OfflineMiss);
    await expect(s.offline().fetch('local://b/data/x.txt')).rejects.toBeInstanceOf(OfflineMiss);
    const again = await s.store.fetch('local://b/data/');
    expect(again.downloaded).toBe(1);
    expect(tree(again.path)).toEqual(FILES);
    expect(tree((await s.offline().fetch('local://b/data/')).path)).toEqual(FILES);
  });

  it('offline, a folder missing a file the user deleted is not complete', async () => {
    const s = await seeded();
    const first = await s.store.fetch('local://b/data/');
    rmSync(path.join(first.path, 'sub', 'y.txt'));
    await expect(s.offline().fetch('local://b/data/')).rejects.toBeInstanceOf(OfflineMiss);
    await expect(s.offline().fetch('local://b/data/sub/')).rejects.toBeInstanceOf(OfflineMiss);
    // The part of the folder that is intact is still served.
    expect(readFileSync((await s.offline().fetch('local://b/data/x.txt')).path, 'utf8')).toBe(
      FILES['x.txt'],
    );
  });

  it('a truncated ?at=version: copy is not served offline and is fetched again online', async () => {
    const s = await seeded();
    const pin = await s.store.pin('local://b/data/x.txt');
    const first = await s.store.fetch(pin);
    truncateSync(first.path, 2);
    await expect(s.offline().fetch(pin)).rejects.toBeInstanceOf(OfflineMiss);
    const again = await s.store.fetch(pin);
    expect(again.downloaded).toBe(1);
    expect(readFileSync(again.path, 'utf8')).toBe(FILES['x.txt']);
    expect(readFileSync((await s.offline().fetch(pin)).path, 'utf8')).toBe(FILES['x.txt']);
  });

  it('a commit copy with a truncated file and a flipped byte: offline refuses, online repairs', async () => {
    const s = await seeded();
    const pinned = await s.store.commit('local://b/data/', 'one');
    const first = await s.store.fetch(pinned);
    truncateSync(path.join(first.path, 'x.txt'), 1);
    await expect(s.offline().fetch(pinned)).rejects.toBeInstanceOf(OfflineMiss);
    const fixed = await s.store.fetch(pinned);
    expect(tree(fixed.path)).toEqual(FILES);
    // An edit that keeps the size (a flipped byte) changes the shared blob too.
    flipByte(path.join(first.path, 'sub', 'y.txt'), 4);
    await expect(s.offline().fetch(pinned)).rejects.toBeInstanceOf(OfflineMiss);
    await expect(
      s.offline().fetch(`local://b/data/sub/y.txt?at=commit:${(pinned.at as { id: string }).id}`),
    ).rejects.toBeInstanceOf(OfflineMiss);
    const again = await s.store.fetch(pinned);
    expect(again.downloaded).toBe(1);
    expect(tree(again.path)).toEqual(FILES);
    expect(tree((await s.offline().fetch(pinned)).path)).toEqual(FILES);
  });
});
