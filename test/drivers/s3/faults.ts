/**
 * The fault suite (src/testing/faults.ts) on S3 through the S3 driver: network faults with
 * the fault proxy between the driver and Ceph radosgw, and the SIGKILL loop over the CLI, with an
 * S3 managed-object stage. Skipped only with `PROVCAT_SKIP_S3=1` (test/setup/s3.ts); on a real
 * AWS bucket (`PROVCAT_TEST_S3_BUCKET`) only the SIGKILL loop runs, since the proxy speaks plain
 * HTTP. Short in `npm test`; `npm run soak` runs it long (docs/reliability.md).
 */
import { PutBucketVersioningCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll } from 'vitest';
import { S3Store } from '../../../drivers/s3/index.js';
import { faultSuite } from '../../../src/testing/faults.js';
import {
  describeS3,
  emptyBucket,
  removeBucket,
  s3Enabled,
  s3TestTarget,
  testS3Client,
  uniqueBucketName,
} from '../../setup/s3.js';

const MiB = 1024 * 1024;
const target = s3Enabled() ? s3TestTarget() : undefined;
const onAws = target?.kind === 'aws';
const bucket = onAws ? (target?.bucket as string) : uniqueBucketName('faults');
const endpoint = target?.endpoint;

describeS3(`fault suite on s3 (${target?.kind ?? 'skipped'})`, () => {
  beforeAll(async () => {
    if (onAws) return;
    await new S3Store({ cache: 'unused' }).makeBucket(bucket, { versioning: true });
    const c = testS3Client();
    await c.send(
      new PutBucketVersioningCommand({
        Bucket: bucket,
        VersioningConfiguration: { Status: 'Enabled' },
      }),
    );
    c.destroy();
  });
  afterAll(async () => {
    const c = testS3Client();
    if (onAws) await emptyBucket(c, bucket, 'faults-');
    else await removeBucket(c, bucket);
    c.destroy();
  });

  faultSuite({
    name: `s3 (${target?.kind ?? 'skipped'})`,
    // Ceph ignores If-None-Match on versioned buckets: commits use the oldest-version-wins mode.
    store: (o) =>
      new S3Store({
        createFallback: onAws ? 'none' : 'oldest-version-wins',
        multipartThreshold: 5 * MiB,
        partSize: 5 * MiB,
        ...o,
      }),
    bucket,
    flags: {
      versions: true,
      createMode: onAws ? 'atomic' : 'oldest-version-wins',
      ranges: true,
      hostileKeys: true,
    },
    env: {
      AWS_ENDPOINT_URL_S3: process.env.AWS_ENDPOINT_URL_S3 ?? '',
      AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? '',
      AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? '',
      AWS_REGION: process.env.AWS_REGION ?? '',
      PROVCAT_S3_FORCE_PATH_STYLE: process.env.PROVCAT_S3_FORCE_PATH_STYLE ?? '',
      PROVCAT_S3_CREATE_FALLBACK: onAws ? 'none' : 'oldest-version-wins',
    },
    network:
      endpoint?.startsWith('http://') === true
        ? {
            endpoint,
            env: (url) => ({ AWS_ENDPOINT_URL_S3: url }),
            multipartBytes: 5 * MiB,
          }
        : undefined,
    stageUri: (prefix) => `s3://${bucket}/${prefix}`,
    purge: async (prefix) => {
      const c = testS3Client();
      try {
        await emptyBucket(c, bucket, prefix);
      } finally {
        c.destroy();
      }
    },
  });
});
