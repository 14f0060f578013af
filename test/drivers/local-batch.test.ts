/**
 * The local store's batched durability (drivers/local/batch.ts, batch-marker.ts): what a crash
 * before `close` may leave is never served — a torn version under a dead batch's marker is
 * removed and its key's listing index repaired before an instance's first read — while a live
 * batch's marker is left alone; and the sync pass's fallback (no `sync -f`) works.
 *
 * A power loss is simulated by what it may leave on disk: version files whose bytes do not match
 * their names, versions lost with their index entries kept, and a marker of a dead writer.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalPutBatch, syncWritten } from '../../drivers/local/batch.js';
import { BATCHES_DIR, type BatchMarker, markerName } from '../../drivers/local/batch-marker.js';
import { LocalStore } from '../../drivers/local/index.js';
import { keyPath } from '../../drivers/local/key-paths.js';
import { indexName, parseVersionFile } from '../../drivers/local/layout.js';
import { NotFound } from '../../src/core/errors.js';
import { hostTag } from '../../src/core/fs-atomic.js';
import { SYNCFS_MIN_FILES } from '../../src/core/sync-fs.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-local-batch-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let n = 0;

async function text(body: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(Buffer.from(c as Uint8Array));
  return Buffer.concat(chunks).toString();
}

async function keysOf(store: LocalStore, bucket: string, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  for await (const page of store._pages(bucket, prefix))
    keys.push(...page.objects.map((o) => o.key));
  return keys;
}

/** A PID that ran on this machine and has exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', ''], { stdio: 'ignore' });
  expect(child.status).toBe(0);
  return child.pid as number;
}

/** A store root with `old` put durably at every key, then `new` put by a closed batch. */
async function seeded(keys: string[]) {
  const root = path.join(work, `root-${n++}`);
  const store = new LocalStore({ root, cache: path.join(work, `cache-${n++}`) });
  const start = Date.now();
  for (const key of keys) await store._put('b', key, Buffer.from(`old ${key}`));
  const batch = store.batchPuts('b', 'f/');
  for (const key of keys) await batch.put(key, Buffer.from(`new ${key} ${'x'.repeat(100)}`));
  await batch.close();
  expect(readdirSync(path.join(root, BATCHES_DIR))).toEqual([]);
  await store.close();
  /** The file of the newest (batch) version of `key`. */
  const newest = (key: string) => {
    const where = keyPath(root, 'b', key, 'read');
    const name = readdirSync(where.dir).sort().at(-1) as string;
    return { where, name, file: path.join(where.dir, name) };
  };
  /** Leave a batch marker, as a writer would have before its first put. */
  const mark = (marker: Partial<BatchMarker>) => {
    const m: BatchMarker = {
      bucket: 'b',
      prefix: 'f/',
      pid: deadPid(),
      host: hostname(),
      tag: hostTag(),
      start: start - 1,
      ...marker,
    };
    const file = path.join(root, BATCHES_DIR, markerName(m, randomBytes(4).toString('hex')));
    writeFileSync(file, JSON.stringify(m));
    return file;
  };
  const reopen = () => new LocalStore({ root, cache: path.join(work, `cache-${n++}`) });
  return { root, newest, mark, reopen };
}

describe('local store: batched puts after a crash', () => {
  it('a torn version under a dead marker is never served, and the index is repaired', async () => {
    const s = await seeded(['f/zeros', 'f/short', 'f/lost', 'f/whole', 'f/sub/deep']);
    // What a power loss may leave: the bytes of a name lost (zeros, or short), a version file
    // lost with its index entry kept.
    const zeros = s.newest('f/zeros');
    writeFileSync(zeros.file, Buffer.alloc(parseVersionFile(zeros.name)?.size as number));
    truncateSync(s.newest('f/short').file, 3);
    const lost = s.newest('f/lost');
    rmSync(lost.file);
    const deep = s.newest('f/sub/deep');
    writeFileSync(deep.file, Buffer.alloc(parseVersionFile(deep.name)?.size as number, 1));
    const marker = s.mark({});

    const store = s.reopen();
    for (const key of ['f/zeros', 'f/short', 'f/lost', 'f/sub/deep']) {
      expect(await text((await store._get('b', key)).body), key).toBe(`old ${key}`);
    }
    expect(await text((await store._get('b', 'f/whole')).body)).toMatch(/^new f\/whole x+$/);
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(zeros.file)).toBe(false);
    // The listing index names exactly the versions left.
    for (const torn of [zeros, lost, deep]) {
      const entry = path.join(torn.where.folder, indexName(torn.where.ref, torn.name));
      expect(existsSync(entry), entry).toBe(false);
    }
    const versions: string[] = [];
    for await (const v of store._history('b', 'f/')) versions.push(`${v.key} ${v.size}`);
    expect(versions.filter((v) => v.startsWith('f/lost'))).toEqual(['f/lost 10']);
    expect(await keysOf(store, 'b', 'f/')).toEqual([
      'f/lost',
      'f/short',
      'f/sub/deep',
      'f/whole',
      'f/zeros',
    ]);
    await store.close();
  });

  it('a marker of an earlier boot of this machine is dead, whatever its PID', async () => {
    const s = await seeded(['f/k']);
    const torn = s.newest('f/k');
    truncateSync(torn.file, 0);
    // Another host tag, this host name: the same machine before a boot. Our own PID runs.
    const marker = s.mark({ pid: process.pid, tag: '0badf00d' });
    const store = s.reopen();
    expect(await text((await store._get('b', 'f/k')).body)).toBe('old f/k');
    expect(existsSync(marker)).toBe(false);
    await store.close();
  });

  it('a live batch (this process) is left alone, and so is another machine’s fresh marker', async () => {
    const s = await seeded(['f/k']);
    const torn = s.newest('f/k');
    truncateSync(torn.file, 0);
    const ours = s.mark({ pid: process.pid });
    const foreign = s.mark({ pid: 1, tag: '0badf00d', host: 'another-machine' });
    const store = s.reopen();
    // Not recovered: the version stays (a live batch's files are whole in the kernel).
    await store._head('b', 'f/k');
    expect(existsSync(ours)).toBe(true);
    expect(existsSync(foreign)).toBe(true);
    expect(existsSync(torn.file)).toBe(true);
    await store.close();
  });

  it('recovery of a torn first version leaves the key absent', async () => {
    const root = path.join(work, `root-${n++}`);
    const store = new LocalStore({ root, cache: path.join(work, `cache-${n++}`) });
    const start = Date.now();
    const batch = store.batchPuts('b', '');
    await batch.put('only', Buffer.from('bytes of the only version'));
    await batch.close();
    await store.close();
    const where = keyPath(root, 'b', 'only', 'read');
    const name = readdirSync(where.dir)[0] as string;
    writeFileSync(path.join(where.dir, name), Buffer.alloc(25));
    const m: BatchMarker = {
      bucket: 'b',
      prefix: '',
      pid: deadPid(),
      host: hostname(),
      tag: hostTag(),
      start,
    };
    writeFileSync(path.join(root, BATCHES_DIR, markerName(m, 'aaaaaaaa')), JSON.stringify(m));
    const again = new LocalStore({ root, cache: path.join(work, `cache-${n++}`) });
    await expect(again._get('b', 'only')).rejects.toBeInstanceOf(NotFound);
    expect(await keysOf(again, 'b', '')).toEqual([]);
    await again.close();
  });

  it('keeps no path per file once sync -f ran, so a large batch holds no list', async () => {
    const root = path.join(work, `root-${n++}`);
    const store = new LocalStore({ root, cache: path.join(work, `cache-${n++}`) });
    const lines: string[] = [];
    const batch = new LocalPutBatch(
      {
        root,
        ready: () => Promise.resolve(),
        put: (key, source, options) => store._put('b', key, source, options),
        trace: (m) => lines.push(m),
      },
      'b',
      'p/',
      8,
    );
    for (let i = 0; i < 40; i++) {
      await batch.put(`p/d${i % 4}/f${String(i).padStart(2, '0')}`, Buffer.from(`bytes ${i}`));
    }
    await batch.close();
    // The check ran after the 8th file: the lists went, the rest was made durable by sync -f.
    expect(batch.listed).toBe(0);
    expect(lines).toContain('batch local://b/p/: 40 versions durable');
    expect(await keysOf(store, 'b', 'p/')).toHaveLength(40);
    expect(await text((await store._get('b', 'p/d3/f39')).body)).toBe('bytes 39');
    expect(readdirSync(path.join(root, BATCHES_DIR))).toEqual([]);
    await store.close();
  });

  it('close makes the versions durable without sync -f too (fsync of each file and directory)', async () => {
    const root = path.join(work, `root-${n++}`);
    const store = new LocalStore({ root, cache: path.join(work, `cache-${n++}`) });
    const batch = store.batchPuts('b', 'p/');
    const info = await batch.put('p/a/b', Buffer.from('x'));
    await batch.close();
    const where = keyPath(root, 'b', 'p/a/b', 'read');
    const file = path.join(where.dir, readdirSync(where.dir)[0] as string);
    const lines: string[] = [];
    await syncWritten(
      { files: [file], dirs: new Set([where.dir, where.folder]), devices: new Map([[0, root]]) },
      (m) => lines.push(m),
      null,
    );
    await expect(
      syncWritten(
        { files: [`${file}.missing`], dirs: new Set(), devices: new Map() },
        () => {},
        null,
      ),
    ).rejects.toThrow(NotFound);
    // A sync program that cannot run: the fallback, not a failure. (A batch of fewer than
    // SYNCFS_MIN_FILES files fsyncs its own without trying `sync -f`.)
    await syncWritten(
      {
        files: Array<string>(SYNCFS_MIN_FILES).fill(file),
        dirs: new Set([where.dir]),
        devices: new Map([[0, root]]),
      },
      (m) => lines.push(m),
      path.join(work, 'no-such-sync'),
    );
    expect(lines.some((l) => l.includes('fsyncing each file'))).toBe(true);
    expect(info.size).toBe(1);
    await store.close();
  });
});
