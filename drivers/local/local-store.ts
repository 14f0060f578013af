/**
 * {@link LocalStore}: the embedded object store behind `local://bucket/key`.
 *
 * Buckets are folders under a root directory; every bucket keeps versions (every write adds a
 * version, a delete adds a delete marker), so pin, commit and branch work on a fresh machine with
 * no server. The class is the store's primitives, each a few calls into the files that do one
 * job each:
 *
 * - `./layout.ts`: the on-disk layout (how keys, folders and versions become file names) and
 *   the publish protocol that keeps each folder's listing index true;
 * - `./key-paths.ts`: where a bucket and a key live, and the checks that keep every path
 *   inside the root;
 * - `./versions.ts`: one key's versions, read without a lock (versions are immutable);
 * - `./write-temp.ts` then `./publish.ts`: a write, in two halves — the bytes into a fsynced
 *   temp file with no lock held (large files copied by the kernel, `./file-copy.ts`), then,
 *   under the key's lock, the next version ID, the `rename` that makes it visible and the index
 *   entry; the lock also makes `_create` atomic (exactly one of racing creators wins);
 * - `./temp-sweep.ts`: removing the temps of killed writers;
 * - `./read-version.ts`: reading a version, whole (as its file) or a byte range, as S3 does;
 * - `./listing.ts`: `_pages` and `_history`, in UTF-8 byte order;
 * - `./batch.ts` and `./batch-marker.ts`: `batchPuts`, many small puts made durable by one sync
 *   pass under a folder-level marker, and the recovery every instance runs once, before its
 *   first read or write, under the markers of dead batches.
 *
 * All of it holds across any number of processes sharing the root. The store keeps no content
 * type. Keys are limited to 1,024 UTF-8 bytes, like S3.
 *
 * @module
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type {
  Capabilities,
  GetOptions,
  GetResult,
  ListPage,
  ObjectInfo,
  PagesOptions,
  PutBatch,
  PutOptions,
  PutSource,
  SignalOptions,
  VersionRecord,
} from '../../src/contract/primitives.js';
import { tempName } from '../../src/core/fs-atomic.js';
import { defaultLocalRoot } from '../../src/core/own-folders.js';
import { ObjectStore } from '../../src/store/object-store.js';
import type { StoreOptions } from '../../src/store/store.js';
import { LocalPutBatch } from './batch.js';
import { recoverBatches } from './batch-marker.js';
import { debug, fsError, type Trace } from './fs-errors.js';
import { bucketDir, keyPath, makeKeyDir } from './key-paths.js';
import { listHistory, listPages } from './listing.js';
import { publishMarker, publishTemp } from './publish.js';
import { openVersion } from './read-version.js';
import { currentVersion, infoOf, listedVersion, versionById } from './versions.js';
import { linkOrCopy, writeTemp } from './write-temp.js';

/** Options of {@link LocalStore}. */
export interface LocalStoreOptions extends StoreOptions {
  /** The directory holding the buckets. Default: {@link defaultLocalRoot}. */
  root?: string | undefined;
}

export { defaultLocalRoot };

/**
 * The embedded, versioned object store serving `local://` (see the module comment).
 *
 * Guarantees: writes are atomic and durable (fsync of the file and its directory before a call
 * returns; a {@link batchPuts} batch's once its `close` resolves, each whole or absent before);
 * every write keeps the earlier versions; version IDs of a key grow in the order its
 * writes completed, across processes; `_create` has exactly one winner among concurrent callers;
 * listings are in UTF-8 byte order, like S3. Nothing is ever written outside `root`.
 */
export class LocalStore extends ObjectStore {
  readonly scheme = 'local';
  readonly driver = 'local';
  readonly capabilities: Capabilities = { versions: true, ranges: true, versionsAlways: true };
  /** The absolute directory holding the buckets. */
  readonly root: string;

  /** A store over `options.root` (default {@link defaultLocalRoot}). Touches no file. */
  constructor(options: LocalStoreOptions = {}) {
    super(options);
    this.root = path.resolve(options.root ?? defaultLocalRoot());
  }

  /** The buckets' folder, which no `fetch --to` or push may overlap (src/core/own-folders.ts). */
  override get localRoot(): string {
    return this.root;
  }

  /**
   * Create a bucket (and the root) if it does not exist yet. Idempotent. Every local bucket keeps
   * versions, so `versioning` is accepted and ignored.
   */
  override async makeBucket(
    bucket: string,
    _options: { versioning?: boolean } = {},
  ): Promise<void> {
    const dir = bucketDir(this.root, bucket);
    try {
      await fs.mkdir(dir, { recursive: true });
    } catch (error) {
      throw fsError(error, `cannot create bucket local://${bucket}`, `local://${bucket}/`);
    }
  }

  // ---- core primitives -------------------------------------------------------------------

  override async _head(bucket: string, key: string, options?: SignalOptions): Promise<ObjectInfo> {
    options?.signal?.throwIfAborted();
    await this.#ready();
    const where = keyPath(this.root, bucket, key, 'read');
    return infoOf(key, await currentVersion(where));
  }

  override async *_pages(
    bucket: string,
    prefix: string,
    options: PagesOptions = {},
  ): AsyncIterable<ListPage> {
    await this.#ready();
    yield* listPages(this.root, bucket, prefix, options, this.#trace);
  }

  override async _get(bucket: string, key: string, options: GetOptions = {}): Promise<GetResult> {
    options.signal?.throwIfAborted();
    await this.#ready();
    const where = keyPath(this.root, bucket, key, 'read');
    const listed = options.listed && listedVersion(where, options.listed);
    return openVersion(key, where, listed ?? (await currentVersion(where)), options);
  }

  override async _put(
    bucket: string,
    key: string,
    source: PutSource,
    options: PutOptions = {},
  ): Promise<ObjectInfo> {
    options.signal?.throwIfAborted();
    await this.#ready();
    const where = keyPath(this.root, bucket, key, 'write');
    await makeKeyDir(where);
    const temp = await writeTemp(where, source, options, this.#trace);
    const published = await publishTemp(where, temp, options.signal, this.#trace);
    this.#trace(`put ${where.uri} ${published.versionId} (${temp.size} bytes)`);
    return infoOf(key, published);
  }

  override async _delete(bucket: string, key: string, options?: SignalOptions): Promise<void> {
    options?.signal?.throwIfAborted();
    await this.#ready();
    const where = keyPath(this.root, bucket, key, 'read');
    await currentVersion(where); // NotFound before taking a lock in a directory that may not exist
    const marker = await publishMarker(where, options?.signal, this.#trace);
    this.#trace(`delete ${where.uri}: marker ${marker.versionId}`);
  }

  // ---- version primitives --------------------------------------------------------------

  override async _versionOf(bucket: string, key: string, options?: SignalOptions): Promise<string> {
    return (await this._head(bucket, key, options)).version;
  }

  override async *_history(
    bucket: string,
    prefix: string,
    options: SignalOptions = {},
  ): AsyncIterable<VersionRecord> {
    await this.#ready();
    yield* listHistory(this.root, bucket, prefix, options, this.#trace);
  }

  override async _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options?: SignalOptions,
  ): Promise<ObjectInfo> {
    options?.signal?.throwIfAborted();
    await this.#ready();
    const where = keyPath(this.root, bucket, key, 'read');
    return infoOf(key, await versionById(where, versionId));
  }

  override async _getVersion(
    bucket: string,
    key: string,
    versionId: string,
    options: GetOptions = {},
  ): Promise<GetResult> {
    options.signal?.throwIfAborted();
    await this.#ready();
    const where = keyPath(this.root, bucket, key, 'read');
    return openVersion(key, where, await versionById(where, versionId), options);
  }

  override async _create(
    bucket: string,
    key: string,
    body: Uint8Array,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    options.signal?.throwIfAborted();
    await this.#ready();
    const where = keyPath(this.root, bucket, key, 'write');
    await makeKeyDir(where);
    const temp = await writeTemp(where, body, { signal: options.signal }, this.#trace);
    const published = await publishTemp(where, temp, options.signal, this.#trace, true);
    this.#trace(`create ${where.uri} ${published.versionId}`);
    return infoOf(key, published);
  }

  override async _copy(
    bucket: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    options.signal?.throwIfAborted();
    await this.#ready();
    const from = keyPath(this.root, bucket, key, 'read');
    const source =
      versionId === undefined ? await currentVersion(from) : await versionById(from, versionId);
    const to = keyPath(this.root, bucket, toKey, 'write');
    await makeKeyDir(to);
    const sourcePath = path.join(from.dir, source.name);
    const temp = path.join(to.dir, tempName());
    await linkOrCopy(sourcePath, temp, from.uri, to.uri, this.#trace);
    const published = await publishTemp(
      to,
      { path: temp, size: source.size as number, md5: source.md5 },
      options.signal,
      this.#trace,
    );
    this.#trace(`copy ${from.uri}@${source.versionId} -> ${to.uri} ${published.versionId}`);
    return infoOf(toKey, published);
  }

  // ---- optional primitives ---------------------------------------------------------------

  /**
   * A batch of puts below `prefix` whose durability is batched (`./batch.ts`): each object
   * visible once its put resolves, all durable once `close` resolves, and before that each
   * whole or absent after a crash or a power loss (the argument is in `./layout.ts`).
   */
  override batchPuts(bucket: string, prefix: string): PutBatch {
    return new LocalPutBatch(
      {
        root: this.root,
        ready: () => this.#ready(),
        put: (key, source, options) => this._put(bucket, key, source, options),
        trace: this.#trace,
      },
      bucket,
      prefix,
    );
  }

  #recovery: Promise<void> | undefined;

  /**
   * Resolves once this instance recovered the dead batches of its root (`./batch-marker.ts`):
   * run once, before the instance's first read or write. A failure is retried by the next call.
   */
  #ready(): Promise<void> {
    this.#recovery ??= recoverBatches(this.root, this.#trace).catch((error: unknown) => {
      this.#recovery = undefined;
      throw error;
    });
    return this.#recovery;
  }

  /** Debug log: `NODE_DEBUG=provcat:local`, and the store's logger if one was given. */
  readonly #trace: Trace = (message) => {
    debug('%s', message);
    this.logger(`local: ${message}`);
  };
}
