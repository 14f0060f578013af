/**
 * The stall timeout bounds every request of an upload in parts, not only the parts
 * (src/upload/requests.ts `boundedRequest`): a create, a part listing, a completion or an abort that
 * gets no answer within it is cancelled and sent again per the retry policy, and when every
 * attempt stalls the upload fails with a typed error in bounded time — `UploadStalled` for a
 * completion (the upload then aborted, or kept for a resume), a `StoreError` for a create or a
 * listing. A completion whose answer was lost and whose retry finds the upload gone is a
 * `StoreError` saying it may have landed; a resumable upload's next attempt then finds the object
 * and accepts it by its size and SHA-256.
 *
 * Against a protocol-level fake S3 (node:http) that holds chosen requests without answering, and
 * against Ceph through the fault proxy stalling CompleteMultipartUpload (`POST …?uploadId=`), in
 * process and through `provcat upload --stall-timeout`.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { S3Store } from '../../drivers/s3/index.js';
import { StoreError, UploadStalled } from '../../src/core/errors.js';
import { stageFromDescriptor } from '../../src/lake/index.js';
import { type CliRun, runCli } from '../../src/testing/fault-cli.js';
import { type FaultProxy, startFaultProxy } from '../../src/testing/fault-proxy.js';
import { rejection } from '../../src/testing/rejection.js';
import {
  MiB,
  openUploads,
  readObject,
  s3Descriptor,
  s3Endpoint,
  testClient,
} from '../fixtures/lake-helpers.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';
import { FAKE_UPLOAD_ID, type FakeOp, type FakeS3, fakeS3s } from '../support/fake-s3.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-request-stall-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The stall timeout of the in-process tests. */
const STALL_MS = 1000;
/**
 * The most an upload whose request stalls on every attempt may take: three attempts of
 * `STALL_MS`, their backoff (under a second) and the abort, with room for a loaded machine.
 */
const BOUND_MS = 12 * STALL_MS;

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

// ---- the fake S3 (test/support/fake-s3.ts) ------------------------------------------------

const s3s = fakeS3s();
const fake = s3s.fake;
const fakeClient = s3s.client;

function fakeStore(endpoint: string) {
  return new S3Store({
    client: fakeClient(endpoint),
    cache: path.join(work, 'cache'),
    partSize: 5 * MiB,
    partsInFlight: 2,
    multipartThreshold: 0,
    stallTimeoutMs: STALL_MS,
  });
}

/** 12 MiB of random bytes: three parts of 5, 5 and 2 MiB. */
const data = randomBytes(12 * MiB);

/** Time `call`; return how long it took and what it gave or threw. */
async function timed<T>(call: () => Promise<T>): Promise<{ ms: number; result: Promise<T> }> {
  const start = performance.now();
  const result = call();
  await result.catch(() => {});
  return { ms: performance.now() - start, result };
}

/**
 * The requests of `op` the fake held: each was cancelled by the client (its connection closed;
 * the server sees that a moment after the client gave up).
 */
async function heldWereCancelled(f: FakeS3, op: FakeOp): Promise<void> {
  const held = f.requests.filter((r) => r.op === op && !r.answered);
  expect(held.length).toBeGreaterThan(0);
  for (let i = 0; i < 40 && !held.every((r) => r.closed); i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  expect(held.every((r) => r.closed)).toBe(true);
}

describe('requests of an upload that are not parts (fake S3)', () => {
  it('a completion that never answers is sent again, and the upload succeeds', async () => {
    const f = await fake((op, attempt) => (op === 'complete' && attempt === 1 ? 'hang' : 'answer'));
    const { ms, result } = await timed(() => fakeStore(f.endpoint).put('s3://b/obj', data));
    const info = await result;
    expect(info.size).toBe(data.length);
    expect(ms).toBeGreaterThanOrEqual(STALL_MS - 50);
    expect(ms).toBeLessThan(BOUND_MS);
    expect(f.count('complete')).toBe(2);
    expect(f.count('abort')).toBe(0);
    await heldWereCancelled(f, 'complete');
  });

  it('a completion that never answers on any attempt is UploadStalled in bounded time, the upload aborted', async () => {
    const f = await fake((op) => (op === 'complete' ? 'hang' : 'answer'));
    const { ms, result } = await timed(() => fakeStore(f.endpoint).put('s3://b/obj', data));
    const error = await rejection(result);
    expect(error).toBeInstanceOf(UploadStalled);
    const stalled = error as UploadStalled;
    expect(stalled.outcome).toBe('aborted');
    expect(stalled.uploadId).toBe(FAKE_UPLOAD_ID);
    expect(stalled.stalledMs).toBe(STALL_MS);
    expect(stalled.message).toContain(`completing multipart upload ${FAKE_UPLOAD_ID}`);
    expect(stalled.message).toContain('got no answer within 1.0 s (attempt 3 of 3)');
    expect((stalled.cause as Error).name).toBe('TimeoutError');
    expect(ms).toBeGreaterThanOrEqual(3 * STALL_MS - 50);
    expect(ms).toBeLessThan(BOUND_MS);
    expect(f.count('complete')).toBe(3);
    expect(f.count('abort')).toBe(1);
    await heldWereCancelled(f, 'complete');
  });

  it('a completion whose answer is lost, sent again to find the upload gone, says it may have landed', async () => {
    const f = await fake((op, attempt) =>
      op === 'complete' && attempt === 1 ? 'complete-hang' : 'answer',
    );
    const { ms, result } = await timed(() => fakeStore(f.endpoint).put('s3://b/obj', data));
    const error = await rejection(result);
    expect(error).toBeInstanceOf(StoreError);
    expect(error).not.toBeInstanceOf(UploadStalled);
    expect((error as Error).message).toMatch(
      /found the upload gone: the stalled attempt may have completed it/,
    );
    expect((error as StoreError).uri).toBe('s3://b/obj');
    expect(((error as Error).cause as Error).name).toBe('NotFound');
    expect(ms).toBeLessThan(BOUND_MS);
    expect(f.count('complete')).toBe(2);
  });

  it('a create that never answers is sent again; on every attempt it is a StoreError, no part sent', async () => {
    const once = await fake((op, attempt) =>
      op === 'create' && attempt === 1 ? 'hang' : 'answer',
    );
    expect((await fakeStore(once.endpoint).put('s3://b/obj', data)).size).toBe(data.length);
    expect(once.count('create')).toBe(2);
    await heldWereCancelled(once, 'create');

    const always = await fake((op) => (op === 'create' ? 'hang' : 'answer'));
    const { ms, result } = await timed(() => fakeStore(always.endpoint).put('s3://b/obj', data));
    const error = await rejection(result);
    expect(error).toBeInstanceOf(StoreError);
    expect(error).not.toBeInstanceOf(UploadStalled);
    expect((error as StoreError).status).toBeUndefined();
    expect((error as Error).message).toContain('creating a multipart upload got no answer');
    expect(((error as Error).cause as Error).name).toBe('TimeoutError');
    expect(ms).toBeLessThan(BOUND_MS);
    expect(always.count('create')).toBe(3);
    expect(always.count('part')).toBe(0);
  });

  it('an abort that never answers ends too: the stalled upload says its abort failed', async () => {
    // Part 2 is never answered (the watchdog fires), then every abort hangs.
    const f = await fake((op, _attempt, part) =>
      (op === 'part' && part === 2) || op === 'abort' ? 'hang' : 'answer',
    );
    const { ms, result } = await timed(() => fakeStore(f.endpoint).put('s3://b/obj', data));
    const error = await rejection(result);
    expect(error).toBeInstanceOf(UploadStalled);
    expect((error as UploadStalled).outcome).toBe('abort-failed');
    expect(ms).toBeLessThan(BOUND_MS + STALL_MS);
    expect(f.count('abort')).toBe(3);
    await heldWereCancelled(f, 'abort');
  });

  it('a resumable upload: a stalled listing is sent again, and a lost completion is recovered by size and SHA-256', async () => {
    const file = path.join(work, 'resume.bin');
    await writeFile(file, data);
    const checkpointDir = path.join(work, 'checkpoints');
    const stageOn = (endpoint: string) =>
      stageFromDescriptor(s3Descriptor('stall-bucket', 'p', endpoint), {
        client: fakeClient(endpoint),
        partSize: 5 * MiB,
      });
    const options = { checkpointDir, partsInFlight: 1, stallTimeoutMs: STALL_MS };
    // 1. The completion is carried out but its answer lost; the retry finds the upload gone.
    const f = await fake((op, attempt) => {
      if (op === 'complete') return attempt === 1 ? 'complete-hang' : 'gone';
      if (op === 'list') return attempt === 1 ? 'hang' : 'answer';
      return 'answer';
    });
    const error = await rejection(stageOn(f.endpoint).upload(file, options));
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toContain('may have completed it');
    expect(await readdir(checkpointDir)).toHaveLength(1);
    // 2. The retry's listing stalls once, is sent again, says the upload is gone; the object is
    // there with the source's size and SHA-256: the upload is done.
    const location = await stageOn(f.endpoint).upload(file, options);
    expect(location.sha256).toBe(sha256(data));
    expect(location.sizeBytes).toBe(data.length);
    expect(f.count('list')).toBe(2);
    await heldWereCancelled(f, 'list');
    expect(f.count('get')).toBe(1);
    expect(f.count('create')).toBe(1);
    expect(await readdir(checkpointDir)).toEqual([]);
  });

  it('a resumable upload whose listing never answers fails with a StoreError and keeps its checkpoint', async () => {
    const file = path.join(work, 'resume-list.bin');
    await writeFile(file, data);
    const checkpointDir = path.join(work, 'checkpoints-list');
    // The first attempt stalls on part 2 (kept for a resume); every listing then hangs.
    const f = await fake((op, _attempt, part) =>
      (op === 'part' && part === 2) || op === 'list' ? 'hang' : 'answer',
    );
    const stage = stageFromDescriptor(s3Descriptor('stall-bucket', 'p', f.endpoint), {
      client: fakeClient(f.endpoint),
      partSize: 5 * MiB,
    });
    const options = { checkpointDir, partsInFlight: 1, stallTimeoutMs: STALL_MS };
    const first = await rejection(stage.upload(file, options));
    expect(first).toBeInstanceOf(UploadStalled);
    expect((first as UploadStalled).outcome).toBe('kept');
    const { ms, result } = await timed(() => stage.upload(file, options));
    const error = await rejection(result);
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toContain(
      `listing the parts of multipart upload ${FAKE_UPLOAD_ID}`,
    );
    expect(ms).toBeLessThan(BOUND_MS);
    expect(f.count('list')).toBe(3);
    expect(await readdir(checkpointDir)).toHaveLength(1);
  });
});

// ---- Ceph through the fault proxy ------------------------------------------------------

describeS3('a stalled CompleteMultipartUpload on S3 (Ceph, fault proxy)', () => {
  let bucket: string;
  let proxy: FaultProxy;
  const admin = () => {
    const c = testClient();
    s3s.track(c);
    return c;
  };
  /** CompleteMultipartUpload: `POST /<bucket>/<key>?uploadId=…`. */
  const complete = /[?&]uploadId=/;

  beforeAll(async () => {
    bucket = await createTestBucket('complete-stall');
    proxy = await startFaultProxy({ target: s3Endpoint() });
  });
  afterEach(() => proxy.set([]));
  afterAll(async () => {
    await proxy?.close();
    await dropTestBucket(bucket, 'stall/');
  });

  const viaProxy = () =>
    new S3Store({
      cache: path.join(work, 'cache-ceph'),
      endpoint: proxy.url,
      partSize: 5 * MiB,
      multipartThreshold: 5 * MiB,
      stallTimeoutMs: STALL_MS,
    });

  it.each([
    ['request', 'request'],
    ['answer (Ceph did complete it)', 'response'],
  ] as const)(
    'a completion whose %s stalls for ever is sent again: the object is exact',
    async (_label, direction) => {
      const key = `stall/${direction}.bin`;
      proxy.set([
        {
          kind: 'stall',
          direction,
          ms: Number.POSITIVE_INFINITY,
          method: 'POST',
          path: complete,
          next: 1,
        },
      ]);
      const store = viaProxy();
      const stallsBefore = proxy.stats().faults.stall;
      const { ms, result } = await timed(() =>
        store.put(`s3://${bucket}/${key}`, Readable.from([data])),
      );
      expect((await result).size).toBe(data.length);
      expect(proxy.stats().faults.stall).toBe(stallsBefore + 1);
      expect(ms).toBeLessThan(BOUND_MS);
      expect((await readObject(admin(), bucket, key)).equals(data)).toBe(true);
      expect(await openUploads(admin(), bucket, 'stall/')).toEqual([]);
    },
  );

  it('a completion that stalls on every attempt is UploadStalled in bounded time, nothing left open', async () => {
    proxy.set([
      {
        kind: 'stall',
        direction: 'request',
        ms: Number.POSITIVE_INFINITY,
        method: 'POST',
        path: complete,
      },
    ]);
    const key = 'stall/always.bin';
    const { ms, result } = await timed(() =>
      viaProxy().put(`s3://${bucket}/${key}`, Readable.from([data])),
    );
    const error = await rejection(result);
    expect(error).toBeInstanceOf(UploadStalled);
    expect((error as UploadStalled).outcome).toBe('aborted');
    expect((error as Error).message).toContain('got no answer within 1.0 s (attempt 3 of 3)');
    expect(ms).toBeLessThan(BOUND_MS);
    proxy.set([]);
    expect(await openUploads(admin(), bucket, 'stall/')).toEqual([]);
  });

  it('`provcat upload --stall-timeout 1`: a completion stalled for ever is sent again; exit 0, the object verifies', async () => {
    const file = path.join(work, 'cli.bin');
    const bytes = randomBytes(6 * MiB);
    await writeFile(file, bytes);
    proxy.set([
      {
        kind: 'stall',
        direction: 'request',
        ms: Number.POSITIVE_INFINITY,
        method: 'POST',
        path: complete,
        next: 1,
      },
    ]);
    const env = {
      ...process.env,
      AWS_ENDPOINT_URL_S3: proxy.url,
      PROVCAT_S3_FORCE_PATH_STYLE: '1',
      PROVCAT_CACHE_DIR: path.join(work, 'cache-cli'),
    };
    const stage = `s3://${bucket}/stall/stage/`;
    const stallsBefore = proxy.stats().faults.stall;
    const run: CliRun = await runCli(
      ['upload', file, '--stage', stage, '--stall-timeout', '1', '--json'],
      { env, timeoutMs: 60_000 },
    );
    expect(run.hung).toBe(false);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.ms).toBeLessThan(BOUND_MS + 5000);
    expect(proxy.stats().faults.stall).toBe(stallsBefore + 1);
    const location = JSON.parse(run.stdout) as { uri: string; sha256: string; sizeBytes: number };
    expect(location.sha256).toBe(sha256(bytes));
    const key = location.uri.slice(`s3://${bucket}/`.length);
    expect((await readObject(admin(), bucket, key)).equals(bytes)).toBe(true);
  });
});
