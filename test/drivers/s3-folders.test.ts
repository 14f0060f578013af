/**
 * The folder flows (push, commit --from, diff, rm -r) on S3 (Ceph): the shared suite on a
 * versioned bucket, then what is S3's own — the requests a push makes, counted at the SDK; large
 * objects with multipart ETags, recognized by the SHA-256 a push records as `x-amz-meta-sha256`
 * (returned by HEAD, on the lean path and the SDK's, never by a listing); and the CLI, including a
 * commit that fails after its push on a bucket without versions.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HeadObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { S3Store, type S3StoreOptions } from '../../drivers/s3/index.js';
import { randomPrefix } from '../../src/testing/target.js';
import {
  createTestBucket,
  describeS3,
  dropTestBucket,
  s3TestTarget,
  testS3Client,
} from '../setup/s3.js';
import { folderFlows, sampleTree, writeTree } from '../support/folder-flows.js';

const MiB = 1024 * 1024;

function tmp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-${label}-`));
}

/** A client that counts the commands it sends (once per command, not per retry). */
function countingClient(): { client: S3Client; counts: Map<string, number> } {
  const counts = new Map<string, number>();
  const client = testS3Client();
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = context.commandName ?? '?';
      counts.set(name, (counts.get(name) ?? 0) + 1);
      return next(args);
    },
    { step: 'initialize', name: 'provcatTestCount' },
  );
  return { client, counts };
}

describeS3('folder flows on S3', () => {
  let bucket = '';
  // On AWS the shared bucket: everything this file writes (but commit logs) stays below it.
  const prefix = `s3f-${Date.now()}/`;
  const store = (o: S3StoreOptions = {}) =>
    new S3Store({ createFallback: 'oldest-version-wins', ...o });

  beforeAll(async () => {
    bucket = await createTestBucket('ff', { versioning: true });
  });
  afterAll(() => dropTestBucket(bucket, prefix), 300_000);

  folderFlows({
    name: 'S3',
    store: (o) => store(o),
    get bucket() {
      return bucket;
    },
    scheme: 's3',
    root: prefix,
  });

  it('a second push of an unchanged folder sends one ListObjectsV2 and nothing else', async () => {
    const dir = tmp('s3f-count');
    writeTree(dir, sampleTree(200));
    const uri = `s3://${bucket}/${prefix}count/`;
    const first = countingClient();
    const a = store({ cache: tmp('s3f-cache'), client: first.client });
    expect(await a.push(dir, uri)).toMatchObject({ uploaded: 208, skipped: 0 });
    expect(first.counts.get('PutObjectCommand')).toBe(208);
    const second = countingClient();
    const b = store({ cache: tmp('s3f-cache'), client: second.client });
    expect(await b.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 208 });
    expect(Object.fromEntries(second.counts)).toEqual({ ListObjectsV2Command: 1 });
    writeTree(dir, { 'd5/e2/f5.txt': 'FILE 5\n' });
    const third = countingClient();
    const c = store({ cache: tmp('s3f-cache'), client: third.client });
    expect(await c.push(dir, uri)).toMatchObject({ uploaded: 1, skipped: 207 });
    expect(Object.fromEntries(third.counts)).toEqual({
      ListObjectsV2Command: 1,
      PutObjectCommand: 1,
    });
    for (const s of [a, b, c]) await s.close();
    for (const x of [first, second, third]) x.client.destroy();
  }, 120_000);

  it('large files: the SHA-256 a push records proves a multipart object unchanged with one HEAD, on the lean path and the SDK path', async () => {
    const dir = tmp('s3f-big');
    const bytes = Buffer.alloc(11 * MiB, 7);
    writeFileSync(path.join(dir, 'weights.bin'), bytes);
    writeTree(dir, { 'config.json': '{"layers":2}\n' });
    const uri = `s3://${bucket}/${prefix}big/`;
    const sizes = { multipartThreshold: 5 * MiB, partSize: 5 * MiB };
    const lean = store({ cache: tmp('s3f-cache'), ...sizes });
    expect(await lean.push(dir, uri)).toMatchObject({ uploaded: 2, bytes: 11 * MiB + 13 });
    const raw = testS3Client();
    const head = await raw.send(
      new HeadObjectCommand({ Bucket: bucket, Key: `${prefix}big/weights.bin` }),
    );
    expect(head.ETag).toMatch(/^"[0-9a-f]{32}-3"$/);
    expect(head.Metadata?.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    // The small file went in one PutObject, with its SHA-256 recorded too.
    const small = await raw.send(
      new HeadObjectCommand({ Bucket: bucket, Key: `${prefix}big/config.json` }),
    );
    expect(small.Metadata?.sha256).toBe(
      createHash('sha256').update('{"layers":2}\n').digest('hex'),
    );
    raw.destroy();

    // Unchanged, through the lean HEAD: one HEAD (for the multipart object), no upload.
    const heads = vi.spyOn(lean, '_head');
    const puts = vi.spyOn(lean, '_put');
    expect(await lean.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 2 });
    expect(heads).toHaveBeenCalledTimes(1);
    expect(puts).not.toHaveBeenCalled();
    vi.restoreAllMocks();

    // Unchanged, through the SDK's HeadObject.
    const counted = countingClient();
    const sdk = store({ cache: tmp('s3f-cache'), client: counted.client, ...sizes });
    expect(await sdk.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 2 });
    expect(Object.fromEntries(counted.counts)).toEqual({
      ListObjectsV2Command: 1,
      HeadObjectCommand: 1,
    });

    // Same size, other bytes: the recorded SHA-256 differs, so it is sent.
    bytes[5 * MiB + 1] = 8;
    writeFileSync(path.join(dir, 'weights.bin'), bytes);
    counted.counts.clear();
    expect(await sdk.push(dir, uri)).toMatchObject({ uploaded: 1, skipped: 1 });
    expect(counted.counts.get('UploadPartCommand')).toBe(3);
    const fetched = await sdk.fetch(`${uri}weights.bin`);
    expect((await readFile(fetched.path)).equals(bytes)).toBe(true);

    // A multipart object written without a recorded SHA-256 proves nothing: it is sent again.
    await sdk._put(bucket, `${prefix}big/weights.bin`, path.join(dir, 'weights.bin'));
    counted.counts.clear();
    expect(await sdk.push(dir, uri)).toMatchObject({ uploaded: 1, skipped: 1 });
    expect(counted.counts.get('UploadPartCommand')).toBe(3);
    await lean.close();
    await sdk.close();
    counted.client.destroy();
  }, 180_000);

  /** The command users run: the bundled executable (scripts/bundle-cli.mjs). */
  const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');
  const run = (env: Record<string, string>, ...args: string[]) => {
    const r = spawnSync(process.execPath, [BIN, ...args], {
      env: { ...process.env, PROVCAT_S3_CREATE_FALLBACK: 'oldest-version-wins', ...env },
      encoding: 'utf8',
    });
    return { code: r.status, out: r.stdout, err: r.stderr };
  };

  it.runIf(process.env.PROVCAT_TEST_S3 === 'ceph')(
    'the CLI: push, commit --from, diff, rm -r; a commit that fails after its push on a bucket without versions',
    async () => {
      expect(s3TestTarget().kind).toBe('ceph');
      const env = { PROVCAT_CACHE_DIR: tmp('s3f-cli-cache') };
      const out = tmp('s3f-cli');
      writeTree(out, sampleTree(30));
      const uri = `s3://${bucket}/${prefix}${randomPrefix('cli')}`;
      const pushed = run(env, 'push', out, uri, '--json');
      expect(pushed.code, pushed.err).toBe(0);
      expect(JSON.parse(pushed.out)).toMatchObject({ uploaded: 38, skipped: 0, deleted: 0 });
      const c1 = run(env, 'commit', uri, '-m', 'one', '--from', out, '--json');
      expect(c1.code, c1.err).toBe(0);
      const first = JSON.parse(c1.out);
      expect(first.push).toEqual({ uploaded: 0, skipped: 38, deleted: 0, bytes: 0 });
      writeTree(out, { 'odd/emoji 🎉.txt': 'party\n' });
      const c2 = run(env, 'commit', uri, '-m', 'two', '--from', out, '--json');
      expect(c2.code, c2.err).toBe(0);
      const second = JSON.parse(c2.out).uri;
      const diff = JSON.parse(run(env, 'diff', first.uri, second, '--json').out);
      expect(diff.added).toEqual([]);
      expect(diff.removed).toEqual([]);
      expect(diff.changed.map((c: { path: string }) => c.path)).toEqual(['odd/emoji 🎉.txt']);
      const offline = run({ ...env, PROVCAT_OFFLINE: '1' }, 'diff', first.uri, second, '--json');
      expect(offline.code, offline.err).toBe(0);
      expect(JSON.parse(offline.out)).toEqual(diff);
      const rm = run(env, 'rm', '-r', uri, '--json');
      expect(rm.code, rm.err).toBe(0);
      expect(JSON.parse(rm.out)).toEqual({ uri, deleted: 38 });
      expect(JSON.parse(run(env, 'log', uri, '--json').out)).toHaveLength(2);

      // No versions: the push goes through, the commit cannot be made.
      const plain = await createTestBucket('ffp');
      try {
        const target = `s3://${plain}/run/`;
        const r = run(env, 'commit', target, '-m', 'x', '--from', out);
        expect(r.code).toBe(11);
        expect(r.err).toMatch(
          /^provcat: NotCommitted: pushed .* \(38 sent, 0 unchanged, 0 deleted\), but no commit was made: NotSupported: .*keeps no versions/,
        );
        expect(JSON.parse(run(env, 'walk', target, '--json').out)).toHaveLength(38);
      } finally {
        await dropTestBucket(plain, '');
      }
    },
    180_000,
  );
});
