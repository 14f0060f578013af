/**
 * Configuration of the S3 driver: the options an {@link S3Store} takes and how they combine with
 * the environment.
 *
 * The driver follows the AWS conventions rather than inventing its own: credentials come from
 * the SDK's default provider chain (environment, shared config and credentials files, SSO, web
 * identity, container and instance metadata), the endpoint from `AWS_ENDPOINT_URL_S3` then
 * `AWS_ENDPOINT_URL` (unless `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is true), the region from
 * `AWS_REGION` (then `AWS_DEFAULT_REGION`, as the AWS CLI reads it). Only what AWS has no convention for is provcat's own: path-style addressing
 * (`PROVCAT_S3_FORCE_PATH_STYLE=1`) and the create fallback (`PROVCAT_S3_CREATE_FALLBACK`).
 *
 * Resolution is a pure function of the options and an environment object
 * ({@link resolveS3Config}), so it is tested without a server and without touching
 * `process.env`.
 *
 * @module
 */
import type { S3Client } from '@aws-sdk/client-s3';
import type { Capabilities } from '../../src/contract/primitives.js';
import { envSwitch, envText } from '../../src/driver-kit/env-settings.js';
import type { StoreOptions } from '../../src/store/store.js';
import {
  DEFAULT_PART_SIZE,
  DEFAULT_PARTS_IN_FLIGHT,
  DEFAULT_STALL_TIMEOUT_MS,
  MAX_PARTS_IN_FLIGHT,
  MAX_STALL_TIMEOUT_MS,
} from '../../src/upload/settings.js';

/** One mebibyte. */
export const MiB = 1024 * 1024;
/** One gibibyte. */
export const GiB = 1024 * MiB;

/** The smallest part S3 accepts (every part but the last). */
export const MIN_PART_SIZE = 5 * MiB;
/** The largest part, and the largest single PutObject or CopyObject. */
export const MAX_PART_SIZE = 5 * GiB;
/** S3 numbers parts 1..10,000. */
export const MAX_PARTS = 10_000;

/**
 * What the S3 driver can do: versions (on buckets with versioning enabled), byte ranges, the
 * SHA-256 as `x-amz-meta-sha256`, and version listings from a KeyMarker (`startAfter`).
 */
export const S3_CAPABILITIES: Capabilities = {
  versions: true,
  ranges: true,
  sha256Metadata: true,
  startAfter: true,
};

// The upload engine's defaults, the same for every driver (src/upload).
export {
  DEFAULT_PART_SIZE,
  DEFAULT_PARTS_IN_FLIGHT,
  DEFAULT_STALL_TIMEOUT_MS,
  MAX_PARTS_IN_FLIGHT,
  MAX_STALL_TIMEOUT_MS,
} from '../../src/upload/settings.js';

/**
 * What `_createMode` reports for a bucket whose store ignores `If-None-Match: *`:
 * - `none` (default): commits on that bucket fail closed with a StoreError.
 * - `oldest-version-wins`: on a versioned bucket, the commit code writes, lists the key's
 *   versions, and treats the oldest as the winner (see docs/drivers/s3.md).
 */
export type CreateFallback = 'oldest-version-wins' | 'none';

/** Options of {@link S3Store} (on top of the options every store takes). */
export interface S3StoreOptions extends StoreOptions {
  /**
   * An S3 client to use instead of building one (tests, embedders with their own transport or
   * credentials). With a client, `region`, `endpoint` and `forcePathStyle` do not change how
   * requests are sent: the client's own configuration does.
   */
  client?: S3Client | undefined;
  /** AWS region. Default: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`. */
  region?: string | undefined;
  /** Endpoint URL (Ceph, MinIO, a proxy). Default: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, else AWS. */
  endpoint?: string | undefined;
  /** Address buckets as `endpoint/bucket/key` instead of `bucket.endpoint/key`. Default: `PROVCAT_S3_FORCE_PATH_STYLE=1`. */
  forcePathStyle?: boolean | undefined;
  /** Copies of objects larger than this use UploadPartCopy. Default (and maximum) 5 GiB, S3's CopyObject limit. */
  copyThreshold?: number | undefined;
  /** See {@link CreateFallback}. Default: `PROVCAT_S3_CREATE_FALLBACK`, else `none`. */
  createFallback?: CreateFallback | undefined;
  /**
   * Reads (HEAD, GET, listings) on the lean path (lean-path.ts, lean-reader.ts) where it applies; `false` sends every
   * request through the SDK. Default: true, unless `PROVCAT_S3_LEAN=0`. An accelerator only:
   * both paths give the same answers (the conformance suite runs on each).
   */
  lean?: boolean | undefined;
  /**
   * Where to read the settings above from (endpoint, region, path style, create fallback,
   * checksums). Default `process.env`. Credentials come from the SDK's own chain unless
   * {@link credentials} or {@link awsProfile} is given.
   */
  env?: NodeJS.ProcessEnv | undefined;
  /**
   * Credentials to sign with instead of the SDK's default chain (a named endpoint's, read from
   * the environment variables it names; src/store/profiles.ts). Never logged.
   */
  credentials?: S3Credentials | undefined;
  /** The AWS shared-config profile whose credentials to use (the SDK's chain for that profile). */
  awsProfile?: string | undefined;
}

/** Static AWS credentials (an access key, and a session token for temporary ones). */
export interface S3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string | undefined;
}

/** The options after defaults and environment are applied. */
export interface S3Config {
  region: string;
  /** `undefined`: the AWS endpoint for the region (or a profile's `endpoint_url`, see below). */
  endpoint: string | undefined;
  /**
   * With no endpoint: keep the SDK from finding one on its own (it reads `AWS_ENDPOINT_URL_S3`
   * from `process.env` and `endpoint_url` from the shared config file). True when
   * `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` says so, or when the caller passed its own `env`
   * (then that environment is the whole truth).
   */
  ignoreConfiguredEndpointUrls: boolean;
  forcePathStyle: boolean;
  multipartThreshold: number;
  partSize: number;
  partsInFlight: number;
  stallTimeoutMs: number;
  copyThreshold: number;
  createFallback: CreateFallback;
  /** The lean read path is allowed (see {@link S3StoreOptions.lean}). */
  lean: boolean;
  /**
   * `WHEN_REQUIRED` unless `AWS_REQUEST_CHECKSUM_CALCULATION` says otherwise (see
   * docs/drivers/s3.md: S3-compatible servers such as Ceph 16 refuse the SDK's default
   * streaming checksums).
   */
  requestChecksumCalculation: ChecksumSetting;
  /** `WHEN_REQUIRED` unless `AWS_RESPONSE_CHECKSUM_VALIDATION` says otherwise. */
  responseChecksumValidation: ChecksumSetting;
  /** Credentials given as an option (else the SDK's chain). */
  credentials: S3Credentials | undefined;
  /** The shared-config profile for the SDK's chain, when given as an option. */
  awsProfile: string | undefined;
}

function checkedInteger(name: string, value: number, min: number, max: number): number {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`S3 option ${name} must be an integer in ${min}..${max}, not ${value}`);
  }
  return value;
}

/** Parse a create fallback from an option or `PROVCAT_S3_CREATE_FALLBACK`; RangeError otherwise. */
export function parseCreateFallback(value: string, source: string): CreateFallback {
  if (value === 'oldest-version-wins' || value === 'none') return value;
  throw new RangeError(`${source} must be 'oldest-version-wins' or 'none', not '${value}'`);
}

/** When the SDK computes or checks flexible checksums (CRC32 and friends). */
export type ChecksumSetting = 'WHEN_REQUIRED' | 'WHEN_SUPPORTED';

function checksumSetting(value: string | undefined, name: string): ChecksumSetting {
  const v = envText(value)?.toUpperCase();
  if (v === undefined) return 'WHEN_REQUIRED';
  if (v === 'WHEN_REQUIRED' || v === 'WHEN_SUPPORTED') return v;
  throw new RangeError(`${name} must be WHEN_REQUIRED or WHEN_SUPPORTED, not '${value}'`);
}

/**
 * Apply defaults and the environment to the options. Throws RangeError for an option or
 * environment value out of range, so a misconfiguration fails at construction, not mid-upload.
 */
export function resolveS3Config(
  options: S3StoreOptions = {},
  env = options.env ?? process.env,
): S3Config {
  const ignoreEnvEndpoints = envSwitch(env.AWS_IGNORE_CONFIGURED_ENDPOINT_URLS, false);
  const endpoint =
    envText(options.endpoint) ??
    (ignoreEnvEndpoints ? undefined : envText(env.AWS_ENDPOINT_URL_S3, env.AWS_ENDPOINT_URL));
  if (endpoint !== undefined && !URL.canParse(endpoint)) {
    throw new RangeError(`S3 endpoint is not a URL: '${endpoint}'`);
  }
  const partSize = checkedInteger(
    'partSize',
    options.partSize ?? DEFAULT_PART_SIZE,
    MIN_PART_SIZE,
    MAX_PART_SIZE,
  );
  const fallbackText = options.createFallback ?? envText(env.PROVCAT_S3_CREATE_FALLBACK);
  return {
    region: envText(options.region, env.AWS_REGION, env.AWS_DEFAULT_REGION) ?? 'us-east-1',
    endpoint,
    ignoreConfiguredEndpointUrls:
      endpoint === undefined && (ignoreEnvEndpoints || options.env !== undefined),
    forcePathStyle: options.forcePathStyle ?? envSwitch(env.PROVCAT_S3_FORCE_PATH_STYLE, false),
    multipartThreshold: checkedInteger(
      'multipartThreshold',
      options.multipartThreshold ?? DEFAULT_PART_SIZE,
      0,
      MAX_PART_SIZE,
    ),
    partSize,
    partsInFlight: checkedInteger(
      'partsInFlight',
      options.partsInFlight ?? DEFAULT_PARTS_IN_FLIGHT,
      1,
      MAX_PARTS_IN_FLIGHT,
    ),
    stallTimeoutMs: checkedInteger(
      'stallTimeoutMs',
      options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS,
      1,
      MAX_STALL_TIMEOUT_MS,
    ),
    copyThreshold: checkedInteger(
      'copyThreshold',
      options.copyThreshold ?? MAX_PART_SIZE,
      0,
      MAX_PART_SIZE,
    ),
    createFallback:
      fallbackText === undefined
        ? 'none'
        : parseCreateFallback(
            fallbackText,
            options.createFallback === undefined
              ? 'PROVCAT_S3_CREATE_FALLBACK'
              : 'S3 option createFallback',
          ),
    lean: options.lean ?? envSwitch(env.PROVCAT_S3_LEAN, true),
    requestChecksumCalculation: checksumSetting(
      env.AWS_REQUEST_CHECKSUM_CALCULATION,
      'AWS_REQUEST_CHECKSUM_CALCULATION',
    ),
    responseChecksumValidation: checksumSetting(
      env.AWS_RESPONSE_CHECKSUM_VALIDATION,
      'AWS_RESPONSE_CHECKSUM_VALIDATION',
    ),
    credentials: options.credentials,
    awsProfile: envText(options.awsProfile),
  };
}
