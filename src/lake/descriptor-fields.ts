/**
 * The field checks every stage descriptor kind shares: strict field sets (a credential-looking
 * field is refused by name), a tenant that is one path segment, key prefixes, local roots and
 * endpoint URLs. Each kind's `parse` (src/lake/stage-kinds.ts) is built from these.
 *
 * @module
 */
import path from 'node:path';
import { segmentProblem } from '../core/uri.js';
import { StageConfigError } from './errors.js';

const CREDENTIAL_HINT = /secret|key|token|password|credential|session|sas|signature/i;

/** Throw a StageConfigError about a descriptor. */
export function fail(message: string): never {
  throw new StageConfigError(`stage descriptor: ${message}`);
}

/**
 * Refuse any field of `record` not in `allowed`; a field whose name looks like a credential is
 * refused as such (descriptors never carry credentials).
 */
export function checkFields(
  record: Readonly<Record<string, unknown>>,
  allowed: readonly string[],
): void {
  for (const key of Object.keys(record)) {
    if (allowed.includes(key)) continue;
    if (CREDENTIAL_HINT.test(key)) {
      fail(`field ${JSON.stringify(key)} is not allowed: descriptors never carry credentials`);
    }
    fail(`unknown field ${JSON.stringify(key)}`);
  }
}

/** A tenant: `undefined`, or one path segment. */
export function checkTenant(tenant: unknown): string | undefined {
  if (tenant === undefined) return undefined;
  if (typeof tenant !== 'string') fail('tenant must be a string');
  const problem = segmentProblem(tenant);
  if (problem) fail(`tenant must be one path segment: ${problem}`);
  return tenant;
}

/**
 * Normalize a key prefix: `/`-separated segments without leading `/`; one trailing `/` is
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

/** An endpoint URL: http(s), no credentials, query or fragment. */
export function checkEndpoint(endpoint: unknown): string {
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
  return endpoint;
}

/** The key prefix a stage confines its objects to: prefix and tenant joined, `''` for none. */
export function joinPrefix(prefix: string, tenant: string | undefined): string {
  return [prefix, tenant ?? ''].filter((p) => p !== '').join('/');
}

/**
 * Decode the prefix of a stage string (`s3://bucket/<prefix>`): each segment percent-decoded,
 * an encoded `/` refused. Throws StageConfigError.
 */
export function decodeStagePrefix(raw: string, text: string): string {
  try {
    return normalizePrefix(
      raw
        .split('/')
        .map((s) => {
          const decoded = decodeURIComponent(s);
          if (decoded.includes('/')) throw new URIError(`encoded '/' in '${s}'`);
          return decoded;
        })
        .join('/'),
    );
  } catch (cause) {
    if (cause instanceof StageConfigError) throw cause;
    throw new StageConfigError(`bad prefix in the stage ${text}`, { cause });
  }
}
