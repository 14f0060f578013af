/**
 * What Azure's answers say of a blob, read one way for the SDK's responses, the lean path's
 * headers and List Blobs entries: the blob name as a URL path, the ETag quoted, the Content-MD5
 * as hex, and the ObjectInfo every primitive returns.
 *
 * @module
 */
import type { BlobGetPropertiesResponse } from '@azure/storage-blob';
import type * as D from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';

/**
 * A blob name as a URL path: each segment percent-encoded (as the SDK does, `'` included). A
 * name with a `.` or `..` segment is encoded whole, `/` as `%2F`, which the service decodes back:
 * URL parsing would otherwise resolve the dot segments and name another blob.
 */
export function encodeBlobName(name: string): string {
  const segments = name.split('/');
  const enc = (s: string) => encodeURIComponent(s).replace(/'/g, '%27');
  return segments.some((s) => s === '.' || s === '..') ? enc(name) : segments.map(enc).join('/');
}

/** What an answer says of a blob: an SDK response's fields, or the same read off headers. */
export type BlobAnswer = Partial<
  Pick<BlobGetPropertiesResponse, 'etag' | 'contentLength' | 'versionId' | 'lastModified'>
> & {
  contentRange?: string | undefined;
  metadata?: Record<string, string> | undefined;
  /**
   * The blob's `Content-MD5` property (bytes, or base64 as listings and headers give it). Set only
   * from a listing or Get Blob Properties: a ranged read's `Content-MD5` is of the range.
   */
  blobMd5?: Uint8Array | string | undefined;
};

/** A Content-MD5 (Base64 of 16 bytes) as lowercase hex; `undefined` for anything else. */
export function md5Hex(value: string | Uint8Array | undefined): string | undefined {
  if (value === undefined) return undefined;
  const bytes = typeof value === 'string' ? Buffer.from(value, 'base64') : Buffer.from(value);
  return bytes.length === 16 ? bytes.toString('hex') : undefined;
}

/** The quoted form of an ETag (headers quote it, listings do not). */
export const quoted = (etag: string) => (etag.startsWith('"') ? etag : `"${etag}"`);

/** An answer's ObjectInfo (the size from Content-Range when ranged); none without ETag or size. */
export function blobInfo(key: string, a: BlobAnswer): D.ObjectInfo | undefined {
  const total = a.contentRange && /\/(\d+)$/.exec(a.contentRange)?.[1];
  const size = total ? Number(total) : a.contentLength;
  if (!a.etag || size === undefined) return undefined;
  const etag = quoted(a.etag);
  const { versionId, lastModified } = a;
  const md5 = md5Hex(a.blobMd5);
  return {
    key,
    size,
    version: etag,
    etag,
    versionId,
    lastModified,
    sha256: a.metadata?.sha256,
    md5,
  };
}

/** {@link blobInfo}, or a StoreError for an answer without an ETag or a size. */
export function infoOf(key: string, a: BlobAnswer): D.ObjectInfo {
  const got = blobInfo(key, a);
  if (got) return got;
  throw new StoreError(`the answer for ${key} lacks an ETag or a size`);
}
