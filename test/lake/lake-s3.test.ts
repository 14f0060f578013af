/**
 * The S3 managed stage against the test server (Ceph radosgw): round trips whose SHA-256 equals
 * `sha256sum`, the request pattern (one PutObject for an empty object, multipart otherwise),
 * integrity faults on objects written behind the stage's back, range responses broken by a
 * proxy, presigned URLs used with fetch and a Range header, cancellation and failure leaving no
 * multipart upload open, and the part ceiling.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectIntegrityError, StoreError } from '../../src/core/errors.js';
import {
  type DataLocation,
  PartLimitExceeded,
  type Stage,
  StageConfigError,
  stageFromDescriptor,
} from '../../src/lake/index.js';
import {
  chunked,
  collect,
  countCalls,
  drain,
  drainTo,
  MiB,
  openUploads,
  type ProxyMode,
  readObject,
  refusingClient,
  s3Descriptor,
  s3Endpoint,
  sha256sum,
  startRangeProxy,
  testClient,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';

const PREFIX = 'managed/v1';

async function failure(promise: Promise<unknown>): Promise<ObjectIntegrityError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ObjectIntegrityError) return error;
    throw error;
  }
  throw new Error('expected an ObjectIntegrityError');
}

function keyOf(loc: DataLocation, bucket: string): string {
  return loc.uri.slice(`s3://${bucket}/`.length);
}

describeS3('S3 stage on the test server', () => {
  let admin: S3Client;
  let bucket: string;
  let dir: string;

  beforeAll(async () => {
    admin = testClient();
    bucket = await createTestBucket('lake-s3');
    dir = await mkdtemp(path.join(tmpdir(), 'lake-s3-'));
  });
  afterAll(async () => {
    await dropTestBucket(bucket, `${PREFIX}/`);
    admin.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  function stage(
    options: {
      partSize?: number;
      maxParts?: number;
      client?: S3Client;
      endpoint?: string;
      tenant?: string;
    } = {},
  ) {
    const client = options.client ?? testClient(options.endpoint);
    const calls = countCalls(client);
    const descriptor = {
      ...s3Descriptor(bucket, PREFIX, options.endpoint),
      ...(options.tenant ? { tenant: options.tenant } : {}),
    };
    const s = stageFromDescriptor(descriptor, {
      client,
      partSize: options.partSize,
      maxParts: options.maxParts,
    }) as Stage;
    return { stage: s, calls, client };
  }

  describe('round trips', () => {
    it.each([
      ['0 B: one PutObject', 0, { Put: 1, Create: 0, Part: 0 }],
      ['1 B: one part', 1, { Put: 0, Create: 1, Part: 1 }],
      ['exactly one 5 MiB part', 5 * MiB, { Put: 0, Create: 1, Part: 1 }],
      ['one part + 1 byte', 5 * MiB + 1, { Put: 0, Create: 1, Part: 2 }],
      ['several parts', 3 * 5 * MiB + 7, { Put: 0, Create: 1, Part: 4 }],
    ])('%s, from a path and from a stream, byte for byte', async (_label, size, pattern) => {
      const file = path.join(dir, `src-${size}`);
      await writeRandomFile(file, size);
      const expected = await sha256sum(file);
      const bytes = await readFile(file);
      for (const source of [file, chunked(bytes, 100_000)]) {
        const { stage: s, calls } = stage({ partSize: 5 * MiB });
        const loc = await s.upload(source, { contentType: 'video/mp4' });
        expect(loc).toMatchObject({ sizeBytes: size, sha256: expected, contentType: 'video/mp4' });
        expect(loc.uri).toMatch(new RegExp(`^s3://${bucket}/${PREFIX}/[0-9a-f]{2}/[0-9a-f]{32}$`));
        expect({
          Put: calls.count('PutObject'),
          Create: calls.count('CreateMultipartUpload'),
          Part: calls.count('UploadPart'),
        }).toEqual(pattern);
        expect(calls.count('CompleteMultipartUpload')).toBe(pattern.Create);
        const stored = await readObject(admin, bucket, keyOf(loc, bucket));
        expect(stored.length).toBe(size);
        expect(stored.equals(bytes)).toBe(true);
        expect(await drain(await s.open(loc))).toEqual({ size, sha256: expected });
        const head = await admin.send(
          new HeadObjectCommand({ Bucket: bucket, Key: keyOf(loc, bucket) }),
        );
        expect(head.ContentType).toBe('video/mp4');
      }
    });

    it('200 MiB in 64 MiB parts: 4 parts, digest equals sha256sum, verified read', async () => {
      const file = path.join(dir, 'big');
      await writeRandomFile(file, 200 * MiB);
      const expected = await sha256sum(file);
      const { stage: s, calls } = stage();
      expect(s.partSize).toBe(64 * MiB);
      const loc = await s.upload(file);
      expect(loc).toMatchObject({ sizeBytes: 200 * MiB, sha256: expected });
      expect(calls.count('UploadPart')).toBe(4);
      expect(await drain(await s.open(loc))).toEqual({ size: 200 * MiB, sha256: expected });
      await rm(file);
      await admin.send(new DeleteObjectCommand({ Bucket: bucket, Key: keyOf(loc, bucket) }));
    }, 180_000);
  });

  describe('integrity faults on objects written directly to the store', () => {
    let good: DataLocation;
    let data: Buffer;
    beforeAll(async () => {
      data = randomBytes(200_000);
      good = await stage({ partSize: 5 * MiB }).stage.upload(chunked(data));
    });

    async function planted(body: Buffer): Promise<DataLocation> {
      const key = `${PREFIX}/ff/${randomBytes(16).toString('hex')}`;
      await admin.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
      return { ...good, uri: `s3://${bucket}/${key}` };
    }

    it('the intact object verifies', async () => {
      expect(await drain(await stage().stage.open(good))).toEqual({
        size: data.length,
        sha256: good.sha256,
      });
    });

    it('one byte short: PrematureEof with expected and observed', async () => {
      const bad = await planted(data.subarray(0, data.length - 1));
      expect(await failure(drain(await stage().stage.open(bad)))).toMatchObject({
        kind: 'PrematureEof',
        expected: data.length,
        observed: data.length - 1,
      });
    });

    it('one byte long: TooLong', async () => {
      const bad = await planted(Buffer.concat([data, Buffer.from([1])]));
      expect((await failure(drain(await stage().stage.open(bad)))).kind).toBe('TooLong');
    });

    it('one flipped byte: DigestMismatch', async () => {
      const flipped = Buffer.from(data);
      flipped[123_456] = (flipped[123_456] as number) ^ 1;
      const bad = await planted(flipped);
      expect((await failure(drain(await stage().stage.open(bad)))).kind).toBe('DigestMismatch');
    });

    it('a bad digest string, a location outside the stage, a bad range: refused with no S3 call', async () => {
      const s = stageFromDescriptor(s3Descriptor(bucket, PREFIX), { client: refusingClient() });
      expect((await failure(s.open({ ...good, sha256: 'z'.repeat(64) }))).kind).toBe(
        'InvalidDigest',
      );
      expect((await failure(s.open({ ...good, sha256: good.sha256.slice(1) }))).kind).toBe(
        'InvalidDigest',
      );
      for (const uri of [
        `s3://${bucket}/${PREFIX}x/ab/cd`,
        `s3://${bucket}/managed/ab/cd`,
        `s3://other-bucket/${PREFIX}/ab/cd`,
        `s3://${bucket}/${PREFIX}/../v2/ab`,
        `s3://${bucket}/${PREFIX}/%2e%2e/v2/ab`,
      ]) {
        expect(await failure(s.open({ ...good, uri }))).toMatchObject({ kind: 'OutsideStage' });
        expect(await failure(s.openRange({ ...good, uri }, 0, 1))).toMatchObject({
          kind: 'OutsideStage',
        });
        expect(await failure(s.presign({ ...good, uri }))).toMatchObject({ kind: 'OutsideStage' });
      }
      await expect(s.openRange(good, 5, 5)).rejects.toMatchObject({ code: 'InvalidRange' });
      await expect(s.presign(good, { expiresIn: 3601 })).rejects.toThrow(StageConfigError);
      await expect(s.upload(chunked(data), { partsInFlight: 17 })).rejects.toThrow(
        StageConfigError,
      );
      await expect(s.upload(chunked(data), { partsInFlight: 0 })).rejects.toThrow(StageConfigError);
    });

    it('a missing object is NotFound, not an integrity error', async () => {
      const gone = { ...good, uri: `s3://${bucket}/${PREFIX}/00/${'0'.repeat(32)}` };
      await expect(stage().stage.open(gone)).rejects.toMatchObject({ code: 'NotFound' });
      await expect(drainTo(stage().stage, gone)).rejects.toMatchObject({ code: 'NotFound' });
    });

    it('readTo (the sink read of cat -o) makes the same checks as open', async () => {
      const s = stage().stage;
      expect(await drainTo(s, good)).toEqual({ size: data.length, sha256: good.sha256 });
      const short = await planted(data.subarray(0, data.length - 1));
      expect(await failure(drainTo(s, short))).toMatchObject({
        kind: 'PrematureEof',
        expected: data.length,
        observed: data.length - 1,
      });
      const long = await planted(Buffer.concat([data, Buffer.from([1])]));
      expect(await failure(drainTo(s, long))).toMatchObject({
        kind: 'TooLong',
        expected: data.length,
      });
      const flipped = Buffer.from(data);
      flipped[7] = (flipped[7] as number) ^ 1;
      expect((await failure(drainTo(s, await planted(flipped)))).kind).toBe('DigestMismatch');
      // The sink's own failure (a full disk) comes out as itself, not as an integrity error.
      const full = new Error('ENOSPC: no space left on device');
      await expect(
        s.readTo(good, {
          data() {
            throw full;
          },
        }),
      ).rejects.toBe(full);
    });
  });

  describe('ranges', () => {
    let loc: DataLocation;
    let data: Buffer;
    let mode: ProxyMode = 'pass';
    let proxy: { endpoint: string; close(): Promise<void> };
    beforeAll(async () => {
      data = randomBytes(1_000_000);
      loc = await stage({ partSize: 5 * MiB }).stage.upload(chunked(data));
      proxy = await startRangeProxy(
        s3Endpoint(),
        () => mode,
        (b, k) =>
          getSignedUrl(admin, new GetObjectCommand({ Bucket: b, Key: k }), { expiresIn: 60 }),
      );
    });
    afterAll(async () => {
      await proxy.close();
    });

    it('one ranged GET returns exactly [start, end)', async () => {
      const { stage: s, calls } = stage();
      for (const [start, end] of [
        [0, 1],
        [0, 1_000_000],
        [500_000, 500_123],
        [999_999, 1_000_000],
      ] as const) {
        expect(
          (await collect(await s.openRange(loc, start, end))).equals(data.subarray(start, end)),
        ).toBe(true);
      }
      expect(calls.names).toEqual(['GetObject', 'GetObject', 'GetObject', 'GetObject']);
    });

    it('through a faithful proxy the same reads work', async () => {
      mode = 'pass';
      const { stage: s } = stage({ endpoint: proxy.endpoint });
      expect((await collect(await s.openRange(loc, 10, 20))).equals(data.subarray(10, 20))).toBe(
        true,
      );
      expect(await drain(await s.open(loc))).toMatchObject({ size: data.length });
    });

    it('a proxy that ignores Range (200, whole body) is RangeMismatch, with no HEAD and no second GET', async () => {
      mode = 'strip-range';
      const { stage: s, calls } = stage({ endpoint: proxy.endpoint });
      const error = await failure(s.openRange(loc, 100, 200));
      expect(error.kind).toBe('RangeMismatch');
      expect(calls.names).toEqual(['GetObject']);
    });

    it('a wrong Content-Range is RangeMismatch', async () => {
      mode = 'wrong-content-range';
      const { stage: s } = stage({ endpoint: proxy.endpoint });
      expect((await failure(s.openRange(loc, 100, 200))).kind).toBe('RangeMismatch');
    });

    it('a body cut off mid-range is PrematureEof with the range counts', async () => {
      mode = 'cut-body';
      const { stage: s } = stage({ endpoint: proxy.endpoint });
      const error = await failure(drain(await s.openRange(loc, 0, 800_000)));
      expect(error.kind).toBe('PrematureEof');
      expect(error.expected).toBe(800_000);
      expect(error.observed).toBeLessThan(800_000);
      mode = 'pass';
    });

    it('a range past a declared size that is wrong is RangeMismatch (Content-Range total differs)', async () => {
      const { stage: s } = stage();
      expect(
        (await failure(s.openRange({ ...loc, sizeBytes: loc.sizeBytes + 10 }, 0, 10))).kind,
      ).toBe('RangeMismatch');
    });
  });

  describe('presigned URLs', () => {
    it('work with fetch and a Range header, and are redacted when printed', async () => {
      const data = randomBytes(50_000);
      const { stage: s } = stage({ partSize: 5 * MiB });
      const loc = await s.upload(chunked(data));
      const url = await s.presign(loc, { expiresIn: 300 });
      expect(String(url)).toBe('[redacted]');
      expect(JSON.stringify({ url })).toBe('{"url":"[redacted]"}');
      expect(inspect(url)).not.toContain('X-Amz');
      expect(url.expiresAt.getTime()).toBeGreaterThan(Date.now() + 290_000);
      const whole = await fetch(url.reveal());
      expect(whole.status).toBe(200);
      expect(Buffer.from(await whole.arrayBuffer()).equals(data)).toBe(true);
      const ranged = await fetch(url.reveal(), { headers: { Range: 'bytes=1000-1999' } });
      expect(ranged.status).toBe(206);
      expect(ranged.headers.get('content-range')).toBe(`bytes 1000-1999/${data.length}`);
      expect(Buffer.from(await ranged.arrayBuffer()).equals(data.subarray(1000, 2000))).toBe(true);
      await expect(s.presign(loc, { expiresIn: 3601 })).rejects.toThrow(StageConfigError);
      expect((await s.presign(loc, { expiresIn: 3600 })).reveal()).toContain('X-Amz-Expires=3600');
    });
  });

  describe('cancellation, failure and limits', () => {
    async function keysUnder(prefix: string): Promise<string[]> {
      const listed = await admin.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
      return (listed.Contents ?? []).map((o) => o.Key as string).sort();
    }

    it('an abort mid-upload leaves no multipart upload open and no object', async () => {
      const before = await keysUnder(`${PREFIX}/`);
      const { stage: s, calls } = stage({ partSize: 5 * MiB });
      const controller = new AbortController();
      const upload = s.upload(chunked(randomBytes(40 * MiB), MiB), {
        signal: controller.signal,
        partsInFlight: 2,
        onProgress: () => controller.abort(),
      });
      await expect(upload).rejects.toMatchObject({ name: 'AbortError' });
      expect(calls.count('AbortMultipartUpload')).toBe(1);
      expect(calls.count('CompleteMultipartUpload')).toBe(0);
      expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
      expect(await keysUnder(`${PREFIX}/`)).toEqual(before);
      expect(calls.count('UploadPart')).toBeLessThan(8);
    });

    it('a refused part aborts the upload and rejects with the StoreError', async () => {
      const client = testClient();
      let parts = 0;
      client.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName === 'UploadPartCommand' && ++parts === 2) {
            throw Object.assign(new Error('injected failure'), {
              name: 'InternalError',
              $metadata: { httpStatusCode: 500 },
            });
          }
          return next(args);
        },
        { step: 'initialize', name: 'failSecondPart' },
      );
      const { stage: s, calls } = stage({ partSize: 5 * MiB, client });
      await expect(
        s.upload(chunked(randomBytes(20 * MiB), MiB), { partsInFlight: 1 }),
      ).rejects.toThrow(StoreError);
      expect(calls.count('AbortMultipartUpload')).toBe(1);
      expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
    });

    it('a full last-allowed part then EOF completes; one byte more is PartLimitExceeded before that part is sent', async () => {
      const file = path.join(dir, 'two-parts');
      const exact = await writeRandomFile(file, 10 * MiB);
      const fits = stage({ partSize: 5 * MiB, maxParts: 2 });
      expect((await fits.stage.upload(file)).sha256).toBe(exact);
      expect(fits.calls.count('UploadPart')).toBe(2);
      const over = stage({ partSize: 5 * MiB, maxParts: 2 });
      await expect(over.stage.upload(chunked(randomBytes(10 * MiB + 1), MiB))).rejects.toThrow(
        PartLimitExceeded,
      );
      expect(over.calls.parts).not.toContain(3);
      expect(over.calls.parts.length).toBeLessThanOrEqual(2);
      expect(over.calls.count('AbortMultipartUpload')).toBe(1);
      expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
    });

    it('responses out of order complete the parts in order, with at most partsInFlight parts in flight', async () => {
      const client = testClient();
      let inFlight = 0;
      let most = 0;
      client.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName !== 'UploadPartCommand') return next(args);
          inFlight++;
          most = Math.max(most, inFlight);
          try {
            const input = args.input as { PartNumber: number };
            // Part 1 answers last.
            if (input.PartNumber === 1) await new Promise((r) => setTimeout(r, 400));
            return await next(args);
          } finally {
            inFlight--;
          }
        },
        { step: 'initialize', name: 'slowFirstPart' },
      );
      const { stage: s } = stage({ partSize: 5 * MiB, client });
      const file = path.join(dir, 'ordered');
      const expected = await writeRandomFile(file, 17 * MiB);
      const loc = await s.upload(file, { partsInFlight: 3 });
      expect(loc.sha256).toBe(expected);
      expect(most).toBe(3);
      expect(await drain(await s.open(loc))).toEqual({ size: 17 * MiB, sha256: expected });
    });

    it('a tenant stage writes below prefix/tenant and refuses its siblings', async () => {
      const { stage: s } = stage({ partSize: 5 * MiB, tenant: 'acme' });
      const loc = await s.upload(chunked(randomBytes(10)));
      expect(loc.uri.startsWith(`s3://${bucket}/${PREFIX}/acme/`)).toBe(true);
      const other = { ...loc, uri: loc.uri.replace('/acme/', '/acme2/') };
      expect((await failure(s.open(other))).kind).toBe('OutsideStage');
    });
  });
});
