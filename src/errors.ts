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
  if (error instanceof NotFound) return 3;
  if (error instanceof Exists) return 4;
  if (error instanceof OfflineMiss) return 5;
  if (error instanceof ObjectIntegrityError) return 6;
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
