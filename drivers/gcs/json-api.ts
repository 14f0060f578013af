/**
 * The JSON API's shapes as the driver reads them — object resources and media response headers
 * — turned into {@link ObjectInfo} in one place, so the SDK path and the lean path report an
 * object alike; and the URLs of the driver's own reads. The version is the generation, also the
 * version ID. The ETag is the MD5 in S3's quoted hex form, because provcat takes an ETag of that
 * form as the content's MD5 (commit checks, branches); GCS's own `etag` is opaque and changes
 * with metadata. Composite objects have no MD5, so no ETag.
 *
 * @module
 */
import type { ObjectInfo } from '../../src/contract/primitives.js';
import { crc32cHexOfBase64 } from '../../src/core/crc32c.js';
import { StoreError } from '../../src/core/errors.js';
import type { ListedVersion } from '../../src/driver-kit/version-history.js';
import { gcsUriText } from './errors.js';

/** The fields of an object resource the driver reads (`timeDeleted`: a noncurrent generation). */
export type ObjectResource = {
  [field in
    | 'name'
    | 'generation'
    | 'size'
    | 'md5Hash'
    | 'crc32c'
    | 'updated'
    | 'timeDeleted']?: string;
};

/** One page of `objects.list`. */
export interface ObjectsPage {
  items?: ObjectResource[];
  prefixes?: string[];
  nextPageToken?: string;
}

/** The part of a bucket resource (`buckets.get`) the driver reads. */
export interface BucketResource {
  versioning?: { enabled?: boolean };
}

/** True for a string that can be a generation (an int64 in decimal). */
export function isGeneration(value: string): boolean {
  return /^[1-9]\d{0,18}$/.test(value);
}

/** The hex of a base64 MD5 (`md5Hash`), or `undefined`. */
function md5Hex(md5Base64: string | undefined): string | undefined {
  const digest = Buffer.from(md5Base64 ?? '', 'base64');
  return digest.length === 16 ? digest.toString('hex') : undefined;
}

/** The S3-style ETag (`"<32 hex>"`) of a base64 MD5, or `undefined`. */
function md5Etag(md5Base64: string | undefined): string | undefined {
  const hex = md5Hex(md5Base64);
  return hex === undefined ? undefined : `"${hex}"`;
}

/** An ObjectInfo from an object resource; StoreError without a name, size or generation. */
export function objectInfo(bucket: string, o: ObjectResource): ObjectInfo {
  const size = Number(o.size);
  const generation = o.generation ?? '';
  if (typeof o.name !== 'string' || !isGeneration(generation) || !Number.isSafeInteger(size)) {
    throw new StoreError(
      `${gcsUriText(bucket, o.name)}: an object resource without name, size or generation`,
    );
  }
  return {
    key: o.name,
    size,
    version: generation,
    versionId: generation,
    etag: md5Etag(o.md5Hash),
    md5: md5Hex(o.md5Hash),
    crc32c: crc32cHexOfBase64(o.crc32c),
    lastModified: o.updated === undefined ? undefined : new Date(o.updated),
  };
}

/** A generation of a `versions=true` listing as src/driver-kit/version-history.ts takes it. */
export function listedVersion(bucket: string, o: ObjectResource): ListedVersion {
  const { key, versionId, size, etag, lastModified } = objectInfo(bucket, o);
  const deletedAt = o.timeDeleted === undefined ? undefined : new Date(o.timeDeleted);
  const current = deletedAt === undefined;
  return { key, versionId: versionId as string, size, current, etag, lastModified, deletedAt };
}

/**
 * The ObjectInfo of a media response from its headers: `x-goog-generation`, the MD5 of
 * `x-goog-hash`, the whole size from `Content-Range` when ranged, else from
 * `x-goog-stored-content-length` (the object's size as stored, which is what the driver asks
 * for), else the body's length. The stored length is what catches a short or long body of an
 * object without an MD5 — a composite — whose Content-Length agrees with its body.
 */
export function mediaInfo(
  bucket: string,
  key: string,
  { headers, contentLength }: { headers: Readonly<Record<string, string>>; contentLength: number },
): ObjectInfo {
  const generation = headers['x-goog-generation'] ?? '';
  if (!isGeneration(generation)) {
    throw new StoreError(`get ${gcsUriText(bucket, key)}: the response has no x-goog-generation`);
  }
  const total = /\/(\d+)$/.exec(headers['content-range'] ?? '')?.[1];
  const hashes = headers['x-goog-hash'] ?? '';
  const md5 = /(?:^|,)\s*md5=([^,\s]+)/.exec(hashes)?.[1];
  const crc = /(?:^|,)\s*crc32c=([^,\s]+)/.exec(hashes)?.[1];
  const stored = /^\d+$/.exec(headers['x-goog-stored-content-length'] ?? '')?.[0];
  const size = Number(total ?? stored ?? contentLength);
  const etag = md5Etag(md5);
  const crc32c = crc32cHexOfBase64(crc);
  return { key, size, version: generation, versionId: generation, etag, crc32c };
}

/**
 * The JSON API URL of a bucket's objects (`key` undefined: the listing) or of one object, with
 * the defined parameters percent-encoded (so `+` and spaces stay apart).
 */
export function apiUrl(
  endpoint: string,
  bucket: string,
  key: string | undefined,
  params: Record<string, string | number | undefined>,
): string {
  const query = Object.entries(params)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${encodeURIComponent(v as string | number)}`)
    .join('&');
  const object = key === undefined ? '' : `/${encodeURIComponent(key)}`;
  return `${bucketUrl(endpoint, bucket)}/o${object}${query ? `?${query}` : ''}`;
}

/** The JSON API URL of a bucket's resource (`buckets.get`). */
export function bucketUrl(endpoint: string, bucket: string): string {
  return `${endpoint}/storage/v1/b/${encodeURIComponent(bucket)}`;
}
