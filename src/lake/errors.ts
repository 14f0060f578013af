/**
 * Typed errors of managed objects, beside the shared ones in src/core/errors.ts.
 *
 * Integrity failures (a digest that is not one, an object that is short, long or different, a
 * range answered wrongly, a location outside the stage) are {@link ObjectIntegrityError} from
 * src/core/errors.ts. The classes here cover what is not about an object's identity: a bad stage
 * descriptor or option, a malformed DataLocation, a bad byte range, an unusable upload
 * checkpoint; and, re-exported from the S3 multipart engine that raises them, the 10,000-part
 * ceiling and a source that changed while it was read.
 *
 * @module
 */
import { ProvcatError, type ProvcatErrorOptions } from '../core/errors.js';

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

// The two upload errors are the upload engine's (src/core/errors.ts), shared with every driver's `put`: `PartLimitExceeded` (more than 10,000 parts; raised before the part beyond the
// limit is sent) and `SourceChanged` (a file that changed size, mtime or bytes while it was
// uploaded; a SourceError).
/** The error an upload or read rejects with when its AbortSignal fired (src/core/errors.ts). */
export { abortError, PartLimitExceeded, SourceChanged } from '../core/errors.js';
