/**
 * Typed errors of managed objects, beside the shared ones in src/errors.ts.
 *
 * Integrity failures (a digest that is not one, an object that is short, long or different, a
 * range answered wrongly, a location outside the stage) are {@link ObjectIntegrityError} from
 * src/errors.ts. The classes here cover what is not about an object's identity: a bad stage
 * descriptor or option, a malformed DataLocation, a bad byte range, the 10,000-part ceiling, an
 * unusable upload checkpoint, a source that changed while it was read.
 *
 * @module
 */
import { ProvcatError, type ProvcatErrorOptions } from '../errors.js';

/**
 * A stage descriptor, stage string or option is invalid (unknown descriptor version or field,
 * `partsInFlight` outside 1..16, `expiresIn` over one hour, an operation the stage kind does not
 * offer). Raised before any I/O.
 */
export class StageConfigError extends ProvcatError {}

/** A DataLocation is malformed (missing or extra field, wrong type, negative size). */
export class InvalidDataLocation extends ProvcatError {}

/** A byte range is empty, reversed or outside `[0, sizeBytes]`. Raised before any I/O. */
export class InvalidRange extends ProvcatError {}

/**
 * The source has more than the S3 maximum of 10,000 parts. Raised after a full 10,000th part,
 * when one more read returns data, and before that part is sent. The upload is aborted.
 */
export class PartLimitExceeded extends ProvcatError {}

/**
 * An upload checkpoint cannot be used: unknown version or part size, malformed JSON, a key
 * outside the stage, or the checkpoint is locked by a live process. Nothing was read or sent.
 */
export class CheckpointError extends ProvcatError {
  /** The checkpoint file. */
  readonly path: string;
  constructor(message: string, path: string, options: ProvcatErrorOptions = {}) {
    super(`${message} (checkpoint ${path})`, options);
    this.path = path;
  }
}

/** A path source changed size while it was uploaded; the upload was abandoned. */
export class SourceChanged extends ProvcatError {}

/**
 * The error an upload or read rejects with when its AbortSignal fired: the signal's reason
 * when that is already an AbortError, else an AbortError whose `cause` is the reason.
 */
export function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error && reason.name === 'AbortError') return reason;
  const error = new Error('The operation was aborted', { cause: reason });
  error.name = 'AbortError';
  (error as Error & { code: string }).code = 'ABORT_ERR';
  return error;
}
