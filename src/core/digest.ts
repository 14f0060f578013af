/**
 * SHA-256 helpers for short strings on hot paths (cache paths, request signatures).
 *
 * @module
 */
import crypto, { createHash, createHmac, createSecretKey, type KeyObject } from 'node:crypto';

/** Node's one-shot digest (20.12+): about a fifth of `createHash`'s cost on short inputs. */
const oneShot = (crypto as { hash?: (algorithm: string, data: string | Uint8Array) => string })
  .hash;

/** The SHA-256 of bytes, or of a string's UTF-8, as lower-case hex. */
export function sha256Hex(data: string | Uint8Array): string {
  return oneShot ? oneShot('sha256', data) : createHash('sha256').update(data).digest('hex');
}

/** The SHA-256 of no bytes, as lower-case hex (S3's payload hash of a request without a body). */
export const EMPTY_SHA256 = sha256Hex('');

/** Keys already imported for HMAC, by the bytes object they were made from. */
const secretKeys = new WeakMap<Uint8Array, KeyObject>();

/**
 * The HMAC-SHA-256 of `text` (UTF-8) under `key`, as lower-case hex. The key is imported once
 * per bytes object, so its bytes must not change after the first call (callers pass the same
 * object for the same key, e.g. a cached signing key): `createHmac` with raw bytes copies and
 * imports them for every call, which costs more than the digest of a short text.
 */
export function hmacSha256Hex(key: Uint8Array, text: string): string {
  let secret = secretKeys.get(key);
  if (secret === undefined) {
    secret = createSecretKey(key);
    secretKeys.set(key, secret);
  }
  return createHmac('sha256', secret).update(text).digest('hex');
}
