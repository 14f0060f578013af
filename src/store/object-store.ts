/**
 * {@link ObjectStore}: the facade of every object-store driver.
 *
 * A driver subclass gives the twelve primitives below (six core, six for versions); this class
 * is what applications call: stat, list, walk, fetch with the cache, put, delete, push, diff,
 * delete-folder, offline mode, and pin/commit/log/branch. Each method delegates to its service
 * (src/folders/, src/cache/, src/commits/, src/upload/), which takes the store as the narrow
 * context of src/contract/store-context.ts and never imports this class (docs/architecture.md).
 *
 * Primitives are public (named with a leading `_`) so that wrapping drivers and the conformance
 * suite can reach them; applications call the methods without `_`.
 *
 * @module
 */

import type { Readable } from 'node:stream';
import { type CachedStoreContext, ownFolders } from '../cache/context.js';
import { fetchUri } from '../cache/fetch.js';
import type { FetchOptions, FetchResult } from '../cache/transfer.js';
import type { BranchOptions } from '../commits/branch.js';
import type { LogEntry } from '../commits/log.js';
import type { Entry } from '../contract/entry.js';
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
} from '../contract/primitives.js';
import {
  type CallOptions,
  type Location,
  type ProgressCallback,
  progressFor,
} from '../contract/store-context.js';
import { checkConcurrency } from '../core/concurrency.js';
import { contentTypeFor } from '../core/content-type.js';
import { NotFound, NotSupported, OfflineMiss, UriError } from '../core/errors.js';
import { META_PREFIX } from '../core/keys.js';
import { encodeSegment, toUri, type Uri } from '../core/uri.js';
import type { CommitFromOptions } from '../folders/commit-from.js';
import type { DeleteFolderOptions, DeleteFolderResult } from '../folders/delete-folder.js';
import type { DiffOptions, DiffResult } from '../folders/diff.js';
import { fileEntry } from '../folders/entries.js';
import type { FetchToOptions, FetchToResult } from '../folders/fetch-to.js';
import {
  listFiles,
  listFolder,
  statEntry,
  type WalkOptions,
  walkFolder,
} from '../folders/listing.js';
import type { PushOptions, PushResult } from '../folders/push.js';
import type { PartBufferPool } from '../upload/buffer-pool.js';
import { deleteUri, type PutCallOptions, putUri } from '../upload/object-writes.js';
import { type UploadSettings, uploadSettings } from '../upload/settings.js';
import { openReadUri, type ReadOptions, type ReadTextOptions, readUri } from './read.js';
import { Store, type StoreOptions } from './store.js';

export type { FetchOptions, FetchResult } from '../cache/transfer.js';
export type { CallOptions, Location } from '../contract/store-context.js';
export type { FetchToOptions, FetchToResult } from '../folders/fetch-to.js';
export type { WalkOptions } from '../folders/listing.js';
export type { PutCallOptions } from '../upload/object-writes.js';
export type { ReadOptions, ReadTextOptions } from './read.js';
export { META_PREFIX };

/**
 * Options of {@link ObjectStore.commit}: the commit's, and with `from` a local folder pushed to
 * the folder first (with the push's options: `delete`, `concurrency`, `onProgress`).
 */
export interface CommitCallOptions extends CommitFromOptions {
  /** A local folder to push to the folder before committing it (src/folders/push.ts). */
  from?: string | undefined;
}

/** The operations {@link ObjectStore.online} names that a pin could answer offline. */
const READS: ReadonlySet<string> = new Set(['stat', 'list', 'walk', 'fetch', 'read']);

/** The base class of object-store drivers, and the facade of the API. See the module comment. */
export abstract class ObjectStore extends Store implements CachedStoreContext {
  /** The URI scheme this driver serves (`s3`, `local`, ...). */
  abstract readonly scheme: string;
  /** A short driver name for messages and debug logs. */
  abstract readonly driver: string;
  /** What the driver can do. */
  abstract readonly capabilities: Capabilities;
  /** How large objects are put: threshold, part size, parts in flight, stall timeout. */
  readonly uploads: UploadSettings;
  /** Part buffers of stream puts, made by the first one. */
  private partPool: PartBufferPool | undefined;

  /** Throws RangeError for options out of range. Makes no I/O. */
  constructor(options: StoreOptions = {}) {
    super(options);
    this.uploads = uploadSettings(options);
  }

  /**
   * The local folder this store keeps its objects in, which no `fetch --to` or push may overlap
   * (the embedded store's root); `undefined` here, for a remote store.
   */
  get localRoot(): string | undefined {
    return undefined;
  }

  /** The bucket and key a URI names. Throws {@link UriError} for another scheme. */
  locate(uri: Uri): Location {
    if (uri.scheme !== this.scheme) {
      throw new UriError(`${this.driver} serves ${this.scheme}:// URIs, not ${uri.scheme}://`, {
        uri: uri.toString(),
      });
    }
    return { bucket: uri.bucket, key: uri.key };
  }

  // ---- the API, built once on the primitives (src/folders/, cache/, commits/, upload/) -----

  /**
   * One file or folder. A key with keys below it is a folder (a folder marker `key/` alone too,
   * as `list` shows it); a bucket that exists always is (`NotFound` for one that does not). At
   * `?at=version:` the version's metadata (cached after the first read, so it works offline);
   * at `?at=commit:` the commit's manifest. Without `?at=`, offline mode raises `OfflineMiss`.
   */
  async stat(uri: Uri | string, options: CallOptions = {}): Promise<Entry> {
    return statEntry(this, uri, options);
  }

  /**
   * A folder one level deep: its files and sub-folders, in key order. `NotFound` for a file, for
   * nothing, and for a bucket that does not exist (an existing empty bucket lists `[]`). Keys no
   * URI can name raise `UriError` (never skipped), as in {@link walk}: so another client's key
   * `/x` at a bucket root (a folder `/`, which would read as the bucket) is refused, never listed
   * as the bucket inside itself. The bucket's `.provcat/` folder (commits and logs) is not listed.
   */
  async list(uri: Uri | string, options: CallOptions = {}): Promise<Entry[]> {
    return listFolder(this, uri, options);
  }

  /**
   * Every file below a folder, at any depth, in key order, filtered by minimatch globs on the
   * path relative to the folder. Folder markers (keys ending `/`) are left out; any other key no
   * URI can name raises `UriError`, so a folder fetched from this listing is never short.
   * `NotFound` where {@link list} says it: a folder with nothing below it, a missing bucket.
   */
  async walk(uri: Uri | string, options: WalkOptions = {}): Promise<Entry[]> {
    return walkFolder(this, uri, options);
  }

  /**
   * Copy a file or a whole folder into the cache, or find it there current, and return its
   * local path. A folder is refetched from one listing: only files whose version changed are
   * transferred, files deleted from the store leave the cache copy, and the copy is marked
   * complete only after that. Offline, a URI without `?at=` gives what the cache holds at any
   * version, or `OfflineMiss`; a pinned URI gives exactly the pinned bytes once fetched.
   */
  async fetch(uri: Uri | string, options: FetchToOptions & { to: string }): Promise<FetchToResult>;
  async fetch(uri: Uri | string, options?: FetchOptions): Promise<FetchResult>;
  /**
   * With `to`, the fetched file or folder is then copied to the local folder `to` as independent
   * files (reflinks where the file system has them, else copies), writing only what differs from
   * what is there; with `delete`, local files the folder lacks are removed. Refusals (a `to`
   * that is or holds a symbolic link, a file where a folder must be) come before anything is
   * written there. See src/folders/fetch-to.ts.
   */
  async fetch(
    uri: Uri | string,
    options: FetchOptions & Partial<FetchToOptions> = {},
  ): Promise<FetchResult | FetchToResult> {
    checkConcurrency(options.concurrency);
    const u = toUri(uri);
    this.locate(u);
    if (options.to === undefined) return fetchUri(this, u, options);
    const { fetchTo } = await import('../folders/fetch-to.js');
    return fetchTo(u, options as FetchToOptions, (o) => fetchUri(this, u, o), ownFolders(this));
  }

  /**
   * The bytes of one file (or of `range`, half-open), through the cache: a whole read is a
   * {@link fetch} (verified as it is cached; a version already cached is read from there, a
   * pinned URI offline too), then the cached copy. A range of a pinned file the cache lacks is
   * one ranged request for exactly those bytes, strictly checked (`InvalidRange` before any I/O,
   * `ObjectIntegrityError('RangeMismatch')` for an answer that is not exactly that range). A
   * folder is `UriError`; nothing there `NotFound`. See src/store/read.ts.
   */
  async read(uri: Uri | string, options: ReadOptions = {}): Promise<Buffer> {
    const u = toUri(uri);
    this.locate(u);
    return readUri(this, u, options);
  }

  /** {@link read}, decoded as text (`encoding`, default `utf8`). */
  async readText(uri: Uri | string, options: ReadTextOptions = {}): Promise<string> {
    const bytes = await this.read(uri, options);
    return bytes.toString(options.encoding ?? 'utf8');
  }

  /**
   * The bytes of one file (or of `range`) as a Node `Readable`, by the rules of {@link read}: a
   * whole file streams from its verified cached copy; a range not cached streams from one
   * ranged request and fails with `PrematureEof`/`TooLong` unless exactly the range arrives.
   */
  async openRead(uri: Uri | string, options: ReadOptions = {}): Promise<Readable> {
    const u = toUri(uri);
    this.locate(u);
    return openReadUri(this, u, options);
  }

  /**
   * True when the URI names a file or folder ({@link stat}), false on `NotFound`. At a pin it
   * answers offline once the version or commit was read; without one, offline is `OfflineMiss`.
   */
  async exists(uri: Uri | string, options: CallOptions = {}): Promise<boolean> {
    try {
      await this.stat(uri, options);
      return true;
    } catch (error) {
      if (error instanceof NotFound) return false;
      throw error;
    }
  }

  /**
   * Write one object from a local file path, a Node stream or bytes; returns the file written.
   * A bucket, a folder URI, a pinned URI or a key under `.provcat/` is refused (`UriError`).
   */
  async put(uri: Uri | string, source: PutSource, options: PutCallOptions = {}): Promise<Entry> {
    return putUri(this, uri, source, options);
  }

  /** Delete one object. Same refusals as {@link put}; `NotFound` when there is none. */
  async delete(uri: Uri | string, options: CallOptions = {}): Promise<void> {
    return deleteUri(this, uri, options);
  }

  /**
   * Upload the files of a local folder to a store folder, with at most `concurrency` requests
   * in flight, skipping files whose object already holds their bytes (decided from one listing;
   * see src/folders/push.ts); with `delete`, also delete the objects the local folder lacks (never
   * `.provcat/`); with `dryRun`, only report. Unnameable or colliding names, links to folders
   * and special files are refused before anything is sent.
   */
  async push(localDir: string, uri: Uri | string, options: PushOptions = {}): Promise<PushResult> {
    const { pushFolder } = await import('../folders/push.js');
    return pushFolder(this, localDir, uri, options);
  }

  /**
   * Delete every object under a folder (never `.provcat/`), at most `concurrency` at a time;
   * returns how many. A bucket root is refused unless `force`; `NotFound` for an empty folder.
   */
  async deleteFolder(
    uri: Uri | string,
    options: DeleteFolderOptions = {},
  ): Promise<DeleteFolderResult> {
    const { deleteFolder } = await import('../folders/delete-folder.js');
    return deleteFolder(this, uri, options);
  }

  /**
   * The files added, removed and changed from folder `a` to `b` (a URI, or a commit ID of `a`'s
   * folder; default: `a`'s folder now). A side at `?at=commit:` is answered from the commit's
   * manifest, so two cached commits diff offline. See src/folders/diff.ts for what "changed" means.
   */
  async diff(a: Uri | string, b?: Uri | string, options: DiffOptions = {}): Promise<DiffResult> {
    const { diffFolders } = await import('../folders/diff.js');
    return diffFolders(this, a, b, options);
  }

  /**
   * Pin a URI: a file to `?at=version:ID` of its current version; a folder to its newest
   * commit, or the newest commit of a folder above it. A URI that has `?at=` is checked and
   * returned. `StoreError` on a bucket without versions or a folder with no commit.
   */
  async pin(uri: Uri | string, options: CallOptions = {}): Promise<Uri> {
    const { pinUri } = await import('../commits/pin.js');
    return pinUri(this, uri, options);
  }

  /**
   * Record the version of every file under a folder as a new commit, and return the folder
   * pinned to it (`?at=commit:ID`). A consistent snapshot (two equal listings) or a
   * `StoreError`; numbered without gaps or duplicates however many processes commit at once.
   * With `from`, the local folder is pushed first ({@link push}); a commit that then fails is
   * `NotCommitted` (the pushed files stay). See docs/commit-format.md.
   */
  async commit(uri: Uri | string, message: string, options: CommitCallOptions = {}): Promise<Uri> {
    if (options.from !== undefined) {
      const { commitFrom } = await import('../folders/commit-from.js');
      return (await commitFrom(this, options.from, uri, message, options)).uri;
    }
    const { commitFolder } = await import('../commits/commit.js');
    return commitFolder(this, uri, message, options);
  }

  /** The commits of a folder, newest first (each checked against its parent chain). */
  async log(uri: Uri | string, options: CallOptions = {}): Promise<LogEntry[]> {
    const { logFolder } = await import('../commits/log.js');
    return logFolder(this, uri, options);
  }

  /**
   * Copy a branch (a top-level folder) or a commit (its ID) to a new top-level folder, file by
   * file, server-side. Running it again completes a branch that failed halfway; an existing,
   * different branch is a `StoreError`.
   */
  async branch(uri: Uri | string, source: string, options: BranchOptions = {}): Promise<Uri> {
    const { branchFrom } = await import('../commits/branch.js');
    return branchFrom(this, uri, source, options);
  }

  // ---- helpers of the API ------------------------------------------------------------------

  /**
   * Throw `OfflineMiss` when offline: the one guard every network use passes. The base calls it
   * before any primitive it needs the store for; a driver calls {@link requireOnline} before it
   * makes or uses a client, so even a primitive called directly makes no connection offline.
   * The message suggests a pin only for a read (`stat`, `list`, `walk`, `fetch`), which a pin
   * can answer from the cache; a write (`put`, `delete`, `push`, `mb`, ...) needs the store.
   */
  online(uri: Uri, what: string): void {
    if (!this.offline) return;
    const why = READS.has(what)
      ? 'needs the store (pin it with ?at= to read it offline)'
      : `needs the store: offline mode makes no network call, and a ${what} changes the store`;
    throw new OfflineMiss(`offline: ${what} of ${uri} ${why}`, { uri: uri.toString() });
  }

  /**
   * The driver's side of the offline guard: throw `OfflineMiss` when offline, before a client
   * is made or a request sent (`what`: the operation, `uri`: what it is about).
   */
  requireOnline(what: string, uri: string): void {
    if (this.offline) {
      throw new OfflineMiss(`offline: no ${this.driver} call (${what} ${uri})`, { uri });
    }
  }

  /**
   * Every object below a folder from one flat listing, as file entries (markers left out,
   * unnameable keys refused, the bucket's `.provcat/` left out). `NotFound` for a folder with
   * nothing below it, not even a marker (as {@link list}), and for a bucket that does not exist.
   */
  async listFiles(folder: Uri, options: CallOptions = {}): Promise<Entry[]> {
    return listFiles(this, folder, options);
  }

  /** An Entry for a file from what the store said about it. */
  fileEntry(uri: Uri, info: ObjectInfo): Entry {
    return fileEntry(uri, info);
  }

  /** A progress callback for one transfer that reports to the store's and the call's callbacks. */
  progressFor(
    operation: string,
    uri: Uri,
    extra: ProgressCallback | undefined,
    totalBytes: number | undefined,
  ): ((bytes: number) => void) | undefined {
    return progressFor(this, operation, uri, extra, totalBytes);
  }

  // ---- core primitives -------------------------------------------------------------------

  /** Size and version of one object; `NotFound` when absent. */
  abstract _head(bucket: string, key: string, options?: SignalOptions): Promise<ObjectInfo>;

  /**
   * Pages of a listing under `prefix`: with `delimiter` `/`, one level (folder prefixes and
   * objects); without, every object below. Keys come in the store's (byte) order. A bucket that
   * does not exist is `NotFound` naming it — from the listing's own answer (S3 `NoSuchBucket`,
   * a 404), so an existing bucket costs no extra request; an existing empty one yields nothing.
   */
  abstract _pages(bucket: string, prefix: string, options?: PagesOptions): AsyncIterable<ListPage>;

  /** The bytes of the current object (or a range of them), as a stream. `NotFound` when absent. */
  abstract _get(bucket: string, key: string, options?: GetOptions): Promise<GetResult>;

  /** Write one object (replacing any current one); returns what was written. */
  abstract _put(
    bucket: string,
    key: string,
    source: PutSource,
    options?: PutOptions,
  ): Promise<ObjectInfo>;

  /** Delete one object (on a versioned bucket: add a delete marker); `NotFound` when absent. */
  abstract _delete(bucket: string, key: string, options?: SignalOptions): Promise<void>;

  // ---- version primitives (a driver without versions keeps these defaults) -----------------

  /** The version ID of the current object. NotSupported when the bucket keeps no versions. */
  async _versionOf(_bucket: string, _key: string, _options?: SignalOptions): Promise<string> {
    throw this.noVersions();
  }

  /**
   * Every version under `prefix`, delete markers included (`size: null`), in key order and,
   * within a key, newest first; with `startAfter` (drivers with `capabilities.startAfter`), only
   * the keys after it. NotSupported when the bucket keeps no versions.
   */
  // biome-ignore lint/correctness/useYield: the default refuses before yielding anything
  async *_history(
    _bucket: string,
    _prefix: string,
    _options?: HistoryOptions,
  ): AsyncIterable<VersionRecord> {
    throw this.noVersions();
  }

  /** `_head` of one version; `NotFound` when that version does not exist. */
  async _headVersion(
    _bucket: string,
    _key: string,
    _versionId: string,
    _options?: SignalOptions,
  ): Promise<ObjectInfo> {
    throw this.noVersions();
  }

  /** `_get` of one version; `NotFound` when that version does not exist. */
  async _getVersion(
    _bucket: string,
    _key: string,
    _versionId: string,
    _options?: GetOptions,
  ): Promise<GetResult> {
    throw this.noVersions();
  }

  /**
   * Write `body` only if no current object has the key, atomically (the store's own
   * conditional write); `Exists` otherwise. See {@link _createMode} for stores that ignore the
   * condition.
   */
  async _create(
    _bucket: string,
    _key: string,
    _body: Uint8Array,
    _options?: SignalOptions,
  ): Promise<ObjectInfo> {
    throw this.noVersions();
  }

  /** Server-side copy of the current object, or of one version, to `toKey` in the same bucket. */
  async _copy(
    _bucket: string,
    _key: string,
    _versionId: string | undefined,
    _toKey: string,
    _options?: SignalOptions,
  ): Promise<ObjectInfo> {
    throw this.noVersions();
  }

  /** How `_create` keeps "only if absent" on `bucket` (drivers may probe once per bucket). */
  async _createMode(_bucket: string): Promise<CreateMode> {
    return this.capabilities.versions ? 'atomic' : 'none';
  }

  // ---- optional primitives ----------------------------------------------------------------

  /**
   * The store's native way to upload one large object in parts, bound to `bucket` (S3 multipart,
   * GCS resumable sessions, Azure staged blocks); `undefined` (the default) when the driver has
   * none, and `put` then always makes one `_put`. See {@link PartProtocol}.
   */
  partProtocol(_bucket: string): PartProtocol | undefined {
    return undefined;
  }

  /**
   * Puts of many objects below `prefix` (`''` or ending in `/`) of `bucket` whose durability is
   * batched: each object is visible once its `put` resolves and durable once the batch's `close`
   * has resolved; before that a crash leaves each whole or absent, never torn (see
   * {@link PutBatch}). `undefined` (the default) when the driver has none: callers then `_put`
   * each object, durable on its own. Creating a batch touches nothing.
   */
  batchPuts(_bucket: string, _prefix: string): PutBatch | undefined {
    return undefined;
  }

  /**
   * `_put` on the upload engine (src/upload/put.ts), for drivers with a {@link partProtocol}:
   * one request through `single` when the source is small (at most `uploads.multipartThreshold`
   * bytes, or a stream that ends within one part), else an upload in parts with bounded memory
   * that is aborted on any failure. A driver's `_put` is then one line:
   * `return this.putInParts(bucket, key, source, options, (s, o) => this.putOne(...))`.
   */
  protected async putInParts(
    bucket: string,
    key: string,
    source: PutSource,
    options: PutOptions,
    single: (source: PutSource, options: PutOptions) => Promise<ObjectInfo>,
  ): Promise<ObjectInfo> {
    // Every object written gets a type by the one rule (src/core/content-type.ts), in one request or in parts.
    options = { ...options, contentType: await contentTypeFor(key, options.contentType) };
    const protocol = this.partProtocol(bucket);
    if (protocol === undefined) return single(source, options);
    const [{ putObject }, { PartBufferPool }] = await Promise.all([
      import('../upload/put.js'),
      import('../upload/buffer-pool.js'),
    ]);
    this.partPool ??= new PartBufferPool();
    return putObject(
      {
        protocol,
        putOne: single,
        key,
        uri: `${this.scheme}://${bucket}/${key.split('/').map(encodeSegment).join('/')}`,
        settings: this.uploads,
        pool: this.partPool,
        debug: (m) => this.logger(m),
      },
      source,
      options,
    );
  }

  /**
   * Delete one object only if it is still `version` (the store's conditional delete: an object
   * rewritten since is kept, {@link PreconditionFailed}); `NotFound` when there is none.
   * Garbage collection deletes with it. Default: {@link NotSupported}.
   */
  async _deleteIf(bucket: string, key: string, _options: DeleteIfOptions): Promise<void> {
    throw new NotSupported(
      `the ${this.driver} driver has no conditional delete (${bucket}/${key})`,
    );
  }

  /**
   * A time-limited GET URL of one object, signed with the store's credentials (managed-object
   * presigned reads). Default: {@link NotSupported}.
   */
  async _presign(bucket: string, key: string, _options: PresignPrimitiveOptions): Promise<string> {
    throw new NotSupported(`the ${this.driver} driver cannot presign URLs (${bucket}/${key})`);
  }

  /**
   * Create a bucket (idempotent where the store allows), with versioning when asked. Drivers
   * that can make buckets override this; the default refuses.
   */
  async makeBucket(bucket: string, _options: { versioning?: boolean } = {}): Promise<void> {
    throw new NotSupported(`the ${this.driver} driver cannot create buckets (${bucket})`);
  }

  /** The error (a StoreError) a driver without versions raises from the version primitives. */
  protected noVersions(): NotSupported {
    return new NotSupported(`the ${this.driver} driver keeps no versions`);
  }
}
