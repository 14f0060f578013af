/**
 * The S3 driver's lean PutObject (drivers/s3/lean-path.ts `put`): a push of small files sends
 * every PutObject without loading the SDK client, and each object is what the SDK would have
 * stored — the bytes, the Content-Type, the recorded SHA-256 (`x-amz-meta-sha256`), an MD5 ETag
 * and a version ID on a versioned bucket; a put the lean path cannot complete goes to the SDK,
 * whose errors come out through the driver's one mapping.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { S3Store } from '../../drivers/s3/index.js';
import { s3SdkRequested } from '../../drivers/s3/sdk.js';
import { NotFound } from '../../src/core/errors.js';
import { rejection } from '../../src/testing/rejection.js';
import {
  createTestBucket,
  describeS3,
  dropTestBucket,
  s3TestTarget,
  testS3Client,
} from '../setup/s3.js';
import { writeTree } from '../support/folder-flows.js';

function tmp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-${label}-`));
}

describeS3('lean PutObject against the server', () => {
  let bucket = '';
  const prefix = `leanput-${Date.now()}/`;
  beforeAll(async () => {
    bucket = await createTestBucket('leanput', { versioning: true });
  }, 60_000);
  afterAll(() => dropTestBucket(bucket, prefix), 120_000);

  it('a push of small files stores each as the SDK would, without loading the SDK client', async (ctx) => {
    const t = s3TestTarget();
    const dir = tmp('leanput');
    const files: Record<string, string> = {};
    for (let i = 0; i < 40; i++) files[`d${i % 4}/f${i}.txt`] = `file ${i}\n`.repeat(i + 1);
    files['odd name é+%.json'] = '{"a": 1}\n';
    writeTree(dir, files);
    const store = new S3Store({ cache: tmp('leanput-cache') });
    const uri = `s3://${bucket}/${prefix}tree/`;
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 41, skipped: 0 });
    if (t.endpoint === undefined || !t.forcePathStyle) {
      ctx.annotate('route learned from the SDK on this target: SDK load not asserted');
    } else {
      expect(s3SdkRequested()).toBe(false);
    }
    const raw = testS3Client();
    for (const [rel, body] of [
      ['d1/f5.txt', files['d1/f5.txt']],
      ['odd name é+%.json', files['odd name é+%.json']],
    ] as const) {
      const key = `${prefix}tree/${rel}`;
      const head = await raw.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
      const md5 = createHash('md5')
        .update(body as string)
        .digest('hex');
      const sha = createHash('sha256')
        .update(body as string)
        .digest('hex');
      expect(head.ETag).toBe(`"${md5}"`);
      expect(head.ContentLength).toBe(Buffer.byteLength(body as string));
      expect(head.ContentType).toBe(rel.endsWith('.json') ? 'application/json' : 'text/plain');
      expect(head.Metadata?.sha256).toBe(sha);
      expect(head.VersionId).toBeTruthy();
      expect((await store._head(bucket, key)).versionId).toBe(head.VersionId);
      const fetched = await store.fetch(
        `${uri}${rel.split('/').map(encodeURIComponent).join('/')}`,
      );
      expect(await readFile(fetched.path, 'utf8')).toBe(body);
    }
    // Unchanged now: one listing proves it (the MD5 ETags the lean puts got).
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 41 });
    raw.destroy();
    await store.close();
  }, 120_000);

  it('a put the lean path cannot complete goes to the SDK, and its error is the mapped one', async () => {
    const store = new S3Store({ cache: tmp('leanput-cache') });
    const missing = `${bucket}-no-such-bucket`;
    const failed = await rejection(store._put(missing, 'k.txt', Buffer.from('x'), { size: 1 }));
    expect(failed).toBeInstanceOf(NotFound);
    expect(s3SdkRequested()).toBe(true);
    await store.close();
  }, 60_000);
});
