/**
 * Commits, logs, pins and branches beyond the conformance suite: the whole conformance suite on
 * the in-memory test driver, the versions part on Ceph in `oldest-version-wins` mode, the
 * on-store format, create modes that the real drivers here do not all have (a store that ignores
 * create-if-absent), the cache and offline rules of `loadCommit`, a writer racing a listing page
 * by page, unversioned buckets, eight processes committing one folder on the local store, and
 * the CLI verbs.
 *
 * The multi-process test runs test/fixtures/commit-worker.mjs, which imports dist/: run
 * `npm run build` first (the `test` script does); a dist older than src/commits fails the test.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { S3Store } from '../../drivers/s3/index.js';
import type { CliContext } from '../../src/cli/command.js';
import { UsageError } from '../../src/cli/command.js';
import { commitCommands, parseMeta } from '../../src/cli/commands/commits.js';
import { branchFrom } from '../../src/commits/branch.js';
import { commitFolder } from '../../src/commits/commit.js';
import {
  COMMIT_FORMAT,
  type CommitBody,
  canonicalJson,
  commitBytes,
  logKey,
  parseCommit,
  sha256Hex,
} from '../../src/commits/format.js';
import { logFolder } from '../../src/commits/log.js';
import { pinUri } from '../../src/commits/pin.js';
import { loadCommit } from '../../src/commits/read.js';
import type { VersionRecord } from '../../src/contract/primitives.js';
import {
  exitCodeOf,
  NotFound,
  ObjectIntegrityError,
  OfflineMiss,
  StoreError,
} from '../../src/core/errors.js';
import { Uri } from '../../src/core/uri.js';
import { registerDriver } from '../../src/store/registry.js';
import { commitPagesSuite } from '../../src/testing/commit-pages.js';
import { type ConformanceTarget, conformance } from '../../src/testing/index.js';
import { rejection } from '../../src/testing/rejection.js';
import { text, versionsSuite } from '../../src/testing/versions.js';
import {
  describeS3,
  removeBucket,
  s3Enabled,
  s3TestTarget,
  testS3Client,
  uniqueBucketName,
} from '../setup/s3.js';
import { MemoryBackend, MemoryStore, type MemoryStoreOptions } from '../support/memory-store.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const work = mkdtempSync(path.join(tmpdir(), 'provcat-commits-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let caches = 0;
const cacheDir = () => path.join(work, `cache-${++caches}`);

const B = 'bkt';
const mem = (options: MemoryStoreOptions = {}) =>
  new MemoryStore({ cache: cacheDir(), ...options });
const put = (s: MemoryStore, key: string, body: string) => s._put(B, key, Buffer.from(body));

// The whole conformance suite on the memory store proves the test driver faithful (others
// reuse it). The versions part runs a second time with latency, so concurrent calls interleave.
const conformanceBackend = new MemoryBackend();
conformance({
  name: 'memory',
  store: (o) => new MemoryStore({ backend: conformanceBackend, ...o }),
  bucket: B,
  flags: { versions: true, createMode: 'atomic', ranges: true, hostileKeys: true },
});
describe('the versions part on a memory store with latency', () => {
  const backend = new MemoryBackend();
  versionsSuite({
    name: 'memory with latency',
    store: (o) => new MemoryStore({ backend, latency: () => Math.random() * 2, ...o }),
    bucket: B,
    flags: { versions: true, createMode: 'atomic', ranges: true, hostileKeys: true },
  });
});

// On Ceph, whose versioned buckets ignore If-None-Match, the S3 driver reports `none` unless
// told to fall back to `oldest-version-wins`: run the whole versions part in that mode against a
// real server (on AWS, which honours the condition, the same run is `atomic`).
const s3 = s3Enabled() ? s3TestTarget() : undefined;
describeS3('the versions conformance part on S3 with the oldest-version-wins fallback', () => {
  const bucket = s3?.bucket ?? uniqueBucketName('c');
  const onAws = s3?.kind === 'aws';
  const admin = new S3Store({ cache: cacheDir() });
  beforeAll(async () => {
    if (!onAws) await admin.makeBucket(bucket, { versioning: true });
  });
  afterAll(async () => {
    if (!onAws) {
      const raw = testS3Client();
      await removeBucket(raw, bucket);
      raw.destroy();
    }
    await admin.close();
  });
  const target: ConformanceTarget = {
    name: 's3 oldest-version-wins',
    store: (o) => new S3Store({ createFallback: 'oldest-version-wins', ...o }),
    bucket,
    flags: {
      versions: true,
      createMode: onAws ? 'atomic' : 'oldest-version-wins',
      ranges: true,
      hostileKeys: true,
    },
  };
  versionsSuite(target);
  // provcat.commit/2 pages on a real S3 server (Ceph: pages and log entries written with _put).
  commitPagesSuite(target);
});

describe('the commit format', () => {
  const body: CommitBody = {
    format: COMMIT_FORMAT,
    folder: 'data/',
    parent: null,
    number: 1,
    message: 'first ✓',
    metadata: { zeta: '1', alpha: '2', Émile: '3' },
    time: '2025-01-02T03:04:05.678Z',
    files: [
      { key: 'data/B.csv', versionId: 'v1', size: 3, etag: '"abc"' },
      { key: 'data/a b%2F+.csv', versionId: 'v2', size: 0, sha256: 'ff'.repeat(32) },
    ],
  };

  it('is canonical JSON: sorted members, no whitespace, UTF-8, one ID per content', () => {
    const bytes = commitBytes(body);
    const textForm = bytes.toString('utf8');
    expect(textForm.startsWith('{"files":[{"etag":"\\"abc\\"","key":"data/B.csv"')).toBe(true);
    expect(textForm).toContain('"metadata":{"alpha":"2","zeta":"1","Émile":"3"}');
    expect(textForm).not.toMatch(/\s(?=[{}[\]:,"])/);
    expect(canonicalJson({ b: undefined, a: [1, [], {}], c: { z: undefined } })).toBe(
      '{"a":[1,[],{}],"c":{}}',
    );
    expect(canonicalJson({ '\u{1F600}': 1, '\uFFFF': 2 })).toBe('{"\u{1F600}":1,"\uFFFF":2}');
    const reordered = { ...body, metadata: { Émile: '3', alpha: '2', zeta: '1' } };
    expect(commitBytes(reordered).equals(bytes)).toBe(true);
    const id = sha256Hex(bytes);
    const parsed = parseCommit(bytes, id, B);
    expect(parsed).toMatchObject({ ...body, id, bucket: B });
    // An extra per-file field survives a round trip.
    expect(parsed.files[1]?.sha256).toBe('ff'.repeat(32));
  });

  it('refuses objects that are not exactly one canonical provcat.commit/1', () => {
    const good = canonicalJson(body);
    const refuse = (t: string, why: RegExp) => {
      const error = (() => {
        try {
          parseCommit(Buffer.from(t), sha256Hex(t), B);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error, t).toBeInstanceOf(StoreError);
      expect((error as Error).message).toMatch(why);
    };
    refuse(JSON.stringify(JSON.parse(good), null, 1), /canonical/);
    refuse(canonicalJson({ ...body, extra: 1 }), /unknown field/);
    refuse(canonicalJson({ ...body, format: 'provcat.commit/3' }), /format/);
    // A format 1 body labelled format 2 is no format 2 commit (format 2 has no `files`).
    refuse(canonicalJson({ ...body, format: 'provcat.commit/2' }), /unknown field "files"/);
    refuse(canonicalJson({ ...body, files: [...body.files].reverse() }), /sorted/);
    refuse(
      canonicalJson({ ...body, files: [{ key: 'other/x', versionId: 'v', size: 1 }] }),
      /under/,
    );
    refuse(canonicalJson({ ...body, number: 2 }), /parent/);
    refuse(canonicalJson({ ...body, message: ' ' }), /message/);
    refuse(canonicalJson({ ...body, folder: '.provcat/' }), /provcat/);
    refuse(canonicalJson({ ...body, metadata: { a: 1 } }), /metadata/);
    refuse(canonicalJson({ ...body, time: 'yesterday' }), /time/);
    refuse('\xff', /JSON/);
  });

  it('names log entries so that the newest lists first', () => {
    const keys = [1, 2, 10, 999].map((n) => logKey('data/', n));
    expect([...keys].sort()).toEqual([...keys].reverse());
    expect(keys[0]).toBe(`.provcat/log/${sha256Hex('data/')}/0999999999999999`);
  });
});

describe('loadCommit, the cache and offline mode', () => {
  it('answers a cached commit with no store call, online or offline', async () => {
    const backend = new MemoryBackend();
    const writer = mem({ backend });
    await put(writer, 'p/f.txt', 'x');
    const c = await commitFolder(writer, `mem://${B}/p/`, 'm');
    const id = c.at?.id as string;
    const cache = cacheDir();
    const reader = mem({ backend, cache });
    expect((await loadCommit(reader, B, id)).id).toBe(id);
    // The commit object and its one page (provcat.commit/2).
    expect(reader.calls._get).toBe(2);
    reader.resetCalls();
    await loadCommit(reader, B, id);
    expect(reader.totalCalls).toBe(0);
    const offline = mem({ backend, cache, offline: true });
    expect((await loadCommit(offline, B, id)).files.length).toBe(1);
    expect((await pinUri(offline, c)).toString()).toBe(c.toString());
    expect((await offline.stat(c.join('f.txt'))).size).toBe(1);
    expect(offline.totalCalls).toBe(0);
    // Not cached and offline: OfflineMiss, still without a store call.
    const empty = mem({ backend, offline: true });
    await expect(loadCommit(empty, B, id)).rejects.toBeInstanceOf(OfflineMiss);
    expect(empty.totalCalls).toBe(0);
  });

  it('drops a corrupt cached copy and reads the commit again', async () => {
    const backend = new MemoryBackend();
    const cache = cacheDir();
    const s = mem({ backend, cache });
    await put(s, 'p/f.txt', 'x');
    const id = (await commitFolder(s, `mem://${B}/p/`, 'm')).at?.id as string;
    const file = s.cache.commitPath(s.scheme, B, id);
    const original = await readFile(file, 'utf8');
    await writeFile(file, original.replace('"m"', '"n"'));
    const offline = mem({ backend, cache, offline: true });
    const miss = await rejection(loadCommit(offline, B, id));
    expect(miss).toBeInstanceOf(OfflineMiss);
    expect((miss as Error).cause).toBeInstanceOf(ObjectIntegrityError);
    await writeFile(file, original.replace('"m"', '"n"'));
    expect((await loadCommit(s, B, id)).message).toBe('m');
    expect(await readFile(file, 'utf8')).toBe(original);
  });
});

describe('a writer racing the listing page by page', () => {
  /** A memory store whose `_history` lets a writer in after the first record of a listing. */
  class Racing extends MemoryStore {
    listings = 0;
    constructor(
      options: MemoryStoreOptions,
      readonly folder: string,
      readonly races: number,
      readonly writeAll: () => Promise<void>,
    ) {
      super(options);
    }
    override async *_history(bucket: string, prefix: string, options?: { signal?: AbortSignal }) {
      let first = prefix === this.folder && this.listings++ < this.races;
      for await (const r of super._history(bucket, prefix, options)) {
        yield r;
        if (first) {
          first = false;
          await this.writeAll();
        }
      }
    }
  }

  it('never commits a mix of two states, though one listing would see one', async () => {
    const backend = new MemoryBackend();
    const plain = mem({ backend, pageSize: 1 });
    let gen = 0;
    const writeAll = async () => {
      gen += 1;
      for (const k of ['a', 'b', 'c']) await put(plain, `f/${k}`, `gen ${gen}`);
    };
    await writeAll();
    const current = (records: VersionRecord[]) =>
      records.filter((r) => r.current).map((r) => r.versionId);
    const contents = async (keysAndVersions: Array<[string, string]>) =>
      Promise.all(
        keysAndVersions.map(async ([k, v]) => text((await plain._getVersion(B, k, v)).body)),
      );

    // The control: one listing with the writer inside it sees a mix of generations.
    const control = new Racing({ backend, pageSize: 1, cache: cacheDir() }, 'f/', 1, writeAll);
    const seen: VersionRecord[] = [];
    for await (const r of control._history(B, 'f/')) seen.push(r);
    const mixed = await contents(
      seen.filter((r) => r.current).map((r) => [r.key, r.versionId] as [string, string]),
    );
    expect(new Set(mixed).size).toBeGreaterThan(1);
    expect(current(seen).length).toBe(3);

    // A commit through the same kind of store: one generation, after the writer stops.
    const racing = new Racing({ backend, pageSize: 1, cache: cacheDir() }, 'f/', 4, writeAll);
    const c = await commitFolder(racing, `mem://${B}/f/`, 'settled');
    const commit = await loadCommit(plain, B, c.at?.id as string);
    const got = await contents(commit.files.map((f) => [f.key, f.versionId]));
    expect(got).toEqual([`gen ${gen}`, `gen ${gen}`, `gen ${gen}`]);
    expect(racing.listings).toBeGreaterThan(4);
  });
});

describe('create modes', () => {
  it("fails closed on a store that ignores create-if-absent and has no versions to order ('none')", async () => {
    const s = mem({ ignoreCreateCondition: true, createMode: 'none' });
    await put(s, 'p/f.txt', 'x');
    const error = await rejection(commitFolder(s, `mem://${B}/p/`, 'unsafe'));
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toMatch(/only-if-absent/);
    const provcat = [...s.backend.bucket(B).keys.keys()].filter((k) => k.startsWith('.provcat/'));
    expect(provcat).toEqual([]);
    expect(s.calls._put).toBe(1); // the test's own write, nothing else
    await expect(branchFrom(s, `mem://${B}/br/`, 'p')).rejects.toBeInstanceOf(StoreError);
  });

  it("orders concurrent commits by the oldest version of each log entry ('oldest-version-wins')", async () => {
    const backend = new MemoryBackend();
    // Equal latency: every committer reaches each step together, so they all race for N = 1.
    const stores = Array.from({ length: 8 }, () =>
      mem({ backend, ignoreCreateCondition: true, createMode: 'oldest-version-wins', latency: 2 }),
    );
    await put(stores[0] as MemoryStore, 'p/f.txt', 'x');
    const made = await Promise.all(
      stores.map((s, i) => commitFolder(s, `mem://${B}/p/`, `c${i}`, { allowEmpty: true })),
    );
    const reader = mem({ backend });
    const log = await logFolder(reader, `mem://${B}/p/`);
    expect(log.map((e) => e.number)).toEqual([8, 7, 6, 5, 4, 3, 2, 1]);
    expect(new Set(log.map((e) => e.id))).toEqual(new Set(made.map((u) => u.at?.id)));
    for (let i = 0; i + 1 < log.length; i++) expect(log[i]?.parent).toBe(log[i + 1]?.id);
    // The race did happen: entry 1 has several versions, and the oldest is the commit 1 read.
    const versions = backend.bucket(B).keys.get(logKey('p/', 1)) ?? [];
    expect(versions.length).toBeGreaterThan(1);
    expect(versions[0]?.data?.toString()).toBe(log.at(-1)?.id);
    // Pins and later commits follow the oldest versions too.
    expect((await pinUri(reader, `mem://${B}/p/`)).at?.id).toBe(log[0]?.id);
    await put(reader, 'p/g.txt', 'y');
    const next = await commitFolder(stores[3] as MemoryStore, `mem://${B}/p/`, 'ninth');
    expect((await loadCommit(reader, B, next.at?.id as string)).parent).toBe(log[0]?.id);
  });

  it('a store that ignores create-if-absent but claims atomic loses commits (why drivers probe)', async () => {
    const backend = new MemoryBackend();
    const stores = Array.from({ length: 4 }, () =>
      mem({ backend, ignoreCreateCondition: true, createMode: 'atomic', latency: 2 }),
    );
    await put(stores[0] as MemoryStore, 'p/f.txt', 'x');
    const made = await Promise.all(
      stores.map((s, i) => commitFolder(s, `mem://${B}/p/`, `c${i}`, { allowEmpty: true })),
    );
    const log = await logFolder(mem({ backend }), `mem://${B}/p/`);
    expect(made.length).toBe(4);
    expect(log.length).toBeLessThan(4);
  });
});

describe('branch sources that hold nothing', () => {
  it('a missing source folder, or a commit with nothing there, is NotFound (exit 3)', async () => {
    const s = mem();
    await put(s, 'main/a.txt', 'a');
    const missing = await rejection(branchFrom(s, `mem://${B}/br/`, 'nothing-here'));
    expect(missing).toBeInstanceOf(NotFound);
    expect(exitCodeOf(missing)).toBe(3);
    expect((missing as NotFound).message).toMatch(/nothing-here/);
    const viaUri = await rejection(branchFrom(s, `mem://${B}/br/`, `mem://${B}/main/sub/`));
    expect(viaUri).toBeInstanceOf(NotFound);
    const c = await commitFolder(s, `mem://${B}/main/`, 'one');
    const nothingAt = `mem://${B}/main/sub/?at=commit:${c.at?.id}`;
    expect(await rejection(branchFrom(s, `mem://${B}/br/`, nothingAt))).toBeInstanceOf(NotFound);
    // Nothing was recorded or copied: a branch from a real source still works afterwards.
    expect(await branchFrom(s, `mem://${B}/br/`, 'main')).toBeInstanceOf(Uri);
  });
});

describe('buckets without versions', () => {
  it('refuse pins of files and folders, commits and branches with StoreError', async () => {
    const s = mem({ versioning: false });
    await put(s, 'p/f.txt', 'x');
    await expect(pinUri(s, `mem://${B}/p/f.txt`)).rejects.toBeInstanceOf(StoreError);
    await expect(pinUri(s, `mem://${B}/p/`)).rejects.toBeInstanceOf(StoreError);
    await expect(commitFolder(s, `mem://${B}/p/`, 'm')).rejects.toBeInstanceOf(StoreError);
    await expect(branchFrom(s, `mem://${B}/br/`, 'p')).rejects.toBeInstanceOf(StoreError);
  });
});

describe('eight processes committing one folder on the local store', () => {
  it('make commits 1..8, each the parent of the next, none lost, snapshots in log order', async () => {
    const dist = path.join(repo, 'dist/src/commits/commit.js');
    if (!existsSync(dist)) throw new Error(`${dist} is missing: run \`npm run build\` first`);
    for (const f of readdirSync(path.join(repo, 'src/commits'))) {
      if (statSync(path.join(repo, 'src/commits', f)).mtimeMs > statSync(dist).mtimeMs + 1) {
        throw new Error(`dist/ is older than src/commits/${f}: run \`npm run build\``);
      }
    }
    const root = path.join(work, 'local-root');
    mkdirSync(root, { recursive: true });
    const folder = `local://procs/run-${Date.now()}/`;
    const startAt = Date.now() + 1500;
    const worker = (i: number) =>
      new Promise<string>((resolve, reject) => {
        execFile(
          process.execPath,
          [
            path.join(here, '../fixtures/commit-worker.mjs'),
            root,
            cacheDir(),
            folder,
            String(i),
            String(startAt),
          ],
          { timeout: 60_000 },
          (error, stdout, stderr) =>
            error ? reject(new Error(`worker ${i}: ${stderr}`)) : resolve(stdout.trim()),
        );
      });
    const pinned = await Promise.all(Array.from({ length: 8 }, (_, i) => worker(i)));
    const store = new LocalStore({ root, cache: cacheDir(), offline: false });
    const log = await logFolder(store, folder);
    expect(log.map((e) => e.number)).toEqual([8, 7, 6, 5, 4, 3, 2, 1]);
    expect(new Set(log.map((e) => e.id))).toEqual(new Set(pinned.map((u) => Uri.parse(u).at?.id)));
    for (let i = 0; i + 1 < log.length; i++) expect(log[i]?.parent).toBe(log[i + 1]?.id);
    // Every worker wrote its file before committing, and snapshots follow the log order, so
    // commit N holds at least N files and the newest holds all eight.
    for (const e of log) expect(e.files).toBeGreaterThanOrEqual(e.number);
    expect(log[0]?.files).toBe(8);
  });
});

describe('the CLI verbs', () => {
  const backend = new MemoryBackend();
  registerDriver(
    'cli',
    async (o) => new MemoryStore({ ...o, backend, scheme: 'cli', cache: cacheDir() }),
  );
  const seed = new MemoryStore({ backend, scheme: 'cli', cache: cacheDir() });

  async function run(argv: string[]) {
    let out = '';
    let err = '';
    const sink = (f: (s: string) => void) =>
      new Writable({
        write(chunk, _enc, done) {
          f(String(chunk));
          done();
        },
      });
    const stdout = sink((s) => {
      out += s;
    });
    const stderr = sink((s) => {
      err += s;
    });
    const command = commitCommands.find((c) => c.name === argv[0]);
    if (!command) throw new Error(`no command ${argv[0]}`);
    const parsed = parseArgs({
      args: argv.slice(1),
      options: { json: { type: 'boolean' }, ...command.options },
      allowPositionals: true,
    });
    const ctx: CliContext = {
      stdout,
      stderr,
      env: {},
      json: parsed.values.json === true,
      offline: false,
      progress: () => ({ onProgress: undefined, done() {} }),
      track: (resource) => resource,
    };
    const code = await command.run(
      { positionals: parsed.positionals, values: parsed.values as never },
      ctx,
    );
    return { code, out, err };
  }

  it('commit, log, pin and branch print URIs, or JSON with --json', async () => {
    await seed._put(B, 'main/a.txt', Buffer.from('a'));
    const c1 = await run([
      'commit',
      `cli://${B}/main/`,
      '-m',
      'first',
      '--meta',
      'k=v=w',
      '--json',
    ]);
    expect(c1.code).toBe(0);
    const u1 = JSON.parse(c1.out).uri as string;
    expect(u1).toMatch(/^cli:\/\/bkt\/main\/\?at=commit:[0-9a-f]{64}$/);
    await expect(run(['commit', `cli://${B}/main/`, '-m', 'again'])).rejects.toBeInstanceOf(
      StoreError,
    );
    const c2 = await run(['commit', `cli://${B}/main/`, '-m', 'again', '--allow-empty']);
    const u2 = c2.out.trim();
    expect(Uri.parse(u2).at?.kind).toBe('commit');

    const log = JSON.parse((await run(['log', `cli://${B}/main/`, '--json'])).out);
    expect(log).toEqual([
      {
        id: Uri.parse(u2).at?.id,
        number: 2,
        parent: Uri.parse(u1).at?.id,
        message: 'again',
        metadata: {},
        time: expect.any(String),
        files: 1,
      },
      {
        id: Uri.parse(u1).at?.id,
        number: 1,
        parent: null,
        message: 'first',
        metadata: { k: 'v=w' },
        time: expect.any(String),
        files: 1,
      },
    ]);
    const human = (await run(['log', `cli://${B}/main/`])).out;
    expect(human).toContain(`commit ${Uri.parse(u2).at?.id} (#2)`);
    expect(human).toContain('Meta:   k=v=w');
    expect(human).toContain('    first');

    expect(JSON.parse((await run(['pin', `cli://${B}/main/`, '--json'])).out)).toEqual({ uri: u2 });
    const pf = (await run(['pin', `cli://${B}/main/a.txt`])).out.trim();
    expect(Uri.parse(pf).at?.kind).toBe('version');

    const br = await run(['branch', `cli://${B}/dev/`, Uri.parse(u1).at?.id as string, '--json']);
    expect(JSON.parse(br.out)).toEqual({ uri: `cli://${B}/dev/` });
    expect(await text((await seed._get(B, 'dev/a.txt')).body)).toBe('a');
  });

  it('refuses bad usage', async () => {
    await expect(run(['commit', `cli://${B}/main/`])).rejects.toBeInstanceOf(UsageError);
    expect(() => parseMeta(['novalue'])).toThrow(UsageError);
    expect(() => parseMeta(['a=1', 'a=2'])).toThrow(UsageError);
    expect(parseMeta(undefined)).toEqual({});
  });
});
