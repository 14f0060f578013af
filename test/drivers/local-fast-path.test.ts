/**
 * The local store at disk speed, and what crashed writers leave behind:
 * - a put from a large file is a kernel copy (its ETag the version ID, not an MD5), a fetch a
 *   kernel copy of the version file into the cache: byte-identical, files of their own, nothing
 *   stored from a source that changed meanwhile, nothing left by an abort;
 * - a writer killed mid-put leaves no version and no partial file, and its temp goes with the
 *   next write of the key; a stopped writer keeps its temp;
 * - `provcat mb local://…` says the bucket keeps versions.
 *
 * The child processes import the compiled driver from dist/ (`npm run build` first; a dist older
 * than the sources fails the test).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  appendFileSync,
  closeSync,
  mkdtempSync,
  openSync,
  rmSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KERNEL_COPY_BYTES } from '../../drivers/local/file-copy.js';
import { LocalStore } from '../../drivers/local/index.js';
import { isAbort, NotFound, StoreError } from '../../src/core/errors.js';
import { hostTag } from '../../src/core/fs-atomic.js';
import { rejection } from '../../src/testing/rejection.js';
import { randomPrefix } from '../../src/testing/target.js';
import { requireFreshBuild } from '../support/fresh-build.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const work = mkdtempSync(path.join(tmpdir(), 'provcat-local-fast-'));
const root = path.join(work, 'root');
const cache = path.join(work, 'cache');
const BUCKET = 'fast';
const store = new LocalStore({ root, cache, offline: false });

afterAll(() => rmSync(work, { recursive: true, force: true }));

async function bytes(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** A local file of `size` random bytes; returns its path and bytes. */
async function sourceFile(size: number): Promise<{ file: string; data: Buffer }> {
  const data = randomBytes(size);
  const file = path.join(work, `src-${randomBytes(4).toString('hex')}.bin`);
  await fs.writeFile(file, data);
  return { file, data };
}

/** The on-disk directory of a key `<prefix>name` (prefix one folder deep; see layout.ts). */
function keyDir(key: string): string {
  const [folder, name] = key.split('/') as [string, string];
  return path.join(root, BUCKET, `d.${folder}`, `o.${name}`);
}

async function entriesOf(dir: string): Promise<string[]> {
  return (await fs.readdir(dir).catch(() => [])).sort();
}

const md5Etag = (data: Buffer) => `"${createHash('md5').update(data).digest('hex')}"`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('the local store at disk speed', () => {
  it('a put from a large file and its fetch are byte-identical files of their own', async () => {
    const key = `${randomPrefix()}big.bin`;
    const uri = `local://${BUCKET}/${key}`;
    const { file, data } = await sourceFile(KERNEL_COPY_BYTES + 3 * 65_536 + 7);
    const entry = await store.put(uri, file);
    expect(entry.size).toBe(data.length);
    const info = await store._head(BUCKET, key);
    // No MD5 was computed: the ETag is the version ID, which nothing takes for an MD5.
    expect(info.etag).toBe(`"${info.versionId}"`);
    expect(info.etag).not.toBe(md5Etag(data));
    expect((await bytes((await store._get(BUCKET, key)).body)).equals(data)).toBe(true);

    const [name] = (await entriesOf(keyDir(key))).filter((n) => !n.startsWith('.'));
    const version = path.join(keyDir(key), name as string);
    expect(name).toBe(`${info.versionId}.${data.length}`);
    const stored = await fs.stat(version);
    expect(stored.ino).not.toBe((await fs.stat(file)).ino);

    const fetched = await store.fetch(uri);
    expect(fetched).toMatchObject({ files: 1, downloaded: 1, bytes: data.length });
    expect((await fs.readFile(fetched.path)).equals(data)).toBe(true);
    const copy = await fs.stat(fetched.path);
    // The cache's own read-only copy: no link to the store's immutable version.
    expect(copy.ino).not.toBe(stored.ino);
    // The version's links are its own and its listing index entry's (drivers/local/entry-link.ts).
    expect((await fs.stat(version)).nlink).toBe(stored.nlink);
    expect(stored.nlink).toBeLessThanOrEqual(2);
    expect(copy.mode & 0o777).toBe(0o444);

    // Changing the source afterwards changes nothing stored or cached.
    await fs.writeFile(file, 'changed');
    expect((await fs.readFile(version)).equals(data)).toBe(true);
    expect((await fs.readFile(fetched.path)).equals(data)).toBe(true);
  });

  it('smaller and empty files stream as before, with the MD5 as the ETag; fetches copy them', async () => {
    const p = randomPrefix();
    for (const size of [0, 1, 100 * 1024, KERNEL_COPY_BYTES - 1]) {
      const key = `${p}f${size}.bin`;
      const { file, data } = await sourceFile(size);
      await store.put(`local://${BUCKET}/${key}`, file);
      expect((await store._head(BUCKET, key)).etag).toBe(md5Etag(data));
      const fetched = await store.fetch(`local://${BUCKET}/${key}`);
      expect(fetched).toMatchObject({ downloaded: 1, bytes: size });
      expect((await fs.readFile(fetched.path)).equals(data)).toBe(true);
    }
  });

  it('a named pipe still streams: it is opened once, by the stream', async () => {
    const fifo = path.join(work, `fifo-${randomBytes(4).toString('hex')}`);
    execFileSync('mkfifo', [fifo]);
    const writer = spawn('sh', ['-c', 'printf "through a pipe" > "$1"', 'sh', fifo]);
    const written = new Promise((resolve) => writer.on('close', resolve));
    const key = `${randomPrefix()}piped.txt`;
    // The driver's own put (`ObjectStore.put` announces the size `stat` gives, 0 for a pipe).
    await store._put(BUCKET, key, fifo);
    expect(await bytes((await store._get(BUCKET, key)).body)).toEqual(
      Buffer.from('through a pipe'),
    );
    expect(await written).toBe(0);
  });

  it('a whole read offers the version file and still streams it; a ranged read only streams', async () => {
    const key = `${randomPrefix()}read.bin`;
    const first = await store._put(BUCKET, key, Buffer.from('first version'));
    const data = randomBytes(200_000);
    await store._put(BUCKET, key, data);
    const whole = await store._get(BUCKET, key);
    expect(whole.file?.size).toBe(data.length);
    expect((await fs.readFile(whole.file?.path as string)).equals(data)).toBe(true);
    expect((await bytes(whole.body)).equals(data)).toBe(true);
    const old = await store._getVersion(BUCKET, key, first.versionId as string);
    expect(await fs.readFile(old.file?.path as string, 'utf8')).toBe('first version');
    const ranged = await store._get(BUCKET, key, { range: { start: 10, end: 20 } });
    expect(ranged.file).toBeUndefined();
    expect((await bytes(ranged.body)).equals(data.subarray(10, 20))).toBe(true);
    // A pinned fetch of the old version copies that file.
    const pinned = await store.fetch(`local://${BUCKET}/${key}?at=version:${first.versionId}`);
    expect(await fs.readFile(pinned.path, 'utf8')).toBe('first version');
  });

  it('refuses a source that shrinks, grows or is rewritten during the put, storing nothing', async () => {
    // Each change is made synchronously in the first progress report, so always before the put
    // has checked its copy (`cp` may or may not be done).
    const changes: [string, (file: string) => void][] = [
      ['truncated', (file) => truncateSync(file, 1024 * 1024)],
      ['appended to', (file) => appendFileSync(file, 'x')],
      [
        'rewritten in place',
        (file) => {
          const fd = openSync(file, 'r+');
          writeSync(fd, Buffer.from('rewritten'), 0, 9, 3 * KERNEL_COPY_BYTES);
          closeSync(fd);
        },
      ],
    ];
    for (const [what, change] of changes) {
      const key = `${randomPrefix()}moving.bin`;
      const { file } = await sourceFile(4 * KERNEL_COPY_BYTES);
      await sleep(20); // so that the change gets a later timestamp even with coarse clocks
      let changed = false;
      const error = await rejection(
        store.put(`local://${BUCKET}/${key}`, file, {
          onProgress: () => {
            if (!changed) change(file);
            changed = true;
          },
        }),
      );
      expect(error, what).toBeInstanceOf(StoreError);
      expect((error as Error).message, what).toMatch(/changed while it was copied/);
      expect(await rejection(store._head(BUCKET, key))).toBeInstanceOf(NotFound);
      expect(await entriesOf(keyDir(key)), what).toEqual([]);
    }
  }, 60_000);

  it('a source truncated while cp copies it: a StoreError or the whole file, never a hang', async () => {
    const key = `${randomPrefix()}shrinking.bin`;
    const { file, data } = await sourceFile(16 * KERNEL_COPY_BYTES);
    await sleep(20);
    const dir = keyDir(key);
    let truncated = false;
    // As soon as the copy has written something, cut the source short (fs.copyFile would spin
    // for ever on this).
    const watcher = (async () => {
      while (!truncated) {
        for (const name of await entriesOf(dir)) {
          if (!name.startsWith('.tmp-')) continue;
          const size = (await fs.stat(path.join(dir, name)).catch(() => undefined))?.size ?? 0;
          if (size > 0 && !truncated) {
            truncateSync(file, 4096);
            truncated = true;
          }
        }
        await new Promise((r) => setImmediate(r));
      }
    })();
    const outcome = await store.put(`local://${BUCKET}/${key}`, file).then(
      () => undefined,
      (error: unknown) => error,
    );
    truncated = true;
    await watcher;
    if (outcome === undefined) {
      // The put was done checking before the cut: it stored the file as it was.
      expect((await bytes((await store._get(BUCKET, key)).body)).equals(data)).toBe(true);
    } else {
      expect(outcome).toBeInstanceOf(StoreError);
      expect(await rejection(store._head(BUCKET, key))).toBeInstanceOf(NotFound);
      expect(await entriesOf(dir)).toEqual([]);
    }
  }, 60_000);

  it('an abort during a kernel copy stores nothing and leaves no temp file', async () => {
    const key = `${randomPrefix()}aborted.bin`;
    const { file } = await sourceFile(4 * KERNEL_COPY_BYTES);
    const controller = new AbortController();
    const error = await rejection(
      store.put(`local://${BUCKET}/${key}`, file, {
        signal: controller.signal,
        onProgress: () => controller.abort(),
      }),
    );
    expect(isAbort(error)).toBe(true);
    expect(await rejection(store._head(BUCKET, key))).toBeInstanceOf(NotFound);
    expect(await entriesOf(keyDir(key))).toEqual([]);
  });
});

describe('what crashed and stopped writers leave', () => {
  beforeAll(() => {
    // The children import dist/: refuse to test a build older than the source.
    requireFreshBuild(repo, 'drivers/local', 'local-store.js');
  });

  /** Start the put child; resolves once its temp file holds bytes. */
  async function startPut(uri: string, mode: 'stream' | 'file', file?: string) {
    const args = [path.join(here, '../fixtures/local-put-child.mjs'), root, cache, uri, mode];
    const child = spawn(process.execPath, file === undefined ? args : [...args, file], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => {
      err += d;
    });
    const exit = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
      child.on('close', (code, signal) => resolve({ code, signal })),
    );
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d) => {
        out += d;
        if (out.includes('started')) resolve();
      });
      exit.then(({ code }) =>
        reject(new Error(`the child ended (${code}) before it started: ${err}`)),
      );
    });
    return { child, exit, output: () => out, errors: () => err };
  }

  const tempsOf = async (key: string) =>
    (await entriesOf(keyDir(key))).filter((n) => n.startsWith('.tmp-'));
  const versionsOf = async (key: string) =>
    (await entriesOf(keyDir(key))).filter((n) => /^\d{17}-/.test(n));

  for (const mode of ['stream', 'file'] as const) {
    it(`a ${mode} put killed by SIGKILL leaves no version; the next put of the key removes its temp`, async () => {
      const key = `${randomPrefix()}killed.bin`;
      const uri = `local://${BUCKET}/${key}`;
      const source = mode === 'file' ? (await sourceFile(4 * KERNEL_COPY_BYTES)).file : undefined;
      const { child, exit } = await startPut(uri, mode, source);
      const temps = await tempsOf(key);
      expect(temps).toEqual([expect.stringMatching(new RegExp(`^\\.tmp-${child.pid}-`))]);
      child.kill('SIGKILL');
      expect((await exit).signal).toBe('SIGKILL');
      // Nothing visible: no version, no listing entry, no history.
      expect(await rejection(store._head(BUCKET, key))).toBeInstanceOf(NotFound);
      expect(await versionsOf(key)).toEqual([]);
      expect(await tempsOf(key)).toEqual(temps);

      await store.put(uri, Buffer.from('after the crash'));
      expect(await tempsOf(key)).toEqual([]);
      expect(await versionsOf(key)).toHaveLength(1);
      expect(await bytes((await store._get(BUCKET, key)).body)).toEqual(
        Buffer.from('after the crash'),
      );
    }, 60_000);
  }

  it('a stopped writer keeps its temp through another put, and completes when continued', async () => {
    const key = `${randomPrefix()}stopped.bin`;
    const uri = `local://${BUCKET}/${key}`;
    const writer = await startPut(uri, 'stream');
    const child = writer.child as ChildProcess;
    try {
      child.kill('SIGSTOP');
      const temps = await tempsOf(key);
      expect(temps).toHaveLength(1);
      await store.put(uri, Buffer.from('meanwhile'));
      expect(await tempsOf(key)).toEqual(temps);
    } finally {
      child.kill('SIGCONT');
    }
    expect(await writer.exit, writer.errors()).toEqual({ code: 0, signal: null });
    const written = JSON.parse(writer.output().trim().split('\n').pop() as string);
    expect(written.size).toBe(40 * 64 * 1024);
    expect(await tempsOf(key)).toEqual([]);
    expect(await versionsOf(key)).toHaveLength(2);
    expect((await store._head(BUCKET, key)).version).toBe(written.version);
  }, 60_000);

  it('removes the temps of dead PIDs of this machine now, and any other temp after an hour', async () => {
    const key = `${randomPrefix()}leftovers.bin`;
    await store._put(BUCKET, key, Buffer.from('first'));
    const dir = keyDir(key);
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
      encoding: 'utf8',
    });
    const deadPid = Number(dead.stdout);
    // A PID of a process that runs: this test's parent (the vitest runner's own parent).
    const livePid = process.ppid;
    const names = {
      dead: `.tmp-${deadPid}-${hostTag()}-0123456789ab`,
      live: `.tmp-${livePid}-${hostTag()}-0123456789ab`,
      mine: `.tmp-${process.pid}-${hostTag()}-0123456789ab`,
      otherHost: `.tmp-${deadPid}-00000000-0123456789ab`,
      otherHostOld: `.tmp-${deadPid}-ffffffff-0123456789ab`,
      oldFormat: '.tmp-99999-0123456789ab',
      oldFormatOld: '.tmp-99998-0123456789ab',
    };
    const old = new Date(Date.now() - 2 * 3600_000);
    for (const name of Object.values(names)) await fs.writeFile(path.join(dir, name), 'partial');
    for (const name of [names.otherHostOld, names.oldFormatOld]) {
      await fs.utimes(path.join(dir, name), old, old);
    }
    await store._put(BUCKET, key, Buffer.from('second'));
    expect(await tempsOf(key)).toEqual(
      [names.live, names.mine, names.otherHost, names.oldFormat].sort(),
    );
    // Any write of the key sweeps: a delete too.
    await fs.writeFile(path.join(dir, names.dead), 'partial');
    await store._delete(BUCKET, key);
    expect(await tempsOf(key)).not.toContain(names.dead);
  });
});

describe('provcat CLI on the local store', () => {
  const BIN = path.join(repo, 'dist', 'cli', 'provcat.cjs');
  const env = {
    ...process.env,
    PROVCAT_LOCAL_ROOT: path.join(work, 'cli-root'),
    PROVCAT_CACHE_DIR: path.join(work, 'cli-cache'),
    PROVCAT_OFFLINE: '',
  };
  const cli = (...args: string[]) =>
    JSON.parse(execFileSync(process.execPath, [BIN, ...args, '--json'], { env, encoding: 'utf8' }));

  it('mb reports that a local bucket keeps versions, asked or not', () => {
    expect(cli('mb', 'local://made')).toEqual({ uri: 'local://made/', versioning: true });
    expect(cli('mb', 'local://made2', '--versioning')).toEqual({
      uri: 'local://made2/',
      versioning: true,
    });
  });

  it('put and fetch of a large file through the CLI give back the same bytes', async () => {
    const { file, data } = await sourceFile(KERNEL_COPY_BYTES + 12_345);
    const put = cli('put', file, 'local://made/big.bin');
    expect(put).toMatchObject({ uri: 'local://made/big.bin', size: data.length });
    const fetched = cli('fetch', 'local://made/big.bin');
    expect(fetched).toMatchObject({ files: 1, downloaded: 1, bytes: data.length });
    expect((await fs.readFile(fetched.path)).equals(data)).toBe(true);
  });
});
