/**
 * provcat: name files in object stores by URI, fetch them into a local cache, run offline from
 * that cache, and — on buckets that keep versions — pin, commit and branch folders.
 *
 * ```ts
 * import { storeFor } from 'provcat';
 * const store = await storeFor('local://demo/data/');
 * const { path } = await store.fetch('local://demo/data/');
 * ```
 *
 * @module
 */
export { Cache, type CacheInfo, type CacheOptions, defaultCacheRoot } from './cache/cache.js';
export {
  type BranchOptions,
  type Commit,
  type CommitFile,
  type CommitHead,
  type CommitOptions,
  type CommitTree,
  type LogEntry,
  loadCommit,
  openCommit,
} from './commits/index.js';
export { type Entry, type EntryJson, entryToJson } from './contract/entry.js';
export type {
  BodySink,
  ByteRange,
  Capabilities,
  CompletedPart,
  CreateMode,
  DeleteIfOptions,
  GetOptions,
  GetResult,
  ListedPart,
  ListPage,
  ObjectInfo,
  OpenUpload,
  PagesOptions,
  PartProtocol,
  PartUpload,
  PresignPrimitiveOptions,
  PutBatch,
  PutOptions,
  PutSource,
  SignalOptions,
  UploadObjectOptions,
  VersionRecord,
} from './contract/primitives.js';
export {
  Exists,
  exitCodeOf,
  type IntegrityKind,
  InvalidArgument,
  NotCommitted,
  NotFound,
  NotSupported,
  ObjectIntegrityError,
  OfflineMiss,
  PartLimitExceeded,
  PermissionDenied,
  PreconditionFailed,
  ProvcatError,
  type ProvcatErrorOptions,
  type PushedCounts,
  SourceChanged,
  SourceError,
  type StalledUploadOutcome,
  StoreError,
  UploadStalled,
  UriError,
} from './core/errors.js';
export {
  backoffMs,
  isRetryable,
  RETRY_ATTEMPTS,
  RETRY_BASE_MS,
  RETRY_CAP_MS,
  type RetryOptions,
  withRetries,
} from './core/retry.js';
export { type At, toUri, Uri } from './core/uri.js';
export { type ServiceFailure, serviceError } from './driver-kit/service-errors.js';
export type { CommitFromOptions, CommitFromResult } from './folders/commit-from.js';
export type { DeleteFolderOptions, DeleteFolderResult } from './folders/delete-folder.js';
export type { DiffChange, DiffFile, DiffOptions, DiffResult } from './folders/diff.js';
export type { PushAction, PushOptions, PushResult } from './folders/push.js';
export * from './lake/index.js';
export {
  type CallOptions,
  type CommitCallOptions,
  type FetchOptions,
  type FetchResult,
  type FetchToOptions,
  type FetchToResult,
  type Location,
  META_PREFIX,
  ObjectStore,
  type PutCallOptions,
  type ReadOptions,
  type ReadTextOptions,
  type WalkOptions,
} from './store/object-store.js';
export { configPath, loadProfile, type Profile, parseProfiles } from './store/profiles.js';
export {
  type DriverFactory,
  registerDriver,
  registeredSchemes,
  type StoreForOptions,
  storeFor,
} from './store/registry.js';
export {
  ADAPTIVE_MAX_CONCURRENCY,
  offlineFromEnv,
  type Progress,
  type ProgressCallback,
  Store,
  type StoreOptions,
} from './store/store.js';
export {
  DEFAULT_STALL_TIMEOUT_MS,
  partSizeFor,
  type UploadSettings,
  type UploadSettingsOptions,
  uploadSettings,
} from './upload/settings.js';
