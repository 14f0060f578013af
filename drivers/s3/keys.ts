/**
 * The two places where S3 keys cross an encoding boundary outside the SDK's own request
 * building: the `x-amz-copy-source` header of CopyObject/UploadPartCopy, and listings requested
 * with `encoding-type=url`.
 *
 * Listings ask for URL-encoded keys because XML 1.0 cannot carry every character a key may hold
 * (control characters such as U+0001); the SDK does not decode them, so the driver does, and
 * only when the response confirms the encoding (a server that ignored the request sends raw
 * keys, which must not be decoded a second time).
 *
 * @module
 */
import { StoreError } from '../../src/core/errors.js';
import { type S3ErrorContext, s3UriText } from './errors.js';

/** Percent-encode a key for a URL path or header: UTF-8, every byte but `A-Za-z0-9-._~/`. */
export function encodeKeyPath(key: string): string {
  return encodeURIComponent(key)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%2F/g, '/');
}

/**
 * The `CopySource` of a CopyObject or UploadPartCopy: `bucket/encoded-key`, plus
 * `?versionId=` for one version. `%`, `+`, spaces, `?`, `#` and non-ASCII characters in the key
 * are percent-encoded, so the server decodes exactly the key's bytes.
 */
export function copySource(bucket: string, key: string, versionId?: string): string {
  const base = `${bucket}/${encodeKeyPath(key)}`;
  return versionId === undefined ? base : `${base}?versionId=${encodeURIComponent(versionId)}`;
}

/**
 * Decode a key from a listing made with `encoding-type=url`. S3 encodes a space as `+` (and a
 * `+` as `%2B`), as in HTML forms; Ceph encodes a space as `%20`. Decoding `+` as a space reads
 * both correctly.
 */
export function decodeListedKey(encoded: string): string {
  return decodeURIComponent(encoded.replace(/\+/g, '%20'));
}

/**
 * The key decoder of one listing page: {@link decodeListedKey} when the page says its keys are
 * URL-encoded (`encoding`), else the keys as sent. A key that is not valid URL encoding is a
 * {@link StoreError} naming the listing (`context`).
 */
export function listedKeyDecoder(
  encoding: string | undefined,
  context: S3ErrorContext,
): (key: string) => string {
  if (encoding !== 'url') return (key: string) => key;
  return (key: string) => {
    try {
      return decodeListedKey(key);
    } catch (cause) {
      throw new StoreError(
        `${context.op} ${s3UriText(context.bucket, context.key)}: the store listed a key that is not valid URL encoding: ${key}`,
        { cause },
      );
    }
  };
}
