/**
 * Managed objects ("Lake"): integrity-verified upload, open and range reads of large immutable
 * objects on a local or S3 stage. See docs/managed-objects.md.
 *
 * @module
 */
export {
  type Checkpoint,
  type CheckpointPart,
  parseCheckpoint,
  RESUMABLE_PART_SIZES,
} from './checkpoint.js';
export { lakeCommands } from './cli.js';
export {
  type LocalStageDescriptor,
  parseStageDescriptor,
  type S3StageDescriptor,
  type StageDescriptor,
} from './descriptor.js';
export {
  CheckpointError,
  InvalidDataLocation,
  InvalidRange,
  PartLimitExceeded,
  SourceChanged,
  StageConfigError,
} from './errors.js';
export {
  descriptorFromString,
  type StageOptions,
  stageFromDescriptor,
  stageFromString,
} from './factory.js';
export { LocalStage } from './local-stage.js';
export {
  checkDataLocation,
  type DataLocation,
  DEFAULT_CONTENT_TYPE,
  formatDataLocation,
  parseDataLocation,
} from './location.js';
export { PresignedUrl } from './presign.js';
export {
  ABORT_TIMEOUT_MS,
  DEFAULT_PART_SIZE,
  MAX_PARTS,
  S3Stage,
  type S3StageOptions,
} from './s3-stage.js';
export {
  DEFAULT_PARTS_IN_FLIGHT,
  MAX_PARTS_IN_FLIGHT,
  MAX_PRESIGN_SECONDS,
  type ManagedStage,
  type PresignOptions,
  type ReadOptions,
  type UploadOptions,
  type UploadSource,
} from './stage.js';
