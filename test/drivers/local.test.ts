/**
 * The local store: the whole conformance suite, plus what only the local store promises —
 * safety of paths, many processes writing one key, `_create` races, crash leftovers, ranges.
 *
 * The multi-process tests run child scripts (test/fixtures/local-*.mjs) that import the compiled
 * driver from dist/, so `npm run build` must have run (the `test` script does it); a stale dist
 * fails the test instead of testing old code.
 */
// The shared GC and fault suites on this driver (their setup is in each module).
import './local/gc.js';
import './local/gc-markers.js';
import './local/faults.js';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import envPaths from 'env-paths';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultLocalRoot, LocalStore } from '../../drivers/local/index.js';
import { decodeName, encodeName, parseFolderEntry, refOf } from '../../drivers/local/layout.js';
import { Exists, isAbort, NotFound, StoreError, UriError } from '../../src/core/errors.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { stageFromDescriptor } from '../../src/lake/index.js';
import { conformance } from '../../src/testing/index.js';
import { rejection } from '../../src/testing/rejection.js';
import { randomPrefix } from '../../src/testing/target.js';
import { requireFreshBuild } from '../support/fresh-build.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const work = mkdtempSync(path.join(tmpdir(), 'provcat-local-'));
const root = path.join(work, 'root');
const cache = path.join(work, 'cache');
mkdirSync(root);

afterAll(() => rmSync(work, { recursive: true, force: true }));

conformance({
  name: 'local',
  store: (o) => new LocalStore({ root, ...o }),
  bucket: 'conf',
  flags: { versions: true, createMode: 'atomic', ranges: true, hostileKeys: false, batch: true },
  env: { PROVCAT_LOCAL_ROOT: root },
  // No SDK but provcat's: another store on the same root is the other client (no content types).
  sdk: {
    put: async (key, body) => {
      const other = new LocalStore({ root, cache: path.join(work, 'other-cache') });
      await other._put('conf', key, body);
      await other.close();
    },
  },
  stage: ({ prefix }) =>
    stageFromDescriptor({ version: 1, kind: 'local', root: path.join(root, 'stages', prefix) }),
});

const BUCKET = 'local';
const store = new LocalStore({ root, cache, offline: false });

async function text(body: Readable): Promise<string> {
  return (await bytes(body)).toString('utf8');
}

async function bytes(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

async function all<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/** Every file and directory below `dir`, relative to it. */
async function tree(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { recursive: true });
  return entries.map(String).sort();
}

describe('local store', () => {
  describe('configuration', () => {
    it('takes its root from PROVCAT_LOCAL_ROOT, else the env-paths data directory', () => {
      expect(defaultLocalRoot({ PROVCAT_LOCAL_ROOT: '/srv/provcat' })).toBe('/srv/provcat');
      expect(defaultLocalRoot({ PROVCAT_LOCAL_ROOT: 'rel/dir' })).toBe(path.resolve('rel/dir'));
      const data = envPaths('provcat', { suffix: '' }).data;
      expect(defaultLocalRoot({ PROVCAT_LOCAL_ROOT: '' })).toBe(path.resolve(data));
      expect(defaultLocalRoot({})).toBe(path.resolve(data));
      expect(new LocalStore({ root: 'x', cache }).root).toBe(path.resolve('x'));
    });

    it('serves local:// with versions and ranges', () => {
      expect(store.scheme).toBe('local');
      expect(store.driver).toBe('local');
      expect(store.capabilities).toEqual({ versions: true, ranges: true, versionsAlways: true });
    });
  });

  describe('on-disk names', () => {
    const segment = fc.string({ unit: 'binary', minLength: 1, maxLength: 40 });

    it('escape every segment reversibly into safe lowercase-ASCII names', () => {
      fc.assert(
        fc.property(segment, (s) => {
          const name = encodeName(s);
          expect(name).toMatch(/^[a-z0-9._%^A-F-]*$/);
          expect(name.endsWith('.')).toBe(false);
          expect(decodeName(name)).toBe(s);
          // Outside %XX escapes there is no uppercase letter, so case-folding loses nothing.
          expect(name.replace(/%[0-9A-F]{2}/g, '')).toMatch(/^[a-z0-9._^-]*$/);
          const parsed = parseFolderEntry(`o${refOf(s).ref}`);
          expect(parsed).toMatchObject({ tag: 'o', ref: refOf(s).ref });
          if (!refOf(s).hashed) expect(parsed).toMatchObject({ segment: s });
        }),
      );
    });

    it('never give two segments the same name, even case-folded', () => {
      fc.assert(
        fc.property(segment, segment, (a, b) => {
          fc.pre(a !== b);
          expect(encodeName(a).toLowerCase()).not.toBe(encodeName(b).toLowerCase());
        }),
      );
      expect(encodeName('A')).not.toBe(encodeName('a'));
      expect(encodeName('..')).toBe('.%2E');
      expect(refOf('x'.repeat(200)).hashed).toBe(true);
    });

    it('compare keys in UTF-8 byte order', () => {
      fc.assert(
        fc.property(segment, segment, (a, b) => {
          const bytes = Math.sign(Buffer.compare(Buffer.from(a), Buffer.from(b)));
          expect(Math.sign(compareUtf8(a, b))).toBe(bytes);
        }),
      );
      expect(compareUtf8('\uff61', '\u{1F600}')).toBeLessThan(0);
    });
  });

  describe('buckets', () => {
    it('makes a bucket idempotently, as a folder under the root', async () => {
      await store.makeBucket('made');
      await store.makeBucket('made');
      expect(statSync(path.join(root, 'made')).isDirectory()).toBe(true);
      expect(await all(store._pages('made', ''))).toEqual([]);
    });

    it('creates a bucket on the first put', async () => {
      await store._put('fresh-bucket', 'k', Buffer.from('x'));
      expect(statSync(path.join(root, 'fresh-bucket')).isDirectory()).toBe(true);
    });

    it('lists a missing bucket as NotFound naming it (history: nothing), and NotFound for objects', async () => {
      for (const [prefix, delimiter] of [
        ['', undefined],
        ['a/', '/'],
        ['a//b', undefined],
      ] as const) {
        const error = await rejection(all(store._pages('no-such-bucket', prefix, { delimiter })));
        expect(error).toBeInstanceOf(NotFound);
        expect(String(error)).toContain('local://no-such-bucket/');
      }
      expect(await all(store._history('no-such-bucket', ''))).toEqual([]);
      expect(await rejection(store._head('no-such-bucket', 'k'))).toBeInstanceOf(NotFound);
      expect(await rejection(store._get('no-such-bucket', 'k'))).toBeInstanceOf(NotFound);
      expect(await rejection(store._delete('no-such-bucket', 'k'))).toBeInstanceOf(NotFound);
      expect(existsSync(path.join(root, 'no-such-bucket'))).toBe(false);
    });

    it('refuses bucket names a URI cannot hold', async () => {
      for (const bucket of ['..', '../evil', 'a/b', 'UPPER', '', '.hidden']) {
        expect(await rejection(store._put(bucket, 'k', Buffer.from('x')))).toBeInstanceOf(UriError);
        expect(await rejection(store.makeBucket(bucket))).toBeInstanceOf(UriError);
        expect(await rejection(all(store._pages(bucket, '')))).toBeInstanceOf(UriError);
      }
    });
  });

  describe('keys', () => {
    const hostile = [
      '',
      'a//b',
      '/lead',
      'trail/',
      '..',
      '../escape',
      'a/../../escape',
      'a/./b',
      'nul\u0000byte',
      'ctl\u0001',
      'lone\ud800surrogate',
      'x'.repeat(1025),
    ];

    it('refuses keys a URI cannot name, on every write, and writes nothing outside the root', async () => {
      const p = randomPrefix();
      await store._put(BUCKET, `${p}source`, Buffer.from('s'));
      for (const key of hostile) {
        expect(await rejection(store._put(BUCKET, key, Buffer.from('x')))).toBeInstanceOf(UriError);
        expect(await rejection(store._create(BUCKET, key, Buffer.from('x')))).toBeInstanceOf(
          UriError,
        );
        expect(await rejection(store._copy(BUCKET, `${p}source`, undefined, key))).toBeInstanceOf(
          UriError,
        );
        // Reads of such a key find nothing, whatever its shape.
        expect(await rejection(store._head(BUCKET, key))).toBeInstanceOf(NotFound);
        expect(await rejection(store._delete(BUCKET, key))).toBeInstanceOf(NotFound);
      }
      expect((await fs.readdir(work)).sort()).toEqual(['root']);
      expect(await fs.readdir(path.dirname(work))).not.toContain('escape');
    });

    it('lists nothing for prefixes no key can have', async () => {
      for (const prefix of ['a//', '../', '../../', './', '\u0000/']) {
        expect(await all(store._pages(BUCKET, prefix))).toEqual([]);
        expect(await all(store._history(BUCKET, prefix))).toEqual([]);
      }
    });

    it('keeps very long keys and segments (1,024 bytes)', async () => {
      const p = randomPrefix();
      const longSegment = `${'Ü'.repeat(150)}.bin`; // 304 bytes, 900+ characters escaped
      const key = `${p}${longSegment}/${'d/'.repeat(200)}${'é'.repeat(100)}`;
      const padded = key + 'z'.repeat(1024 - Buffer.byteLength(key));
      expect(Buffer.byteLength(padded)).toBe(1024);
      await store._put(BUCKET, padded, Buffer.from('long'));
      await store._put(BUCKET, `${p}${longSegment}`, Buffer.from('file beside the folder'));
      expect(await text((await store._get(BUCKET, padded)).body)).toBe('long');
      const listed = (await all(store._pages(BUCKET, p))).flatMap((page) =>
        page.objects.map((o) => o.key),
      );
      expect(listed).toEqual([`${p}${longSegment}`, padded]);
      const level = await all(store._pages(BUCKET, p, { delimiter: '/' }));
      expect(level.flatMap((page) => page.prefixes)).toEqual([`${p}${longSegment}/`]);
      const history = await all(store._history(BUCKET, `${p}${longSegment}/d/`));
      expect(history.map((r) => r.key)).toEqual([padded]);
    });

    it('keeps keys that differ only in case apart (also on case-insensitive disks)', async () => {
      const p = randomPrefix();
      await store._put(BUCKET, `${p}ReadMe.md`, Buffer.from('upper'));
      await store._put(BUCKET, `${p}readme.md`, Buffer.from('lower'));
      await store._put(BUCKET, `${p}README.MD`, Buffer.from('shout'));
      expect(await text((await store._get(BUCKET, `${p}ReadMe.md`)).body)).toBe('upper');
      expect(await text((await store._get(BUCKET, `${p}readme.md`)).body)).toBe('lower');
      expect(await text((await store._get(BUCKET, `${p}README.MD`)).body)).toBe('shout');
    });
  });

  describe('objects', () => {
    it('reports the MD5 of the bytes as the ETag and the version ID as the version', async () => {
      const key = `${randomPrefix()}etag.bin`;
      const body = randomBytes(5000);
      const info = await store._put(BUCKET, key, body);
      expect(info.etag).toBe(`"${createHash('md5').update(body).digest('hex')}"`);
      expect(info.version).toBe(info.versionId);
      expect(Math.abs((info.lastModified as Date).getTime() - Date.now())).toBeLessThan(60_000);
    });

    it('clamps a range that ends past the object, and refuses one that starts past it', async () => {
      const key = `${randomPrefix()}range.bin`;
      const body = randomBytes(1000);
      await store._put(BUCKET, key, body);
      const clamped = await store._get(BUCKET, key, { range: { start: 990, end: 2000 } });
      expect(clamped.contentRange).toBe('bytes 990-999/1000');
      expect(clamped.contentLength).toBe(10);
      expect((await bytes(clamped.body)).equals(body.subarray(990))).toBe(true);
      for (const range of [
        { start: 1000, end: 1001 },
        { start: 5000, end: 6000 },
        { start: 10, end: 10 },
        { start: 20, end: 10 },
        { start: -1, end: 10 },
      ]) {
        const error = await rejection(store._get(BUCKET, key, { range }));
        expect(error).toBeInstanceOf(StoreError);
        expect((error as StoreError).status).toBe(416);
      }
    });

    it('refuses a source whose length differs from the announced size, keeping nothing', async () => {
      const key = `${randomPrefix()}short.bin`;
      const error = await rejection(store._put(BUCKET, key, Buffer.from('four'), { size: 5 }));
      expect(error).toBeInstanceOf(StoreError);
      expect(await rejection(store._head(BUCKET, key))).toBeInstanceOf(NotFound);
      expect(await all(store._history(BUCKET, key))).toEqual([]);
    });

    it('reports a missing source file as NotFound', async () => {
      const key = `${randomPrefix()}nosource.bin`;
      const error = await rejection(store._put(BUCKET, key, path.join(work, 'no-such-file')));
      expect(error).toBeInstanceOf(NotFound);
    });

    it('abandons a put when its signal aborts, leaving no version and no temp file', async () => {
      const p = randomPrefix();
      const key = `${p}aborted.bin`;
      const controller = new AbortController();
      const endless = new Readable({
        read() {
          this.push(randomBytes(16 * 1024));
        },
      });
      let sent = 0;
      const error = await rejection(
        store._put(BUCKET, key, endless, {
          signal: controller.signal,
          onProgress: (n) => {
            sent = n;
            if (n > 100_000) controller.abort();
          },
        }),
      );
      expect(isAbort(error)).toBe(true);
      expect(sent).toBeGreaterThan(100_000);
      expect(await rejection(store._head(BUCKET, key))).toBeInstanceOf(NotFound);
      expect(await all(store._history(BUCKET, p))).toEqual([]);
      const leftovers = (await tree(path.join(root, BUCKET))).filter((f) => f.includes('.tmp-'));
      expect(leftovers).toEqual([]);
    });

    it('survives what a crashed writer leaves: temp file, stale lock, unindexed version', async () => {
      const p = randomPrefix();
      const key = `${p}crashed.txt`;
      const first = await store._put(BUCKET, key, Buffer.from('before the crash'));
      // The layout (drivers/local/layout.ts): folder `t-…/` is the directory `d.t-…`, object
      // `crashed.txt` the directory `o.crashed.txt` holding its versions; the folder also holds
      // an index entry per version and, while a write is in flight, `p.crashed.txt`.
      const folder = path.join(root, BUCKET, `d.${p.slice(0, -1)}`);
      const dir = path.join(folder, 'o.crashed.txt');
      expect(await fs.readdir(dir)).toEqual([expect.stringMatching(/^\d{17}-/)]);
      // A writer killed mid-put two hours ago: a temp file and its lock directory; and the temp
      // file of a write in flight right now.
      await fs.writeFile(path.join(dir, '.tmp-99999-abcdef'), 'partial');
      await fs.writeFile(path.join(dir, '.tmp-99998-live'), 'in flight');
      await fs.mkdir(path.join(dir, '.lock'));
      const old = new Date(Date.now() - 2 * 3600_000);
      await fs.utimes(path.join(dir, '.lock'), old, old);
      await fs.utimes(path.join(dir, '.tmp-99999-abcdef'), old, old);
      expect(await text((await store._get(BUCKET, key)).body)).toBe('before the crash');
      // A writer killed after publishing a version but before indexing it in the folder.
      const crashed = Buffer.from('published, not indexed');
      const md5 = createHash('md5').update(crashed).digest('hex');
      const ticks = String(Number((first.versionId as string).slice(0, 17)) + 1000).padStart(
        17,
        '0',
      );
      const crashedId = `${ticks}-0badc0de`;
      await fs.writeFile(path.join(dir, `${crashedId}.${crashed.length}.${md5}`), crashed);
      await fs.writeFile(path.join(folder, 'p.crashed.txt'), '');
      // Readers see it, in listings too (the pending marker says: do not trust the index).
      expect(await store._versionOf(BUCKET, key)).toBe(crashedId);
      const listed = (await all(store._pages(BUCKET, p))).flatMap((page) => page.objects);
      expect(listed.map((o) => [o.key, o.version, o.size])).toEqual([
        [key, crashedId, crashed.length],
      ]);
      // The next write takes the stale lock over, repairs the index and clears the marker.
      const second = await store._put(BUCKET, key, Buffer.from('after'));
      expect(await store._versionOf(BUCKET, key)).toBe(second.versionId);
      const ids = [second.versionId, crashedId, first.versionId];
      expect((await all(store._history(BUCKET, key))).map((r) => r.versionId)).toEqual(ids);
      const entries = await fs.readdir(folder);
      expect(entries).not.toContain('p.crashed.txt');
      expect(entries.filter((e) => e.startsWith('v.crashed.txt.'))).toHaveLength(3);
      const left = await fs.readdir(dir);
      expect(left).not.toContain('.lock');
      expect(left).not.toContain('.tmp-99999-abcdef');
      expect(left).toContain('.tmp-99998-live');
    });

    it('gives later writes larger version IDs, even within one millisecond', async () => {
      const key = `${randomPrefix()}fast.txt`;
      const ids: string[] = [];
      for (let i = 0; i < 30; i++) {
        ids.push((await store._put(BUCKET, key, Buffer.from(String(i)))).versionId as string);
      }
      expect(ids).toEqual([...ids].sort());
      expect(new Set(ids).size).toBe(30);
      expect(await text((await store._get(BUCKET, key)).body)).toBe('29');
    });

    it('has exactly one winner among concurrent creates in one process', async () => {
      const key = `${randomPrefix()}inproc.txt`;
      const results = await Promise.allSettled(
        Array.from({ length: 10 }, (_, i) => store._create(BUCKET, key, Buffer.from(`c${i}`))),
      );
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r) => r.status === 'rejected');
      expect(won).toHaveLength(1);
      for (const r of lost) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(Exists);
    });
  });

  describe('many processes', () => {
    beforeAll(() => {
      // The children import dist/: refuse to test a build older than the source.
      requireFreshBuild(repo, 'drivers/local', 'local-store.js');
    });

    function run(
      script: string,
      args: string[],
    ): Promise<{ code: number; stdout: string; stderr: string }> {
      return new Promise((resolve) => {
        execFile(
          process.execPath,
          [path.join(here, '..', 'fixtures', script), ...args],
          { cwd: repo, timeout: 120_000 },
          (error, stdout, stderr) => {
            const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
            resolve({ code, stdout, stderr });
          },
        );
      });
    }

    it('8 processes putting 20 versions of one key each lose and corrupt nothing', async () => {
      const key = `${randomPrefix()}contended.bin`;
      const startAt = String(Date.now() + 1500);
      const children = Array.from({ length: 8 }, (_, w) =>
        run('local-put-versions.mjs', [root, BUCKET, key, String(w), '20', startAt, cache]),
      );
      // Meanwhile, read the key over and over: every read is one whole version.
      let reading = true;
      let reads = 0;
      const reader = (async () => {
        while (reading) {
          try {
            checkBody(await bytes((await store._get(BUCKET, key)).body));
            reads++;
          } catch (error) {
            if (!(error instanceof NotFound)) throw error;
          }
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      const results = await Promise.all(children);
      reading = false;
      await reader;
      for (const r of results) expect(r.stderr).toBe('');
      expect(results.map((r) => r.code)).toEqual(Array(8).fill(0));
      const written = results.flatMap((r) =>
        r.stdout
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { writer: string; i: number; versionId: string }),
      );
      expect(written).toHaveLength(160);

      const history = await all(store._history(BUCKET, key));
      expect(history).toHaveLength(160);
      expect(new Set(history.map((r) => r.versionId))).toEqual(
        new Set(written.map((w) => w.versionId)),
      );
      expect(history.filter((r) => r.current)).toHaveLength(1);
      const ids = history.map((r) => r.versionId);
      expect(ids).toEqual([...ids].sort().reverse());
      // Each writer's versions are in the order it wrote them.
      for (let w = 0; w < 8; w++) {
        const mine = written.filter((x) => x.writer === String(w)).map((x) => x.versionId);
        expect(mine).toEqual([...mine].sort());
      }
      const seen = new Set<string>();
      for (const record of history) {
        const body = await bytes((await store._getVersion(BUCKET, key, record.versionId)).body);
        expect(body.length).toBe(record.size);
        seen.add(checkBody(body));
      }
      expect(seen.size).toBe(160);
      expect(reads).toBeGreaterThan(0);
    });

    it('8 processes racing to create one key: exactly one wins, the others get Exists', async () => {
      const key = `${randomPrefix()}race.txt`;
      const startAt = String(Date.now() + 1500);
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, w) =>
          run('local-create-race.mjs', [root, BUCKET, key, String(w), startAt, cache]),
        ),
      );
      for (const r of results) expect(r.stderr).toBe('');
      const winners = results.filter((r) => r.code === 0);
      expect(winners).toHaveLength(1);
      expect(results.filter((r) => r.code === 4 && r.stdout.trim() === 'exists')).toHaveLength(7);
      const versionId = (winners[0] as { stdout: string }).stdout.trim().split(' ')[1];
      const history = await all(store._history(BUCKET, key));
      expect(history.map((r) => r.versionId)).toEqual([versionId]);
      const winner = results.indexOf(winners[0] as (typeof results)[number]);
      expect(await text((await store._get(BUCKET, key)).body)).toBe(`created by ${winner}`);
    });
  });
});

/** Check a body written by local-put-versions.mjs; returns its `writer=.. i=..` header. */
function checkBody(body: Buffer): string {
  const newline = body.indexOf(0x0a);
  const header = body.subarray(0, newline).toString('utf8');
  expect(header).toMatch(/^writer=\d i=\d+$/);
  const digest = createHash('sha256')
    .update(body.subarray(0, body.length - 32))
    .digest();
  expect(digest.equals(body.subarray(body.length - 32))).toBe(true);
  return header;
}
