/**
 * The one mapping from what a storage service answered to a provcat error, shared by every
 * driver. A driver reads its SDK's error (HTTP status, the service's error code, a message) and
 * hands it to {@link serviceError}; it never decides the class itself. Rules:
 *
 * | the store said | provcat error |
 * |---|---|
 * | 404, or a code the driver names as "not found" (`NoSuchKey`, `BlobNotFound`, `notFound`) | {@link NotFound} |
 * | 401, 403 | {@link PermissionDenied} |
 * | 412 on a create-only-if-absent, or 409 on a create (`BlobAlreadyExists`, `BucketAlreadyExists`) | {@link Exists} |
 * | 412 elsewhere (a delete or copy conditional on a version that moved) | {@link PreconditionFailed} |
 * | 501, or a code the driver names as unsupported | {@link NotSupported} |
 * | anything else: 4xx, 5xx, throttling, timeouts, connection errors | {@link StoreError} with `status` when there was one |
 *
 * A {@link ProvcatError} passes through unchanged, so a driver may map twice without harm. The
 * SDK's error is always the `cause`, and the message names the operation, the URI, the code and
 * the status, plus the driver's hint (which setting to check) when it has one. Why one table:
 * the classic bug of storage libraries is a `catch` that turns a 403 or a timeout into
 * "missing"; with one table, that rule is written, documented (docs/errors.md) and tested once.
 *
 * @module
 */
import {
  Exists,
  NotFound,
  NotSupported,
  PermissionDenied,
  PreconditionFailed,
  ProvcatError,
  StoreError,
} from '../core/errors.js';

/** What a driver read off one failed call. */
export interface ServiceFailure {
  /** The operation, for the message: `head`, `get`, `put`, `create`, `UploadPart`, ... */
  op: string;
  /** The URI the call was about (`s3://bucket/key`), for the message and `ProvcatError.uri`. */
  uri: string;
  /** The HTTP status, when the store answered. */
  status?: number | undefined;
  /** The service's error code (`NoSuchKey`, `AuthorizationFailure`, `conditionNotMet`, ...). */
  code?: string | undefined;
  /** The service's message, when it gave one. */
  message?: string | undefined;
  /**
   * True for a create-only-if-absent (a conditional put, a bucket creation): its 412 and 409
   * mean the thing is already there.
   */
  create?: boolean | undefined;
  /** The driver's "not found" codes besides status 404 (HEAD answers carry no code). */
  notFoundCodes?: ReadonlySet<string> | undefined;
  /** The driver's codes for "this store cannot do that". */
  unsupportedCodes?: ReadonlySet<string> | undefined;
  /** What to check, appended to the message (` — check AWS_REGION`); empty when nothing helps. */
  hint?: string | undefined;
  /** The driver's own error. */
  cause: unknown;
}

/** Map one failure to its provcat error (see the module comment). Never throws. */
export function serviceError(failure: ServiceFailure): ProvcatError {
  const { cause, status, code, op, uri } = failure;
  if (cause instanceof ProvcatError) return cause;
  const where = `${op} ${uri}`;
  const named = code !== undefined && code !== '' ? code : undefined;
  const detail = describe(named, status, failure.message);
  const hint = failure.hint ?? '';
  if (status === 404 || (named !== undefined && failure.notFoundCodes?.has(named))) {
    return new NotFound(`${where}: not found${detail}`, { uri, cause });
  }
  if (status === 401 || status === 403) {
    return new PermissionDenied(`${where}: permission denied${detail}${hint}`, {
      uri,
      cause,
      status,
    });
  }
  if (failure.create && (status === 412 || status === 409)) {
    return new Exists(`${where}: already exists${detail}`, { uri, cause });
  }
  if (status === 412) {
    return new PreconditionFailed(`${where}: precondition failed${detail}`, {
      uri,
      cause,
      status,
    });
  }
  if (status === 501 || (named !== undefined && failure.unsupportedCodes?.has(named))) {
    return new NotSupported(`${where}: not supported by the store${detail}`, {
      uri,
      cause,
      status,
    });
  }
  return new StoreError(`${where} failed${detail}${hint}`, { uri, cause, status });
}

/** `: Code (HTTP 403): message`, leaving out what is missing or repeats. */
function describe(code: string | undefined, status: number | undefined, message?: string): string {
  const parts: string[] = [];
  if (code !== undefined) parts.push(code);
  if (status !== undefined) parts.push(`(HTTP ${status})`);
  let text = parts.length > 0 ? `: ${parts.join(' ')}` : '';
  if (message !== undefined && message !== '' && message !== code && message !== 'UnknownError') {
    text += `: ${message}`;
  }
  return text;
}
