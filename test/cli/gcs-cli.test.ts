/**
 * The `provcat` executable (dist/cli/provcat.cjs, `npm run build` first) on `gs://` URIs against
 * the GCS test server, reached through STORAGE_EMULATOR_HOST exactly as a script would: `mb`
 * with and without `--versioning`, the file verbs, pins, commits, log, branch, and the
 * managed-object verbs on a `gs://` stage string, with their exit codes.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Storage } from '@google-cloud/storage';
import { afterAll, describe, expect, it } from 'vitest';
import { startGcsServer } from '../../servers/gcs/server.js';
import { startFaultProxy } from '../../src/testing/fault-proxy.js';
import { sha256sum, writeRandomFile } from '../fixtures/lake-helpers.js';

const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');
const server = await startGcsServer();
const admin = new Storage({ apiEndpoint: server.url, projectId: 'test' });
const dir = await mkdtemp(path.join(tmpdir(), 'gcs-cli-'));
afterAll(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

/** Run the CLI (asynchronously: the server answers from this process's event loop). */
function run(
  ...args: string[]
): Promise<{ code: number | null; out: string; bytes: Buffer; err: string }> {
  return runAt(server.url, args);
}

/** {@link run} against `host` (a proxy in front of the server). */
function runAt(
  host: string,
  args: string[],
): Promise<{ code: number | null; out: string; bytes: Buffer; err: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      env: {
        ...process.env,
        STORAGE_EMULATOR_HOST: host,
        PROVCAT_CACHE_DIR: path.join(dir, 'cache'),
        NODE_NO_WARNINGS: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out.push(d);
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      const bytes = Buffer.concat(out);
      resolve({ code, out: bytes.toString('utf8'), bytes, err });
    });
  });
}

async function json(...args: string[]): Promise<unknown> {
  const r = await run(...args, '--json');
  expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(0);
  return JSON.parse(r.out);
}

const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
const versioned = unique('cli');
const plain = unique('clip');
await admin.createBucket(versioned, { versioning: { enabled: true } });
await admin.createBucket(plain);

describe('provcat CLI on gs://', () => {
  it('mb makes buckets with and without versioning, and refuses a URI that is not a bucket', async () => {
    const versioned = unique('mbv');
    const plain = unique('mb');
    expect(await json('mb', `gs://${versioned}`, '--versioning')).toEqual({
      uri: `gs://${versioned}/`,
      versioning: true,
    });
    expect(await json('mb', `gs://${plain}`)).toEqual({ uri: `gs://${plain}/`, versioning: false });
    const enabled = async (b: string) =>
      (await admin.bucket(b).getMetadata())[0].versioning?.enabled;
    expect(await enabled(versioned)).toBe(true);
    expect(await enabled(plain)).not.toBe(true);
    expect((await run('mb', `gs://${plain}/not-a-bucket/`)).code).toBe(2);
  });

  it('put, stat, ls, walk, fetch, rm; pin, commit, log, branch', async () => {
    const local = path.join(dir, 'x.txt');
    await writeFile(local, 'hello');
    const root = `gs://${versioned}/main/`;
    expect(await json('put', local, `${root}a/x.txt`)).toMatchObject({
      uri: `${root}a/x.txt`,
      size: 5,
    });
    expect(await json('put', local, `${root}b.txt`)).toMatchObject({ kind: 'file' });
    expect(await json('stat', `${root}a/x.txt`)).toMatchObject({ kind: 'file', size: 5 });
    expect(((await json('ls', root)) as { uri: string }[]).map((e) => e.uri)).toEqual([
      `${root}a/`,
      `${root}b.txt`,
    ]);
    expect(((await json('walk', root)) as { uri: string }[]).map((e) => e.uri)).toEqual([
      `${root}a/x.txt`,
      `${root}b.txt`,
    ]);
    const fetched = (await json('fetch', root)) as {
      path: string;
      files: number;
      downloaded: number;
    };
    expect(fetched).toMatchObject({ files: 2, downloaded: 2 });
    expect(await readFile(path.join(fetched.path, 'a/x.txt'), 'utf8')).toBe('hello');
    expect(await json('fetch', root)).toMatchObject({ files: 2, downloaded: 0 });

    const pin = (await json('pin', `${root}a/x.txt`)) as { uri: string };
    expect(pin.uri).toMatch(/\?at=version:\d+$/);
    const commit = (await json('commit', root, '-m', 'first')) as { uri: string };
    expect(commit.uri).toMatch(/\?at=commit:[0-9a-f]{64}$/);
    await writeFile(local, 'changed!');
    await json('put', local, `${root}a/x.txt`);
    expect(await json('rm', `${root}b.txt`)).toEqual({ uri: `${root}b.txt`, deleted: true });
    expect((await run('rm', `${root}b.txt`)).code).toBe(3);
    const atCommit = (await json('fetch', commit.uri)) as { path: string; files: number };
    expect(atCommit.files).toBe(2);
    expect(await readFile(path.join(atCommit.path, 'a/x.txt'), 'utf8')).toBe('hello');
    expect(await json('stat', pin.uri)).toMatchObject({ size: 5 });
    const log = (await json('log', root)) as { number: number; message: string }[];
    expect(log.map((e) => [e.number, e.message])).toEqual([[1, 'first']]);
    const branch = (await json('branch', `gs://${versioned}/dev/`, commit.uri)) as { uri: string };
    expect(branch.uri).toBe(`gs://${versioned}/dev/`);
    expect(((await json('walk', branch.uri)) as { uri: string }[]).map((e) => e.uri)).toEqual([
      `gs://${versioned}/dev/a/x.txt`,
      `gs://${versioned}/dev/b.txt`,
    ]);
    // No versions on the plain bucket: pin, commit, log and branch are NotSupported (exit 11),
    // as on every driver; an error at a version names the URI given, ?at=version: and all.
    await json('put', local, `gs://${plain}/y.txt`);
    await json('put', local, `gs://${plain}/main/z.txt`);
    for (const args of [
      ['pin', `gs://${plain}/y.txt`],
      ['commit', `gs://${plain}/`, '-m', 'm'],
      ['log', `gs://${plain}/`],
      ['branch', `gs://${plain}/dev/`, 'main'],
      ['stat', `gs://${plain}/y.txt?at=version:123`],
    ]) {
      const refused = await run(...args);
      expect(refused.code, `${args.join(' ')}: ${refused.err}`).toBe(11);
      expect(refused.err).toMatch(/^provcat: NotSupported: /);
    }
    const missing = await run('stat', `${root}a/x.txt?at=version:abc`);
    expect(missing.code).toBe(3);
    expect(missing.err).toContain(`${root}a/x.txt?at=version:abc`);
    // Offline, nothing connects: OfflineMiss (exit 5) and no request.
    const before = server.log.length;
    expect((await run('stat', `${root}a/x.txt`, '--offline')).code).toBe(5);
    expect(server.log.length).toBe(before);
  }, 120_000);

  it('upload, cat and verify on a gs:// stage string; a corrupted object exits 6', async () => {
    const stage = `gs://${versioned}/lake/`;
    const file = path.join(dir, 'big.bin');
    await writeRandomFile(file, 6 * 1024 * 1024 + 12_345);
    const loc = (await json('upload', file, '--stage', stage)) as { uri: string; sha256: string };
    expect(loc.uri.startsWith(stage)).toBe(true);
    expect(loc.sha256).toBe(await sha256sum(file));
    const out = path.join(dir, 'out.bin');
    const cat = await run('cat', JSON.stringify(loc), '--stage', stage, '-o', out);
    expect(cat.code, cat.err).toBe(0);
    expect((await readFile(out)).equals(await readFile(file))).toBe(true);
    const ranged = await run('cat', JSON.stringify(loc), '--stage', stage, '--range', '10:20');
    expect(ranged.bytes.equals((await readFile(file)).subarray(10, 20))).toBe(true);
    expect((await run('verify', JSON.stringify(loc), '--stage', stage)).code).toBe(0);
    await admin
      .bucket(versioned)
      .file(loc.uri.slice(`gs://${versioned}/`.length))
      .save(Buffer.from('not the bytes'), { resumable: false });
    const bad = await run('verify', JSON.stringify(loc), '--stage', stage);
    expect(bad.code).toBe(6);
    expect(bad.err).toMatch(/ObjectIntegrityError/);
    expect(
      (await run('verify', JSON.stringify(loc), '--stage', `gs://${versioned}/other/`)).code,
    ).toBe(6);
  }, 120_000);

  it('an upload whose session create stalls for ever exits typed within its bound', async () => {
    // The SDK's create takes no signal: the engine abandons it at the stall bound, and the
    // process must not then wait for a request that never ends (seen in the fault suite).
    const proxy = await startFaultProxy({
      target: server.url,
      faults: [
        { kind: 'stall', direction: 'request', ms: Number.POSITIVE_INFINITY, method: 'POST' },
      ],
    });
    try {
      const file = path.join(dir, 'stalled.bin');
      await writeRandomFile(file, 6 * 1024 * 1024);
      const started = Date.now();
      const r = await runAt(proxy.url, [
        'upload',
        file,
        '--stage',
        `gs://${versioned}/stalled/`,
        '--stall-timeout',
        '1',
      ]);
      const seconds = (Date.now() - started) / 1000;
      expect(r.code, r.err).toBe(7);
      expect(r.err).toMatch(/^provcat: StoreError: .*creating a resumable session got no answer/m);
      // 3 attempts of 1 s and their backoff, and a process start: far from the 30 s a hang
      // would show.
      expect(seconds).toBeLessThan(20);
    } finally {
      await proxy.close();
    }
  }, 60_000);
});
