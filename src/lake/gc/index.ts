/**
 * Garbage collection of managed objects (docs/gc.md): reference sets, the fail-closed keep-set,
 * plans and their apply, written once over the one managed stage, so they run on every stage.
 *
 * @module
 */

export {
  type ApplyCounts,
  type ApplyOptions,
  type ApplyProgress,
  type ApplyResult,
  applyGc,
  CHECKPOINT_FORMAT,
  parseShard,
} from './apply.js';
export { type CandidatesOptions, FINGERPRINT_METADATA, readCandidates } from './candidates.js';
export { parseDuration } from './duration.js';
export {
  GcPlanError,
  InventoryError,
  KeepSetFileError,
  type PlanProblem,
  ReferenceSetError,
  type ReferenceSetProblem,
  ReferencesChanged,
} from './errors.js';
export {
  type InventoryFileOptions,
  type InventoryFormat,
  type InventoryRow,
  type KeyEncoding,
  readInventoryFile,
} from './inventory.js';
export {
  type CheckedManifest,
  checkManifest,
  isManifestName,
  type ManifestOptions,
  readManifestRows,
} from './inventory-manifests.js';
export { type KeepSetOptions, writeKeepSet } from './keep-set.js';
export {
  KEEP_SET_FORMAT,
  KeepSetFile,
  type KeepSetHeader,
  type KeepSetSource,
  type KeepSetSummary,
  KeepSetWriter,
  readKeepSet,
} from './keep-set-file.js';
export { type KeepSetParquetResult, writeKeepSetParquet } from './keep-set-parquet.js';
export {
  covers,
  entryOfLocation,
  entryProblem,
  isPrefixEntry,
  isReservedKey,
  RESERVED_PREFIX,
} from './keys.js';
export { KeepSetIndex, SortedMatcher } from './matcher.js';
export {
  DEFAULT_OLDER_THAN_MS,
  type PlanOptions,
  type PlanProgress,
  type PlanResult,
  planGc,
} from './plan.js';
export {
  DEFAULT_PAGE_SIZE,
  PAGE_FORMAT,
  PLAN_FORMAT,
  type PlanManifest,
  type PlanObject,
  type PlanPage,
  type PlanTotals,
  type PlanUpload,
  verifyPlan,
} from './plan-format.js';
export {
  type AddReferencesResult,
  addReferences,
  listReferenceSets,
  type ReferenceOptions,
  type ReferenceSetInfo,
  type RetireReferencesResult,
  retireReferences,
} from './refs.js';
export { MAX_DELTA_ENTRIES, REFS_FORMAT, type ReferenceDelta } from './refs-format.js';
