/**
 * An in-memory object store for tests: a complete, faithful driver of all twelve primitives,
 * versioned by default, with the knobs tests need.
 *
 * Faithful means it behaves like S3 where tests can tell: keys list in UTF-8 byte order; a
 * versioned bucket keeps every version and turns deletes into delete markers; `_history` lists
 * versions newest first with delete markers (`size: null`); `_create` is atomic (check and write
 * happen with no await between them); `_copy` keeps the ETag (an MD5 of the bytes, quoted, as
 * S3 gives for single-part objects); an unversioned bucket refuses the version primitives with
 * a StoreError. Listings are paged and every page is computed from the state at that moment, so
 * writes that land while a listing runs show up in its later pages, as on a real store.
 *
 * Knobs: share a {@link MemoryBackend} between stores (several "processes" on one bucket), turn
 * versioning off, make `_create` ignore its condition (`ignoreCreateCondition`) and choose what
 * `_createMode` reports (to simulate stores such as Ceph RGW on versioned buckets), add latency
 * so concurrent calls interleave, count calls per primitive ({@link MemoryStore.calls}), and
 * fail any primitive called while the store is offline (so "no store call" is checkable).
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type {
  Capabilities,
  CreateMode,
  GetOptions,
  GetResult,
  HistoryOptions,
  ListPage,
  ObjectInfo,
  PagesOptions,
  PutOptions,
  PutSource,
  SignalOptions,
  VersionRecord,
} from '../../src/contract/primitives.js';
import { Exists, NotFound, StoreError } from '../../src/core/errors.js';
import { ObjectStore } from '../../src/store/object-store.js';
import type { StoreOptions } from '../../src/store/store.js';

/** One stored version of a key; `data === null` is a delete marker. */
export interface MemoryVersion {
  versionId: string;
  data: Buffer | null;
  etag: string;
  lastModified: Date;
}

/** One bucket: keys to their versions, oldest first. */
export interface MemoryBucket {
  versioning: boolean;
  keys: Map<string, MemoryVersion[]>;
}

/** The shared state: buckets. Stores made over one backend see the same objects. */
export class MemoryBackend {
  readonly buckets = new Map<string, MemoryBucket>();
  /** Versioning of buckets created implicitly (on first use). */
  readonly versioning: boolean;
  private seq = 0;

  constructor(options: { versioning?: boolean } = {}) {
    this.versioning = options.versioning ?? true;
  }

  /** The bucket, created (empty, with the default versioning) on first use. */
  bucket(name: string): MemoryBucket {
    let b = this.buckets.get(name);
    if (!b) {
      b = { versioning: this.versioning, keys: new Map() };
      this.buckets.set(name, b);
    }
    return b;
  }

  /** A new version ID: unique and opaque (not ordered, like S3's). */
  nextVersionId(): string {
    this.seq += 1;
    return `${randomBytes(6).toString('hex')}.${this.seq.toString(36)}`;
  }
}

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions extends StoreOptions {
  /** Share state with other stores. Default: a new backend. */
  backend?: MemoryBackend | undefined;
  /** Versioning of a new backend's buckets (ignored with `backend`). Default true. */
  versioning?: boolean | undefined;
  /** The URI scheme served. Default `mem`. */
  scheme?: string | undefined;
  /** What `_createMode` reports. Default: `atomic` on versioned buckets, else `none`. */
  createMode?: CreateMode | undefined;
  /** `_create` behaves like `_put` (a store that ignores If-None-Match). Default false. */
  ignoreCreateCondition?: boolean | undefined;
  /** Delay of every primitive call (and listing page) in ms, or a function giving it. Default 0 (one macrotask). */
  latency?: number | (() => number) | undefined;
  /** Objects per listing page (`_pages` without a smaller limit; `_history`). Default 1000. */
  pageSize?: number | undefined;
}

function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** A byte stream (not object mode, like a socket or a file) of `data`. */
function byteStream(data: Buffer): Readable {
  let sent = false;
  return new Readable({
    read() {
      if (!sent && data.length > 0) this.push(data);
      sent = true;
      this.push(null);
    },
  });
}

function md5Etag(data: Buffer): string {
  return `"${createHash('md5').update(data).digest('hex')}"`;
}

async function readSource(source: PutSource): Promise<Buffer> {
  if (typeof source === 'string') return readFile(source);
  if (source instanceof Uint8Array) return Buffer.from(source);
  const chunks: Buffer[] = [];
  for await (const chunk of source) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** The in-memory driver. See the module comment. */
export class MemoryStore extends ObjectStore {
  readonly scheme: string;
  readonly driver = 'memory';
  readonly capabilities: Capabilities = { versions: true, ranges: true, startAfter: true };
  readonly backend: MemoryBackend;
  /** Calls per primitive name (`_put`, `_history`, ...) since construction or {@link resetCalls}. */
  calls: Record<string, number> = {};
  private readonly options: MemoryStoreOptions;

  constructor(options: MemoryStoreOptions = {}) {
    super(options);
    this.options = options;
    this.scheme = options.scheme ?? 'mem';
    this.backend = options.backend ?? new MemoryBackend({ versioning: options.versioning });
  }

  /** Zero the call counters. */
  resetCalls(): void {
    this.calls = {};
  }

  /** Total primitive calls counted. */
  get totalCalls(): number {
    return Object.values(this.calls).reduce((a, b) => a + b, 0);
  }

  /** Count a call, refuse it offline, wait the latency, honour the signal. */
  private async enter(name: string, signal?: AbortSignal): Promise<void> {
    this.calls[name] = (this.calls[name] ?? 0) + 1;
    if (this.offline) {
      throw new StoreError(`memory store: ${name} called in offline mode (a network call)`);
    }
    await this.delay();
    signal?.throwIfAborted();
  }

  private async delay(): Promise<void> {
    const l = this.options.latency;
    const ms = typeof l === 'function' ? l() : (l ?? 0);
    await new Promise((resolve) => (ms > 0 ? setTimeout(resolve, ms) : setImmediate(resolve)));
  }

  private bucketOf(bucket: string): MemoryBucket {
    return this.backend.bucket(bucket);
  }

  private versioned(bucket: string): MemoryBucket {
    const b = this.bucketOf(bucket);
    if (!b.versioning) throw new StoreError(`memory bucket ${bucket} keeps no versions`);
    return b;
  }

  private current(bucket: string, key: string): MemoryVersion | undefined {
    const versions = this.bucketOf(bucket).keys.get(key);
    const v = versions?.[versions.length - 1];
    return v && v.data !== null ? v : undefined;
  }

  private info(bucket: string, key: string, v: MemoryVersion): ObjectInfo {
    const versioning = this.bucketOf(bucket).versioning;
    return {
      key,
      size: (v.data as Buffer).length,
      version: versioning ? v.versionId : v.etag,
      versionId: versioning ? v.versionId : undefined,
      etag: v.etag,
      lastModified: v.lastModified,
    };
  }

  private notFound(bucket: string, key: string, versionId?: string): NotFound {
    const uri = `${this.scheme}://${bucket}/${key}`;
    return new NotFound(versionId ? `no version ${versionId} of ${uri}` : `no object ${uri}`, {
      uri,
    });
  }

  /** Write a version synchronously (the atomic step of every write). */
  private write(bucket: string, key: string, data: Buffer | null, etag?: string): MemoryVersion {
    const b = this.bucketOf(bucket);
    const v: MemoryVersion = {
      versionId: b.versioning ? this.backend.nextVersionId() : 'null',
      data,
      etag: etag ?? (data ? md5Etag(data) : ''),
      lastModified: new Date(),
    };
    if (b.versioning) {
      const versions = b.keys.get(key) ?? [];
      versions.push(v);
      b.keys.set(key, versions);
    } else if (data === null) {
      b.keys.delete(key);
    } else {
      b.keys.set(key, [v]);
    }
    return v;
  }

  // ---- core ------------------------------------------------------------------------------

  async _head(bucket: string, key: string, options?: SignalOptions): Promise<ObjectInfo> {
    await this.enter('_head', options?.signal);
    const v = this.current(bucket, key);
    if (!v) throw this.notFound(bucket, key);
    return this.info(bucket, key, v);
  }

  async *_pages(bucket: string, prefix: string, options?: PagesOptions): AsyncIterable<ListPage> {
    await this.enter('_pages', options?.signal);
    if (!this.backend.buckets.has(bucket)) {
      // As a real store's listing answers for a bucket no one made (or wrote to).
      throw new NotFound(`no such bucket: ${this.scheme}://${bucket}/`, {
        uri: `${this.scheme}://${bucket}/`,
      });
    }
    const limit = Math.min(options?.limit ?? Number.POSITIVE_INFINITY, this.pageSize);
    const delimiter = options?.delimiter;
    let after: string | undefined;
    for (;;) {
      // Each page reads the state as it is now, after the last entry of the previous page.
      const entries: Array<{ prefix: string } | { object: ObjectInfo }> = [];
      const seen = new Set<string>();
      const keys = [...(this.backend.buckets.get(bucket)?.keys.keys() ?? [])]
        .filter((k) => k.startsWith(prefix))
        .sort(compareBytes);
      for (const key of keys) {
        const v = this.current(bucket, key);
        if (!v) continue;
        let name = key;
        let isPrefix = false;
        if (delimiter) {
          const i = key.indexOf(delimiter, prefix.length);
          if (i >= 0) {
            name = key.slice(0, i + delimiter.length);
            isPrefix = true;
          }
        }
        if (after !== undefined && compareBytes(name, after) <= 0) continue;
        if (seen.has(name)) continue;
        seen.add(name);
        entries.push(isPrefix ? { prefix: name } : { object: this.info(bucket, key, v) });
        if (entries.length >= limit) break;
      }
      if (entries.length === 0) return;
      const page: ListPage = { prefixes: [], objects: [] };
      for (const e of entries) {
        if ('prefix' in e) page.prefixes.push(e.prefix);
        else page.objects.push(e.object);
      }
      const last = entries[entries.length - 1] as { prefix: string } | { object: ObjectInfo };
      after = 'prefix' in last ? last.prefix : last.object.key;
      yield page;
      if (entries.length < limit) return;
      await this.delay();
      options?.signal?.throwIfAborted();
    }
  }

  private get pageSize(): number {
    return this.options.pageSize ?? 1000;
  }

  private body(data: Buffer, key: string, info: ObjectInfo, options?: GetOptions): GetResult {
    const range = options?.range;
    if (!range) {
      return { body: byteStream(data), info, contentLength: data.length };
    }
    const { start, end } = range;
    if (!(Number.isInteger(start) && Number.isInteger(end) && start >= 0 && start < end)) {
      throw new StoreError(`bad range [${start}, ${end}) of ${key}`, { status: 416 });
    }
    if (start >= data.length) {
      throw new StoreError(`range [${start}, ${end}) outside ${key} (${data.length} bytes)`, {
        status: 416,
      });
    }
    const stop = Math.min(end, data.length);
    return {
      body: byteStream(data.subarray(start, stop)),
      info,
      contentLength: stop - start,
      contentRange: `bytes ${start}-${stop - 1}/${data.length}`,
    };
  }

  async _get(bucket: string, key: string, options?: GetOptions): Promise<GetResult> {
    await this.enter('_get', options?.signal);
    const v = this.current(bucket, key);
    if (!v) throw this.notFound(bucket, key);
    return this.body(v.data as Buffer, key, this.info(bucket, key, v), options);
  }

  /** Make an empty bucket (with the backend's versioning unless told); nothing if it exists. */
  override async makeBucket(bucket: string, options: { versioning?: boolean } = {}) {
    const b = this.backend.bucket(bucket);
    if (options.versioning !== undefined && b.keys.size === 0) b.versioning = options.versioning;
  }

  async _put(
    bucket: string,
    key: string,
    source: PutSource,
    options?: PutOptions,
  ): Promise<ObjectInfo> {
    await this.enter('_put', options?.signal);
    const data = await readSource(source);
    options?.signal?.throwIfAborted();
    options?.onProgress?.(data.length);
    return this.info(bucket, key, this.write(bucket, key, data));
  }

  async _delete(bucket: string, key: string, options?: SignalOptions): Promise<void> {
    await this.enter('_delete', options?.signal);
    if (!this.current(bucket, key)) throw this.notFound(bucket, key);
    this.write(bucket, key, null);
  }

  // ---- versions --------------------------------------------------------------------------

  override async _versionOf(bucket: string, key: string, options?: SignalOptions) {
    await this.enter('_versionOf', options?.signal);
    this.versioned(bucket);
    const v = this.current(bucket, key);
    if (!v) throw this.notFound(bucket, key);
    return v.versionId;
  }

  override async *_history(
    bucket: string,
    prefix: string,
    options?: HistoryOptions,
  ): AsyncIterable<VersionRecord> {
    await this.enter('_history', options?.signal);
    const b = this.versioned(bucket);
    let after: string | undefined = options?.startAfter;
    for (;;) {
      const keys = [...b.keys.keys()]
        .filter((k) => k.startsWith(prefix) && (after === undefined || compareBytes(k, after) > 0))
        .sort(compareBytes);
      if (keys.length === 0) return;
      let count = 0;
      const page: VersionRecord[] = [];
      for (const key of keys) {
        const versions = b.keys.get(key) ?? [];
        for (let i = versions.length - 1; i >= 0; i--) {
          const v = versions[i] as MemoryVersion;
          page.push({
            key,
            versionId: v.versionId,
            size: v.data === null ? null : v.data.length,
            current: i === versions.length - 1,
            etag: v.data === null ? undefined : v.etag,
            lastModified: v.lastModified,
          });
        }
        after = key;
        count += versions.length;
        if (count >= this.pageSize) break;
      }
      yield* page;
      if (after === keys[keys.length - 1]) return;
      await this.delay();
      options?.signal?.throwIfAborted();
    }
  }

  private version(bucket: string, key: string, versionId: string): MemoryVersion {
    const v = this.versioned(bucket)
      .keys.get(key)
      ?.find((x) => x.versionId === versionId);
    if (!v || v.data === null) throw this.notFound(bucket, key, versionId);
    return v;
  }

  override async _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options?: SignalOptions,
  ): Promise<ObjectInfo> {
    await this.enter('_headVersion', options?.signal);
    return this.info(bucket, key, this.version(bucket, key, versionId));
  }

  override async _getVersion(
    bucket: string,
    key: string,
    versionId: string,
    options?: GetOptions,
  ): Promise<GetResult> {
    await this.enter('_getVersion', options?.signal);
    const v = this.version(bucket, key, versionId);
    return this.body(v.data as Buffer, key, this.info(bucket, key, v), options);
  }

  override async _create(
    bucket: string,
    key: string,
    body: Uint8Array,
    options?: SignalOptions,
  ): Promise<ObjectInfo> {
    await this.enter('_create', options?.signal);
    // No await from here to the write: the check and the write are one atomic step.
    if (!this.options.ignoreCreateCondition && this.current(bucket, key)) {
      throw new Exists(`${this.scheme}://${bucket}/${key} exists`, {
        uri: `${this.scheme}://${bucket}/${key}`,
      });
    }
    return this.info(bucket, key, this.write(bucket, key, Buffer.from(body)));
  }

  override async _copy(
    bucket: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options?: SignalOptions,
  ): Promise<ObjectInfo> {
    await this.enter('_copy', options?.signal);
    const v =
      versionId === undefined ? this.current(bucket, key) : this.version(bucket, key, versionId);
    if (!v) throw this.notFound(bucket, key);
    return this.info(bucket, toKey, this.write(bucket, toKey, v.data, v.etag));
  }

  override async _createMode(bucket: string): Promise<CreateMode> {
    this.calls._createMode = (this.calls._createMode ?? 0) + 1;
    return this.options.createMode ?? (this.bucketOf(bucket).versioning ? 'atomic' : 'none');
  }
}
