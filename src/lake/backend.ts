/**
 * {@link StageBackend}: what the one managed stage (managed-stage.ts) needs of storage — the store
 * primitives for one bucket (or one local root), plus the driver's part protocol. Keys are full
 * keys in that bucket or root.
 *
 * Every object-store driver gets its backend from {@link storeBackend}, a direct translation of
 * its `ObjectStore` primitives; the local stage's plain files have their own (drivers/local). So
 * the stage never knows which store it is on: the rules (containment, integrity, resumes, GC)
 * are written once.
 *
 * @module
 */
import type {
  CreateMode,
  GetResult,
  ObjectInfo,
  PartProtocol,
  SignalOptions,
} from '../contract/primitives.js';
import type { ClosableStore } from '../contract/store-context.js';
import { NotFound, NotSupported } from '../core/errors.js';
import { oldestVersions } from '../logs/create-only-log.js';

/** The storage behind one stage (see the module comment). */
export interface StageBackend {
  /** Size and version of one object; `NotFound` when absent. */
  head(key: string, options?: SignalOptions): Promise<ObjectInfo>;
  /**
   * The object's bytes (or `[start, end)` of them, one ranged request whose `contentRange` and
   * `contentLength` say what the store sent); `NotFound` when absent.
   */
  get(
    key: string,
    options?: SignalOptions & { range?: { start: number; end: number } | undefined },
  ): Promise<GetResult>;
  /**
   * The version of `key` that "create only if absent" made the winner: in the
   * `oldest-version-wins` create mode the key's oldest version (a losing writer's version is a
   * newer one), in every other mode the only one. `NotFound` when absent. Reference-set logs
   * are read with it, as commit logs are (docs/commit-format.md#create-modes).
   */
  getOldest(key: string, options?: SignalOptions): Promise<GetResult>;
  /** Every object below `prefix` (a flat listing, every page), in key order. */
  list(prefix: string, options?: SignalOptions): AsyncIterable<ObjectInfo>;
  /** Write one small object (an empty upload, a reference-set entry) in one request. */
  put(
    key: string,
    bytes: Uint8Array,
    options?: SignalOptions & { contentType?: string | undefined },
  ): Promise<ObjectInfo>;
  /** Write `bytes` only if no object has the key (`Exists` otherwise), as `createMode` says. */
  create(key: string, bytes: Uint8Array, options?: SignalOptions): Promise<ObjectInfo>;
  /** How {@link create} keeps "only if absent" here. */
  createMode(): Promise<CreateMode>;
  /** Delete one object; `NotFound` when absent. */
  delete(key: string, options?: SignalOptions): Promise<void>;
  /**
   * Delete one object only if it is still `version` (`PreconditionFailed` otherwise, `NotFound`
   * when absent); `NotSupported` on a store without a conditional delete.
   */
  deleteIf(key: string, version: string, options?: SignalOptions): Promise<void>;
  /** The upload part protocol (`NotSupported` thrown at use when the store has none). */
  readonly parts: PartProtocol;
  /** A GET URL of one object valid for `expiresIn` seconds; `NotSupported` where there is none. */
  presign(key: string, expiresIn: number): Promise<string>;
  /** Release sockets and clients. */
  close(): Promise<void>;
}

/** A protocol that refuses every call: for stores without uploads in parts. */
function noParts(store: ClosableStore): PartProtocol {
  const refuse = async (): Promise<never> => {
    throw new NotSupported(`the ${store.driver} driver cannot upload in parts`);
  };
  return {
    name: 'upload',
    maxParts: 1,
    minPartSize: 1,
    maxPartSize: Number.MAX_SAFE_INTEGER,
    leftover: 'it is removed by hand (this store uploads no parts)',
    resumable: false,
    create: refuse,
    putPart: refuse,
    listParts: refuse,
    complete: refuse,
    abort: refuse,
    // biome-ignore lint/correctness/useYield: refuses before yielding anything
    async *listUploads() {
      await refuse();
    },
  };
}

/** The backend of a stage in `bucket` of an object store: its primitives, one to one. */
export function storeBackend(store: ClosableStore, bucket: string): StageBackend {
  return {
    head: (key, options) => store._head(bucket, key, options),
    get: (key, options = {}) =>
      store._get(bucket, key, { range: options.range, signal: options.signal }),
    async getOldest(key, options = {}) {
      if ((await store._createMode(bucket)) !== 'oldest-version-wins') {
        return store._get(bucket, key, { signal: options.signal });
      }
      const [oldest] = await oldestVersions(
        store._history(bucket, key, { signal: options.signal }),
        key,
      );
      if (oldest === undefined) {
        throw new NotFound(`${store.scheme}://${bucket}/${key} has no version`);
      }
      return store._getVersion(bucket, key, oldest.versionId, { signal: options.signal });
    },
    async *list(prefix, options = {}) {
      for await (const page of store._pages(bucket, prefix, { signal: options.signal })) {
        yield* page.objects;
      }
    },
    put: (key, bytes, options = {}) =>
      store._put(bucket, key, bytes, {
        size: bytes.byteLength,
        contentType: options.contentType,
        signal: options.signal,
      }),
    create: (key, bytes, options) => store._create(bucket, key, bytes, options),
    createMode: () => store._createMode(bucket),
    delete: (key, options) => store._delete(bucket, key, options),
    deleteIf: (key, version, options = {}) =>
      store._deleteIf(bucket, key, { version, signal: options.signal }),
    parts: store.partProtocol(bucket) ?? noParts(store),
    presign: (key, expiresIn) => store._presign(bucket, key, { expiresIn }),
    close: () => store.close(),
  };
}
