/**
 * GCS errors read off what the SDK (or the driver's own requests) threw, handed to the one status
 * map of every driver (src/service-errors.ts): 404 NotFound, 401/403 PermissionDenied, 412 on a
 * create (`ifGenerationMatch=0`) or 409 on a bucket creation Exists, other 412s
 * PreconditionFailed, the rest StoreError with `status`. The SDK reports the status two ways: its
 * JSON calls throw an `ApiError` whose `code` is the status; a resumable session's start throws
 * the transport's error, with `status` (its `code` may be a socket error's name). Both are read.
 *
 * @module
 */
import type { ProvcatError } from '../../src/errors.js';
import { serviceError } from '../../src/service-errors.js';
import { uriText } from '../../src/uri.js';

/** What a GCS call was about: bucket, key and operation (`head`, `create`, `makeBucket`, ...). */
export interface GcsErrorContext {
  bucket: string;
  key?: string | undefined;
  op: string;
}

interface GcsErrorLike {
  code?: unknown;
  status?: unknown;
  response?: { status?: unknown } | undefined;
  errors?: { reason?: unknown }[] | undefined;
  message?: unknown;
}

/** The `gs://` text of a bucket and key for messages (segments encoded, nothing refused). */
export const gcsUriText = (bucket: string, key?: string): string => uriText('gs', bucket, key);

/** The HTTP status of an error, when the server answered. */
export function statusOf(error: unknown): number | undefined {
  const e = error as GcsErrorLike | null;
  return [e?.code, e?.status, e?.response?.status].find(
    (v): v is number => typeof v === 'number' && v >= 100 && v < 600,
  );
}

/**
 * An error shaped like the SDK's (`code`: the status, `errors[0].reason`) from a response the
 * driver received itself, with the JSON API's error message when the body has one.
 */
export function responseError(status: number, body: string, what: string): Error {
  let parsed: { error?: { message?: string; errors?: GcsErrorLike['errors'] } } | undefined;
  try {
    parsed = JSON.parse(body);
  } catch {
    // Not the JSON API's error shape (a proxy's page): the body text is the message.
  }
  const message = parsed?.error?.message ?? (body.trim().slice(0, 300) || `HTTP ${status}`);
  const reason = parsed?.error?.errors?.[0]?.reason;
  return Object.assign(new Error(`${what}: ${message}`), { code: status, errors: [{ reason }] });
}

const NOT_FOUND = new Set(['notFound']);

/**
 * Map an error of a GCS call to a provcat error through the shared table; a ProvcatError passes
 * through unchanged. Never throws; aborts are the caller's to let through.
 */
export function mapGcsError(error: unknown, context: GcsErrorContext): ProvcatError {
  const e = error as GcsErrorLike | null;
  const status = statusOf(error);
  const reason = e?.errors?.[0]?.reason;
  const code =
    typeof reason === 'string' ? reason : typeof e?.code === 'string' ? e.code : undefined;
  return serviceError({
    op: context.op,
    uri: gcsUriText(context.bucket, context.key),
    status,
    code,
    message: typeof e?.message === 'string' ? e.message.split('\n')[0] : undefined,
    create: context.op === 'create' || context.op === 'makeBucket',
    notFoundCodes: NOT_FOUND,
    hint:
      status === 401 || status === 403
        ? ' — check the credentials (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`) and the bucket IAM'
        : code === 'ECONNREFUSED' || code === 'ENOTFOUND'
          ? ' — is the endpoint (STORAGE_EMULATOR_HOST) right and the server up?'
          : '',
    cause: error,
  });
}

/** The provcat error for a bare HTTP status (a response whose body was not read). */
export function statusError(status: number, context: GcsErrorContext): ProvcatError {
  return mapGcsError(Object.assign(new Error(`HTTP ${status}`), { code: status }), context);
}
