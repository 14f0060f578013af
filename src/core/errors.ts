/**
 * Typed errors. Every failure provcat reports is a {@link ProvcatError}; callers branch on the
 * class (or on `code`, which survives serialization), never on message text.
 *
 * A missing object ({@link NotFound}) is never confused with a refusal or a network failure
 * ({@link StoreError}): each driver maps its SDK's errors in exactly one function.
 *
 * @module
 */

/** Options shared by every provcat error. */
export interface ProvcatErrorOptions {
  /** The URI the operation was about, when there is one. */
  uri?: string | undefined;
  /** The underlying error (an SDK error, an `fs` error, ...). */
  cause?: unknown;
}

/** The base of every error provcat raises. */
export class ProvcatError extends Error {
  /** A stable machine-readable name, equal to the class name. */
  readonly code: string = 'ProvcatError';
  /** The URI the operation was about, if any. */
  readonly uri: string | undefined;

  constructor(message: string, options: ProvcatErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.uri = options.uri;
    this.name = new.target.name;
    this.code = new.target.name;
  }
}

/** A URI (or a key that would have to become one) is malformed or names something unsafe. */
export class UriError extends ProvcatError {}

/**
 * An argument or option of a call is not valid: a `concurrency` outside 1..256, an empty commit
 * message, a number where none fits. Raised before any I/O, so nothing was read or changed. The
 * CLI exits with 2 for it, as for any other bad command line.
 */
export class InvalidArgument extends ProvcatError {}

/** No object, folder or version exists where the URI points. */
export class NotFound extends ProvcatError {}

/** A create-if-absent found the key already there. */
export class Exists extends ProvcatError {}

/**
 * The store refused or failed (permission, network, throttling, an unsupported feature, a
 * snapshot that never settled). The driver's own error is attached as `cause`.
 */
export class StoreError extends ProvcatError {
  /** HTTP status (or the driver's equivalent) when the store gave one. */
  readonly status: number | undefined;
  constructor(
    message: string,
    options: ProvcatErrorOptions & { status?: number | undefined } = {},
  ) {
    super(message, options);
    this.status = options.status;
  }
}

/**
 * The store refused the credentials or the caller's rights (HTTP 401 or 403): wrong or missing
 * credentials, a bucket policy, a signature the store rejected. Never reported as
 * {@link NotFound}: "not allowed to look" says nothing about whether the object exists.
 */
export class PermissionDenied extends StoreError {}

/**
 * A condition other than "create only if absent" failed: a delete or a copy conditional on a
 * version or ETag that is no longer current (HTTP 412 outside a create). Nothing was changed.
 */
export class PreconditionFailed extends StoreError {}

/**
 * The store (or this driver on it) cannot do what was asked: versions on a bucket or container
 * that keeps none, presigned URLs on a local stage, a conditional delete on a store without one.
 * Raised before anything was changed.
 */
export class NotSupported extends StoreError {}

/**
 * A failure of an upload's source (the local file or stream being sent), not of the store: a
 * file that does not exist or cannot be read, a FIFO or a directory given as a file, a stream
 * that failed or ended before its declared size.
 */
export class SourceError extends ProvcatError {}

/**
 * The source changed while it was uploaded: a file whose size or mtime changed, that ended early
 * or grew, or whose bytes sent differ from the bytes hashed. The upload is abandoned (and
 * aborted); no object appears.
 */
export class SourceChanged extends SourceError {}

/**
 * The source needs more parts than the store's part protocol accepts (10,000 on S3, 50,000
 * blocks on Azure). Raised before the first part beyond the limit is sent; the upload is aborted.
 */
export class PartLimitExceeded extends ProvcatError {}

/** What became of a stalled multipart upload (see {@link UploadStalled}). */
export type StalledUploadOutcome =
  /** AbortMultipartUpload succeeded (or the upload was already gone): nothing is left behind. */
  | 'aborted'
  /** The caller keeps the upload for a resume (a managed upload with a checkpoint). */
  | 'kept'
  /** Aborting failed too: the upload remains until a lifecycle rule removes it. */
  | 'abort-failed';

/**
 * An upload made no progress for its stall timeout (`stallTimeoutMs`): no part was acknowledged
 * and the store took no new body byte, while at least one part request was waiting on it. Every
 * part in flight was cancelled and none was sent again. The message names the object, the
 * multipart upload, how long nothing moved and what became of the upload ({@link outcome}).
 * `cause` is the watchdog's `TimeoutError` (with the abort's failure, when it failed too, in an
 * AggregateError). A {@link StoreError} without `status`: the store gave no answer.
 */
export class UploadStalled extends StoreError {
  /** The multipart upload's id. */
  readonly uploadId: string;
  /** How long nothing moved when the upload was stopped (milliseconds). */
  readonly stalledMs: number;
  /** What became of the multipart upload. */
  readonly outcome: StalledUploadOutcome;
  constructor(
    message: string,
    options: ProvcatErrorOptions & {
      uploadId: string;
      stalledMs: number;
      outcome: StalledUploadOutcome;
    },
  ) {
    super(message, options);
    this.uploadId = options.uploadId;
    this.stalledMs = options.stalledMs;
    this.outcome = options.outcome;
  }
}

/** What a push sent before the commit that followed it failed (see {@link NotCommitted}). */
export interface PushedCounts {
  uploaded: number;
  skipped: number;
  deleted: number;
  bytes: number;
}

/**
 * A push-then-commit (`commit --from`) pushed the local folder, but the commit that followed
 * failed, so no commit was made. The pushed files stay in the store; {@link pushed} says what was
 * sent; `cause` is the commit's own error, and the CLI exits with the status of that cause.
 */
export class NotCommitted extends ProvcatError {
  /** What the push did before the commit failed. */
  readonly pushed: PushedCounts;
  constructor(message: string, options: ProvcatErrorOptions & { pushed: PushedCounts }) {
    super(message, options);
    this.pushed = options.pushed;
  }
}

/** Offline mode is on and the cache cannot answer. */
export class OfflineMiss extends ProvcatError {}

/** The ways a managed object can fail its integrity checks. */
export type IntegrityKind =
  | 'InvalidDigest'
  | 'PrematureEof'
  | 'TooLong'
  | 'DigestMismatch'
  | 'RangeMismatch'
  | 'OutsideStage';

/** A managed object (or a commit object) is not what its identity says. */
export class ObjectIntegrityError extends ProvcatError {
  readonly kind: IntegrityKind;
  /** For `PrematureEof`/`TooLong`: the byte count that was promised. */
  readonly expected: number | undefined;
  /** For `PrematureEof`/`TooLong`: the byte count that was seen. */
  readonly observed: number | undefined;

  constructor(
    kind: IntegrityKind,
    message: string,
    options: ProvcatErrorOptions & { expected?: number; observed?: number } = {},
  ) {
    super(`${kind}: ${message}`, options);
    this.kind = kind;
    this.expected = options.expected;
    this.observed = options.observed;
  }
}

/** CLI exit status per error class (a fixed contract; see docs/cli.md). */
export function exitCodeOf(error: unknown): number {
  if (error instanceof NotCommitted) return exitCodeOf(error.cause);
  if (error instanceof InvalidArgument) return 2;
  if (error instanceof NotFound) return 3;
  if (error instanceof Exists) return 4;
  if (error instanceof OfflineMiss) return 5;
  if (error instanceof ObjectIntegrityError) return 6;
  if (error instanceof PermissionDenied) return 9;
  if (error instanceof PreconditionFailed) return 10;
  if (error instanceof NotSupported) return 11;
  if (error instanceof StoreError) return 7;
  if (error instanceof UriError) return 8;
  return 1;
}

/** True when `error` is an abort (an `AbortSignal` fired). */
export function isAbort(error: unknown): boolean {
  return (
    error instanceof Error &&
    (error.name === 'AbortError' || (error as { code?: string }).code === 'ABORT_ERR')
  );
}

/**
 * What a call rejects with for `error`, raised after `signal` fired: `error` itself when it is an
 * abort, else {@link abortError}. A socket or SDK error the abort caused (Node's `Error: aborted`
 * for a response cut mid-body) is the caller's abort, never an untyped failure of its own.
 */
export function asAbort(error: unknown, signal: AbortSignal): unknown {
  return isAbort(error) ? error : abortError(signal);
}

/**
 * The error a call rejects with when its AbortSignal fired: the signal's reason when that is
 * already an AbortError, else an AbortError (`code` `ABORT_ERR`) whose `cause` is the reason.
 * {@link isAbort} is true for it.
 */
export function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error && reason.name === 'AbortError') return reason;
  const error = new Error('The operation was aborted', { cause: reason });
  error.name = 'AbortError';
  (error as Error & { code: string }).code = 'ABORT_ERR';
  return error;
}
