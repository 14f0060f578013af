/**
 * Managed-stage descriptors: the versioned, credential-free description of where managed objects
 * live.
 *
 * ```json
 * { "version": 1, "kind": "local", "root": "/srv/lake" }
 * { "version": 1, "kind": "s3", "bucket": "lake", "prefix": "managed", "region": "us-east-1",
 *   "endpoint": "http://127.0.0.1:7480", "forcePathStyle": true, "tenant": "acme" }
 * ```
 *
 * A descriptor holds storage topology only. Credentials come from the SDK's default chain in the
 * process that uses the stage; a descriptor that carries any field not listed here (an access
 * key, say) is refused rather than ignored, and so is any version other than 1 — a reader must
 * never half-understand a newer format. `tenant` names one child segment of the stage prefix:
 * the stage then accepts only locations below it.
 *
 * @module
 */
import path from 'node:path';
import { segmentProblem } from '../uri.js';
import { StageConfigError } from './errors.js';

/** A stage whose objects are plain files under `root`. */
export interface LocalStageDescriptor {
  readonly version: 1;
  readonly kind: 'local';
  /** Absolute, normalized directory. */
  readonly root: string;
  /** One child segment of the root that this stage is confined to. */
  readonly tenant?: string | undefined;
}

/** A stage in one S3 bucket, below one key prefix. */
export interface S3StageDescriptor {
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
  /** One child segment of the prefix that this stage is confined to. */
  readonly tenant?: string | undefined;
}

/** A managed-stage descriptor (version 1). */
export type StageDescriptor = LocalStageDescriptor | S3StageDescriptor;

const LOCAL_FIELDS = ['version', 'kind', 'root', 'tenant'];
const S3_FIELDS = [
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
const CREDENTIAL_HINT = /secret|key|token|password|credential|session/i;

function fail(message: string): never {
  throw new StageConfigError(`stage descriptor: ${message}`);
}

function checkFields(record: Record<string, unknown>, allowed: string[]): void {
  for (const key of Object.keys(record)) {
    if (allowed.includes(key)) continue;
    if (CREDENTIAL_HINT.test(key)) {
      fail(`field ${JSON.stringify(key)} is not allowed: descriptors never carry credentials`);
    }
    fail(`unknown field ${JSON.stringify(key)}`);
  }
}

function checkTenant(tenant: unknown): string | undefined {
  if (tenant === undefined) return undefined;
  if (typeof tenant !== 'string') fail('tenant must be a string');
  const problem = segmentProblem(tenant);
  if (problem) fail(`tenant must be one path segment: ${problem}`);
  return tenant;
}

/**
 * Normalize an S3 key prefix: `/`-separated segments without leading `/`; one trailing `/` is
 * accepted and dropped. Empty, `.` and `..` segments and control characters are refused.
 */
export function normalizePrefix(prefix: string): string {
  const body = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
  if (body === '') return '';
  for (const segment of body.split('/')) {
    const problem = segmentProblem(segment);
    if (problem) fail(`prefix ${JSON.stringify(prefix)}: ${problem}`);
  }
  return body;
}

/** Normalize a local root: absolute, no `.`/`..`/empty segments, no trailing `/` (except `/`). */
export function normalizeRoot(root: string): string {
  if (!path.isAbsolute(root)) fail(`root must be an absolute path, not ${JSON.stringify(root)}`);
  const trimmed = root.length > 1 && root.endsWith('/') ? root.slice(0, -1) : root;
  if (path.normalize(trimmed) !== trimmed) {
    fail(`root must be a normalized path (no '.', '..' or '//'), not ${JSON.stringify(root)}`);
  }
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what we refuse
  if (/[\u0000-\u001f\u007f]/.test(trimmed)) fail('root contains a control character');
  return trimmed;
}

/**
 * Parse a stage descriptor from JSON text or an already-parsed value. Strict: version must be 1,
 * `kind` `local` or `s3`, every field of the right type and no other field. Returns a frozen,
 * normalized descriptor. Throws {@link StageConfigError}. Performs no I/O.
 */
export function parseStageDescriptor(json: string | unknown): StageDescriptor {
  let value: unknown = json;
  if (typeof json === 'string') {
    try {
      value = JSON.parse(json);
    } catch (cause) {
      throw new StageConfigError('stage descriptor: not JSON', { cause });
    }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail('must be a JSON object');
  }
  const record = value as Record<string, unknown>;
  if (record.version !== 1) {
    fail(`unsupported version ${JSON.stringify(record.version)} (this provcat reads version 1)`);
  }
  if (record.kind === 'local') {
    checkFields(record, LOCAL_FIELDS);
    if (typeof record.root !== 'string') fail('root must be a string');
    const tenant = checkTenant(record.tenant);
    return Object.freeze({
      version: 1,
      kind: 'local',
      root: normalizeRoot(record.root),
      ...(tenant === undefined ? {} : { tenant }),
    });
  }
  if (record.kind === 's3') {
    checkFields(record, S3_FIELDS);
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
    const tenant = checkTenant(record.tenant);
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
  }
  return fail(`kind must be "local" or "s3", not ${JSON.stringify(record.kind)}`);
}

function checkEndpoint(endpoint: unknown): void {
  if (typeof endpoint !== 'string') fail('endpoint must be a URL string');
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch (cause) {
    throw new StageConfigError(`stage descriptor: endpoint is not a URL: ${endpoint}`, { cause });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    fail(`endpoint must be http:// or https://, not ${url.protocol}`);
  }
  if (url.username !== '' || url.password !== '') {
    fail('endpoint must not carry credentials');
  }
  if (url.search !== '' || url.hash !== '') fail('endpoint must not have a query or fragment');
}

/** The key prefix a stage confines its objects to: prefix and tenant joined, `''` for none. */
export function effectivePrefix(descriptor: StageDescriptor): string {
  const base = descriptor.kind === 's3' ? descriptor.prefix : '';
  const parts = [base, descriptor.tenant ?? ''].filter((p) => p !== '');
  return parts.join('/');
}
