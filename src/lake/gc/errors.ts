/**
 * Typed errors of garbage collection. Every refusal that protects live objects is one of these,
 * and every one is raised before anything is deleted (or, during an apply, before anything more
 * is deleted).
 *
 * The store-side failures (a reference set that cannot be read exactly, a plan that cannot be
 * trusted, references that changed since the plan) are {@link StoreError}s, so the CLI exits
 * with status 7 for each; bad input files (an inventory, an exported keep-set) are
 * {@link ProvcatError}s of their own. Callers branch on the class and its `kind`, never on text.
 *
 * @module
 */
import { ProvcatError, type ProvcatErrorOptions, StoreError } from '../../core/errors.js';

/** Why reference sets could not be read as an exact keep-set. */
export type ReferenceSetProblem =
  /** No reference set in the stage, or every one retired: an empty keep-set is refused. */
  | 'NoSets'
  /** A log entry names a delta that is not there, or a log key names no entry. */
  | 'Missing'
  /** Bytes that are not a valid delta or log entry (bad JSON, a wrong field, a bad key). */
  | 'Corrupt'
  /** A delta whose SHA-256 is not its ID. */
  | 'DigestMismatch'
  /** A number missing from a set's log (entries 1..N must all be there). */
  | 'Gap'
  /** A delta that is not in canonical form (member order, whitespace, unsorted entries). */
  | 'NonCanonical'
  /** Entry N whose number, parent, name or time does not follow entry N - 1. */
  | 'NonMonotonic'
  /** A `format` this reader does not know. */
  | 'UnknownFormat'
  /** The set was retired: nothing more can be added. */
  | 'Retired'
  /** A delta or entry larger than the format allows. */
  | 'TooLarge';

/**
 * A reference set cannot be read (or written) exactly; see {@link ReferenceSetProblem}. Reading
 * the keep-set fails closed with this error rather than returning a smaller set.
 */
export class ReferenceSetError extends StoreError {
  readonly kind: ReferenceSetProblem;
  constructor(kind: ReferenceSetProblem, message: string, options: ProvcatErrorOptions = {}) {
    super(`${kind}: ${message}`, options);
    this.kind = kind;
  }
}

/** Why a GC plan authorizes nothing. */
export type PlanProblem =
  /** The plan directory has no manifest (a plan is complete only once its manifest is written). */
  | 'NoManifest'
  /** A page (or the manifest) whose bytes differ from the hash that names them. */
  | 'DigestMismatch'
  /** A page or manifest that is not valid (fields, order, totals). */
  | 'Corrupt'
  /** A `format` this reader does not know. */
  | 'UnknownFormat'
  /** The plan was made for another stage. */
  | 'WrongStage'
  /** `--out` already holds a plan or other files. */
  | 'Exists'
  /** The apply checkpoint does not belong to this plan or is not valid. */
  | 'Checkpoint'
  /** A candidates file made against another keep-set (its fingerprint is not the live one). */
  | 'KeepSetMismatch';

/** A GC plan (or its apply checkpoint) cannot be trusted; nothing is deleted. */
export class GcPlanError extends StoreError {
  readonly kind: PlanProblem;
  constructor(kind: PlanProblem, message: string, options: ProvcatErrorOptions = {}) {
    super(`${kind}: ${message}`, options);
    this.kind = kind;
  }
}

/**
 * The reference sets changed since the plan was made (their fingerprint differs): the plan no
 * longer describes what is unreferenced. Apply stops before the next page; nothing more is
 * deleted. CLI exit status 7.
 */
export class ReferencesChanged extends StoreError {
  /** The fingerprint the plan was made with. */
  readonly planned: string;
  /** The fingerprint the stage has now. */
  readonly current: string;
  constructor(
    message: string,
    planned: string,
    current: string,
    options: ProvcatErrorOptions = {},
  ) {
    super(message, options);
    this.planned = planned;
    this.current = current;
  }
}

/** An inventory file cannot be read exactly (malformed CSV or JSON Lines, a bad field, a key twice). */
export class InventoryError extends ProvcatError {}

/**
 * An exported keep-set file cannot be trusted: unknown format, a line out of order or not in
 * canonical form, a missing trailer (a truncated file), a count or digest that differs.
 */
export class KeepSetFileError extends ProvcatError {}
