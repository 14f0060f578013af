/**
 * The `s3` stage descriptor kind: managed objects in one S3 bucket below one key prefix.
 *
 * ```json
 * { "version": 1, "kind": "s3", "bucket": "lake", "prefix": "managed", "region": "us-east-1",
 *   "endpoint": "http://127.0.0.1:7480", "forcePathStyle": true, "tenant": "acme" }
 * ```
 *
 * The stage string `s3://bucket/prefix/` takes region, endpoint and path style from the AWS
 * environment, read by config.ts (the driver's one place for it). The descriptor decides the
 * topology: without an endpoint in it, the environment's `AWS_ENDPOINT_URL_S3` does not redirect
 * the stage elsewhere. The backend is an {@link S3Store} (loaded on first use), so reads take the
 * driver's lean path and uploads its multipart protocol.
 *
 * @module
 */
import type { S3Client } from '@aws-sdk/client-s3';
import {
  checkEndpoint,
  checkFields,
  decodeStagePrefix,
  fail,
  joinPrefix,
  normalizePrefix,
} from '../../src/lake/descriptor-fields.js';
import type { StageDescriptor, StageKind } from '../../src/lake/kinds.js';
import { objectLocations } from '../../src/lake/locations.js';
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

const FIELDS = [
  'version',
  'kind',
  'bucket',
  'prefix',
  'region',
  'endpoint',
  'forcePathStyle',
  'tenant',
];
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const REGION = /^[a-z0-9-]{1,64}$/;

function asS3(descriptor: StageDescriptor): S3StageDescriptor {
  return descriptor as S3StageDescriptor;
}

/** The `s3` kind (see the module comment). */
export const s3StageKind: StageKind = {
  kind: 's3',

  parse(record, tenant) {
    checkFields(record, FIELDS);
    const { bucket, prefix, region, endpoint, forcePathStyle } = record;
    if (typeof bucket !== 'string' || !BUCKET.test(bucket)) {
      fail(`bucket must be an S3 bucket name, not ${JSON.stringify(bucket)}`);
    }
    if (typeof prefix !== 'string') fail('prefix must be a string (use "" for the whole bucket)');
    if (typeof region !== 'string' || !REGION.test(region)) {
      fail(`region must be a region name, not ${JSON.stringify(region)}`);
    }
    if (endpoint !== undefined) checkEndpoint(endpoint);
    if (forcePathStyle !== undefined && typeof forcePathStyle !== 'boolean') {
      fail('forcePathStyle must be true or false');
    }
    return Object.freeze({
      version: 1,
      kind: 's3',
      bucket,
      prefix: normalizePrefix(prefix),
      region,
      ...(endpoint === undefined ? {} : { endpoint: endpoint as string }),
      ...(forcePathStyle === undefined ? {} : { forcePathStyle }),
      ...(tenant === undefined ? {} : { tenant }),
    });
  },

  fromString(text, env) {
    const m = /^s3:\/\/([^/?#]+)(?:\/([^?#]*))?$/.exec(text);
    if (!m) return undefined;
    const config = resolveS3Config({}, env);
    return s3StageKind.parse(
      {
        version: 1,
        kind: 's3',
        bucket: m[1],
        prefix: decodeStagePrefix(m[2] ?? '', text),
        region: config.region,
        ...(config.endpoint === undefined ? {} : { endpoint: config.endpoint }),
        forcePathStyle: config.forcePathStyle,
      },
      undefined,
    );
  },

  locations(descriptor) {
    const d = asS3(descriptor);
    return objectLocations('s3', d.bucket, joinPrefix(d.prefix, d.tenant));
  },

  identity(descriptor) {
    const d = asS3(descriptor);
    return `s3|${d.endpoint ?? ''}|${d.bucket}|${joinPrefix(d.prefix, d.tenant)}`;
  },

  async backend(descriptor, options) {
    const d = asS3(descriptor);
    const [{ S3Store }, { storeBackend }] = await Promise.all([
      import('./s3-store.js'),
      import('../../src/lake/backend.js'),
    ]);
    const env = options.env ?? process.env;
    const store = new S3Store({
      client: options.client as S3Client | undefined,
      region: d.region,
      endpoint: d.endpoint,
      forcePathStyle: d.forcePathStyle ?? false,
      offline: options.offline,
      env: d.endpoint === undefined ? { ...env, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: 'true' } : env,
    });
    return storeBackend(store, d.bucket);
  },
};
