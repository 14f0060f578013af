/**
 * Object keys and location URIs of managed objects, and the containment checks that guard them.
 *
 * Every upload gets a fresh random key `<2 hex>/<32 hex>` (128 random bits; the two-character
 * fan-out keeps local directories small), below the stage's prefix and tenant. Nothing else
 * ever writes there, so an upload never replaces anything and a crash can leave only
 * unreferenced objects, never a changed one.
 *
 * A stage's locations are `scheme://bucket/<key>` on an object store (s3, gs, az) and
 * `file:///<root>/<key>` on a local stage; {@link StageLocations} turns keys into location URIs
 * and back, refusing anything outside the stage's key prefix.
 *
 * Containment compares decoded path segments, never string prefixes: prefix `a/b` accepts
 * `a/b/x` but not `a/bc/x`. URIs with empty segments (`//`), `.` or `..` segments (also encoded,
 * `%2e%2e`), an encoded `/`, control characters, a query or a fragment are refused outright —
 * they are `ObjectIntegrityError('OutsideStage')`, raised before any I/O.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { ObjectIntegrityError, UriError } from '../core/errors.js';
import { encodeSegment, segmentProblem, Uri } from '../core/uri.js';

/** A fresh random object key, relative to the stage: `<2 hex>/<32 hex>`. */
export function newObjectKey(): string {
  const hex = randomBytes(16).toString('hex');
  return `${hex.slice(0, 2)}/${hex}`;
}

function outside(uri: string, reason: string, cause?: unknown): ObjectIntegrityError {
  return new ObjectIntegrityError('OutsideStage', `${uri} is outside the stage: ${reason}`, {
    uri,
    cause,
  });
}

/** Segments of `prefix` (`''` → none). */
export function splitKey(prefix: string): string[] {
  return prefix === '' ? [] : prefix.split('/');
}

/** The segments after `base` in `segments` (at least one), or `undefined` when not below it. */
function below(segments: readonly string[], base: readonly string[]): string[] | undefined {
  if (segments.length <= base.length) return undefined;
  for (let i = 0; i < base.length; i++) if (segments[i] !== base[i]) return undefined;
  return segments.slice(base.length);
}

/**
 * The key of `uri` relative to `base` (the stage's `[...prefix, tenant]` segments) in
 * `bucket`, for a `scheme://` location. Throws `ObjectIntegrityError('OutsideStage')`.
 */
export function containObject(
  uri: string,
  scheme: string,
  bucket: string,
  base: readonly string[],
): string {
  if (typeof uri !== 'string' || !uri.startsWith(`${scheme}://`))
    throw outside(String(uri), `not a ${scheme}:// URI`);
  let parsed: Uri;
  try {
    parsed = Uri.parse(uri);
  } catch (cause) {
    const reason = cause instanceof UriError ? cause.message : 'malformed URI';
    throw outside(uri, reason, cause);
  }
  if (parsed.at !== undefined) throw outside(uri, 'a managed location takes no ?at=');
  if (parsed.isFolder) throw outside(uri, 'names a folder, not an object');
  if (parsed.bucket !== bucket) throw outside(uri, `bucket is not ${bucket}`);
  const rest = below(parsed.segments, base);
  if (rest === undefined) throw outside(uri, `key is not below ${base.join('/') || 'the bucket'}/`);
  return rest.join('/');
}

/** The `scheme://bucket/key` URI of a key. */
export function objectUri(scheme: string, bucket: string, key: string): string {
  return Uri.fromKey(scheme, bucket, key).toString();
}

/**
 * Strictly decode the path of a `file:///abs/path` URI into segments. Refuses a host, query,
 * fragment, empty/`.`/`..` segments (also encoded), encoded `/`, bad escapes, control characters.
 */
export function fileUriSegments(uri: string): string[] {
  if (typeof uri !== 'string' || !uri.startsWith('file:///')) {
    throw outside(String(uri), 'not a file:/// URI');
  }
  const rest = uri.slice('file://'.length);
  if (/[?#]/.test(rest)) throw outside(uri, 'a file location takes no query or fragment');
  const raw = rest.slice(1).split('/');
  const segments: string[] = [];
  for (const part of raw) {
    if (part === '') throw outside(uri, 'empty path segment (//) or trailing /');
    if (/%(?![0-9A-Fa-f]{2})/.test(part)) throw outside(uri, `bad percent-escape in '${part}'`);
    let decoded: string;
    try {
      decoded = decodeURIComponent(part);
    } catch (cause) {
      throw outside(uri, `'${part}' does not decode to UTF-8`, cause);
    }
    const problem = segmentProblem(decoded);
    if (problem) throw outside(uri, problem);
    segments.push(decoded);
  }
  return segments;
}

/**
 * The key of a `file://` location relative to `base` (root segments plus tenant). Throws
 * `ObjectIntegrityError('OutsideStage')`.
 */
export function containFile(uri: string, base: readonly string[]): string {
  const segments = fileUriSegments(uri);
  const rest = below(segments, base);
  if (rest === undefined) throw outside(uri, `path is not below /${base.join('/')}/`);
  return rest.join('/');
}

/** The `file://` URI of the absolute path made of `segments`. */
export function fileUri(segments: readonly string[]): string {
  return `file:///${segments.map(encodeSegment).join('/')}`;
}

/** How the locations of one stage look: keys (full, from the bucket or root) to URIs and back. */
export interface StageLocations {
  /** The key prefix objects are written below (prefix and tenant), `''` for none. */
  readonly keyPrefix: string;
  /** The location URI of a full key. */
  uriOf(key: string): string;
  /**
   * The full key of a location inside the stage (below the key prefix). Throws
   * `ObjectIntegrityError('OutsideStage')`. No I/O.
   */
  keyOf(uri: string): string;
}

function join(prefix: string, rel: string): string {
  return prefix === '' ? rel : `${prefix}/${rel}`;
}

/** Locations `scheme://bucket/<keyPrefix>/...` of an object-store stage. */
export function objectLocations(scheme: string, bucket: string, keyPrefix: string): StageLocations {
  const base = splitKey(keyPrefix);
  return {
    keyPrefix,
    uriOf: (key) => objectUri(scheme, bucket, key),
    keyOf: (uri) => join(keyPrefix, containObject(uri, scheme, bucket, base)),
  };
}

/** Locations `file:///<root>/<keyPrefix>/...` of a local stage (keys relative to the root). */
export function fileLocations(root: string, keyPrefix: string): StageLocations {
  const rootSegments = splitKey(root.slice(1));
  const base = [...rootSegments, ...splitKey(keyPrefix)];
  return {
    keyPrefix,
    uriOf: (key) => fileUri([...rootSegments, ...splitKey(key)]),
    keyOf: (uri) => join(keyPrefix, containFile(uri, base)),
  };
}
