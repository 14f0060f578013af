import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { Cache, type InstallableBody } from '../../src/cache/cache.js';
import { ObjectIntegrityError, OfflineMiss, StoreError, UriError } from '../../src/core/errors.js';
import { checkDiskNames } from '../../src/core/keys.js';
import { Uri } from '../../src/core/uri.js';
import { readTree } from '../../src/testing/fetch.js';

const FIXTURE = path.join(import.meta.dirname, '..', 'fixtures', 'cache-fetch.mjs');

function temp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-${label}-`));
}

function child(args: string[], env: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, [FIXTURE, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

function finished(p: ChildProcess): Promise<{ code: number | null; out: string; err: string }> {
  let out = '';
  let err = '';
  p.stdout?.on('data', (d) => {
    out += d;
  });
  p.stderr?.on('data', (d) => {
    err += d;
  });
  return new Promise((resolve) => p.on('close', (code) => resolve({ code, out, err })));
}

/** Every file below `dir` (names only), recursively. */
async function allFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
}

describe('the cache across processes', () => {
  it('a fetch killed mid-file leaves nothing taken as complete; the next fetch completes it', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    const big = Buffer.alloc(24 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(i, i);
    await store.put('local://b/data/big.bin', big);
    await store.put('local://b/data/small.txt', Buffer.from('small'));

    for (const uri of ['local://b/data/big.bin', 'local://b/data/']) {
      const p = child([root, cache, uri], { THROTTLE: '1' });
      const done = finished(p);
      await new Promise<void>((resolve, reject) => {
        p.stdout?.on('data', (d) => {
          if (String(d).includes('started')) resolve();
        });
        p.on('close', () => reject(new Error('the child ended before it was killed')));
      });
      await new Promise((r) => setTimeout(r, 150));
      p.kill('SIGKILL');
      expect((await done).code).toBeNull();

      // Whatever was left is not a complete file for any reader.
      const offline = new LocalStore({ root, cache, offline: true });
      await expect(offline.fetch(uri)).rejects.toBeInstanceOf(OfflineMiss);
      // Every finished (non-temp) blob holds a whole object: nothing partial was published.
      for (const f of await allFiles(path.join(cache, 'v1', 'blobs'))) {
        if (path.basename(f).startsWith('.tmp-')) continue;
        expect([big.length, 5]).toContain((await stat(f)).size);
      }
    }
    // The next fetch (it may wait for the dead holder's lock to go stale) completes the work.
    const folder = await store.fetch('local://b/data/');
    expect(folder.downloaded).toBeGreaterThanOrEqual(1);
    expect((await readFile(path.join(folder.path, 'big.bin'))).equals(big)).toBe(true);
    const file = await store.fetch('local://b/data/big.bin');
    expect((await readFile(file.path)).equals(big)).toBe(true);
    const offline = new LocalStore({ root, cache, offline: true });
    expect((await offline.fetch('local://b/data/')).path).toBe(folder.path);
  }, 60_000);

  it('two processes fetching one folder at once both end with a complete, correct copy', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    const files: Record<string, string> = {};
    for (let i = 0; i < 150; i++) files[`d${i % 7}/f${i}.txt`] = `content ${i} `.repeat(i + 1);
    for (const [k, v] of Object.entries(files))
      await store.put(`local://b/set/${k}`, Buffer.from(v));
    const runs = await Promise.all([
      finished(child([root, cache, 'local://b/set/'])),
      finished(child([root, cache, 'local://b/set/'])),
    ]);
    const results = runs.map((r) => {
      expect(r.code, r.err).toBe(0);
      return JSON.parse(r.out.trim()) as { path: string; files: number; downloaded: number };
    });
    expect(results.map((r) => r.files)).toEqual([150, 150]);
    // One of them did the work, the other found it current (they never raced file by file).
    expect(results.map((r) => r.downloaded).sort((a, b) => a - b)).toEqual([0, 150]);
    expect(await readTree(results[0]?.path as string)).toEqual(files);
  }, 60_000);

  it('after a fetch killed halfway, the refetch downloads only the files whose blobs are missing (S3-like listings)', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const N = 300;
    const seeder = new LocalStore({ root, cache: temp('seed') });
    await Promise.all(
      Array.from({ length: N }, (_, i) =>
        seeder.put(`local://b/set/d${i % 5}/f${i}.txt`, Buffer.from(`file ${i} `.repeat(20))),
      ),
    );
    // As on S3: listings carry no version ID, the version is the ETag, a GET reports both.
    const env = { S3_LIKE: '1', KILL_AFTER_FILES: '100' };
    const killed = await finished(child([root, cache, 'local://b/set/'], env));
    expect(killed.code, killed.err).toBeNull();
    const complete = (await allFiles(path.join(cache, 'v1', 'blobs'))).filter(
      (f) => !path.basename(f).startsWith('.tmp-'),
    ).length;
    expect(complete).toBeGreaterThanOrEqual(100);
    expect(complete).toBeLessThan(N);

    const store = new LocalStore({ root, cache });
    const pages = store._pages.bind(store);
    store._pages = async function* (...args) {
      for await (const page of pages(...args)) {
        const objects = page.objects.map((o) => ({
          ...o,
          versionId: undefined,
          version: o.etag ?? '',
        }));
        yield { ...page, objects };
      }
    };
    const get = store._get.bind(store);
    store._get = async (...args) => {
      const res = await get(...args);
      return { ...res, info: { ...res.info, version: res.info.etag ?? '' } };
    };
    const again = await store.fetch('local://b/set/');
    expect(again).toMatchObject({ files: N, downloaded: N - complete });
    expect(Object.keys(await readTree(again.path))).toHaveLength(N);
    // And the blobs a folder fetch stored are shared with a commit of the same versions.
    const pinned = await store.commit('local://b/set/', 'all');
    expect(await store.fetch(pinned)).toMatchObject({ files: N, downloaded: 0 });
  }, 60_000);

  it('refuses hostile keys and URIs, writing nothing outside the local root or the cache', async () => {
    const parent = temp('hostile');
    const root = path.join(parent, 'root');
    const cache = path.join(parent, 'cache');
    const store = new LocalStore({ root, cache });
    for (const uri of [
      'local://b/a//b',
      'local://b/../escape',
      'local://b/%2e%2e/escape',
      'local://b/./x',
      'local://b/a%00b',
      'local:///etc/passwd',
      'local://../escape',
    ]) {
      await expect(store.put(uri, Buffer.from('x')), uri).rejects.toBeInstanceOf(UriError);
      await expect(store.fetch(uri), uri).rejects.toBeInstanceOf(UriError);
    }
    for (const key of ['a//b', '../escape', 'x/../../escape', '/abs', 'a\u0000b']) {
      await expect(store._put('b', key, Buffer.from('x')), key).rejects.toBeInstanceOf(UriError);
    }
    for (const bucket of ['..', '.', '', 'a/b']) {
      await expect(store._put(bucket, 'k', Buffer.from('x')), bucket).rejects.toBeInstanceOf(
        UriError,
      );
    }
    expect((await readdir(parent)).filter((n) => n !== 'root' && n !== 'cache')).toEqual([]);
    const written = await allFiles(parent);
    expect(written.filter((f) => f.includes('escape') || f.includes('passwd'))).toEqual([]);
  });

  it('cache prune frees only the bytes no view links to', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    await store.put('local://b/p/x.txt', Buffer.from('version one'));
    const pinned = await store.pin('local://b/p/x.txt');
    await store.fetch('local://b/p/x.txt');
    await store.put('local://b/p/x.txt', Buffer.from('version two!'));
    const now = await store.fetch('local://b/p/x.txt');
    // The first version's blob is now linked by no view: it goes; the current one stays.
    expect(await store.cache.collect(0)).toEqual({ files: 1, bytes: 11 });
    expect(await readFile(now.path, 'utf8')).toBe('version two!');
    expect(await store.fetch('local://b/p/x.txt')).toMatchObject({ downloaded: 0 });
    // A pinned copy is a view too: once fetched, its bytes are kept.
    const old = await store.fetch(pinned);
    expect(old.downloaded).toBe(1);
    expect(await store.cache.collect(0)).toEqual({ files: 0, bytes: 0 });
    expect(await readFile(old.path, 'utf8')).toBe('version one');
  });
});

describe('views of nested folders', () => {
  it('offline, a folder whose files a fetch of a folder inside it changed or added is a miss', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    const offline = new LocalStore({ root, cache, offline: true });
    await store.put('local://b/d/a', Buffer.from('A1'));
    await store.put('local://b/d/sub/b', Buffer.from('B1'));
    const parent = await store.fetch('local://b/d/');
    expect(await offline.fetch('local://b/d/')).toMatchObject({ path: parent.path, files: 2 });
    // Upstream: a changed, a file added below; then only the folder inside is fetched. It shares
    // the parent's files, so the parent's copy holds a=A1 beside sub/c, which never existed
    // together in the store.
    await store.put('local://b/d/a', Buffer.from('A2'));
    await store.put('local://b/d/sub/c', Buffer.from('C'));
    await store.fetch('local://b/d/sub/');
    expect(await readTree(parent.path)).toEqual({ a: 'A1', 'sub/b': 'B1', 'sub/c': 'C' });
    const miss = await offline.fetch('local://b/d/').catch((e: unknown) => e);
    expect(miss).toBeInstanceOf(OfflineMiss);
    expect((miss as Error).message).toMatch(/no longer the one fetched/);
    // The folder inside is what was fetched, and one file of the parent's state still reads.
    expect(await offline.fetch('local://b/d/sub/')).toMatchObject({ files: 2 });
    expect(await readFile((await offline.fetch('local://b/d/a')).path, 'utf8')).toBe('A1');
    // Online, the parent is fetched whole again; then offline it is complete.
    expect(await store.fetch('local://b/d/')).toMatchObject({ files: 3 });
    expect(await offline.fetch('local://b/d/')).toMatchObject({ files: 3 });
    expect(await readTree(parent.path)).toEqual({ a: 'A2', 'sub/b': 'B1', 'sub/c': 'C' });
  });
});

describe('blob install', () => {
  it('writes a body read whole as a read-only blob, gives its memory back after, and refuses one of the wrong length', async () => {
    const cache = new Cache({ root: temp('blob') });
    const blob = cache.blobPath('s3', 'b', 'k', 'v1');
    const unused = () => {
      throw new Error('the stream of a body read whole is not read');
    };
    // The driver's release reuses the memory at once: here it overwrites the bytes, so a
    // release before the write would leave the wrong bytes in the blob.
    const bytes = Buffer.from('whole');
    let released = 0;
    const res = {
      get body(): never {
        return unused();
      },
      bytes,
      release: () => {
        released++;
        bytes.fill('X');
      },
    };
    const seen: number[] = [];
    await cache.installBlob(blob, res, { expectedSize: 5, onBytes: (n) => seen.push(n) });
    expect(await readFile(blob, 'utf8')).toBe('whole');
    expect((await stat(blob)).mode & 0o222).toBe(0);
    expect(seen).toEqual([5]);
    expect(released).toBe(1);

    const other = cache.blobPath('s3', 'b', 'k', 'v2');
    const short = {
      get body(): never {
        return unused();
      },
      bytes: Buffer.from('who'),
      release: () => {
        released++;
      },
    };
    await expect(cache.installBlob(other, short, { expectedSize: 5 })).rejects.toThrow(StoreError);
    // Refused bytes are given back too.
    expect(released).toBe(2);
    // Nothing half-written: no blob, no temp file.
    expect(await allFiles(path.dirname(other))).toEqual(
      path.dirname(other) === path.dirname(blob) ? [blob] : [],
    );
  });
});

describe('the six install paths', () => {
  const small = Buffer.from('sealed the same way');
  const big = Buffer.alloc(100 * 1024, 7);
  /** A GET's result of each shape a driver hands back, for `body`. */
  const shapes: [string, (body: Buffer, dir: string) => InstallableBody][] = [
    ['bytes read whole', (body) => ({ body: Readable.from([]), bytes: Buffer.from(body) })],
    [
      'a pipeTo sink',
      (body) => ({
        body: Readable.from([]),
        pipeTo: async (sink) => {
          await sink.data(body.subarray(0, 3));
          await sink.data(body.subarray(3));
        },
      }),
    ],
    [
      "a driver's small local file (read whole)",
      (body, dir) => {
        const file = path.join(dir, `source-${body.length}`);
        writeFileSync(file, body);
        return { body: Readable.from([]), file: { path: file, size: body.length } };
      },
    ],
    [
      "a driver's big local file (kernel copy)",
      (body, dir) => {
        const file = path.join(dir, `source-${body.length}`);
        writeFileSync(file, body);
        return { body: Readable.from([]), file: { path: file, size: body.length } };
      },
    ],
    [
      'a small Readable',
      (body) => ({ body: Readable.from([body.subarray(0, 2), body.subarray(2)]) }),
    ],
    [
      'a big Readable',
      (body) => ({ body: Readable.from([body.subarray(0, 5), body.subarray(5)]) }),
    ],
  ];
  const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

  for (const [name, shape] of shapes) {
    const body = name.includes(' big ') ? big : small;
    it(`${name}: the checked bytes become a read-only blob; bad ones leave nothing`, async () => {
      const dir = temp('install');
      const cache = new Cache({ root: path.join(dir, 'cache') });
      const blob = cache.blobPath('s3', 'b', 'k', 'v1');
      const seen: number[] = [];
      const digest = { algorithm: 'sha256' as const, hex: sha256(body), uri: 'u', source: 'test' };
      await cache.installBlob(blob, shape(body, dir), {
        expectedSize: body.length,
        onBytes: (n) => seen.push(n),
        digest,
      });
      expect((await readFile(blob)).equals(body)).toBe(true);
      expect((await stat(blob)).mode & 0o222).toBe(0);
      expect(seen.reduce((a, n) => a + n, 0)).toBe(body.length);

      const bad = cache.blobPath('s3', 'b', 'k', 'v2');
      const wrong = { ...digest, hex: sha256(Buffer.from('other bytes')) };
      const refused = cache.installBlob(bad, shape(body, dir), {
        expectedSize: body.length,
        digest: wrong,
      });
      await expect(refused).rejects.toThrow(ObjectIntegrityError);
      const short = cache.installBlob(bad, shape(body.subarray(1), dir), {
        expectedSize: body.length,
      });
      await expect(short).rejects.toThrow(StoreError);
      const long = cache.installBlob(bad, shape(Buffer.concat([body, body]), dir), {
        expectedSize: body.length,
      });
      await expect(long).rejects.toThrow(StoreError);
      // Nothing half-written: the good blob only, no temp file.
      expect(await allFiles(path.join(dir, 'cache'))).toEqual([blob]);
    });
  }
});

describe('cache folders', () => {
  it('a cold fetch of many files makes each cache folder once, parents first', async () => {
    const root = temp('root');
    const store = new LocalStore({ root, cache: temp('cache'), concurrency: 16 });
    await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        store.put(`local://b/many/d${i % 7}/f${i}.txt`, Buffer.from(`file ${i}`)),
      ),
    );
    // One level of the cache's safe mkdir -p (its parents are made or checked first), made by
    // the cache's SafeDirs (src/cache/safe-dirs.ts).
    const dirsOf = store.cache as unknown as { dirs: { makeLevel(dir: string): void } };
    const made = vi.spyOn(dirsOf.dirs, 'makeLevel');
    const r = await store.fetch('local://b/many/');
    expect(r).toMatchObject({ files: 300, downloaded: 300 });
    const dirs = made.mock.calls.map(([dir]) => dir);
    // 300 blobs spread over up to 256 fan-out folders and 7 folders of the copy, all fetched
    // 16 at a time: still one call per folder (the end of the fetch may check the copy's root
    // once more).
    const counts = new Map<string, number>();
    for (const d of dirs) counts.set(d, (counts.get(d) ?? 0) + 1);
    const twice = [...counts].filter(([d, n]) => n > 1 && d !== r.path);
    expect(twice).toEqual([]);
    expect(counts.size).toBeGreaterThan(100);
    // Every parent was asked for before its child.
    for (const [i, d] of dirs.entries()) {
      const parent = path.dirname(d);
      if (counts.has(parent)) expect(dirs.indexOf(parent)).toBeLessThan(i);
    }
  });
});

describe('checkDiskNames', () => {
  const where = Uri.parse('local://b/f/');
  it('refuses names one disk would store as one: case, or two Unicode spellings', () => {
    expect(() => checkDiskNames(['a/Readme', 'a/README'], where)).toThrow(/case-insensitive/);
    // é precomposed and as e + combining acute: one name after normalization.
    // The message tells the two spellings apart (they print alike).
    expect(() => checkDiskNames(['caf\u00e9', 'cafe\u0301'], where)).toThrow(
      /\("caf\\u00e9" and "cafe\\u0301"\) are one name in two Unicode spellings/,
    );
    expect(() => checkDiskNames(['CAF\u00c9', 'cafe\u0301'], where)).toThrow(/case-insensitive/);
  });
  it('refuses a name that is both a file and a folder', () => {
    expect(() => checkDiskNames(['d/x', 'd'], where)).toThrow(/both a file and a folder/);
  });
  it('accepts distinct names, ASCII or not', () => {
    expect(() =>
      checkDiskNames(['a/b', 'a/c', 'caf\u00e9', 'cafe', 'd\u00e9j\u00e0/vu', 'A-b'], where),
    ).not.toThrow();
  });
});
