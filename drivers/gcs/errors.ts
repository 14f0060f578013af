/**
 * GCS errors, read off what the SDK or the driver's own requests threw, through the one status
 * map of every driver (src/driver-kit/service-errors.ts); a create's 412 and a bucket creation's 409 are
 * Exists. The SDK reports the status two ways: its JSON calls throw an `ApiError` whose `code` is
 * the status; a resumable session's start throws the transport's error, with `status` (its
 * `code` may be a socket error's name). Both are read.
 *
 * @module
 */
import type { ProvcatError } from '../../src/core/errors.js';
import { uriText } from '../../src/core/uri.js';
import { serviceError } from '../../src/driver-kit/service-errors.js';

/** What a GCS call was about: bucket, key and operation (`head`, `create`, `makeBucket`, ...). */
export interface GcsErrorContext {
  bucket: string;
  key?: string | undefined;
  /** The generation a version primitive was asked for: messages name `gs://b/k?at=version:ID`. */
  versionId?: string | undefined;
  op: string;
}

interface GcsErrorLike {
  code?: unknown;
  status?: unknown;
  response?: { status?: unknown } | undefined;
  errors?: { reason?: unknown }[] | undefined;
  message?: unknown;
}

/**
 * The `gs://` text of a bucket and key for messages (segments encoded, nothing refused); with
 * `versionId`, the URI of that generation (`?at=version:ID`).
 */
export const gcsUriText = (bucket: string, key?: string, versionId?: string): string =>
  uriText('gs', bucket, key, versionId);

/** The HTTP status of an error, when the server answered. */
export function statusOf(error: unknown): number | undefined {
  const e = error as GcsErrorLike | null;
  return [e?.code, e?.status, e?.response?.status].find(
    (v): v is number => typeof v === 'number' && v >= 100 && v < 600,
  );
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
    uri: gcsUriText(context.bucket, context.key, context.versionId),
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

/**
 * The provcat error of a status the driver's own request got, with the JSON API's error message
 * and reason when `body` has them (else its text).
 */
export function statusError(status: number, context: GcsErrorContext, body = ''): ProvcatError {
  let parsed: { error?: { message?: string; errors?: GcsErrorLike['errors'] } } | undefined;
  try {
    parsed = body === '' ? undefined : JSON.parse(body);
  } catch {
    // Not the JSON API's error shape (a proxy's page): the body text is the message.
  }
  const message = parsed?.error?.message ?? (body.trim().slice(0, 300) || `HTTP ${status}`);
  const errors = [{ reason: parsed?.error?.errors?.[0]?.reason }];
  return mapGcsError(Object.assign(new Error(message), { code: status, errors }), context);
}
