/**
 * SIGKILL during a push and during a fetch of 1,000 files, on the embedded local store, through
 * the bundled CLI users run (so `npm run build` must have run): after the kill every object (and
 * every file the cache shows) is whole — byte for byte one of the local files — or absent, and
 * the next run completes the folder. The kill lands once about a tenth of the files are through,
 * watched from this process.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { TEMP_PREFIX } from '../../src/core/fs-atomic.js';
import { requireFreshBuild } from '../support/fresh-build.js';

const repo = path.join(import.meta.dirname, '..', '..');
const BIN = path.join(repo, 'dist', 'cli', 'provcat.cjs');
const FILES = 1000;

function tmp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-${label}-`));
}

/** 1,000 files of 4 KiB of distinct random bytes in 10 folders: rel → bytes. */
function seed(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (let i = 0; i < FILES; i++) {
    const rel = `d${i % 10}/f${String(i).padStart(4, '0')}.bin`;
    const bytes = randomBytes(4096);
    mkdirSync(path.join(dir, `d${i % 10}`), { recursive: true });
    writeFileSync(path.join(dir, rel), bytes);
    out.set(rel, bytes);
  }
  return out;
}

/** Every file below `dir` (relative, `/`-separated), temps included. */
function filesBelow(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return (readdirSync(dir, { recursive: true, withFileTypes: true }) as import('node:fs').Dirent[])
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)).split(path.sep).join('/'));
}

/** `count()`, or -1 when a directory vanished under it (the child removes locks and temps). */
function racing(count: () => number): number {
  try {
    return count();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return -1;
    throw error;
  }
}

/**
 * Run the CLI and SIGKILL it once `progress()` reaches `at` (polled every few ms); resolves
 * with how it ended.
 */
async function killWhen(
  args: string[],
  env: NodeJS.ProcessEnv,
  progress: () => number,
  at: number,
): Promise<{ killed: boolean; code: number | null }> {
  const child: ChildProcess = spawn(process.execPath, [BIN, ...args], { env, stdio: 'ignore' });
  const ended = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  let done = false;
  void ended.then(() => {
    done = true;
  });
  while (!done) {
    if (racing(progress) >= at) {
      child.kill('SIGKILL');
      break;
    }
    await sleep(5);
  }
  const end = await ended;
  return { killed: end.signal === 'SIGKILL', code: end.code };
}

function sandbox(label: string) {
  const dir = tmp(label);
  const root = path.join(dir, 'root');
  const cache = path.join(dir, 'cache');
  const env = {
    ...process.env,
    PROVCAT_LOCAL_ROOT: root,
    PROVCAT_CACHE_DIR: cache,
    PROVCAT_OFFLINE: '',
  };
  return { dir, root, cache, env };
}

describe('SIGKILL during a folder push or fetch of 1,000 files', () => {
  it('a killed push leaves every object whole or absent, and the rerun completes it', async () => {
    requireFreshBuild(repo, 'drivers/local', 'index.js');
    const box = sandbox('kill-push');
    const src = path.join(box.dir, 'src');
    const files = seed(src);
    const uri = 'local://kill/pushed/';
    // Objects published so far: one listing-index entry (`v.`) per version in the store.
    const bucketDir = path.join(box.root, 'kill');
    const published = () => filesBelow(bucketDir).filter((f) => /(^|\/)v\.[^/]*$/.test(f)).length;
    const run = await killWhen(['push', src, uri, '--json'], box.env, published, FILES / 10);
    expect(run.killed, 'the push ended before the kill; the test proves nothing').toBe(true);

    const store = new LocalStore({ root: box.root, cache: box.cache });
    const listed = await store.walk(uri);
    expect(listed.length).toBeGreaterThan(0);
    expect(listed.length).toBeLessThan(FILES);
    for (const entry of listed) {
      const rel = entry.uri.key.slice('pushed/'.length);
      const got = await store._get('kill', entry.uri.key);
      const chunks: Buffer[] = [];
      for await (const c of got.body) chunks.push(Buffer.from(c));
      expect(Buffer.concat(chunks).equals(files.get(rel) as Buffer), rel).toBe(true);
    }
    const rerun = await store.push(src, uri);
    expect(rerun.uploaded + rerun.skipped).toBe(FILES);
    expect(rerun.skipped).toBe(listed.length);
    const fetched = await store.fetch(uri);
    expect(fetched.files).toBe(FILES);
    for (const [rel, bytes] of files) {
      expect((await readFile(path.join(fetched.path, rel))).equals(bytes), rel).toBe(true);
    }
    await store.close();
  }, 240_000);

  it('a killed fetch leaves every file the cache shows whole, and the rerun completes it', async () => {
    requireFreshBuild(repo, 'drivers/local', 'index.js');
    const box = sandbox('kill-fetch');
    const src = path.join(box.dir, 'src');
    const files = seed(src);
    const uri = 'local://kill/fetched/';
    const seeder = new LocalStore({ root: box.root, cache: path.join(box.dir, 'seed-cache') });
    expect(await seeder.push(src, uri)).toMatchObject({ uploaded: FILES });
    await seeder.close();

    const tree = path.join(box.cache, 'v1', 'tree', 'local', 'kill', 'fetched');
    const shown = () => filesBelow(tree).length;
    const run = await killWhen(['fetch', uri, '--json'], box.env, shown, FILES / 10);
    expect(run.killed, 'the fetch ended before the kill; the test proves nothing').toBe(true);

    const visible = filesBelow(tree).filter((f) => !path.basename(f).startsWith(TEMP_PREFIX));
    expect(visible.length).toBeGreaterThan(0);
    for (const rel of visible) {
      const want = files.get(rel);
      expect(want, `an unexpected file in the cache: ${rel}`).toBeDefined();
      expect((await readFile(path.join(tree, rel))).equals(want as Buffer), rel).toBe(true);
    }
    const store = new LocalStore({ root: box.root, cache: box.cache });
    const again = await store.fetch(uri);
    expect(again.files).toBe(FILES);
    expect(filesBelow(again.path).filter((f) => path.basename(f).startsWith(TEMP_PREFIX))).toEqual(
      [],
    );
    for (const [rel, bytes] of files) {
      expect((await readFile(path.join(again.path, rel))).equals(bytes), rel).toBe(true);
    }
    await store.close();
  }, 240_000);
});
