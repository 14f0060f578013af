/**
 * The narrow interface every operation (fetch, commit, pin, log, branch, push, diff,
 * delete-folder, put) takes instead of the facade: the driver primitives and the store's
 * settings. `ObjectStore` (src/store/object-store.ts) implements it; a service never imports the
 * facade, so each can be read and tested with any object of this shape. A service that uses the
 * cache takes `CachedStoreContext` (src/cache/context.ts), which adds it.
 *
 * Also here, because services below the facade share them: {@link Location}, {@link CallOptions},
 * the progress types and {@link progressFor}.
 *
 * @module
 */
import type { Uri } from '../core/uri.js';
import type {
  Capabilities,
  CreateMode,
  DeleteIfOptions,
  GetOptions,
  GetResult,
  HistoryOptions,
  ListPage,
  ObjectInfo,
  PagesOptions,
  PartProtocol,
  PresignPrimitiveOptions,
  PutBatch,
  PutOptions,
  PutSource,
  SignalOptions,
  VersionRecord,
} from './primitives.js';

/** Progress of a long operation: cumulative bytes and files so far, and totals when known. */
export interface Progress {
  /** What is going on: `fetch`, `put`, `upload`, `read`, `branch`, ... */
  operation: string;
  /** The URI being worked on. */
  uri: string;
  bytes: number;
  totalBytes?: number | undefined;
  files?: number | undefined;
  totalFiles?: number | undefined;
}

/** A progress callback; called often, so keep it cheap. */
export type ProgressCallback = (progress: Progress) => void;

/** The most transfers an adaptive folder fetch grows to (see `StoreOptions.concurrency`). */
export const ADAPTIVE_MAX_CONCURRENCY = 64;

/** Where a URI points in a store. */
export interface Location {
  bucket: string;
  /** The key; empty for the bucket. No trailing `/`. */
  key: string;
}

/** Options of calls that take only a signal. */
export interface CallOptions {
  signal?: AbortSignal | undefined;
}

/**
 * The driver primitives (docs in src/store/object-store.ts, which declares them): six core, six
 * for versions, and the optional ones.
 */
export interface StorePrimitives {
  _head(bucket: string, key: string, options?: SignalOptions): Promise<ObjectInfo>;
  _pages(bucket: string, prefix: string, options?: PagesOptions): AsyncIterable<ListPage>;
  _get(bucket: string, key: string, options?: GetOptions): Promise<GetResult>;
  _put(bucket: string, key: string, source: PutSource, options?: PutOptions): Promise<ObjectInfo>;
  _delete(bucket: string, key: string, options?: SignalOptions): Promise<void>;
  _versionOf(bucket: string, key: string, options?: SignalOptions): Promise<string>;
  _history(bucket: string, prefix: string, options?: HistoryOptions): AsyncIterable<VersionRecord>;
  _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options?: SignalOptions,
  ): Promise<ObjectInfo>;
  _getVersion(
    bucket: string,
    key: string,
    versionId: string,
    options?: GetOptions,
  ): Promise<GetResult>;
  _create(
    bucket: string,
    key: string,
    body: Uint8Array,
    options?: SignalOptions,
  ): Promise<ObjectInfo>;
  _copy(
    bucket: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options?: SignalOptions,
  ): Promise<ObjectInfo>;
  _createMode(bucket: string): Promise<CreateMode>;
  _deleteIf(bucket: string, key: string, options: DeleteIfOptions): Promise<void>;
  _presign(bucket: string, key: string, options: PresignPrimitiveOptions): Promise<string>;
  partProtocol(bucket: string): PartProtocol | undefined;
  batchPuts(bucket: string, prefix: string): PutBatch | undefined;
}

/** The primitives and the settings of one store: what a service below the facade takes. */
export interface StoreContext extends StorePrimitives {
  /** The URI scheme the store serves (`s3`, `local`, ...). */
  readonly scheme: string;
  /** A short driver name for messages. */
  readonly driver: string;
  /** What the driver can do. */
  readonly capabilities: Capabilities;
  /** Offline mode: no network call at all. */
  readonly offline: boolean;
  /** Transfers in flight for folder operations (where a fetch starts, when adaptive). */
  readonly concurrency: number;
  /** True when `concurrency` was not given: folder fetches adapt their window. */
  readonly adaptiveConcurrency: boolean;
  /** The store's progress callback, if any. */
  readonly onProgress: ProgressCallback | undefined;
  /**
   * The local folder the store keeps its objects in (the embedded store's root), which no
   * `fetch --to` or push may overlap (src/core/own-folders.ts); `undefined` for a remote store.
   */
  readonly localRoot?: string | undefined;
  /** The bucket and key a URI names; `UriError` for another scheme. */
  locate(uri: Uri): Location;
  /** `OfflineMiss` when offline (`what`: the operation, for the message). */
  online(uri: Uri, what: string): void;
}

/**
 * A progress callback for one transfer that reports to the store's and the call's callbacks;
 * `undefined` when there is neither.
 */
export function progressFor(
  ctx: Pick<StoreContext, 'onProgress'>,
  operation: string,
  uri: Uri,
  extra: ProgressCallback | undefined,
  totalBytes: number | undefined,
): ((bytes: number) => void) | undefined {
  const sinks = [ctx.onProgress, extra].filter((f): f is ProgressCallback => f !== undefined);
  if (sinks.length === 0) return undefined;
  const text = uri.toString();
  return (bytes) => {
    for (const sink of sinks) sink({ operation, uri: text, bytes, totalBytes });
  };
}

/** A {@link StoreContext} its holder owns and closes (what a managed stage builds on). */
export interface ClosableStore extends StoreContext {
  /** Release sockets and clients. */
  close(): Promise<void>;
}
