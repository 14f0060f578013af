/**
 * Managed objects ("Lake"): integrity-verified upload, open and range reads of large immutable
 * objects on a stage of any driver (local files, S3, ...). See docs/managed-objects.md.
 *
 * @module
 */

export { type StageBackend, storeBackend } from './backend.js';
export {
  type Checkpoint,
  type CheckpointPart,
  parseCheckpoint,
  RESUMABLE_PART_SIZES,
} from './checkpoint.js';
export {
  checkDataLocation,
  type DataLocation,
  DEFAULT_CONTENT_TYPE,
  formatDataLocation,
  parseDataLocation,
} from './data-location.js';
export { parseStageDescriptor, type StageDescriptor } from './descriptor.js';
export {
  checkEndpoint,
  checkFields,
  checkTenant,
  decodeStagePrefix,
  joinPrefix,
  normalizePrefix,
  normalizeRoot,
} from './descriptor-fields.js';
export {
  CheckpointError,
  InvalidDataLocation,
  InvalidRange,
  PartLimitExceeded,
  SourceChanged,
  StageConfigError,
} from './errors.js';
export * from './gc/index.js';
export {
  fileLocations,
  objectLocations,
  type StageLocations,
} from './location-keys.js';
export { PresignedUrl } from './presign.js';
export {
  DEFAULT_PART_SIZE,
  Stage,
  type StageObject,
  type StageUpload,
} from './stage.js';
export {
  DEFAULT_PARTS_IN_FLIGHT,
  MAX_PARTS_IN_FLIGHT,
  MAX_PRESIGN_SECONDS,
  type ManagedStage,
  type PresignOptions,
  type ReadOptions,
  type UploadOptions,
  type UploadSource,
} from './stage-contract.js';
export {
  descriptorFromString,
  type StageOptions,
  stageFromDescriptor,
  stageFromString,
} from './stage-factory.js';
export {
  type BackendOptions,
  registerStageKind,
  type StageKind,
  stageKind,
  stageKinds,
} from './stage-kinds.js';
