/**
 * The content digests the cache can check: what a record (a commit's file entry, a version's
 * metadata, a GET's answer) says the bytes hash to, and hashing a cached file to compare.
 *
 * A record carries a digest of the content only sometimes: a `sha256` field (written by tools
 * that know it), or an ETag that is a plain MD5 — S3's ETag of an object uploaded in one part
 * (`"<32 hex>"`, no `-N` suffix), GCS's (the driver reports `md5Hash` in that form) and the
 * local store's ETag — or an answer's Content-MD5 (Azure: {@link GetResult.contentMd5}), or,
 * where none of those is stated, the store's CRC32C ({@link ObjectInfo.crc32c}: GCS composite
 * objects have no MD5; a CRC32C catches a flipped byte, though not a forgery).
 * Multipart ETags (`"…-N"`) and Azure ETags are not content hashes and are never checked as such: the shape is the test, so a driver whose ETag stops being an MD5 is
 * simply not checked, never wrongly refused. The one exception the shape cannot see is an S3
 * object encrypted with SSE-KMS or SSE-C, whose 32-hex ETag is not its MD5: its GET response
 * says so, the driver reports it ({@link GetResult.etagNotMd5}), and {@link statedDigest} then
 * drops the MD5. The rule lives here once; drivers only report what their store said.
 *
 * Every download into the cache is checked against the digest its GET (or the commit that names
 * it) states, before the blob appears; a cached blob is checked when it enters a pinned view (a
 * commit's or a version's copy), once, and afterwards trusted while its inode, size and mtime are
 * the ones recorded. Bytes are hashed as they stream to disk; only a kernel copy
 * ({@link GetResult.file}) is read back to hash.
 *
 * @module
 */
import crypto, { createHash } from 'node:crypto';
import { closeSync, constants as fsc, fstatSync, openSync, read, readSync } from 'node:fs';
import type { GetResult } from '../contract/primitives.js';
import { Crc32cHash } from '../core/crc32c.js';
import { ObjectIntegrityError } from '../core/errors.js';

/** A digest the bytes must have. */
export interface ContentDigest {
  algorithm: 'md5' | 'sha256' | 'crc32c';
  /** Lower-case hex. */
  hex: string;
}

const PLAIN_MD5_ETAG = /^"?([0-9a-fA-F]{32})"?$/;
const SHA256_HEX = /^[0-9a-fA-F]{64}$/;
const MD5_HEX = /^[0-9a-fA-F]{32}$/;
const CRC32C_HEX = /^[0-9a-f]{8}$/;

/** The MD5 an ETag states (a plain one: 32 hex, quoted or not, no `-N`), else `undefined`. */
export function md5OfEtag(etag: string | undefined): string | undefined {
  const m = etag === undefined ? null : PLAIN_MD5_ETAG.exec(etag);
  return m ? (m[1] as string).toLowerCase() : undefined;
}

/**
 * The MD5 of an object as a listing or a HEAD states it ({@link ObjectInfo.md5}, else a plain
 * MD5 ETag), lower-case hex, or `undefined`.
 */
export function statedMd5(info: { md5?: string | undefined; etag?: string | undefined }) {
  const md5 = info.md5?.toLowerCase();
  return md5 !== undefined && /^[0-9a-f]{32}$/.test(md5) ? md5 : md5OfEtag(info.etag);
}

/**
 * The digest a record states: its `sha256` when that is 64 hex, else the MD5 of a plain ETag,
 * else its `crc32c` when that is 8 hex, else `undefined` (nothing to check but the size).
 */
export function recordedDigest(record: {
  etag?: string | undefined;
  sha256?: unknown;
  crc32c?: unknown;
}): ContentDigest | undefined {
  const sha = record.sha256;
  if (typeof sha === 'string' && SHA256_HEX.test(sha)) {
    return { algorithm: 'sha256', hex: sha.toLowerCase() };
  }
  const md5 = md5OfEtag(record.etag);
  if (md5 !== undefined) return { algorithm: 'md5', hex: md5 };
  const crc = record.crc32c;
  return typeof crc === 'string' && CRC32C_HEX.test(crc)
    ? { algorithm: 'crc32c', hex: crc }
    : undefined;
}

/**
 * The digest the bytes of a GET must have, as its answer states it: {@link recordedDigest} of
 * the object it describes (a recorded `sha256`, else a plain-MD5 ETag), without the MD5 when
 * the driver says the ETag is not one ({@link GetResult.etagNotMd5}); else the answer's own MD5
 * of the bytes ({@link GetResult.contentMd5}: Azure's Content-MD5), when it states one; else
 * the object's CRC32C ({@link ObjectInfo.crc32c}).
 */
export function statedDigest(
  res: Pick<GetResult, 'info' | 'etagNotMd5' | 'contentMd5'>,
): ContentDigest | undefined {
  const { crc32c, ...rest } = res.info;
  const stated = checkableWith(recordedDigest(rest), res);
  if (stated !== undefined) return stated;
  const md5 = res.contentMd5;
  if (md5 !== undefined && MD5_HEX.test(md5)) return { algorithm: 'md5', hex: md5.toLowerCase() };
  return recordedDigest({ crc32c });
}

/**
 * `digest` (what a record such as a commit states), unless it is an MD5 that the GET returning
 * the bytes says its ETag is not ({@link GetResult.etagNotMd5}): then `undefined`, as such an
 * ETag never was the bytes' MD5. A SHA-256 always stands.
 */
export function checkableWith(
  digest: ContentDigest | undefined,
  res: Pick<GetResult, 'etagNotMd5'>,
): ContentDigest | undefined {
  return digest?.algorithm === 'md5' && res.etagNotMd5 === true ? undefined : digest;
}

/** Node's one-shot digest (20.12+), cheaper than a Hash object for a body held whole. */
const oneShot = (crypto as { hash?: (algorithm: string, data: Uint8Array) => string }).hash;

/** A running hash of `algorithm`, with the `update`/`digest('hex')` of a `node:crypto` Hash. */
export interface DigestHash {
  update(data: Uint8Array): unknown;
  digest(encoding: 'hex'): string;
}

/** A fresh running hash of `algorithm`. */
function newHash(algorithm: ContentDigest['algorithm']): DigestHash {
  return algorithm === 'crc32c' ? new Crc32cHash() : createHash(algorithm);
}

/** The digest of bytes held in memory, as lower-case hex. */
export function digestOf(algorithm: ContentDigest['algorithm'], data: Uint8Array): string {
  if (algorithm !== 'crc32c' && oneShot) return oneShot(algorithm, data);
  const hash = newHash(algorithm);
  hash.update(data);
  return hash.digest('hex');
}

/** A running hash for `digest`, or `undefined` when there is none to check. */
export function hasherFor(digest: ContentDigest | undefined): DigestHash | undefined {
  return digest === undefined ? undefined : newHash(digest.algorithm);
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
    return await fdDigest(fd, algorithm, size);
  } finally {
    closeSync(fd);
  }
}

/**
 * The digest of the first `size` bytes of the open file `fd` (read from offset 0, whatever its
 * position), or `undefined` when it holds fewer. Up to {@link DIRECT_READ_BYTES} are read with
 * direct calls, more through the thread pool, so the event loop never waits on the disk.
 */
export async function fdDigest(
  fd: number,
  algorithm: ContentDigest['algorithm'],
  size: number,
): Promise<string | undefined> {
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
  const hash = newHash(algorithm);
  const buf = Buffer.allocUnsafe(READ_CHUNK);
  let total = 0;
  while (total < size) {
    const want = Math.min(buf.length, size - total);
    const n = await new Promise<number>((resolve, reject) =>
      read(fd, buf, 0, want, total, (error, bytes) => (error ? reject(error) : resolve(bytes))),
    );
    if (n === 0) return undefined;
    hash.update(buf.subarray(0, n));
    total += n;
  }
  return hash.digest('hex');
}

/** A digest a download must match, with what the error names when it does not. */
export interface ExpectedContent extends ContentDigest {
  /** The URI of the bytes (with its `?at=`). */
  uri: string;
  /** What states the digest, for the message: `commit <id>`, `the store's ETag`. */
  source: string;
}

/** The two digests of a {@link checkDigest} that differed (the `cause` of its error). */
export class DigestsDiffer extends Error {
  override readonly name = 'DigestsDiffer';
  constructor(
    readonly algorithm: ContentDigest['algorithm'],
    /** What the record states. */
    readonly expected: string,
    /** What the bytes read hash to. */
    readonly actual: string,
  ) {
    super(`${algorithm.toUpperCase()} of the bytes read ${actual}, stated ${expected}`);
  }
}

/**
 * Throw `ObjectIntegrityError('DigestMismatch')` unless `actualHex` is the expected digest; its
 * `cause` is a {@link DigestsDiffer} with both digests.
 */
export function checkDigest(expected: ExpectedContent, actualHex: string): void {
  if (actualHex === expected.hex) return;
  throw new ObjectIntegrityError(
    'DigestMismatch',
    `${expected.uri}: the bytes read hash to ${expected.algorithm.toUpperCase()} ${actualHex}, ${expected.source} says ${expected.hex}; nothing was cached`,
    { uri: expected.uri, cause: new DigestsDiffer(expected.algorithm, expected.hex, actualHex) },
  );
}
