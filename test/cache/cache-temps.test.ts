/**
 * Temp files of cache writers that are gone (a killed fetch: its pid is dead) are removed by the
 * next fetch that takes over the interrupted view (its blob temps, wherever the object's
 * versions went since, and its state temp) or writes where they lie, and by `provcat cache
 * prune`; a live writer's temp never
 * is, however old.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { TEMP_PREFIX, tempPathFor } from '../../src/core/fs-atomic.js';
import { deadWriterTemps, liveTempIn, tempsBelow } from '../support/temp-writers.js';

const FIXTURE = path.join(import.meta.dirname, '..', 'fixtures', 'cache-fetch.mjs');
const FS_ATOMIC = path.join(import.meta.dirname, '..', '..', 'dist', 'src', 'core', 'fs-atomic.js');
const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

function temp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-temps-${label}-`));
}

/** Temp files a process that then exits (a dead writer) leaves beside each of `targets`. */
function deadWritersTemps(targets: string[]): string[] {
  const script = `import { tempPathFor } from ${JSON.stringify(FS_ATOMIC)};
import { writeFileSync } from 'node:fs';
const out = [];
for (const t of JSON.parse(process.argv[1])) { const p = tempPathFor(t); writeFileSync(p, 'partial'); out.push(p); }
process.stdout.write(JSON.stringify(out));`;
  const r = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', script, JSON.stringify(targets)],
    {
      encoding: 'utf8',
    },
  );
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as string[];
}

/** A temp file of this (live) process beside `target`, made to look two hours old. */
function liveTemp(target: string): string {
  const p = tempPathFor(target);
  writeFileSync(p, 'in progress');
  const old = new Date(Date.now() - 2 * 3600_000);
  utimesSync(p, old, old);
  return p;
}

function temps(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.name.startsWith(TEMP_PREFIX))
    .map((e) => path.join(e.parentPath, e.name));
}

function started(p: ChildProcess): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    p.stdout?.on('data', (d) => {
      if (String(d).includes('started')) resolve();
    });
    p.on('close', () => reject(new Error('the child ended before it was killed')));
  });
}

describe('garbage of gone cache writers', () => {
  it('a killed fetch’s temp is removed by the next fetch of the view; a live writer’s stays', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    await store.put('local://b/data/big.bin', Buffer.alloc(24 * 1024 * 1024, 7));
    await store.put('local://b/data/small.txt', Buffer.from('small'));
    const child = spawn(process.execPath, [FIXTURE, root, cache, 'local://b/data/'], {
      env: { ...process.env, THROTTLE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const closed = new Promise((r) => child.on('close', r));
    await started(child);
    await new Promise((r) => setTimeout(r, 100));
    child.kill('SIGKILL');
    await closed;
    const version = (await store.stat('local://b/data/big.bin')).versionId as string;
    const blob = store.cache.blobPath('local', 'b', 'data/big.bin', version);
    // Blob temps are written in the bucket's blob folder, whichever version they are of.
    const blobRoot = path.dirname(path.dirname(blob));
    const left = tempsBelow(blobRoot);
    expect(left.length).toBeGreaterThan(0);
    const live = liveTempIn(blobRoot);
    // The object changes before the rerun: its new version's blob goes to another shard.
    await store.put('local://b/data/big.bin', Buffer.alloc(1024 * 1024, 8));

    const r = await store.fetch('local://b/data/');
    expect(r.files).toBe(2);
    expect(readFileSync(path.join(r.path, 'big.bin'))).toEqual(Buffer.alloc(1024 * 1024, 8));
    expect(tempsBelow(cache)).toEqual([live]);
  }, 60_000);

  it('a rerun removes the blob and state temps a killed fetch left, whatever changed since; live ones stay', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    await store.put('local://b/data/a.txt', Buffer.from('one'));
    await store.put('local://b/data/b.txt', Buffer.from('b'));
    await store.fetch('local://b/data/');
    // As a killed refetch leaves the cache: the done mark removed (before its first change),
    // a blob temp of the version it was downloading, a temp of the state it was writing.
    await store.put('local://b/data/a.txt', Buffer.from('two'));
    const viewId = 'tree:local://b/data/';
    await store.cache.clearState(viewId);
    const two = (await store.stat('local://b/data/a.txt')).versionId as string;
    const blobRoot = path.dirname(
      path.dirname(store.cache.blobPath('local', 'b', 'data/a.txt', two)),
    );
    const stateDir = path.dirname(store.cache.statePath(viewId));
    const dead = deadWriterTemps([blobRoot, stateDir]);
    const live = [liveTempIn(blobRoot), liveTempIn(stateDir)];
    expect(tempsBelow(cache)).toEqual([...dead, ...live].sort());
    // The object changes again before the rerun, which downloads a third version.
    await store.put('local://b/data/a.txt', Buffer.from('three'));

    const r = await store.fetch('local://b/data/');
    expect(r).toMatchObject({ files: 2, downloaded: 1 });
    expect(readFileSync(path.join(r.path, 'a.txt'), 'utf8')).toBe('three');
    expect(tempsBelow(cache)).toEqual(live.sort());
  });

  it('a folder fetch and cache prune remove dead writers’ temps in views and blobs, never a live one', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    await store.put('local://b/data/a.txt', Buffer.from('a'));
    await store.put('local://b/data/sub/b.txt', Buffer.from('b'));
    const first = await store.fetch('local://b/data/');
    const version = (await store.stat('local://b/data/a.txt')).versionId as string;
    const blob = store.cache.blobPath('local', 'b', 'data/a.txt', version);
    const inView = [path.join(first.path, 'a.txt'), path.join(first.path, 'sub', 'b.txt')];
    const dead = deadWritersTemps([...inView, blob, store.cache.statePath('tree:local://b/x/')]);
    const live = [liveTemp(inView[0] as string), liveTemp(blob)];

    // The next fetch of the folder cleans its copy.
    await store.fetch('local://b/data/');
    expect(temps(first.path).sort()).toEqual([live[0]]);
    expect(existsSync(dead[2] as string)).toBe(true);

    // cache prune cleans everywhere (blobs, state), whatever the age; live writers' temps stay.
    const pruned = spawnSync(process.execPath, [BIN, 'cache', 'prune', '--json'], {
      env: { ...process.env, PROVCAT_CACHE_DIR: cache },
      encoding: 'utf8',
    });
    expect(pruned.status, pruned.stderr).toBe(0);
    expect(JSON.parse(pruned.stdout).files).toBeGreaterThanOrEqual(2);
    expect(temps(cache).sort()).toEqual([...live].sort());
    // What the views hold is untouched.
    expect(await store.fetch('local://b/data/')).toMatchObject({ files: 2, downloaded: 0 });
  });
});
