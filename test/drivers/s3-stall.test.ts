/**
 * The multipart engine's stall watchdog (drivers/s3/multipart.ts): an upload whose store stops
 * answering fails with `UploadStalled` in bounded time, without sending any part again after the
 * stall, and with its multipart upload aborted — or kept, with its checkpoint, for a resumable
 * managed upload, which a retry against a healthy server then resumes.
 *
 * Against a protocol-level fake S3 (a node:http server here) that answers
 * CreateMultipartUpload, Complete and Abort, and treats each UploadPart as the test says: answer
 * it, read its body fully and never answer (radosgw with a full OSD), stop reading mid-body, or
 * read it slowly (a slow but moving upload must not trip the watchdog). The resume runs against
 * S3 (Ceph) through a small proxy that swallows some parts, then directly.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_STALL_TIMEOUT_MS } from '../../drivers/s3/config.js';
import { S3Store } from '../../drivers/s3/index.js';
import { sha256Hex } from '../../src/commits/format.js';
import { StoreError, UploadStalled } from '../../src/core/errors.js';
import { parseCheckpoint } from '../../src/lake/checkpoint.js';
import { type Stage, StageConfigError, stageFromDescriptor } from '../../src/lake/index.js';
import { rejection } from '../../src/testing/rejection.js';
import {
  countCalls,
  listening,
  MiB,
  openUploads,
  randomFiles,
  readObject,
  s3Descriptor,
  s3Endpoint,
  testClient,
} from '../fixtures/lake-helpers.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';
import { FAKE_UPLOAD_ID, type FakeS3, fakeS3s } from '../support/fake-s3.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-stall-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The stall timeout of these tests. */
const STALL_MS = 1500;
/** The most a stalled upload may take to fail on a loaded 2-core machine (10 × the timeout). */
const BOUND_MS = 10 * STALL_MS;

/** A file of `size` random bytes under the test directory; returns its path and bytes. */
const randomFile = randomFiles(work);

/** `count` MiB of one random MiB, as a stream (a source of buffered parts). */
function mebibytes(count: number): Readable {
  const block = randomBytes(MiB);
  return Readable.from(
    (function* () {
      for (let i = 0; i < count; i++) yield block;
    })(),
  );
}

/** The checkpoint files in `dir`. */
async function checkpoints(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => f.endsWith('.json')).map((f) => path.join(dir, f));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- the fake S3 (test/support/fake-s3.ts) ------------------------------------------------

/** What the fake does with one UploadPart request (every other request is answered). */
type PartMode = 'answer' | 'swallow' | 'stop' | 'slow' | 'fail';

const s3s = fakeS3s();
const fakeClient = s3s.client;

/** A fake whose parts `mode` decides (`swallow`: read the body fully, never answer). */
function fake(mode: (part: number, attempt: number) => PartMode): Promise<FakeS3> {
  return s3s.fake((op, attempt, part) => {
    if (op !== 'part') return 'answer';
    const how = mode(part as number, attempt);
    return how === 'swallow' ? 'hang' : how;
  });
}

function fakeStore(
  endpoint: string,
  options: {
    partSize?: number;
    partsInFlight?: number;
    socketTimeout?: number;
    stallTimeoutMs?: number;
  } = {},
) {
  return new S3Store({
    client: fakeClient(endpoint, options.socketTimeout),
    cache: path.join(work, 'cache'),
    partSize: options.partSize ?? 5 * MiB,
    partsInFlight: options.partsInFlight ?? 2,
    multipartThreshold: 0,
    stallTimeoutMs: options.stallTimeoutMs ?? STALL_MS,
  });
}

/**
 * Run `upload`, expect `UploadStalled` within the bounds, and check that no part request came
 * after the stall and that every part request the fake holds was cancelled by the client.
 */
async function expectStall(
  f: FakeS3,
  upload: () => Promise<unknown>,
): Promise<{ error: UploadStalled; elapsed: number }> {
  const start = performance.now();
  const error = await rejection(upload());
  const elapsed = performance.now() - start;
  if (!(error instanceof UploadStalled)) throw error;
  expect(elapsed).toBeGreaterThanOrEqual(STALL_MS - 50);
  expect(elapsed).toBeLessThan(BOUND_MS);
  const requested = f.parts.length;
  // Longer than any retry backoff (at most 400 ms for 3 attempts): nothing is sent again.
  f.resume();
  await sleep(1000);
  expect(f.parts.length).toBe(requested);
  // Every part the fake was holding was cancelled by the client.
  expect(f.parts.filter((p) => !p.answered && !p.closed)).toEqual([]);
  return { error, elapsed };
}

// ---- options -----------------------------------------------------------------------------

describe('stall timeout option', () => {
  it('defaults to the idle-socket timeout and refuses values out of range', () => {
    expect(DEFAULT_STALL_TIMEOUT_MS).toBe(120_000);
    expect(new S3Store({ cache: path.join(work, 'cache') }).stallTimeoutMs).toBe(120_000);
    expect(
      new S3Store({ cache: path.join(work, 'cache'), stallTimeoutMs: 5000 }).stallTimeoutMs,
    ).toBe(5000);
    const descriptor = s3Descriptor('stall-bucket', 'p', 'http://127.0.0.1:9');
    expect(() => stageFromDescriptor(descriptor, { stallTimeoutMs: 1000 })).not.toThrow();
    for (const bad of [0, -1, 1.5, 2 ** 31]) {
      expect(() => new S3Store({ cache: path.join(work, 'cache'), stallTimeoutMs: bad })).toThrow(
        RangeError,
      );
      expect(() => stageFromDescriptor(descriptor, { stallTimeoutMs: bad })).toThrow(
        StageConfigError,
      );
      expect(() => stageFromDescriptor(descriptor, { stallTimeoutMs: bad })).toThrow(
        /stallTimeoutMs/,
      );
    }
  });
});

// ---- against the fake S3 -----------------------------------------------------------------

describe('a store that stops answering (fake S3)', () => {
  it('put of a file: the store reads each part and never answers -> UploadStalled, upload aborted, nothing sent again', async () => {
    const f = await fake(() => 'swallow');
    const { file } = await randomFile(4 * 5 * MiB + 100);
    const store = fakeStore(f.endpoint);
    const { error } = await expectStall(f, () => store.put('s3://b/dir/obj', file));
    expect(error).toBeInstanceOf(StoreError);
    expect(error.code).toBe('UploadStalled');
    expect(error.uploadId).toBe(FAKE_UPLOAD_ID);
    expect(error.outcome).toBe('aborted');
    expect(error.stalledMs).toBeGreaterThanOrEqual(STALL_MS);
    expect(error.uri).toBe('s3://b/dir/obj');
    expect(error.message).toContain('s3://b/dir/obj');
    expect(error.message).toContain(FAKE_UPLOAD_ID);
    expect(error.message).toMatch(/nothing moved for \d+\.\d s/);
    expect(error.message).toContain('aborted');
    expect((error.cause as Error).name).toBe('TimeoutError');
    // The two parts in flight, each once; nothing after them; the upload aborted.
    expect(f.parts.map((p) => p.number).sort()).toEqual([1, 2]);
    expect(f.parts.every((p) => p.received === 5 * MiB)).toBe(true);
    expect(f.parts.every((p) => p.closed)).toBe(true);
    expect(f.ops.filter((op) => op === 'abort')).toEqual(['abort']);
    expect(f.ops).not.toContain('complete');
  });

  it('put of a stream: the store stops reading mid-body -> UploadStalled, upload aborted', async () => {
    const f = await fake(() => 'stop');
    const store = fakeStore(f.endpoint, { partSize: 16 * MiB });
    const { error } = await expectStall(f, () => store.put('s3://b/obj', mebibytes(48)));
    expect(error.outcome).toBe('aborted');
    expect(f.parts.map((p) => p.number).sort()).toEqual([1, 2]);
    // The bodies were cut short: the stall came while the client was still sending.
    expect(f.parts.every((p) => p.received < 16 * MiB)).toBe(true);
    expect(f.parts.every((p) => p.closed)).toBe(true);
    expect(f.ops.filter((op) => op === 'abort')).toEqual(['abort']);
  });

  it.each([
    ['a file (sent again by the engine)', 'file'],
    ['a stream (sent again by the SDK)', 'stream'],
  ])(
    'parts of %s that time out are sent again only until the watchdog fires; resent bytes are not progress',
    async (_label, kind) => {
      // Each attempt times out after 1 s of silence, so part n is sent again at about 1 s and
      // would be sent a third time at about 2 s; the watchdog fires at 1.5 s, during the second
      // attempt, because sending the same bytes again does not count as progress.
      const f = await fake(() => 'swallow');
      const source = kind === 'file' ? (await randomFile(3 * 5 * MiB)).file : mebibytes(15);
      const store = fakeStore(f.endpoint, { socketTimeout: 1000 });
      const { error } = await expectStall(f, () => store.put('s3://b/obj', source));
      expect(error.outcome).toBe('aborted');
      const attempts = new Map<number, number>();
      for (const p of f.parts)
        attempts.set(p.number, Math.max(attempts.get(p.number) ?? 0, p.attempt));
      expect([...attempts.keys()].sort()).toEqual([1, 2]);
      expect(Math.max(...attempts.values())).toBe(2);
      expect(f.ops.filter((op) => op === 'abort')).toEqual(['abort']);
    },
  );

  it('a stream part the store fails once is sent again by the SDK, streamed from its buffer and signed', async () => {
    const f = await fake((part, attempt) => (part === 2 && attempt === 1 ? 'fail' : 'answer'));
    const store = fakeStore(f.endpoint);
    const data = randomBytes(12 * MiB);
    const info = await store.put('s3://b/obj', Readable.from([data]));
    expect(info.size).toBe(data.length);
    expect(f.parts.map((p) => `${p.number}.${p.attempt}`).sort()).toEqual([
      '1.1',
      '2.1',
      '2.2',
      '3.1',
    ]);
    for (const p of f.parts) {
      const bytes = data.subarray((p.number - 1) * 5 * MiB, p.number * 5 * MiB);
      expect(p.bodySha256).toBe(sha256Hex(bytes));
      expect(p.payload).toBe(p.bodySha256);
    }
  });

  it.each([
    ['a file', 'file'],
    ['a stream', 'stream'],
  ])('a slow but moving upload of %s does not trip the watchdog', async (_label, kind) => {
    // About 8 MiB/s: the 24 MiB first part takes about 3 s, longer than the 2 s stall timeout,
    // and is acknowledged only then; its bytes keep moving meanwhile. (The kernel takes about
    // 4 MiB of a socket's bytes before the server reads them — 0.5 s here — so the client sees
    // them move in steps, and sees the last 4 MiB "taken" well before the answer.)
    const stallTimeoutMs = 2000;
    const f = await fake(() => 'slow');
    const store = fakeStore(f.endpoint, { partSize: 24 * MiB, partsInFlight: 1, stallTimeoutMs });
    const size = 25 * MiB;
    const source = kind === 'file' ? (await randomFile(size)).file : mebibytes(25);
    const start = performance.now();
    const info = await store.put('s3://b/obj', source);
    const elapsed = performance.now() - start;
    expect(info.size).toBe(size);
    expect(elapsed).toBeGreaterThan(stallTimeoutMs);
    expect(f.parts.map((p) => [p.number, p.received, p.closed])).toEqual([
      [1, 24 * MiB, false],
      [2, MiB, false],
    ]);
    // A buffer's part is signed with its SHA-256 (the store checks the bytes); a file range is not.
    for (const p of f.parts) {
      expect(p.payload).toBe(kind === 'file' ? 'UNSIGNED-PAYLOAD' : p.bodySha256);
    }
    expect(f.ops).toContain('complete');
    expect(f.ops).not.toContain('abort');
  });

  it('a resumable managed upload that stalls keeps its upload and checkpoint (no abort)', async () => {
    const f = await fake((part) => (part === 1 ? 'answer' : 'swallow'));
    const { file, data } = await randomFile(3 * 5 * MiB);
    const cpDir = path.join(work, 'cp-fake');
    const stage = stageFromDescriptor(s3Descriptor('stall-bucket', 'stalls', f.endpoint), {
      client: fakeClient(f.endpoint),
      partSize: 5 * MiB,
      stallTimeoutMs: 60_000, // the per-upload option below wins
    }) as Stage;
    const { error } = await expectStall(f, () =>
      stage.upload(file, { checkpointDir: cpDir, partsInFlight: 1, stallTimeoutMs: STALL_MS }),
    );
    expect(error.outcome).toBe('kept');
    expect(error.message).toContain(`${FAKE_UPLOAD_ID} kept`);
    expect(f.ops).not.toContain('abort');
    expect(f.parts.map((p) => p.number)).toEqual([1, 2]);
    const [cp, ...more] = await checkpoints(cpDir);
    expect(more).toEqual([]);
    const checkpoint = parseCheckpoint(await readFile(cp as string, 'utf8'), cp as string);
    expect(checkpoint.upload).toBe(FAKE_UPLOAD_ID);
    expect(checkpoint.parts).toEqual([
      { number: 1, token: '"part-1"', sha256: sha256Hex(data.subarray(0, 5 * MiB)) },
    ]);
  });

  it('a plain managed upload (no checkpoint) that stalls is aborted', async () => {
    const f = await fake(() => 'swallow');
    const stage = stageFromDescriptor(s3Descriptor('stall-bucket', 'stalls', f.endpoint), {
      client: fakeClient(f.endpoint),
      partSize: 5 * MiB,
      stallTimeoutMs: STALL_MS,
    });
    const { error } = await expectStall(f, () => stage.upload(mebibytes(12)));
    expect(error.outcome).toBe('aborted');
    expect(f.ops.filter((op) => op === 'abort')).toEqual(['abort']);
  });
});

// ---- resume against S3 -------------------------------------------------------------------

/**
 * A proxy in front of the S3 server that forwards every request unchanged, except UploadPart
 * requests as `mode` says: `swallow` reads the body and neither forwards nor answers anything;
 * `corrupt` forwards it with the first byte of the body inverted.
 */
async function startPartProxy(
  target: string,
  mode: (part: number) => 'pass' | 'swallow' | 'corrupt',
): Promise<{ endpoint: string; close(): Promise<void> }> {
  const upstream = new URL(target);
  const server = http.createServer((req, res) => {
    const part = new URL(req.url ?? '/', 'http://proxy').searchParams.get('partNumber');
    const how = req.method === 'PUT' && part !== null ? mode(Number(part)) : 'pass';
    if (how === 'swallow') {
      req.resume();
      return;
    }
    const forward = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
      },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    forward.on('error', (error) => {
      res.statusCode = 502;
      res.end(String(error));
    });
    let first = how === 'corrupt';
    req.on('data', (chunk: Buffer) => {
      if (first && chunk.length > 0) {
        first = false;
        chunk[0] = (chunk[0] as number) ^ 0xff;
      }
      if (!forward.write(chunk)) {
        req.pause();
        forward.once('drain', () => req.resume());
      }
    });
    req.on('end', () => forward.end());
  });
  return listening(server);
}

describeS3('stalls and part bodies against S3', () => {
  let admin: S3Client;
  let bucket: string;

  beforeAll(async () => {
    admin = testClient();
    bucket = await createTestBucket('lake-stall');
  });
  afterAll(async () => {
    // Objects are written only under resume/ (the corrupted put under corrupt/ is refused).
    await dropTestBucket(bucket, 'resume/');
    admin.destroy();
  });

  it('the stall keeps the upload and its checkpoint; a retry on a healthy path sends only the missing parts', async () => {
    const { file, data } = await randomFile(3 * 5 * MiB + 1000);
    const cpDir = path.join(work, 'cp-ceph');
    const proxy = await startPartProxy(s3Endpoint(), (part) => (part >= 3 ? 'swallow' : 'pass'));
    // The descriptor names the S3 server either way (it is the checkpoint's identity); the first
    // attempt's client goes through the proxy, the retry's directly.
    const descriptor = s3Descriptor(bucket, 'resume');
    try {
      const stalledClient = testClient(proxy.endpoint);
      s3s.track(stalledClient);
      const first = stageFromDescriptor(descriptor, {
        client: stalledClient,
        partSize: 5 * MiB,
        stallTimeoutMs: STALL_MS,
      });
      const start = performance.now();
      const error = await rejection(first.upload(file, { checkpointDir: cpDir, partsInFlight: 2 }));
      expect(performance.now() - start).toBeLessThan(BOUND_MS);
      expect(error).toBeInstanceOf(UploadStalled);
      expect((error as UploadStalled).outcome).toBe('kept');
      const open = await openUploads(admin, bucket, 'resume/');
      expect(open).toHaveLength(1);
      expect(open[0]).toContain((error as UploadStalled).uploadId);
      expect(await checkpoints(cpDir)).toHaveLength(1);
    } finally {
      await proxy.close();
    }

    const healthy = testClient();
    s3s.track(healthy);
    const calls = countCalls(healthy);
    const retry = stageFromDescriptor(descriptor, { client: healthy, partSize: 5 * MiB });
    const loc = await retry.upload(file, { checkpointDir: cpDir });
    expect(calls.parts.sort()).toEqual([3, 4]);
    expect(calls.count('CreateMultipartUpload')).toBe(0);
    expect(loc.sha256).toBe(sha256Hex(data));
    expect(loc.sizeBytes).toBe(data.length);
    const stored = await readObject(admin, bucket, loc.uri.slice(`s3://${bucket}/`.length));
    expect(stored.equals(data)).toBe(true);
    expect(await openUploads(admin, bucket, 'resume/')).toEqual([]);
    expect(await checkpoints(cpDir)).toEqual([]);
  });

  it('the store verifies the bytes of a buffered part: a part corrupted on the way is refused', async () => {
    const proxy = await startPartProxy(s3Endpoint(), (part) => (part === 2 ? 'corrupt' : 'pass'));
    try {
      const client = testClient(proxy.endpoint);
      s3s.track(client);
      const store = new S3Store({
        client,
        cache: path.join(work, 'cache'),
        partSize: 5 * MiB,
        multipartThreshold: 0,
      });
      const error = await rejection(store.put(`s3://${bucket}/corrupt/obj`, mebibytes(12)));
      expect(error).toBeInstanceOf(StoreError);
      expect((error as StoreError).status).toBe(400);
      expect(await openUploads(admin, bucket, 'corrupt/')).toEqual([]);
    } finally {
      await proxy.close();
    }
  });
});
