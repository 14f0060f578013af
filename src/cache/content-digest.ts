/**
 * The content digests the cache can check: what a record (a commit's file entry, a version's
 * metadata, a GET's answer) says the bytes hash to, and hashing a cached file to compare.
 *
 * A record carries a digest of the content only sometimes: a `sha256` field (written by tools
 * that know it), or an ETag that is a plain MD5 — S3's ETag of an object uploaded in one part
 * (`"<32 hex>"`, no `-N` suffix) and the local store's ETag. Multipart ETags (`"…-N"`), GCS and
 * Azure ETags are not content hashes and are never checked as such: the shape is the test, so a
 * driver whose ETag stops being an MD5 is simply not checked, never wrongly refused. (An S3
 * object encrypted with SSE-KMS or SSE-C has a 32-hex ETag that is not its MD5: a commit of such
 * objects is refused at fetch with `DigestMismatch`; see docs/cache.md.)
 *
 * Checking costs a hash of every byte, so the cache checks when bytes enter a pinned view (a
 * commit's or a version's copy) — during the download, or once for a blob already cached — and
 * afterwards trusts the view file while its inode, size and mtime are the ones recorded.
 *
 * @module
 */
import crypto, { createHash, type Hash } from 'node:crypto';
import { closeSync, constants as fsc, fstatSync, openSync, read, readSync } from 'node:fs';
import { ObjectIntegrityError } from '../errors.js';

/** A digest the bytes must have. */
export interface ContentDigest {
  algorithm: 'md5' | 'sha256';
  /** Lower-case hex. */
  hex: string;
}

const PLAIN_MD5_ETAG = /^"?([0-9a-fA-F]{32})"?$/;
const SHA256_HEX = /^[0-9a-fA-F]{64}$/;

/** The MD5 an ETag states (a plain one: 32 hex, quoted or not, no `-N`), else `undefined`. */
export function md5OfEtag(etag: string | undefined): string | undefined {
  const m = etag === undefined ? null : PLAIN_MD5_ETAG.exec(etag);
  return m ? (m[1] as string).toLowerCase() : undefined;
}

/**
 * The digest a record states: its `sha256` when that is 64 hex, else the MD5 of a plain ETag,
 * else `undefined` (nothing to check but the size).
 */
export function recordedDigest(record: {
  etag?: string | undefined;
  sha256?: unknown;
}): ContentDigest | undefined {
  const sha = record.sha256;
  if (typeof sha === 'string' && SHA256_HEX.test(sha)) {
    return { algorithm: 'sha256', hex: sha.toLowerCase() };
  }
  const md5 = md5OfEtag(record.etag);
  return md5 === undefined ? undefined : { algorithm: 'md5', hex: md5 };
}

/** Node's one-shot digest (20.12+), cheaper than a Hash object for a body held whole. */
const oneShot = (crypto as { hash?: (algorithm: string, data: Uint8Array) => string }).hash;

/** The digest of bytes held in memory, as lower-case hex. */
export function digestOf(algorithm: ContentDigest['algorithm'], data: Uint8Array): string {
  return oneShot ? oneShot(algorithm, data) : createHash(algorithm).update(data).digest('hex');
}

/** A running hash for `digest`, or `undefined` when there is none to check. */
export function hasherFor(digest: ContentDigest | undefined): Hash | undefined {
  return digest === undefined ? undefined : createHash(digest.algorithm);
}

/** Files up to this size are hashed with direct reads (see src/cache/cache.ts). */
const DIRECT_READ_BYTES = 64 * 1024;
const READ_CHUNK = 1024 * 1024;

/**
 * The digest of the regular file at `file`, opened without following a link (`O_NOFOLLOW`), or
 * `undefined` when it is not a regular file of exactly `size` bytes (a link, a folder, missing,
 * or another size). Small files are read with direct calls, big ones through the thread pool.
 */
export async function fileDigest(
  file: string,
  algorithm: ContentDigest['algorithm'],
  size: number,
): Promise<string | undefined> {
  let fd: number;
  try {
    fd = openSync(file, fsc.O_RDONLY | fsc.O_NOFOLLOW);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR') return undefined;
    throw error;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size !== size) return undefined;
    if (size <= DIRECT_READ_BYTES) {
      const buf = Buffer.allocUnsafe(size);
      let at = 0;
      while (at < size) {
        const n = readSync(fd, buf, at, size - at, at);
        if (n === 0) return undefined;
        at += n;
      }
      return digestOf(algorithm, buf);
    }
    // A big file: read through the thread pool, so the event loop never waits on the disk.
    const hash = createHash(algorithm);
    const buf = Buffer.allocUnsafe(READ_CHUNK);
    let total = 0;
    for (;;) {
      const n = await new Promise<number>((resolve, reject) =>
        read(fd, buf, 0, buf.length, total, (error, bytes) =>
          error ? reject(error) : resolve(bytes),
        ),
      );
      if (n === 0) break;
      hash.update(buf.subarray(0, n));
      total += n;
    }
    return total === size ? hash.digest('hex') : undefined;
  } finally {
    closeSync(fd);
  }
}

/** A digest a download must match, with what the error names when it does not. */
export interface ExpectedContent extends ContentDigest {
  /** The URI of the bytes (with its `?at=`). */
  uri: string;
  /** What states the digest, for the message: `commit <id>`, `the store's ETag`. */
  source: string;
}

/** Throw `DigestMismatch` unless `actualHex` is the expected digest. */
export function checkDigest(expected: ExpectedContent, actualHex: string): void {
  if (actualHex === expected.hex) return;
  throw new ObjectIntegrityError(
    'DigestMismatch',
    `${expected.uri}: the bytes read hash to ${expected.algorithm.toUpperCase()} ${actualHex}, ${expected.source} says ${expected.hex}; nothing was cached`,
    { uri: expected.uri },
  );
}
