/**
 * What only the S3 managed stage has, on the test server (Ceph radosgw); the cases every cloud
 * stage shares run from test/drivers/s3.test.ts (test/support/stage-suite.ts). Here: refusals
 * proved by a client on which any call fails, a refused part aborting the upload, the part
 * ceiling, and parts completed in order when their answers come out of order.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import {
  type DataLocation,
  PartLimitExceeded,
  type Stage,
  StageConfigError,
  stageFromDescriptor,
} from '../../src/lake/index.js';
import {
  chunked,
  countCalls,
  drain,
  MiB,
  openUploads,
  refusingClient,
  s3Descriptor,
  testClient,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';
import { describeS3 } from '../setup/s3.js';
import { integrityFailure as failure, PREFIX } from '../support/stage-suite.js';
import { s3StageHarness } from '../support/stage-targets.js';

const h = s3StageHarness();

describeS3('S3 stage: what only S3 has', () => {
  let dir: string;
  let bucket: string;
  let admin: S3Client;
  let good: DataLocation;
  const data = randomBytes(200_000);

  beforeAll(async () => {
    await h.setup();
    bucket = h.bucket();
    admin = h.admin();
    dir = await mkdtemp(path.join(tmpdir(), 'lake-s3-'));
    good = await h.stage({ partSize: 5 * MiB }).upload(chunked(data));
  });
  afterAll(async () => {
    await h.teardown();
    await rm(dir, { recursive: true, force: true });
  });

  /** A stage on `client` (a fresh one by default) with its calls counted. */
  function stage(options: { partSize?: number; maxParts?: number; client?: S3Client } = {}) {
    const client = options.client ?? testClient();
    const calls = countCalls(client);
    const s = stageFromDescriptor(s3Descriptor(bucket, PREFIX), {
      client,
      partSize: options.partSize,
      maxParts: options.maxParts,
    }) as Stage;
    return { stage: s, calls };
  }

  it('a bad digest string, a location outside the stage, a bad range: refused with no S3 call', async () => {
    const s = stageFromDescriptor(s3Descriptor(bucket, PREFIX), { client: refusingClient() });
    expect((await failure(s.open({ ...good, sha256: 'z'.repeat(64) }))).kind).toBe('InvalidDigest');
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
    await expect(s.upload(chunked(data), { partsInFlight: 17 })).rejects.toThrow(StageConfigError);
    await expect(s.upload(chunked(data), { partsInFlight: 0 })).rejects.toThrow(StageConfigError);
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
});
