/**
 * The one multipart engine (drivers/s3/multipart.ts) and its part sources (drivers/s3/parts.ts).
 *
 * Without a server: the engine against a fake client (part order whatever the response order,
 * the parts-in-flight bound, the 10,000-part rule, stopping on the first failure, a file part
 * sent again from its range, trusted parts of a resumed upload, the stall watchdog: a part
 * never answered, a slow source that is no stall), and file parts (ranges and
 * digests, a file changed between the digest read and a range read, truncated, grown).
 *
 * Against S3 (Ceph): `S3Store._put` and `S3Stage.upload` from a file, byte for byte; a part
 * that fails once is sent again from its file range; a file changed during the upload fails
 * with SourceChanged and leaves no upload and no object; cancellation leaves nothing.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { appendFile, open, readFile, truncate } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import * as sdk from '@aws-sdk/client-s3';
import { HeadObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  PartLimitExceeded as DriverPartLimitExceeded,
  SourceChanged as DriverSourceChanged,
  S3Store,
  SourceError,
} from '../../drivers/s3/index.js';
import { S3Multipart } from '../../drivers/s3/multipart.js';
import { sha256Hex } from '../../src/commits/format.js';
import { isAbort, NotFound, StoreError, UploadStalled } from '../../src/core/errors.js';
import {
  PartLimitExceeded,
  SourceChanged,
  type Stage,
  stageFromDescriptor,
} from '../../src/lake/index.js';
import { rejection } from '../../src/testing/rejection.js';
import { PartBufferPool } from '../../src/upload/buffer-pool.js';
import { BufferedParts } from '../../src/upload/buffered-parts.js';
import { type UploadPartsOptions, uploadParts } from '../../src/upload/engine.js';
import { FileParts } from '../../src/upload/file-parts.js';
import type { PartSource } from '../../src/upload/part-source.js';
import type { UploadTarget } from '../../src/upload/requests.js';
import { BytesReader, StreamReader } from '../../src/upload/stream-readers.js';
import {
  countCalls,
  openUploads,
  randomFiles,
  s3Descriptor,
  testClient,
} from '../fixtures/lake-helpers.js';
import { describeS3, removeBucket, uniqueBucketName } from '../setup/s3.js';

const MiB = 1024 * 1024;
const work = mkdtempSync(path.join(tmpdir(), 'provcat-multipart-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A file of `size` random bytes under the test directory; returns its path and bytes. */
const randomFile = randomFiles(work);

/** Overwrite `bytes.length` bytes of `file` at `position` (same size, new mtime). */
async function overwrite(file: string, position: number, bytes: Buffer): Promise<void> {
  const handle = await open(file, 'r+');
  try {
    await handle.write(bytes, 0, bytes.length, position);
  } finally {
    await handle.close();
  }
}

async function bytesOf(body: AsyncIterable<Uint8Array> | Uint8Array): Promise<Buffer> {
  if (body instanceof Uint8Array) return Buffer.from(body);
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

// ---- the engine against a fake client -----------------------------------------------------

interface FakeCall {
  name: string;
  input: Record<string, unknown>;
  /** UploadPart: the bytes the body delivered. */
  body?: Buffer;
}

type Handler = (call: FakeCall, signal: AbortSignal | undefined) => Promise<object | undefined>;

/**
 * A MultipartTarget whose client answers every command with `handler` (after draining an
 * UploadPart body the way the HTTP handler would), and records the calls.
 */
function fakeTarget(handler: Handler = async () => undefined): {
  target: UploadTarget;
  calls: FakeCall[];
} {
  const calls: FakeCall[] = [];
  const client = {
    config: { maxAttempts: async () => 3 },
    async send(
      command: { constructor: { name: string }; input: Record<string, unknown> },
      options?: { abortSignal?: AbortSignal },
    ) {
      const name = command.constructor.name.replace(/Command$/, '');
      const call: FakeCall = { name, input: command.input };
      calls.push(call);
      if (name === 'UploadPart') {
        call.body = await bytesOf(command.input.Body as Readable | Uint8Array);
        if (call.body.length !== command.input.ContentLength) {
          throw new Error(
            `body of ${call.body.length} bytes, ContentLength ${String(command.input.ContentLength)}`,
          );
        }
      }
      const answer = await handler(call, options?.abortSignal);
      if (answer) return answer;
      if (name === 'CreateMultipartUpload') return { UploadId: 'u1' };
      if (name === 'CompleteMultipartUpload') return { ETag: '"done"' };
      if (name === 'UploadPart') return { ETag: `"e${String(command.input.PartNumber)}"` };
      return {};
    },
  } as unknown as S3Client;
  const multipart = new S3Multipart(async () => ({ client, sdk }), 'b');
  return { target: multipart.target('k'), calls };
}

function parts(calls: FakeCall[], name = 'UploadPart'): number[] {
  return calls.filter((c) => c.name === name).map((c) => c.input.PartNumber as number);
}

function completed(calls: FakeCall[]): Array<{ PartNumber: number; ETag: string }> {
  const call = calls.find((c) => c.name === 'CompleteMultipartUpload');
  if (!call) throw new Error('no CompleteMultipartUpload');
  return (call.input.MultipartUpload as { Parts: Array<{ PartNumber: number; ETag: string }> })
    .Parts;
}

function streamOf(data: Buffer, chunk = 7): Readable {
  const pieces: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunk) pieces.push(data.subarray(i, i + chunk));
  return Readable.from(pieces);
}

async function run(
  target: UploadTarget,
  source: PartSource,
  options: Partial<UploadPartsOptions> = {},
) {
  try {
    return await uploadParts(target, source, { partSize: 16, partsInFlight: 4, ...options });
  } finally {
    await source.close(true);
  }
}

describe('multipart engine (fake client)', () => {
  it('completes parts in number order whatever order the responses come in, within the window', async () => {
    let inFlight = 0;
    let most = 0;
    const { target, calls } = fakeTarget(async (call) => {
      if (call.name !== 'UploadPart') return undefined;
      inFlight++;
      most = Math.max(most, inFlight);
      // Later parts answer sooner.
      await new Promise((r) => setTimeout(r, (12 - (call.input.PartNumber as number)) * 3));
      inFlight--;
      return undefined;
    });
    const data = randomBytes(10 * 16 + 3);
    const pool = new PartBufferPool();
    const progress: number[] = [];
    const source = new BufferedParts(new StreamReader(streamOf(data)), {
      partSize: 16,
      pool,
      digest: true,
    });
    const result = await run(target, source, {
      partsInFlight: 3,
      onProgress: (b) => progress.push(b),
    });
    expect(completed(calls).map((p) => p.PartNumber)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(completed(calls).map((p) => p.ETag)).toEqual(
      completed(calls).map((p) => `"e${p.PartNumber}"`),
    );
    expect(
      Buffer.concat(
        calls
          .filter((c) => c.name === 'UploadPart')
          .sort((a, b) => (a.input.PartNumber as number) - (b.input.PartNumber as number))
          .map((c) => c.body as Buffer),
      ).equals(data),
    ).toBe(true);
    expect(result).toMatchObject({ size: data.length, sha256: sha256Hex(data), sent: 11 });
    expect(most).toBe(3);
    expect(pool.allocated).toBeLessThanOrEqual(3);
    expect(progress.at(-1)).toBe(data.length);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
  });

  it('reads once more after a full last-allowed part: EOF completes, more data is PartLimitExceeded before it is sent', async () => {
    const fits = fakeTarget();
    const pool = new PartBufferPool();
    const exact = new BufferedParts(new StreamReader(streamOf(randomBytes(48))), {
      partSize: 16,
      pool,
    });
    await run(fits.target, exact, { maxParts: 3 });
    expect(parts(fits.calls)).toEqual([1, 2, 3]);

    const over = fakeTarget();
    const more = new BufferedParts(new StreamReader(streamOf(randomBytes(49))), {
      partSize: 16,
      pool,
    });
    const error = await rejection(run(over.target, more, { maxParts: 3 }));
    expect(error).toBeInstanceOf(PartLimitExceeded);
    expect(error).toBeInstanceOf(DriverPartLimitExceeded);
    expect(parts(over.calls)).not.toContain(4);
    expect(over.calls.map((c) => c.name)).toContain('AbortMultipartUpload');
    expect(over.calls.map((c) => c.name)).not.toContain('CompleteMultipartUpload');
  });

  it('refuses a file that needs more parts than allowed before creating the upload', async () => {
    const { file } = await randomFile(49);
    const { target, calls } = fakeTarget();
    const error = await rejection(
      run(target, await FileParts.open(file, { partSize: 16 }), { maxParts: 3 }),
    );
    expect(error).toBeInstanceOf(PartLimitExceeded);
    expect(calls).toEqual([]);
  });

  it('stops reading after a part fails, waits for the parts in flight, then aborts; the error is mapped', async () => {
    let started = 0;
    let settled = 0;
    const { target, calls } = fakeTarget(async (call, signal) => {
      if (call.name !== 'UploadPart') return undefined;
      started++;
      try {
        if (call.input.PartNumber === 3) {
          throw Object.assign(new Error('refused'), {
            name: 'AccessDenied',
            $metadata: { httpStatusCode: 403 },
          });
        }
        await new Promise((resolve, reject) => {
          const t = setTimeout(resolve, 50);
          signal?.addEventListener('abort', () => {
            clearTimeout(t);
            reject(signal.reason);
          });
        });
        return undefined;
      } finally {
        settled++;
      }
    });
    const source = new BufferedParts(new BytesReader(randomBytes(16 * 50)), {
      partSize: 16,
      pool: new PartBufferPool(),
    });
    const error = await rejection(run(target, source));
    expect(error).toBeInstanceOf(StoreError);
    expect((error as StoreError).status).toBe(403);
    expect(settled).toBe(started);
    expect(started).toBeLessThan(10);
    expect(calls.at(-1)?.name).toBe('AbortMultipartUpload');
  });

  it('sends a file part again from its range after a retryable failure; a refusal is not retried', async () => {
    const { file, data } = await randomFile(16 * 3 + 5);
    let failures = 0;
    const { target, calls } = fakeTarget(async (call) => {
      if (call.name === 'UploadPart' && call.input.PartNumber === 2 && failures++ === 0) {
        throw Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', $metadata: {} });
      }
      return undefined;
    });
    const result = await run(target, await FileParts.open(file, { partSize: 16, digest: true }));
    expect(parts(calls).sort()).toEqual([1, 2, 2, 3, 4]);
    const sent = calls.filter((c) => c.name === 'UploadPart' && c.input.PartNumber === 2);
    expect(sent.map((c) => (c.body as Buffer).equals(data.subarray(16, 32)))).toEqual([true, true]);
    expect(result.sha256).toBe(sha256Hex(data));

    const refused = fakeTarget(async (call) => {
      if (call.name === 'UploadPart' && call.input.PartNumber === 2) {
        throw Object.assign(new Error('bad'), {
          name: 'BadDigest',
          $metadata: { httpStatusCode: 400 },
        });
      }
      return undefined;
    });
    await expect(run(refused.target, await FileParts.open(file, { partSize: 16 }))).rejects.toThrow(
      StoreError,
    );
    expect(parts(refused.calls).filter((n) => n === 2)).toEqual([2]);
  });

  it('a part the store never answers fails the upload with UploadStalled: aborted, or kept', async () => {
    /** The store takes every part's body and never answers; other calls answer. */
    const silent = () =>
      fakeTarget(async (call, signal) => {
        if (call.name !== 'UploadPart') return undefined;
        return new Promise((_resolve, reject) => {
          signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
        });
      });
    const data = randomBytes(16 * 6);
    for (const abortOnFailure of [true, false]) {
      const { target, calls } = silent();
      const source = new BufferedParts(new BytesReader(data), {
        partSize: 16,
        pool: new PartBufferPool(),
      });
      const start = performance.now();
      const error = await rejection(
        run(target, source, { partsInFlight: 2, stallTimeoutMs: 200, abortOnFailure }),
      );
      expect(performance.now() - start).toBeLessThan(2000);
      expect(error).toBeInstanceOf(UploadStalled);
      const stalled = error as UploadStalled;
      expect(stalled).toMatchObject({
        uploadId: 'u1',
        uri: 's3://b/k',
        outcome: abortOnFailure ? 'aborted' : 'kept',
      });
      expect(stalled.stalledMs).toBeGreaterThanOrEqual(200);
      expect(stalled.message).toContain('parts 1, 2 waiting');
      expect(parts(calls)).toEqual([1, 2]);
      expect(calls.at(-1)?.name).toBe(abortOnFailure ? 'AbortMultipartUpload' : 'UploadPart');
    }
  });

  it('a stalled upload whose abort fails too says so and keeps both errors', async () => {
    const { target } = fakeTarget(async (call, signal) => {
      if (call.name === 'AbortMultipartUpload') {
        throw Object.assign(new Error('busy'), {
          name: 'ServiceUnavailable',
          $metadata: { httpStatusCode: 503 },
        });
      }
      if (call.name !== 'UploadPart') return undefined;
      return new Promise((_resolve, reject) => {
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    });
    const source = new BufferedParts(new BytesReader(randomBytes(40)), {
      partSize: 16,
      pool: new PartBufferPool(),
    });
    const error = await rejection(run(target, source, { stallTimeoutMs: 100 }));
    expect(error).toBeInstanceOf(UploadStalled);
    expect((error as UploadStalled).outcome).toBe('abort-failed');
    expect((error as UploadStalled).message).toContain('lifecycle rule');
    const cause = (error as UploadStalled).cause as AggregateError;
    expect(cause).toBeInstanceOf(AggregateError);
    expect(cause.errors.map((e: Error) => e.name)).toEqual(['TimeoutError', 'StoreError']);
    // The abort's failure comes mapped, with the store's status.
    expect((cause.errors[1] as StoreError).status).toBe(503);
  });

  it('a slow source is no stall: the clock runs only while parts are being sent', async () => {
    // Each part's bytes come 300 ms after the previous part was acknowledged: more than the
    // stall timeout, with nothing being sent meanwhile.
    const data = randomBytes(16 * 4);
    const slow = Readable.from(
      (async function* () {
        for (let i = 0; i < data.length; i += 16) {
          await new Promise((r) => setTimeout(r, 300));
          yield data.subarray(i, i + 16);
        }
      })(),
    );
    const { target, calls } = fakeTarget();
    const source = new BufferedParts(new StreamReader(slow), {
      partSize: 16,
      pool: new PartBufferPool(),
      digest: true,
    });
    const result = await run(target, source, { stallTimeoutMs: 100 });
    expect(result.sha256).toBe(sha256Hex(data));
    expect(parts(calls)).toEqual([1, 2, 3, 4]);
  });

  it('keeps trusted parts whose digest still matches, sends the others, and reports each part', async () => {
    const { file, data } = await randomFile(16 * 4);
    const partSha = (n: number) => sha256Hex(data.subarray((n - 1) * 16, n * 16));
    const trusted = new Map([
      [1, { token: '"t1"', sha256: partSha(1) }],
      [3, { token: '"t3"', sha256: '0'.repeat(64) }], // the source changed there: sent again
    ]);
    const reported: Array<{ number: number; sent: boolean; sha256: string | undefined }> = [];
    const { target, calls } = fakeTarget();
    const result = await run(
      target,
      await FileParts.open(file, { partSize: 16, digest: true, partDigests: true }),
      {
        upload: 'existing',
        trusted,
        onPart: async (p) => {
          reported.push({ number: p.number, sent: p.sent, sha256: p.sha256 });
        },
      },
    );
    expect(calls.map((c) => c.name)).not.toContain('CreateMultipartUpload');
    expect(parts(calls).sort()).toEqual([2, 3, 4]);
    expect(completed(calls).map((p) => p.ETag)).toEqual(['"t1"', '"e2"', '"e3"', '"e4"']);
    expect(reported.sort((a, b) => a.number - b.number)).toEqual(
      [1, 2, 3, 4].map((n) => ({ number: n, sent: n !== 1, sha256: partSha(n) })),
    );
    expect(result).toMatchObject({ sha256: sha256Hex(data), sent: 3 });
  });

  it('a cancelled upload rejects with the abort and aborts the multipart upload', async () => {
    const controller = new AbortController();
    const { target, calls } = fakeTarget(async (call, signal) => {
      if (call.name !== 'UploadPart') return undefined;
      if (call.input.PartNumber === 2) controller.abort();
      await new Promise((r) => setTimeout(r, 5));
      signal?.throwIfAborted();
      return undefined;
    });
    const { file } = await randomFile(16 * 8);
    const error = await rejection(
      run(target, await FileParts.open(file, { partSize: 16 }), {
        partsInFlight: 1,
        signal: controller.signal,
      }),
    );
    expect(isAbort(error)).toBe(true);
    expect(calls.at(-1)?.name).toBe('AbortMultipartUpload');
    expect(parts(calls)).toEqual([1, 2]);
  });
});

// ---- file parts --------------------------------------------------------------------------

describe('file parts', () => {
  const never = new AbortController().signal;

  async function drainAll(source: FileParts): Promise<Buffer[]> {
    const bodies: Buffer[] = [];
    for (let part = await source.next(); part; part = await source.next()) {
      const body = await part.body(never);
      bodies.push(await bytesOf(body.body as Readable));
      await body.sent(never);
      part.release();
    }
    return bodies;
  }

  it('cuts a file into ranges with their digests and the whole digest', async () => {
    const { file, data } = await randomFile(5 * 16 + 3);
    const source = await FileParts.open(file, { partSize: 16, digest: true, partDigests: true });
    try {
      expect(source.count).toBe(6);
      const digests: Array<string | undefined> = [];
      for (let part = await source.next(); part; part = await source.next()) {
        digests.push(await part.digest(never));
        part.release();
      }
      expect(digests).toEqual(
        Array.from({ length: 6 }, (_, i) => sha256Hex(data.subarray(i * 16, (i + 1) * 16))),
      );
      expect(await source.finish()).toEqual({ size: data.length, sha256: sha256Hex(data) });
    } finally {
      await source.close();
    }
    const plain = await FileParts.open(file, { partSize: 16 });
    try {
      expect(Buffer.concat(await drainAll(plain)).equals(data)).toBe(true);
      expect(await plain.finish()).toEqual({ size: data.length, sha256: undefined });
    } finally {
      await plain.close();
    }
  });

  it('refuses to confirm a part whose bytes sent differ from the bytes hashed', async () => {
    const { file } = await randomFile(4 * 16);
    const source = await FileParts.open(file, { partSize: 16, digest: true, partDigests: true });
    try {
      const part = await source.next();
      if (!part) throw new Error('no part');
      await part.digest(never); // the digest read is past part 1
      await overwrite(file, 3, Buffer.from('changed'));
      const body = await part.body(never);
      await bytesOf(body.body as Readable);
      await expect(body.sent(never)).rejects.toThrow(SourceChanged);
    } finally {
      await source.close();
    }
  });

  it('a file that shrinks, grows or is rewritten while uploaded is SourceChanged', async () => {
    const shrunk = await randomFile(4 * 16);
    const source = await FileParts.open(shrunk.file, { partSize: 16 });
    await truncate(shrunk.file, 20);
    await expect(drainAll(source)).rejects.toThrow(SourceChanged);
    await source.close();

    const grown = await randomFile(4 * 16);
    const growing = await FileParts.open(grown.file, { partSize: 16, digest: true });
    await appendFile(grown.file, 'more');
    await drainAll(growing).catch(() => undefined);
    await expect(growing.finish()).rejects.toThrow(SourceChanged);
    await growing.close();

    const rewritten = await randomFile(4 * 16);
    const plain = await FileParts.open(rewritten.file, { partSize: 16 });
    await new Promise((r) => setTimeout(r, 20)); // past the file system's timestamp granularity
    await overwrite(rewritten.file, 40, Buffer.from('x'));
    await drainAll(plain);
    const error = await rejection(plain.finish());
    expect(error).toBeInstanceOf(SourceChanged);
    expect(error).toBeInstanceOf(SourceError);
    expect(error).toBeInstanceOf(DriverSourceChanged);
    await plain.close();
  });
});

// ---- against S3 --------------------------------------------------------------------------

describeS3('file sources against S3', () => {
  let admin: S3Client;
  let bucket: string;

  beforeAll(async () => {
    admin = testClient();
    bucket = uniqueBucketName('multipart');
    await admin.send(new sdk.CreateBucketCommand({ Bucket: bucket }));
  });
  afterAll(async () => {
    await removeBucket(admin, bucket);
    admin.destroy();
  });

  function store(client: S3Client = testClient()) {
    const calls = countCalls(client);
    const s = new S3Store({
      client,
      cache: path.join(work, 'cache'),
      partSize: 5 * MiB,
      multipartThreshold: 0,
    });
    return { store: s, calls };
  }

  function stage(prefix: string, client: S3Client = testClient()) {
    const calls = countCalls(client);
    const s = stageFromDescriptor(s3Descriptor(bucket, prefix), {
      client,
      partSize: 5 * MiB,
    }) as Stage;
    return { stage: s, calls };
  }

  async function stored(key: string): Promise<Buffer> {
    const out = await admin.send(new sdk.GetObjectCommand({ Bucket: bucket, Key: key }));
    return bytesOf(out.Body as Readable);
  }

  async function keysUnder(prefix: string): Promise<string[]> {
    const listed = await admin.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
    return (listed.Contents ?? []).map((o) => o.Key as string);
  }

  /** A client whose first UploadPart of `part` fails with a 500 after the server took it. */
  function failOnceAfter(part: number): S3Client {
    const client = testClient();
    let failed = false;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        const input = args.input as { PartNumber?: number };
        if (context.commandName === 'UploadPartCommand' && input.PartNumber === part && !failed) {
          failed = true;
          throw Object.assign(new Error('injected: the response was lost'), {
            name: 'InternalError',
            $metadata: { httpStatusCode: 500 },
          });
        }
        return result;
      },
      { step: 'initialize', name: 'failOnceAfter' },
    );
    return client;
  }

  /** A client that runs `change` before the first attempt of UploadPart `part`. */
  function changingBefore(part: number, change: () => Promise<void>): S3Client {
    const client = testClient();
    let done = false;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { PartNumber?: number };
        if (context.commandName === 'UploadPartCommand' && input.PartNumber === part && !done) {
          done = true;
          await change();
        }
        return next(args);
      },
      { step: 'initialize', name: 'changeSource' },
    );
    return client;
  }

  it.each([
    ['1 B', 1],
    ['exactly one part', 5 * MiB],
    ['one part + 1 byte', 5 * MiB + 1],
    ['several parts', 3 * 5 * MiB + 7],
  ])('put from a file: %s, multipart, byte for byte', async (_label, size) => {
    const { file, data } = await randomFile(size);
    const { store: s, calls } = store();
    const progress: number[] = [];
    const info = await s.put(`s3://${bucket}/put/${size}`, file, {
      onProgress: (p) => progress.push(p.bytes),
    });
    expect(info.size).toBe(size);
    expect(calls.count('UploadPart')).toBe(Math.ceil(size / (5 * MiB)));
    expect(calls.count('PutObject')).toBe(0);
    expect(progress.at(-1)).toBe(size);
    const back = await stored(`put/${size}`);
    expect(back.length).toBe(size);
    expect(back.equals(data)).toBe(true);
    expect(sha256Hex(back)).toBe(sha256Hex(data));
    const head = await admin.send(new HeadObjectCommand({ Bucket: bucket, Key: `put/${size}` }));
    expect(head.ETag).toBe(info.version);
  });

  it('put of an empty file is one PutObject', async () => {
    const { file } = await randomFile(0);
    const { store: s, calls } = store();
    expect((await s.put(`s3://${bucket}/put/empty`, file)).size).toBe(0);
    expect(calls.names).toEqual(['PutObject']);
    expect((await stored('put/empty')).length).toBe(0);
  });

  it('a part that fails once is sent again from its file range (put and upload)', async () => {
    const { file, data } = await randomFile(3 * 5 * MiB + 11);
    const put = store(failOnceAfter(2));
    await put.store.put(`s3://${bucket}/retry/put`, file);
    expect(put.calls.parts.sort()).toEqual([1, 2, 2, 3, 4]);
    expect((await stored('retry/put')).equals(data)).toBe(true);

    const up = stage('retry', failOnceAfter(3));
    const loc = await up.stage.upload(file);
    expect(up.calls.parts.sort()).toEqual([1, 2, 3, 3, 4]);
    expect(loc.sha256).toBe(sha256Hex(data));
    expect((await stored(loc.uri.slice(`s3://${bucket}/`.length))).equals(data)).toBe(true);
    expect(await openUploads(admin, bucket)).toEqual([]);
  });

  it.each([
    ['rewritten in place', (file: string) => overwrite(file, 2 * 5 * MiB + 100, randomBytes(64))],
    ['truncated', (file: string) => truncate(file, 5 * MiB + 3)],
    ['appended to', (file: string) => appendFile(file, randomBytes(10))],
  ])(
    'a file %s during the upload fails with SourceChanged, leaving no upload and no object',
    async (_label, change) => {
      const put = await randomFile(3 * 5 * MiB);
      const { store: s } = store(changingBefore(2, () => change(put.file)));
      const putError = await rejection(s.put(`s3://${bucket}/changed/put`, put.file));
      expect(putError).toBeInstanceOf(SourceChanged);
      await expect(s._head(bucket, 'changed/put')).rejects.toBeInstanceOf(NotFound);

      const up = await randomFile(3 * 5 * MiB);
      const { stage: st } = stage(
        'changed',
        changingBefore(2, () => change(up.file)),
      );
      await expect(st.upload(up.file, { partsInFlight: 1 })).rejects.toBeInstanceOf(SourceChanged);
      expect(await keysUnder('changed/')).toEqual([]);
      expect(await openUploads(admin, bucket)).toEqual([]);
    },
  );

  it('cancelling a put or an upload of a file leaves no upload and no object', async () => {
    const { file } = await randomFile(8 * 5 * MiB);
    const put = new AbortController();
    const { store: s } = store();
    const putError = await rejection(
      s.put(`s3://${bucket}/cancel/put`, file, {
        signal: put.signal,
        onProgress: () => put.abort(),
      }),
    );
    expect(isAbort(putError)).toBe(true);
    await expect(s._head(bucket, 'cancel/put')).rejects.toBeInstanceOf(NotFound);

    const upload = new AbortController();
    const { stage: st, calls } = stage('cancel');
    await expect(
      st.upload(file, { signal: upload.signal, onProgress: () => upload.abort() }),
    ).rejects.toMatchObject({ name: 'AbortError' });
    expect(calls.count('AbortMultipartUpload')).toBe(1);
    expect(await keysUnder('cancel/')).toEqual([]);
    expect(await openUploads(admin, bucket)).toEqual([]);
  });

  it('a missing file is a SourceError for put and for upload, before any request', async () => {
    const missing = path.join(work, 'missing.bin');
    const put = store();
    await expect(put.store.put(`s3://${bucket}/missing`, missing)).rejects.toBeInstanceOf(
      SourceError,
    );
    expect(put.calls.names).toEqual([]);
    await expect(stage('missing').stage.upload(missing)).rejects.toBeInstanceOf(SourceError);
    expect(await readFile(missing).catch((e: { code: string }) => e.code)).toBe('ENOENT');
  });
});
