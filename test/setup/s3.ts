/**
 * Helpers for test files that need S3: whether the S3 suites run, against what, and buckets
 * that clean up after themselves.
 *
 * The global setup (global.ts) decides the target and exports it to the workers through the
 * environment:
 * - `PROVCAT_SKIP_S3=1`: {@link describeS3} registers the suite as skipped, with the reason in
 *   its name, so the report shows it (never a silent pass).
 * - `PROVCAT_TEST_S3=ceph`: the local Ceph radosgw; tests create their own buckets.
 * - `PROVCAT_TEST_S3=aws` (`PROVCAT_TEST_S3_BUCKET` set): a real bucket, which must have
 *   versioning enabled; tests work under random prefixes in it and delete what they wrote. A
 *   second, unversioned bucket can be named with `PROVCAT_TEST_S3_UNVERSIONED_BUCKET`; tests
 *   that need one skip visibly without it.
 *
 * When neither is set and S3 is not skipped, {@link s3TestTarget} throws: a suite that needs a
 * server fails loudly when the server is missing.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import {
  AbortMultipartUploadCommand,
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  ListMultipartUploadsCommand,
  ListObjectVersionsCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { describe } from 'vitest';

/** Where the S3 suites run. */
export interface S3TestTarget {
  kind: 'ceph' | 'aws';
  /** The endpoint, or `undefined` for AWS itself. */
  endpoint: string | undefined;
  region: string;
  forcePathStyle: boolean;
  /** On `aws`: the versioned bucket to use (tests do not create buckets there). */
  bucket: string | undefined;
  /** On `aws`: an unversioned bucket, if one was named. */
  unversionedBucket: string | undefined;
}

/** Why S3 suites are skipped, or `undefined` when they run. */
export function s3SkipReason(): string | undefined {
  return process.env.PROVCAT_SKIP_S3 === '1' ? 'PROVCAT_SKIP_S3=1' : undefined;
}

/** True unless `PROVCAT_SKIP_S3=1`. */
export function s3Enabled(): boolean {
  return s3SkipReason() === undefined;
}

/**
 * The target the global setup prepared. Throws when S3 is enabled but no server was prepared
 * (the test file ran without the global setup, or the setup failed).
 */
export function s3TestTarget(): S3TestTarget {
  const kind = process.env.PROVCAT_TEST_S3;
  if (kind !== 'ceph' && kind !== 'aws') {
    throw new Error(
      'no S3 server for the tests: PROVCAT_TEST_S3 is not set. Run through vitest (its global ' +
        'setup starts Ceph), set PROVCAT_TEST_S3_BUCKET for a real bucket, or PROVCAT_SKIP_S3=1',
    );
  }
  const endpoint = process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL;
  return {
    kind,
    endpoint: endpoint === '' ? undefined : endpoint,
    region: process.env.AWS_REGION ?? 'us-east-1',
    forcePathStyle: process.env.PROVCAT_S3_FORCE_PATH_STYLE === '1',
    bucket: kind === 'aws' ? process.env.PROVCAT_TEST_S3_BUCKET : undefined,
    unversionedBucket:
      kind === 'aws' ? process.env.PROVCAT_TEST_S3_UNVERSIONED_BUCKET || undefined : undefined,
  };
}

/**
 * `describe` for a suite that needs S3: skipped, with the reason in its name, when
 * `PROVCAT_SKIP_S3=1`; otherwise it runs (and fails loudly if the server is missing).
 */
export function describeS3(name: string, fn: () => void): void {
  const reason = s3SkipReason();
  if (reason) describe.skip(`${name} (skipped: ${reason})`, fn);
  else describe(name, fn);
}

/** A raw SDK client for the test target (for checks behind the driver's back). */
export function testS3Client(overrides: Partial<S3ClientConfig> = {}): S3Client {
  const t = s3TestTarget();
  return new S3Client({
    region: t.region,
    endpoint: t.endpoint,
    forcePathStyle: t.forcePathStyle,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    ...overrides,
  });
}

/** A fresh, valid, unique bucket name (`provcat-<label>-<hex>`). */
export function uniqueBucketName(label = 't'): string {
  return `provcat-${label}-${randomBytes(5).toString('hex')}`;
}

/**
 * Delete every version and delete marker under `prefix` (the whole bucket for `''`), and any
 * open multipart upload. Lists again until nothing is left (a store may list lazily), and throws
 * when a delete is refused.
 */
export async function emptyBucket(client: S3Client, bucket: string, prefix = ''): Promise<void> {
  for (let pass = 0; ; pass++) {
    const page = await client.send(
      new ListObjectVersionsCommand({ Bucket: bucket, Prefix: prefix || undefined }),
    );
    const objects = [...(page.Versions ?? []), ...(page.DeleteMarkers ?? [])].map((v) => ({
      Key: v.Key as string,
      VersionId: v.VersionId,
    }));
    const uploads = await client.send(
      new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix || undefined }),
    );
    if (objects.length === 0 && (uploads.Uploads ?? []).length === 0) return;
    if (pass >= 50) throw new Error(`${bucket}/${prefix} does not become empty`);
    if (objects.length > 0) await deleteVersions(client, bucket, objects);
    for (const u of uploads.Uploads ?? []) {
      await client.send(
        new AbortMultipartUploadCommand({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }),
      );
    }
  }
}

/**
 * Delete versions with one DeleteObjects call; keys XML cannot carry (control characters) make
 * the store refuse the whole request, so then one DeleteObject per version.
 */
async function deleteVersions(
  client: S3Client,
  bucket: string,
  objects: Array<{ Key: string; VersionId: string | undefined }>,
): Promise<void> {
  let errors: Array<{ Key?: string; Code?: string; Message?: string }> | undefined;
  try {
    const r = await client.send(
      new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: objects, Quiet: true } }),
    );
    errors = r.Errors;
  } catch (error) {
    if ((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode !== 400) {
      throw error;
    }
    for (const o of objects) {
      await client.send(
        new DeleteObjectCommand({ Bucket: bucket, Key: o.Key, VersionId: o.VersionId }),
      );
    }
    return;
  }
  if (errors && errors.length > 0) {
    const first = errors[0];
    throw new Error(
      `deleting ${errors.length} objects from ${bucket} failed: ${first?.Key} ${first?.Code} ${first?.Message}`,
    );
  }
}

/** Empty and delete a bucket the test created. */
export async function removeBucket(client: S3Client, bucket: string): Promise<void> {
  await emptyBucket(client, bucket);
  await client.send(new DeleteBucketCommand({ Bucket: bucket }));
}

/**
 * A bucket for one test file: on Ceph a new one named `provcat-<label>-<hex>`, unversioned
 * unless `versioning` is set; on AWS the target's versioned bucket (tests then work under their
 * own prefix in it). Pair with {@link dropTestBucket}, which removes every version.
 */
export async function createTestBucket(
  label: string,
  options: { versioning?: boolean } = {},
): Promise<string> {
  const t = s3TestTarget();
  if (t.kind === 'aws') return t.bucket as string;
  const bucket = uniqueBucketName(label);
  const c = testS3Client();
  try {
    await c.send(new CreateBucketCommand({ Bucket: bucket }));
    if (options.versioning) {
      await c.send(
        new PutBucketVersioningCommand({
          Bucket: bucket,
          VersioningConfiguration: { Status: 'Enabled' },
        }),
      );
    }
  } finally {
    c.destroy();
  }
  return bucket;
}

/** Undo {@link createTestBucket}: remove the bucket on Ceph, empty `prefix` in it on AWS. */
export async function dropTestBucket(bucket: string, prefix: string): Promise<void> {
  const c = testS3Client();
  try {
    if (s3TestTarget().kind === 'ceph') await removeBucket(c, bucket);
    else await emptyBucket(c, bucket, prefix);
  } finally {
    c.destroy();
  }
}

/** Put each of `objects` (key → text) into `bucket` with a raw SDK client. */
export async function putTestObjects(
  bucket: string,
  objects: Record<string, string>,
): Promise<void> {
  const c = testS3Client();
  try {
    for (const [key, body] of Object.entries(objects)) {
      await c.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
    }
  } finally {
    c.destroy();
  }
}
