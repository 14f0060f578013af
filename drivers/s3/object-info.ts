/**
 * The {@link ObjectInfo} of an S3 answer (HeadObject, GetObject, PutObject, CopyObject, a listed
 * object), read the same way whichever reader (SDK or lean) got it: the ETag in its quoted form
 * is the version, the recorded SHA-256 comes from the user metadata.
 *
 * @module
 */
import type { ObjectInfo } from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';
import { recordedSha256 } from './metadata.js';

/** The parts of a HEAD response the driver uses. */
export interface HeadFields {
  ContentLength?: number | undefined;
  ETag?: string | undefined;
  VersionId?: string | undefined;
  LastModified?: Date | undefined;
  /** User metadata (`x-amz-meta-*`, names lowercased): `sha256` is the one the driver reads. */
  Metadata?: Record<string, string> | undefined;
}

/**
 * An ETag in S3's quoted form. Ceph 16 sends CopyObject's ETag without the quotes it uses
 * everywhere else; one form keeps `version` comparable across calls (the cache keys by it).
 */
export function quotedEtag(etag: string): string {
  return etag.startsWith('"') ? etag : `"${etag}"`;
}

/**
 * The ObjectInfo of `key` from an answer's fields; `size` (when given) wins over its
 * ContentLength. StoreError when the answer lacks an ETag or a size.
 */
export function objectInfo(key: string, head: HeadFields, size?: number): ObjectInfo {
  const length = size ?? head.ContentLength;
  if (!head.ETag || length === undefined) {
    throw new StoreError(`the store's answer for ${key} lacks an ETag or a size`);
  }
  const etag = quotedEtag(head.ETag);
  return {
    key,
    size: length,
    version: etag,
    etag,
    versionId: head.VersionId,
    lastModified: head.LastModified,
    sha256: recordedSha256(head.Metadata),
  };
}

/** The full object size from a `Content-Range: bytes a-b/size` header, when it carries one. */
export function totalFromContentRange(contentRange: string | undefined): number | undefined {
  const m = contentRange === undefined ? null : /\/(\d+)\s*$/.exec(contentRange);
  return m ? Number(m[1]) : undefined;
}

/**
 * True when a GET's encryption headers say its ETag is not the MD5 of the bytes, though it may
 * look like one (32 hex): SSE-KMS (`aws:kms`, `aws:kms:dsse`) and SSE-C (a customer algorithm).
 * The cache then checks no MD5 (`GetResult.etagNotMd5`). SSE-S3 (`AES256`) keeps the MD5.
 */
export function etagNotMd5(
  serverSideEncryption: string | undefined,
  customerAlgorithm: string | undefined,
): boolean | undefined {
  const kms = serverSideEncryption?.toLowerCase().startsWith('aws:kms') === true;
  return kms || (customerAlgorithm !== undefined && customerAlgorithm !== '') ? true : undefined;
}
