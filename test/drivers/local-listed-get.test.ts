/**
 * The local store's GET of a version a listing named (`GetOptions.listed`, drivers/local/
 * versions.ts `listedVersion`): found by its file name without a `readdir`, else read as without
 * the hint; and what a folder fetch caches from such GETs when the store's files are wrong.
 */
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import type { Entry } from '../../src/contract/entry.js';
import type { GetOptions } from '../../src/contract/primitives.js';
import { NotFound, ObjectIntegrityError, StoreError } from '../../src/core/errors.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-local-listed-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

let n = 0;
/** A fresh store (own root and cache). */
function fresh(): { store: LocalStore; root: string; cache: string } {
  n++;
  const root = path.join(work, `root-${n}`);
  const cache = path.join(work, `cache-${n}`);
  return { store: new LocalStore({ root, cache, offline: false }), root, cache };
}

async function text(body: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks).toString();
}

/** The object directory of `f/<name>` in bucket `b` (see drivers/local/layout.ts). */
function keyDir(root: string, name: string): string {
  return path.join(root, 'b', 'd.f', `o.${name}`);
}

/** What a listing says of a file that `put` returned, as `GetOptions.listed`. */
function hint(e: Entry): NonNullable<GetOptions['listed']> {
  return { versionId: e.versionId, size: e.size as number, etag: e.etag };
}

/** Every file below `dir` (none when it does not exist). */
function filesBelow(dir: string): string[] {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((d) => d.isFile())
      .map((d) => d.name);
  } catch {
    return [];
  }
}

describe('a GET of a listed version', () => {
  it('opens the listed version by its name, without reading the key directory', async () => {
    const { store } = fresh();
    const old = await store.put('local://b/f/k', Buffer.from('old bytes'));
    await store.put('local://b/f/k', Buffer.from('new bytes'));
    const readdir = vi.spyOn(fs, 'readdir');
    try {
      const res = await store._get('b', 'f/k', { listed: hint(old) });
      expect(readdir).not.toHaveBeenCalled();
      // The version the listing saw, as it was then.
      expect(res.info.versionId).toBe(old.versionId);
      expect(await text(res.body)).toBe('old bytes');
    } finally {
      readdir.mockRestore();
    }
  });

  it('finds a version without an MD5 in its name by its ETag (its version ID)', async () => {
    const { store, root } = fresh();
    const info = await store.put('local://b/f/k', Buffer.from('bytes'));
    // As the kernel copy of a large file names a version: no MD5.
    const dir = keyDir(root, 'k');
    const name = readdirSync(dir).find((e) => e.startsWith(info.versionId as string)) as string;
    const plain = `${info.versionId}.${info.size}`;
    await fs.rename(path.join(dir, name), path.join(dir, plain));
    const res = await store._get('b', 'f/k', {
      listed: { ...hint(info), etag: `"${info.versionId}"` },
    });
    expect(res.info.etag).toBe(`"${info.versionId}"`);
    expect(await text(res.body)).toBe('bytes');
  });

  it('reads the current version when the listed one is not there', async () => {
    const { store, root } = fresh();
    const info = await store.put('local://b/f/k', Buffer.from('current'));
    // A hint naming no file (another MD5), or a file removed since: as without the hint.
    const wrong = { ...hint(info), etag: `"${'0'.repeat(32)}"` };
    const res = await store._get('b', 'f/k', { listed: wrong });
    expect(res.info.etag).toBe(info.etag);
    expect(await text(res.body)).toBe('current');
    for (const e of readdirSync(keyDir(root, 'k'))) {
      if (!e.startsWith('.')) rmSync(path.join(keyDir(root, 'k'), e));
    }
    await expect(store._get('b', 'f/k', { listed: hint(info) })).rejects.toThrow(NotFound);
  });

  it('ignores a hint that names no version file', async () => {
    const { store } = fresh();
    const info = hint(await store.put('local://b/f/k', Buffer.from('current')));
    for (const listed of [
      { ...info, versionId: '../x' },
      { ...info, etag: 'no quotes' },
      { ...info, etag: undefined },
    ]) {
      const res = await store._get('b', 'f/k', { listed });
      expect(await text(res.body)).toBe('current');
    }
  });
});

describe('a folder fetch of small local files', () => {
  it('refuses a version file whose bytes differ from its name, and caches nothing of it', async () => {
    const { store, root, cache } = fresh();
    await store.put('local://b/f/good', Buffer.from('good bytes'));
    const info = await store.put('local://b/f/bad', Buffer.from('bad bytes'));
    const dir = keyDir(root, 'bad');
    const name = readdirSync(dir).find((e) => e.startsWith(info.versionId as string)) as string;
    const file = path.join(dir, name);
    await fs.chmod(file, 0o644);
    // Same size, other bytes: the MD5 in its name catches it.
    writeFileSync(file, 'BAD bytes');
    await expect(store.fetch('local://b/f/')).rejects.toThrow(ObjectIntegrityError);
    const blobs = filesBelow(path.join(cache, 'v1', 'blobs'));
    // The good file's blob at most; no temp, no blob of the bad one.
    expect(blobs.filter((b) => b.startsWith('.tmp'))).toEqual([]);
    expect(blobs.length).toBeLessThanOrEqual(1);
    // Another size: refused before any temp is made.
    writeFileSync(file, 'bad bytes, longer');
    await expect(store.fetch('local://b/f/')).rejects.toThrow(StoreError);
    expect(filesBelow(path.join(cache, 'v1', 'blobs')).length).toBeLessThanOrEqual(1);
    // Made right again: the next fetch completes.
    writeFileSync(file, 'bad bytes');
    const r = await store.fetch('local://b/f/');
    expect(r.files).toBe(2);
    expect(await fs.readFile(path.join(r.path, 'bad'), 'utf8')).toBe('bad bytes');
    expect(statSync(path.join(r.path, 'bad')).mode & 0o222).toBe(0);
  });

  it('fetches a key deleted after the listing as the listing saw it, and the next fetch drops it', async () => {
    const { store } = fresh();
    await store.put('local://b/f/a', Buffer.from('a'));
    await store.put('local://b/f/gone', Buffer.from('gone'));
    const listed = store.cache.installBlob.bind(store.cache);
    let deleted = false;
    // Delete `gone` while the fetch is under way, after its listing was read.
    const spy = vi.spyOn(store.cache, 'installBlob').mockImplementation(async (...args) => {
      if (!deleted) {
        deleted = true;
        await store.delete('local://b/f/gone');
      }
      return listed(...args);
    });
    try {
      const r = await store.fetch('local://b/f/');
      expect(r.files).toBe(2);
    } finally {
      spy.mockRestore();
    }
    const again = await store.fetch('local://b/f/');
    expect(again.files).toBe(1);
    expect(readdirSync(again.path)).toEqual(['a']);
  });
});
