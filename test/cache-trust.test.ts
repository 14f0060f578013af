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
  mkdtempSync,
  openSync,
  readdirSync,
  readSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../drivers/local/index.js';
import { exitCodeOf, ObjectIntegrityError, OfflineMiss } from '../src/errors.js';

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
