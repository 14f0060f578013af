/**
 * The one place where S3 SDK errors become provcat errors; also the errors of the multipart
 * engine's sources (kept here so that reading code never loads that engine).
 *
 * A missing object must never look like a refusal or a network failure, and the reverse: a 403
 * (wrong credentials, a bucket policy) stays a {@link StoreError} with `status: 403`, so a
 * caller never concludes "absent" from "not allowed to look". The rules:
 *
 * | SDK error | provcat error |
 * |---|---|
 * | HTTP 404, or `NoSuchKey`, `NotFound`, `NoSuchBucket`, `NoSuchVersion`, `NoSuchUpload` | {@link NotFound} |
 * | HTTP 412 / `PreconditionFailed` (a conditional write lost) | {@link Exists} |
 * | HTTP 409 on a create (`create`, `makeBucket`: `ConditionalRequestConflict`, `BucketAlreadyExists`) | {@link Exists} |
 * | anything else (403, 400, 5xx, throttling, timeouts, connection errors, aborts) | {@link StoreError} with `status` when there was one |
 *
 * The SDK's error is always the `cause`. HEAD requests have no error body, so the SDK names
 * their errors after the status (`NotFound`, `Forbidden`, `BadRequest`); that is why the status,
 * not only the name, decides.
 *
 * @module
 */
import { Exists, NotFound, ProvcatError, StoreError } from '../../src/errors.js';
import { encodeSegment } from '../../src/uri.js';

/** What an S3 call was about, for messages and for the create rule. */
export interface S3ErrorContext {
  bucket: string;
  key?: string | undefined;
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
 * an error about such a key must still say which key it was.
 */
export function s3UriText(bucket: string, key?: string): string {
  return `s3://${bucket}/${key === undefined ? '' : key.split('/').map(encodeSegment).join('/')}`;
}

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
 * Map an S3 SDK error (or any error thrown during an S3 call) to a provcat error; see the module
 * comment for the rules. A {@link ProvcatError} passes through unchanged. Never throws.
 */
export function mapS3Error(error: unknown, context: S3ErrorContext): ProvcatError {
  if (error instanceof ProvcatError) return error;
  const uri = s3UriText(context.bucket, context.key);
  const status = statusOf(error);
  const name = errorName(error);
  const where = `${context.op} ${uri}`;
  if (status === 404 || NOT_FOUND_NAMES.has(name)) {
    const what =
      name === 'NoSuchBucket'
        ? `no bucket ${context.bucket}`
        : name === 'NoSuchUpload'
          ? 'no such multipart upload'
          : name === 'NoSuchVersion'
            ? 'no such version'
            : 'not found';
    return new NotFound(`${where}: ${what}`, { uri, cause: error });
  }
  if (status === 412 || name === 'PreconditionFailed') {
    return new Exists(`${where}: already exists (precondition failed)`, { uri, cause: error });
  }
  if (status === 409 && CREATE_OPS.has(context.op)) {
    return new Exists(`${where}: already exists (${name})`, { uri, cause: error });
  }
  const raw = (error as SdkErrorLike | null)?.message;
  const message = typeof raw === 'string' && raw !== '' && raw !== 'UnknownError' ? raw : '';
  const statusText = status === undefined ? '' : ` (HTTP ${status})`;
  return new StoreError(
    `${where} failed: ${name}${statusText}${message && message !== name ? `: ${message}` : ''}${hint(status, name)}`,
    { uri, cause: error, status },
  );
}

/** A failure of the upload's source (the file or stream being uploaded), not of the store. */
export class SourceError extends ProvcatError {}

/**
 * The source changed while it was uploaded: a file whose size or mtime changed, that ended
 * early or grew, or whose bytes sent differ from the bytes hashed. The upload is abandoned.
 */
export class SourceChanged extends SourceError {}

/**
 * The source needs more parts than the store accepts (10,000 on S3). Raised before the first
 * part beyond the limit is sent; the upload is aborted.
 */
export class PartLimitExceeded extends ProvcatError {}
