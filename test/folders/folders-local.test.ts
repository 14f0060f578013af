/**
 * The folder flows (push, commit --from, diff, rm -r) on the embedded local store: the shared
 * suite, what only needs a local disk (files that change while they are pushed), and the CLI's
 * `--json` contracts and exit statuses, through the bundled executable users run (so
 * `npm run build` must have run; the `test` script does it).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import {
  exitCodeOf,
  NotCommitted,
  SourceChanged,
  SourceError,
  StoreError,
} from '../../src/core/errors.js';
import {
  readWhole,
  readWholeSync,
  STABLE_ATTEMPTS,
  stableRead,
  walkLocalTree,
} from '../../src/folders/local-tree.js';
import { rejection } from '../../src/testing/rejection.js';
import { folderFlows, readTree, sampleTree, writeTree } from '../support/folder-flows.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-folders-'));
const root = path.join(work, 'root');
mkdirSync(root);

folderFlows({
  name: 'local',
  store: (o) => new LocalStore({ root, ...o }),
  bucket: 'flows',
  scheme: 'local',
});

function tmp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-${label}-`));
}

describe('push of files that change while they are read', () => {
  it('a read that sees the file change is read again; one that always does is SourceChanged', async () => {
    const file = path.join(tmp('stable'), 'f.txt');
    writeFileSync(file, 'one');
    let reads = 0;
    const once = await stableRead(file, async () => {
      reads++;
      if (reads === 1) await appendFile(file, ' two');
      return readFile(file, 'utf8');
    });
    expect(reads).toBe(2);
    expect(once.value).toBe('one two');
    let n = 0;
    const never = await rejection(
      stableRead(file, async () => {
        await appendFile(file, String(n++));
      }),
    );
    expect(never).toBeInstanceOf(SourceChanged);
    expect(n).toBe(STABLE_ATTEMPTS);
    expect((await readWhole(file)).value.toString()).toMatch(/^one two012$/);
    // The synchronous read of small files (push's) gives the same bytes and the same stamp.
    const sync = readWholeSync(file);
    const promised = await readWhole(file);
    expect(sync.value.equals(promised.value)).toBe(true);
    expect(sync.stamp).toEqual(promised.stamp);
    expect(() => readWholeSync(`${file}.missing`)).toThrow(SourceError);
  });

  it('a large file rewritten during its upload is sent again, and the object holds its final bytes', async () => {
    const dir = tmp('big');
    const big = path.join(dir, 'big.bin');
    writeFileSync(big, Buffer.alloc(3 * 1024 * 1024, 1));
    // Files above 1 MiB go from disk, through the engine.
    const store = new LocalStore({ root, cache: tmp('cache'), multipartThreshold: 1024 * 1024 });
    const put = store._put.bind(store);
    let calls = 0;
    vi.spyOn(store, '_put').mockImplementation(async (bucket, key, source, options) => {
      calls++;
      const info = await put(bucket, key, source, options);
      if (calls === 1) await writeFile(big, Buffer.alloc(3 * 1024 * 1024, 2));
      return info;
    });
    const uri = 'local://flows/changing/';
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 1, bytes: 3 * 1024 * 1024 });
    expect(calls).toBe(2);
    vi.restoreAllMocks();
    const fetched = await store.fetch(`${uri}big.bin`);
    expect((await readFile(fetched.path)).equals(Buffer.alloc(3 * 1024 * 1024, 2))).toBe(true);
    // Unchanged now: the plain MD5 ETag of the local store proves it.
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 1 });

    // A file that never stops changing fails the push.
    await writeFile(big, Buffer.alloc(3 * 1024 * 1024, 3));
    let n = 0;
    vi.spyOn(store, '_put').mockImplementation(async (bucket, key, source, options) => {
      const info = await put(bucket, key, source, options);
      await appendFile(big, String(n++));
      return info;
    });
    const failed = await rejection(store.push(dir, uri));
    expect(failed).toBeInstanceOf(SourceChanged);
    expect((failed as Error).message).toMatch(/kept changing while it was pushed/);
    expect(n).toBe(STABLE_ATTEMPTS);
    vi.restoreAllMocks();
    await store.close();
  });

  it('the local tree lists regular files in key order, with their sizes', async () => {
    const dir = tmp('tree');
    writeTree(dir, { 'b/z.txt': 'zz', 'a.txt': 'a', 'b/a.txt': 'aaa', 'é.txt': 'e' });
    mkdirSync(path.join(dir, 'empty'));
    const files: [string, number][] = [];
    await walkLocalTree(dir, (f) => void files.push([f.rel, f.stamp.size]));
    expect(files).toEqual([
      ['a.txt', 1],
      ['b/a.txt', 3],
      ['b/z.txt', 2],
      ['é.txt', 1],
    ]);
  });
});

/** The command users run: the bundled executable (scripts/bundle-cli.mjs). */
const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

function sandbox() {
  const dir = tmp('fcli');
  const env = {
    ...process.env,
    PROVCAT_LOCAL_ROOT: path.join(dir, 'root'),
    PROVCAT_CACHE_DIR: path.join(dir, 'cache'),
    PROVCAT_OFFLINE: '',
  };
  const run = (...args: string[]) => {
    const r = spawnSync(process.execPath, [BIN, ...args], { env, encoding: 'utf8' });
    return { code: r.status, out: r.stdout, err: r.stderr };
  };
  const offline = (...args: string[]) => {
    const r = spawnSync(process.execPath, [BIN, ...args], {
      env: { ...env, PROVCAT_OFFLINE: '1' },
      encoding: 'utf8',
    });
    return { code: r.status, out: r.stdout, err: r.stderr };
  };
  return { dir, run, offline };
}

describe('the folder verbs of the CLI', () => {
  it('push, commit --from, diff and rm -r keep their --json contracts', async () => {
    const { dir, run, offline } = sandbox();
    const out = path.join(dir, 'out');
    writeTree(out, sampleTree(12));
    const uri = 'local://lab/runs/42/';

    const plan = run('push', out, uri, '--dry-run', '--json');
    expect(plan.code, plan.err).toBe(0);
    const planned = JSON.parse(plan.out);
    expect(Object.keys(planned).sort()).toEqual([
      'bytes',
      'deleted',
      'dryRun',
      'plan',
      'skipped',
      'uploaded',
    ]);
    expect(planned).toMatchObject({ uploaded: 20, skipped: 0, deleted: 0, dryRun: true });
    expect(planned.plan[0]).toEqual({ action: 'upload', path: 'd0/e0/f0.txt', size: 7 });
    // A dry run writes nothing: the folder is still not there (walk agrees with ls: exit 3).
    expect(run('walk', uri, '--json').code).toBe(3);

    const pushed = run('push', out, uri, '--json', '--concurrency', '4');
    expect(pushed.code, pushed.err).toBe(0);
    const counts = JSON.parse(pushed.out);
    expect(counts).toEqual({ uploaded: 20, skipped: 0, deleted: 0, bytes: planned.bytes });
    expect(JSON.parse(run('push', out, uri, '--json').out)).toEqual({
      uploaded: 0,
      skipped: 20,
      deleted: 0,
      bytes: 0,
    });
    const human = run('push', out, uri);
    expect(human.out).toMatch(
      /^uploaded 0 file\(s\) \(0 B\), 20 unchanged, deleted 0: local:\/\/lab\/runs\/42\/\n$/,
    );

    const c1 = run('commit', uri, '-m', 'run 42', '--from', out, '--meta', 'seed=7', '--json');
    expect(c1.code, c1.err).toBe(0);
    const first = JSON.parse(c1.out);
    expect(first).toEqual({
      uri: expect.stringMatching(/^local:\/\/lab\/runs\/42\/\?at=commit:[0-9a-f]{64}$/),
      push: { uploaded: 0, skipped: 20, deleted: 0, bytes: 0 },
    });
    const fetched = JSON.parse(run('fetch', first.uri, '--json').out);
    expect(await readTree(fetched.path)).toEqual(await readTree(out));

    // Nothing changed: pushed, but no commit; the exit status is the commit's (StoreError, 7).
    const none = run('commit', uri, '-m', 'again', '--from', out);
    expect(none.code).toBe(7);
    expect(none.err).toMatch(
      /^provcat: NotCommitted: pushed .* but no commit was made: StoreError: /,
    );

    writeTree(out, { 'd0/e0/f0.txt': 'changed\n', 'extra.txt': 'extra\n' });
    const c2 = run('commit', uri, '-m', 'two', '--from', out);
    expect(c2.code, c2.err).toBe(0);
    const second = c2.out.trim();
    expect(c2.err).toMatch(/uploaded 2 file\(s\)/);

    const diff = run('diff', first.uri, second, '--json');
    expect(diff.code, diff.err).toBe(0);
    const d = JSON.parse(diff.out);
    expect(Object.keys(d)).toEqual(['added', 'removed', 'changed']);
    expect(d.added).toEqual([{ path: 'extra.txt', size: 6, version: expect.any(String) }]);
    expect(d.removed).toEqual([]);
    expect(d.changed).toEqual([
      {
        path: 'd0/e0/f0.txt',
        from: { size: 7, version: expect.any(String) },
        to: { size: 8, version: expect.any(String) },
      },
    ]);
    const id = second.split('?at=commit:')[1] as string;
    expect(JSON.parse(run('diff', first.uri, id, '--json').out)).toEqual(d);
    // Offline from the commits the cache holds.
    expect(JSON.parse(offline('diff', first.uri, second, '--json').out)).toEqual(d);
    const humanDiff = offline('diff', first.uri, second);
    expect(humanDiff.out).toMatch(/^\+ extra\.txt {2}\(6 B, .*\)$/m);
    expect(humanDiff.out).toMatch(/^~ d0\/e0\/f0\.txt {2}\(7 B, .* -> 8 B, .*\)$/m);
    expect(offline('diff', first.uri).code).toBe(5);
    expect(JSON.parse(run('diff', second, '--json').out)).toEqual({
      added: [],
      removed: [],
      changed: [],
    });

    const bucketRoot = run('rm', '-r', 'local://lab/');
    expect(bucketRoot.code).toBe(2);
    expect(bucketRoot.err).toMatch(/--force/);
    const rm = run('rm', '-r', uri, '--json');
    expect(rm.code, rm.err).toBe(0);
    expect(JSON.parse(rm.out)).toEqual({ uri, deleted: 21 });
    expect(run('rm', '-r', uri).code).toBe(3);
    expect(run('rm', uri, '--force').code).toBe(2);
    // The commits survive the folder.
    expect(JSON.parse(run('log', uri, '--json').out)).toHaveLength(2);
  }, 120_000);

  it('a push refused for its names exits with the refusal and sends nothing', () => {
    const { dir, run } = sandbox();
    const out = path.join(dir, 'out');
    writeTree(out, { 'Model.bin': 'a', 'model.bin': 'b' });
    const r = run('push', out, 'local://lab/x/');
    expect(r.code).toBe(7);
    expect(r.err).toMatch(
      /^provcat: StoreError: push of .* refused: the folder would not fetch back/,
    );
    expect(run('walk', 'local://lab/x/', '--json').code).toBe(3); // nothing was sent
    writeTree(out, { 'ctl\u0007.txt': 'c' });
    expect(run('push', out, 'local://lab/x/').code).toBe(8);
  });

  it('NotCommitted exits with the status of the commit failure it carries', () => {
    const cause = new StoreError('x');
    const e = new NotCommitted('pushed; no commit', {
      cause,
      pushed: { uploaded: 1, skipped: 0, deleted: 0, bytes: 1 },
    });
    expect(exitCodeOf(e)).toBe(7);
  });
});
