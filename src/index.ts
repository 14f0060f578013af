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
  type CommitOptions,
  type LogEntry,
  loadCommit,
} from './commits/index.js';
export type {
  ByteRange,
  Capabilities,
  CreateMode,
  GetOptions,
  GetResult,
  ListPage,
  ObjectInfo,
  PagesOptions,
  PutOptions,
  PutSource,
  SignalOptions,
  VersionRecord,
} from './driver.js';
export { type Entry, type EntryJson, entryToJson } from './entry.js';
export {
  Exists,
  exitCodeOf,
  type IntegrityKind,
  NotFound,
  ObjectIntegrityError,
  OfflineMiss,
  ProvcatError,
  type ProvcatErrorOptions,
  type StalledUploadOutcome,
  StoreError,
  UploadStalled,
  UriError,
} from './errors.js';
export * from './lake/index.js';
export type { BodySink } from './net/http1-download.js';
export {
  type CallOptions,
  type FetchOptions,
  type FetchResult,
  type Location,
  META_PREFIX,
  ObjectStore,
  type PutCallOptions,
  type WalkOptions,
} from './object-store.js';
export { type DriverFactory, registerDriver, registeredSchemes, storeFor } from './registry.js';
export {
  offlineFromEnv,
  type Progress,
  type ProgressCallback,
  Store,
  type StoreOptions,
} from './store.js';
export { type At, toUri, Uri } from './uri.js';
