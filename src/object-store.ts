/**
 * {@link ObjectStore}: the base of every object-store driver.
 *
 * A driver subclass gives the twelve primitives below (six core, six for versions); this class
 * builds everything else on them, once for all drivers: stat, list, walk, fetch with the cache,
 * put, delete, offline mode, and pin/commit/log/branch.
 *
 * Primitives are public (named with a leading `_`) so that wrapping drivers and the conformance
 * suite can reach them; applications call the methods without `_`.
 *
 * @module
 */
import type {
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
import { StoreError, UriError } from './errors.js';
import { Store } from './store.js';
import type { Uri } from './uri.js';

/** Where a URI points in a store. */
export interface Location {
  bucket: string;
  /** The key; empty for the bucket. No trailing `/`. */
  key: string;
}

/** The base class of object-store drivers. See the module comment. */
export abstract class ObjectStore extends Store {
  /** The URI scheme this driver serves (`s3`, `local`, ...). */
  abstract readonly scheme: string;
  /** A short driver name for messages and debug logs. */
  abstract readonly driver: string;
  /** What the driver can do. */
  abstract readonly capabilities: Capabilities;

  /** The bucket and key a URI names. Throws {@link UriError} for another scheme. */
  locate(uri: Uri): Location {
    if (uri.scheme !== this.scheme) {
      throw new UriError(`${this.driver} serves ${this.scheme}:// URIs, not ${uri.scheme}://`, {
        uri: uri.toString(),
      });
    }
    return { bucket: uri.bucket, key: uri.key };
  }

  // ---- core primitives -------------------------------------------------------------------

  /** Size and version of one object; `NotFound` when absent. */
  abstract _head(bucket: string, key: string, options?: SignalOptions): Promise<ObjectInfo>;

  /**
   * Pages of a listing under `prefix`: with `delimiter` `/`, one level (folder prefixes and
   * objects); without, every object below. Keys come in the store's (byte) order. A bucket that
   * does not exist yields nothing.
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

  /** The version ID of the current object. StoreError when the bucket keeps no versions. */
  async _versionOf(_bucket: string, _key: string, _options?: SignalOptions): Promise<string> {
    throw this.noVersions();
  }

  /**
   * Every version under `prefix`, delete markers included (`size: null`), in key order and,
   * within a key, newest first. StoreError when the bucket keeps no versions.
   */
  // biome-ignore lint/correctness/useYield: the default refuses before yielding anything
  async *_history(
    _bucket: string,
    _prefix: string,
    _options?: SignalOptions,
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

  /** The StoreError a driver without versions raises from the version primitives. */
  protected noVersions(): StoreError {
    return new StoreError(`the ${this.driver} driver keeps no versions`);
  }
}
