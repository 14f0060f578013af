/**
 * The `s3` stage descriptor kind: managed objects in one S3 bucket below one key prefix.
 *
 * ```json
 * { "version": 1, "kind": "s3", "bucket": "lake", "prefix": "managed", "region": "us-east-1",
 *   "endpoint": "http://127.0.0.1:7480", "forcePathStyle": true, "tenant": "acme" }
 * ```
 *
 * The shape is every bucket stage's (src/lake/bucket-stage.ts). The stage string
 * `s3://bucket/prefix/` takes region, endpoint and path style from the AWS environment, read by
 * config.ts (the driver's one place for it). The descriptor decides the
 * topology: without an endpoint in it, the environment's `AWS_ENDPOINT_URL_S3` does not redirect
 * the stage elsewhere. The backend is an {@link S3Store} (loaded on first use), so reads take the
 * driver's lean path and uploads its multipart protocol.
 *
 * @module
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { bucketStageKind } from '../../src/lake/bucket-stage.js';
import { checkEndpoint, fail } from '../../src/lake/descriptor-fields.js';
import type { StageDescriptor, StageKind } from '../../src/lake/stage-kinds.js';
import { resolveS3Config } from './config.js';

/** A stage in one S3 bucket, below one key prefix. */
export interface S3StageDescriptor extends StageDescriptor {
  readonly version: 1;
  readonly kind: 's3';
  readonly bucket: string;
  /** Key prefix as `/`-separated segments, without leading or trailing `/`; `''` is the whole bucket. */
  readonly prefix: string;
  readonly region: string;
  /** Endpoint URL for S3-compatible stores (`http://127.0.0.1:7480`). */
  readonly endpoint?: string | undefined;
  /** Path-style addressing (`endpoint/bucket/key`) instead of virtual hosts. */
  readonly forcePathStyle?: boolean | undefined;
}

const REGION = /^[a-z0-9-]{1,64}$/;

/** The `s3` kind (see the module comment). */
export const s3StageKind: StageKind = bucketStageKind({
  kind: 's3',
  bucketName: { pattern: /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, what: 'an S3 bucket name' },
  fields: ['region', 'endpoint', 'forcePathStyle'],
  own({ region, endpoint, forcePathStyle }) {
    if (typeof region !== 'string' || !REGION.test(region)) {
      fail(`region must be a region name, not ${JSON.stringify(region)}`);
    }
    if (endpoint !== undefined) checkEndpoint(endpoint);
    if (forcePathStyle !== undefined && typeof forcePathStyle !== 'boolean') {
      fail('forcePathStyle must be true or false');
    }
    return {
      region,
      ...(endpoint === undefined ? {} : { endpoint }),
      ...(forcePathStyle === undefined ? {} : { forcePathStyle }),
    };
  },
  fromEnv(env) {
    const config = resolveS3Config({}, env);
    return {
      region: config.region,
      ...(config.endpoint === undefined ? {} : { endpoint: config.endpoint }),
      forcePathStyle: config.forcePathStyle,
    };
  },
  endpoint: (d) => (d as S3StageDescriptor).endpoint ?? '',
  async store(descriptor, options) {
    const d = descriptor as S3StageDescriptor;
    const { S3Store } = await import('./s3-store.js');
    const env = options.env ?? process.env;
    return new S3Store({
      client: options.client as S3Client | undefined,
      region: d.region,
      endpoint: d.endpoint,
      forcePathStyle: d.forcePathStyle ?? false,
      offline: options.offline,
      env: d.endpoint === undefined ? { ...env, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: 'true' } : env,
    });
  },
});
