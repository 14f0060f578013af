/**
 * S3 errors read off the SDK's exceptions and handed to the one status map of every driver
 * (src/driver-kit/service-errors.ts): 404 and the `NoSuch*` codes are NotFound, 401/403 PermissionDenied,
 * a failed `If-None-Match: *` (412, or 409 `ConditionalRequestConflict`) on a create Exists, any
 * other 412 PreconditionFailed, everything else StoreError with `status`.
 *
 * HEAD requests have no error body, so the SDK names their errors after the status (`NotFound`,
 * `Forbidden`, `BadRequest`); that is why the status, not only the name, decides.
 *
 * @module
 */
import type { ProvcatError } from '../../src/core/errors.js';
import { uriText } from '../../src/core/uri.js';
import { serviceError } from '../../src/driver-kit/service-errors.js';

/** What an S3 call was about, for messages and for the create rule. */
export interface S3ErrorContext {
  bucket: string;
  key?: string | undefined;
  /** The version a version primitive was asked for: messages name `s3://b/k?at=version:ID`. */
  versionId?: string | undefined;
  /** The operation: `head`, `get`, `put`, `create`, `copy`, `makeBucket`, ... */
  op: string;
}

/** Operations whose 409 means "already there". */
const CREATE_OPS = new Set(['create', 'makeBucket']);

const NOT_FOUND_NAMES = new Set([
  'NoSuchKey',
  'NotFound',
  'NoSuchBucket',
  'NoSuchVersion',
  'NoSuchUpload',
]);

/** The shape of an SDK service error, read defensively (anything may be thrown). */
interface SdkErrorLike {
  name?: unknown;
  message?: unknown;
  code?: unknown;
  $metadata?: { httpStatusCode?: unknown };
}

/**
 * The `s3://` text of a bucket and key for messages and `ProvcatError.uri`. Every segment is
 * percent-encoded the way {@link Uri} does, but without refusing keys no URI can name (`a//b`):
 * an error about such a key must still say which key it was. With `versionId`, the URI of that
 * version (`?at=version:ID`).
 */
export const s3UriText = (bucket: string, key?: string, versionId?: string): string =>
  uriText('s3', bucket, key, versionId);

/** The HTTP status of an SDK error, when the server answered. */
export function statusOf(error: unknown): number | undefined {
  const status = (error as SdkErrorLike | null)?.$metadata?.httpStatusCode;
  return typeof status === 'number' ? status : undefined;
}

/** The SDK's error name (`NoSuchKey`, `AccessDenied`, `TimeoutError`, ...) or the error code. */
export function errorName(error: unknown): string {
  const e = error as SdkErrorLike | null;
  if (typeof e?.name === 'string' && e.name !== 'Error') return e.name;
  if (typeof e?.code === 'string') return e.code;
  return typeof e?.name === 'string' ? e.name : typeof error;
}

function hint(status: number | undefined, name: string): string {
  if (status === 403 || name === 'InvalidAccessKeyId' || name === 'SignatureDoesNotMatch') {
    return ' — check the credentials (AWS_ACCESS_KEY_ID/AWS_PROFILE) and the bucket policy';
  }
  if (status === 301 || name === 'PermanentRedirect' || name === 'AuthorizationHeaderMalformed') {
    return ' — the bucket is in another region: set AWS_REGION';
  }
  if (name === 'ECONNREFUSED' || name === 'ENOTFOUND') {
    return ' — is the endpoint (AWS_ENDPOINT_URL_S3) right and the server up?';
  }
  return '';
}

/**
 * Map an S3 SDK error (or any error thrown during an S3 call) to a provcat error through the
 * shared status map; a {@link ProvcatError} passes through unchanged. Never throws.
 */
export function mapS3Error(error: unknown, context: S3ErrorContext): ProvcatError {
  const status = statusOf(error);
  const name = errorName(error);
  const raw = (error as SdkErrorLike | null)?.message;
  return serviceError({
    op: context.op,
    uri: s3UriText(context.bucket, context.key, context.versionId),
    status,
    code: name,
    message: typeof raw === 'string' ? raw : undefined,
    create: CREATE_OPS.has(context.op),
    notFoundCodes: NOT_FOUND_NAMES,
    hint: hint(status, name),
    cause: error,
  });
}
