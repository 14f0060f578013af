/**
 * The S3 driver's bucket calls: creating a bucket with versioning ({@link createBucket}) and
 * reading a bucket's versioning state ({@link bucketVersioning}), which the version primitives
 * ask once per bucket.
 *
 * @module
 */
import type { BucketLocationConstraint, S3Client } from '@aws-sdk/client-s3';
import type { Versioning } from '../../src/driver-kit/bucket-state.js';
import { errorName } from './errors.js';
import type { S3Sdk } from './sdk.js';

/**
 * CreateBucket in `region` (idempotent for a bucket this account already owns: its
 * `BucketAlreadyOwnedByYou` is success), then, with `versioning`, PutBucketVersioning `Enabled`.
 */
export async function createBucket(
  client: S3Client,
  sdk: S3Sdk,
  bucket: string,
  options: { region: string; versioning: boolean; signal?: AbortSignal | undefined },
): Promise<void> {
  const { region, signal } = options;
  try {
    await client.send(
      new sdk.CreateBucketCommand({
        Bucket: bucket,
        CreateBucketConfiguration:
          region === 'us-east-1'
            ? undefined
            : { LocationConstraint: region as BucketLocationConstraint },
      }),
      { abortSignal: signal },
    );
  } catch (error) {
    if (errorName(error) !== 'BucketAlreadyOwnedByYou') throw error;
  }
  if (options.versioning) {
    await client.send(
      new sdk.PutBucketVersioningCommand({
        Bucket: bucket,
        VersioningConfiguration: { Status: 'Enabled' },
      }),
      { abortSignal: signal },
    );
  }
}

/** GetBucketVersioning: `enabled`, `suspended` or `not enabled` (never set). */
export async function bucketVersioning(
  client: S3Client,
  sdk: S3Sdk,
  bucket: string,
): Promise<Versioning> {
  const r = await client.send(new sdk.GetBucketVersioningCommand({ Bucket: bucket }));
  return r.Status === 'Enabled'
    ? 'enabled'
    : r.Status === 'Suspended'
      ? 'suspended'
      : 'not enabled';
}
