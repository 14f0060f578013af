/**
 * {@link Entry}: one file or folder as provcat reports it.
 *
 * @module
 */

import type { Uri } from '../core/uri.js';
import type { ObjectInfo } from './primitives.js';

/** One file or folder. */
export interface Entry {
  /** Where it is (with `?at=` when it was read at a version or a commit). */
  uri: Uri;
  kind: 'file' | 'folder';
  /** Size in bytes; `null` for a folder. */
  size: number | null;
  /** What changes when the bytes change (see ObjectInfo.version); `null` for a folder. */
  version: string | null;
  /** The store's version ID of a file, when known. */
  versionId?: string | undefined;
  /** The ETag of a file, when known. */
  etag?: string | undefined;
  /**
   * The MD5 (32 lower-case hex) of a file's bytes as the store states it, when it does: S3's
   * ETag of an object put in one request (a plain `"<32 hex>"`), Azure's `Content-MD5`, GCS's
   * `md5Hash`, the local store's ETag (see {@link ObjectInfo.md5}). On S3 with SSE-KMS or SSE-C a
   * listing's plain ETag looks like an MD5 and is none: it then matches no file's MD5, so it only
   * ever makes a file look changed, never the same.
   */
  md5?: string | undefined;
  /** The SHA-256 (64 lower-case hex) recorded with a file, when the store reports one. */
  sha256?: string | undefined;
}

/** What {@link sameBytes} compares of a file: an {@link Entry}'s fields, or a commit's record. */
export interface FileFacts {
  /** The full key in the bucket. */
  key: string;
  size: number | null;
  /** The version token (`Entry.version`), when there is one. */
  version?: string | null | undefined;
  versionId?: string | undefined;
  etag?: string | undefined;
  md5?: string | undefined;
  sha256?: string | undefined;
}

const DIGEST_ETAG = /^"?([0-9a-fA-F]{32}(-[0-9]+)?)"?$/;
const MD5_HEX = /^[0-9a-f]{32}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;

/** The MD5 a file's facts state: its `md5`, else a plain-MD5 ETag (32 hex, no `-N`). */
function md5Of(f: FileFacts): string | undefined {
  if (f.md5 !== undefined && MD5_HEX.test(f.md5)) return f.md5;
  const m = f.etag === undefined ? null : DIGEST_ETAG.exec(f.etag);
  return m && m[2] === undefined ? (m[1] as string).toLowerCase() : undefined;
}

/** A multipart digest ETag (`"<32 hex>-N"`, the MD5 of the parts' MD5s), else `undefined`. */
function partsDigestOf(f: FileFacts): string | undefined {
  const m = f.etag === undefined ? null : DIGEST_ETAG.exec(f.etag);
  return m && m[2] !== undefined ? (m[1] as string).toLowerCase() : undefined;
}

/**
 * **The one rule for "the same file"**, which `diff` uses for every file on both sides and
 * `commit` for its "no change since commit N" check, so the two always agree. Two files are the
 * same when they provably hold the same bytes:
 *
 * 1. another size: not the same;
 * 2. the same key, and the same version ID, or the same version token, or the same ETag (one
 *    state of one key: any store's ETag changes when the object is written again, except where
 *    it is a digest of the bytes, which proves the same anyway);
 * 3. equal digests the stores state, on any two keys: the recorded SHA-256, or the MD5 (a plain
 *    ETag, Azure's `Content-MD5`, GCS's `md5Hash`), or a multipart ETag `"<32 hex>-N"`;
 * 4. anything else: not the same — unknown is never taken as unchanged.
 *
 * So a file rewritten with identical bytes, or copied to another folder, is the same where a
 * digest shows it (S3, GCS, local; Azure blobs put in one request); the same bytes uploaded with
 * different part sizes, or an Azure blob written again without an MD5, are not. This may call
 * identical bytes different, never different bytes the same (barring an MD5 collision).
 */
export function sameBytes(a: FileFacts, b: FileFacts): boolean {
  if (a.size !== b.size) return false;
  if (a.key === b.key) {
    if (a.versionId !== undefined && a.versionId === b.versionId) return true;
    if (a.version != null && a.version === b.version) return true;
    if (a.etag !== undefined && a.etag === b.etag) return true;
  }
  const sha = [a.sha256, b.sha256];
  if (sha[0] !== undefined && sha[0] === sha[1] && SHA256_HEX.test(sha[0])) return true;
  const md5 = md5Of(a);
  if (md5 !== undefined && md5 === md5Of(b)) return true;
  const parts = partsDigestOf(a);
  return parts !== undefined && parts === partsDigestOf(b);
}

/** The JSON shape of an entry, as the CLI prints it: `{"uri","kind","size","version"}`. */
export interface EntryJson {
  uri: string;
  kind: 'file' | 'folder';
  size: number | null;
  version: string | null;
}

/** The stable JSON form of an entry. */
export function entryToJson(entry: Entry): EntryJson {
  return { uri: entry.uri.toString(), kind: entry.kind, size: entry.size, version: entry.version };
}
