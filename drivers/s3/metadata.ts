/**
 * The one piece of user metadata the S3 driver writes and reads: `x-amz-meta-sha256`, the
 * SHA-256 a caller passed as `PutOptions.sha256` (provcat push records it so that a later push
 * can recognize an unchanged file whose ETag is a multipart ETag, not an MD5). HeadObject and
 * GetObject return it; ListObjectsV2 does not, so a listing never carries it.
 *
 * @module
 */

const SHA256_HEX = /^[0-9a-f]{64}$/;

/** The user metadata of a put (PutObject, CreateMultipartUpload): `sha256` when one is given. */
export function putMetadata(sha256: string | undefined): Record<string, string> | undefined {
  if (sha256 === undefined) return undefined;
  if (!SHA256_HEX.test(sha256)) throw new RangeError(`sha256 is 64 lowercase hex, not ${sha256}`);
  return { sha256 };
}

/** The recorded SHA-256 in an object's user metadata, when it is one (else `undefined`). */
export function recordedSha256(metadata: Record<string, string> | undefined): string | undefined {
  const v = metadata?.sha256;
  return v !== undefined && SHA256_HEX.test(v) ? v : undefined;
}
