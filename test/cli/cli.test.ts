import assert from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { forEachLimit } from '../../src/core/concurrency.js';
import {
  Exists,
  exitCodeOf,
  InvalidArgument,
  NotFound,
  NotSupported,
  ObjectIntegrityError,
  OfflineMiss,
  StoreError,
  UriError,
} from '../../src/core/errors.js';

/** The command users run: the bundled executable (scripts/bundle-cli.mjs). */
const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

function cli(env: Record<string, string>) {
  return (...args: string[]) => {
    const r = spawnSync(process.execPath, [BIN, ...args], {
      env: { ...process.env, ...env, PROVCAT_OFFLINE: env.PROVCAT_OFFLINE ?? '' },
      encoding: 'utf8',
    });
    return { code: r.status, out: r.stdout, err: r.stderr };
  };
}

function sandbox() {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-cli-'));
  const env = {
    PROVCAT_LOCAL_ROOT: path.join(dir, 'root'),
    PROVCAT_CACHE_DIR: path.join(dir, 'cache'),
  };
  return { dir, env, run: cli(env) };
}

describe('provcat CLI', () => {
  it('keeps the --json contract of put, stat, ls, walk and fetch', () => {
    const { dir, run } = sandbox();
    const local = path.join(dir, 'a.csv');
    writeFileSync(local, 'id\n1\n');
    const put = run('put', local, 'local://b/data/a.csv', '--json');
    expect(put.code, put.err).toBe(0);
    const written = JSON.parse(put.out);
    expect(written).toMatchObject({ uri: 'local://b/data/a.csv', kind: 'file', size: 5 });
    expect(typeof written.version).toBe('string');
    run('put', local, 'local://b/data/sub/b.csv');

    const stat = JSON.parse(run('stat', 'local://b/data/a.csv', '--json').out);
    expect(Object.keys(stat).sort()).toEqual(['kind', 'size', 'uri', 'version']);
    expect(stat).toEqual(written);
    expect(JSON.parse(run('stat', 'local://b/data', '--json').out)).toEqual({
      uri: 'local://b/data/',
      kind: 'folder',
      size: null,
      version: null,
    });
    const ls = JSON.parse(run('ls', 'local://b/data/', '--json').out);
    expect(ls.map((e: { uri: string; kind: string }) => [e.uri, e.kind])).toEqual([
      ['local://b/data/a.csv', 'file'],
      ['local://b/data/sub/', 'folder'],
    ]);
    const walk = JSON.parse(run('walk', 'local://b/data/', '--json').out);
    expect(walk.map((e: { uri: string }) => e.uri)).toEqual([
      'local://b/data/a.csv',
      'local://b/data/sub/b.csv',
    ]);

    const f1 = run('fetch', 'local://b/data/', '--json');
    expect(f1.code, f1.err).toBe(0);
    expect(f1.err).toBe(''); // no progress bar when stderr is not a terminal
    const r1 = JSON.parse(f1.out);
    expect(Object.keys(r1).sort()).toEqual(['bytes', 'downloaded', 'files', 'path']);
    expect(r1).toMatchObject({ files: 2, downloaded: 2, bytes: 10 });
    expect(JSON.parse(run('fetch', 'local://b/data/', '--json').out)).toMatchObject({
      files: 2,
      downloaded: 0,
      bytes: 0,
    });
    const off = run('fetch', 'local://b/data/', '--json', '--offline');
    expect(JSON.parse(off.out).path).toBe(r1.path);
    const rm = run('rm', 'local://b/data/sub/b.csv', '--json');
    expect(rm.code).toBe(0);
    expect(run('stat', 'local://b/data/sub/b.csv').code).toBe(3);
  });

  it('cache info and cache prune: --json shapes, human lines and usage', () => {
    const { dir, env, run } = sandbox();
    const local = path.join(dir, 'a.csv');
    writeFileSync(local, 'id\n1\n');
    run('put', local, 'local://b/c/a.csv');
    expect(run('fetch', 'local://b/c/').code).toBe(0);
    const info = run('cache', 'info', '--json');
    expect(info.code, info.err).toBe(0);
    expect(JSON.parse(info.out)).toEqual({ root: env.PROVCAT_CACHE_DIR, blobs: 1, bytes: 5 });
    expect(run('cache', 'info').out).toBe(
      `root   ${env.PROVCAT_CACHE_DIR}\nblobs  1\nbytes  5 B\n`,
    );
    const prune = run('cache', 'prune', '--json');
    expect(prune.code, prune.err).toBe(0);
    expect(JSON.parse(prune.out)).toEqual({ files: 0, bytes: 0 });
    expect(run('cache', 'prune').out).toBe('removed 0 file(s), 0 B\n');
    expect(run('cache', 'info', '--help').out).toMatch(/^usage: provcat cache info \[--json\]\n/);
    expect(run('cache', 'prune', 'extra').code).toBe(2);
  });

  it('reports errors on stderr as "provcat: <ErrorClass>: <message>" with the fixed exit codes', () => {
    const { run } = sandbox();
    const missing = run('stat', 'local://b/nothing.txt');
    expect(missing.code).toBe(3);
    expect(missing.err).toMatch(/^provcat: NotFound: /);
    const bad = run('stat', 'local://b/a//b');
    expect(bad.code).toBe(8);
    expect(bad.err).toMatch(/^provcat: UriError: .*empty path segment/);
    const offline = run('stat', 'local://b/x', '--offline');
    expect(offline.code).toBe(5);
    expect(offline.err).toMatch(/^provcat: OfflineMiss: /);
    const envOffline = cli({ ...sandbox().env, PROVCAT_OFFLINE: '1' })('ls', 'local://b/');
    expect(envOffline.code).toBe(5);
    expect(run('frobnicate').code).toBe(2);
    expect(run('stat').code).toBe(2);
    expect(run('stat', 'local://b/x', '--no-such-flag').code).toBe(2);
    expect(run('fetch', 'local://b/x', '--concurrency', 'lots').code).toBe(2);
    expect(run().code).toBe(2);
    expect(run('--help').code).toBe(0);
    expect(run('put', '/nonexistent/file', 'local://b/x').code).toBe(1);
  });

  it('a reader of stdout that goes away (walk … --json | head -c 10) ends any command quietly, exit 1', async () => {
    const { dir, env } = sandbox();
    const store = new LocalStore({ root: env.PROVCAT_LOCAL_ROOT, cache: env.PROVCAT_CACHE_DIR });
    // Enough entries that the output is far bigger than a pipe's buffer.
    await forEachLimit(
      Array.from({ length: 600 }, (_, i) => i),
      32,
      async (i) => {
        await store.put(`local://b/many/f${i}-${'long-name-'.repeat(8)}.txt`, Buffer.from('x'));
      },
    );
    for (const args of [
      ['walk', 'local://b/many/', '--json'],
      ['ls', 'local://b/many/'],
      ['ls', 'local://b/many/', '--json'],
    ]) {
      const errFile = path.join(dir, 'stderr.txt');
      const quoted = [BIN, ...args].map((a) => `'${a}'`).join(' ');
      const r = spawnSync(
        'bash',
        [
          '-c',
          `"${process.execPath}" ${quoted} 2>"${errFile}" | head -c 10; echo " \${PIPESTATUS[0]}"`,
        ],
        { env: { ...process.env, ...env, PROVCAT_OFFLINE: '' }, encoding: 'utf8' },
      );
      expect(r.stdout, args.join(' ')).toMatch(/^.{10} 1\n$/s);
      expect(await readFile(errFile, 'utf8'), args.join(' ')).toBe('');
    }
  });

  it('maps every error class to its exit code', () => {
    expect(exitCodeOf(new NotFound('x'))).toBe(3);
    expect(exitCodeOf(new Exists('x'))).toBe(4);
    expect(exitCodeOf(new OfflineMiss('x'))).toBe(5);
    expect(exitCodeOf(new ObjectIntegrityError('PrematureEof', 'x'))).toBe(6);
    expect(exitCodeOf(new StoreError('x'))).toBe(7);
    expect(exitCodeOf(new UriError('x'))).toBe(8);
    expect(exitCodeOf(new InvalidArgument('x'))).toBe(2);
    expect(exitCodeOf(new NotSupported('x'))).toBe(11);
    expect(exitCodeOf(new Error('x'))).toBe(1);
  });

  it('a missing bucket exits 3 naming it for ls, walk, stat and fetch; a missing folder too', () => {
    const { dir, run } = sandbox();
    for (const verb of ['ls', 'walk', 'stat', 'fetch']) {
      const r = run(verb, 'local://nobucket/', '--json');
      expect([r.code, r.err], verb).toEqual([
        3,
        expect.stringMatching(/^provcat: NotFound: .*nobucket/),
      ]);
    }
    const local = path.join(dir, 'x');
    writeFileSync(local, 'x');
    run('put', local, 'local://b1/here.txt');
    // ls and walk of a folder with nothing in it agree.
    for (const verb of ['ls', 'walk']) expect(run(verb, 'local://b1/missing/').code, verb).toBe(3);
    expect(run('ls', 'local://b1/', '--json').code).toBe(0);
  });

  it('a refused fetch (names colliding on disk) exits 7 as a StoreError', async () => {
    const { dir, run } = sandbox();
    const local = path.join(dir, 'x');
    writeFileSync(local, 'x');
    run('put', local, 'local://b/c/Readme');
    run('put', local, 'local://b/c/README');
    const r = run('fetch', 'local://b/c/');
    expect(r.code).toBe(7);
    expect(r.err).toMatch(/^provcat: StoreError: .*case-insensitive/);
  });

  it('tour: tells the story on the embedded store and exits 0', async () => {
    const { run } = sandbox();
    const r = run('tour');
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/2\. fetch the folder[\s\S]*3 files, 3 transferred/);
    expect(r.out).toMatch(/3\. fetch again[\s\S]*3 files, 0 transferred/);
    expect(r.out).toMatch(/4\. change one file[\s\S]*3 files, 1 transferred/);
    expect(r.out).toMatch(/5\. go offline[\s\S]*1,11/);
    expect(r.out).toMatch(/OfflineMiss/);
    expect(r.out).toMatch(/6\. commit[\s\S]*\?at=commit:[0-9a-f]{64}[\s\S]*commit 1 /);
    expect(r.out).toMatch(/7\. change[\s\S]*a\.csv now: 1,99; files: 2/);
    expect(r.out).toMatch(
      /8\. offline[\s\S]*a\.csv at the commit: 1,11 2,22[\s\S]*b\.csv at the commit: 3,30/,
    );
    const pkg = JSON.parse(
      await readFile(path.join(import.meta.dirname, '..', '..', 'package.json'), 'utf8'),
    );
    expect(pkg.scripts.start).toMatch(/dist\/cli\/provcat\.cjs tour/);
    expect(pkg.bin.provcat).toBe('dist/cli/provcat.cjs');
  });

  it('the bundled executable knows its version and its help', async () => {
    const { run } = sandbox();
    const pkg = JSON.parse(
      await readFile(path.join(import.meta.dirname, '..', '..', 'package.json'), 'utf8'),
    );
    const version = run('--version');
    expect(version.code, version.err).toBe(0);
    expect(version.out.trim()).toBe(pkg.version);
    const help = run('--help');
    expect(help.code, help.err).toBe(0);
    for (const verb of ['fetch', 'commit', 'upload', 'tour']) expect(help.out).toContain(verb);
  });
});

/**
 * A CLI run that cannot hang the suite: killed (SIGKILL, which a spinning process cannot ignore)
 * after `ms`, with the time it took.
 */
function bounded(env: Record<string, string>, ms: number) {
  return (...args: string[]) => {
    const started = performance.now();
    const r = spawnSync(process.execPath, [BIN, ...args], {
      env: { ...process.env, ...env, PROVCAT_OFFLINE: '' },
      encoding: 'utf8',
      timeout: ms,
      killSignal: 'SIGKILL',
    });
    return { code: r.status, err: r.stderr, ms: performance.now() - started };
  };
}

describe('usage errors exit 2 at once, before any store is touched', () => {
  it('a --concurrency outside 1..256 (or not plain digits) on fetch, push, rm -r, commit --from', () => {
    const { dir, env, run } = sandbox();
    const local = path.join(dir, 'up');
    mkdirSync(local);
    writeFileSync(path.join(local, 'new.txt'), 'new');
    writeFileSync(path.join(dir, 'x'), 'x');
    expect(run('put', path.join(dir, 'x'), 'local://b/d/x.txt').code).toBe(0);
    const quick = bounded(env, 20_000);
    for (const n of ['99999999', '257', '0', '1e3', ' 8']) {
      for (const args of [
        ['fetch', 'local://b/d/', '--concurrency', n],
        ['push', local, 'local://b/d/', '--concurrency', n],
        ['rm', '-r', 'local://b/d/', '--concurrency', n],
        ['commit', 'local://b/d/', '-m', 'm', '--from', local, '--concurrency', n],
      ]) {
        const r = quick(...args);
        expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(2);
        expect(r.err, args.join(' ')).toMatch(
          /^provcat: InvalidArgument: --concurrency takes a whole number in 1\.\.256, not /,
        );
        expect(r.ms, args.join(' ')).toBeLessThan(10_000);
      }
    }
    // Nothing was deleted, pushed or committed.
    expect(run('stat', 'local://b/d/x.txt').code).toBe(0);
    expect(run('stat', 'local://b/d/new.txt').code).toBe(3);
    expect(JSON.parse(run('log', 'local://b/d/', '--json').out)).toEqual([]);
    // The bounds themselves are accepted.
    for (const n of ['1', '256'])
      expect(run('fetch', 'local://b/d/', '--concurrency', n).code).toBe(0);
  });

  it('upload: --parts-in-flight outside 1..16 and --stall-timeout outside 1..2147483 seconds', () => {
    const { dir, env } = sandbox();
    const source = path.join(dir, 'obj');
    writeFileSync(source, 'payload');
    const stage = `file://${path.join(dir, 'stage')}/`;
    const quick = bounded(env, 20_000);
    for (const extra of [
      ['--parts-in-flight', '17'],
      ['--parts-in-flight', '0'],
      ['--parts-in-flight', '99999999'],
      ['--stall-timeout', '0'],
      ['--stall-timeout', '99999999999'],
      ['--stall-timeout', '1.5'],
    ]) {
      const r = quick('upload', source, '--stage', stage, ...extra);
      expect(r.code, `${extra.join(' ')}: ${r.err}`).toBe(2);
      expect(r.err).toMatch(
        new RegExp(`^provcat: InvalidArgument: ${extra[0]} takes a whole number`),
      );
    }
    const ok = quick('upload', source, '--stage', stage, '--parts-in-flight', '16', '--json');
    expect(ok.code, ok.err).toBe(0);
  });

  it('an empty commit message is a usage error (exit 2); nothing is pushed', () => {
    const { dir, run } = sandbox();
    const local = path.join(dir, 'up');
    mkdirSync(local);
    writeFileSync(path.join(local, 'f.txt'), 'f');
    for (const message of ['', '   ']) {
      for (const args of [
        ['commit', 'local://b/d/', '-m', message],
        ['commit', 'local://b/d/', '-m', message, '--from', local],
      ]) {
        const r = run(...args);
        expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(2);
        expect(r.err).toMatch(/message/);
      }
    }
    expect(run('stat', 'local://b/d/f.txt').code).toBe(3);
  });

  it('offline, a write says it needs the store, never that a pin would help', () => {
    const { dir, run } = sandbox();
    writeFileSync(path.join(dir, 'x'), 'x');
    expect(run('put', path.join(dir, 'x'), 'local://b/d/x.txt').code).toBe(0);
    for (const args of [
      ['rm', '-r', 'local://b/d/'],
      ['rm', 'local://b/d/x.txt'],
      ['put', path.join(dir, 'x'), 'local://b/d/y.txt'],
      ['push', dir, 'local://b/e/'],
      ['mb', 'local://c'],
    ]) {
      const r = run(...args, '--offline');
      expect(r.code, args.join(' ')).toBe(5);
      expect(r.err, args.join(' ')).toMatch(/offline mode makes no network call/);
      expect(r.err, args.join(' ')).not.toMatch(/pin/);
    }
    // A read still hears that a pin answers offline.
    expect(run('stat', 'local://b/d/x.txt', '--offline').err).toMatch(/pin it with \?at=/);
    expect(run('stat', 'local://b/d/x.txt').code).toBe(0);
  });
});

describe("the executable's stand-ins for modules its dependencies load (scripts/cli-shims)", () => {
  const load = createRequire(import.meta.url);
  const shim = load('../../scripts/cli-shims/assert.cjs') as typeof assert;

  it('assert: equal passes what node:assert passes and throws what it throws', () => {
    expect(() => shim.equal(typeof (() => {}), 'function', 'a callback')).not.toThrow();
    expect(() => shim.equal(1, '1')).not.toThrow();
    expect(() => shim.equal(Number.NaN, Number.NaN)).not.toThrow();
    expect(() => shim.equal(typeof 1, 'function', 'a callback must be provided')).toThrow(
      assert.AssertionError,
    );
    expect(() => shim.equal(1, 2, 'one is not two')).toThrow('one is not two');
  });

  it('assert: every other use is node:assert itself', () => {
    expect(() => shim(false, 'called')).toThrow(assert.AssertionError);
    expect(() => shim(true)).not.toThrow();
    expect(shim.strictEqual).toBe(assert.strictEqual);
    expect(shim.AssertionError).toBe(assert.AssertionError);
  });

  it('graceful-fs is node:fs', () => {
    expect(load('../../scripts/cli-shims/graceful-fs.cjs')).toBe(load('node:fs'));
  });
});
