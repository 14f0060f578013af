/**
 * {@link GcsStore}: the `gs://bucket/key` driver over `@google-cloud/storage` 7.22 — the twelve
 * primitives as JSON API calls; everything else is the {@link ObjectStore} base and the core
 * rules it calls (version histories, exact sizes, per-bucket answers).
 *
 * - Version and version ID are the generation, the ETag the MD5 (json-api.ts).
 * - The SDK loads on first use (sdk.ts). Media GETs are always the driver's own, on the shared
 *   HTTP/1.1 client (src/net/lean-get.ts): a `createReadStream()` of SDK 7.22 whose connection
 *   drops mid-body never ends nor fails. Metadata reads and listings are the driver's own too
 *   (the lean path: one GET, no SDK load, a fraction of the SDK's CPU, docs/performance.md),
 *   falling back to the SDK on any answer other than a 200 or a 404.
 * - The client retries with `IdempotencyStrategy.RetryAlways`: under the default strategy one
 *   upload or delete without a precondition turns the client's retries off for good
 *   (`retryOptions.autoRetry = false`, SDK 7.22), and a whole-object put is safe to repeat.
 * - Versions need a bucket with object versioning (asked once per bucket), since elsewhere an
 *   overwritten generation is gone and a pin could not survive. A key with no live generation
 *   is deleted: `_history` gives it a delete marker (src/version-history.ts).
 * - `_create` is `ifGenerationMatch=0`, checked atomically by GCS (`_createMode` `atomic`).
 * - Large puts and managed uploads are resumable sessions (resumable.ts).
 *
 * @module
 */
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { debuglog } from 'node:util';
import type { Storage } from '@google-cloud/storage';
import { BucketMemo, requireVersioning, type Versioning } from '../../src/bucket-state.js';
import { raceAbort } from '../../src/concurrency.js';
import type {
  Capabilities,
  DeleteIfOptions,
  GetOptions,
  GetResult,
  ListPage,
  ObjectInfo,
  PagesOptions,
  PresignPrimitiveOptions,
  PutOptions,
  PutSource,
  SignalOptions,
  VersionRecord,
} from '../../src/driver.js';
import { isAbort, NotFound, StoreError } from '../../src/errors.js';
import { checkByteRange, exactBytes } from '../../src/exact-bytes.js';
import { Http1Pool, isFallback } from '../../src/net/http1-download.js';
import { leanGet, leanGetResult } from '../../src/net/lean-get.js';
import { ObjectStore } from '../../src/object-store.js';
import { isRetryable, RETRY_ATTEMPTS, withRetries } from '../../src/retry.js';
import { historyOf } from '../../src/version-history.js';
import { type GcsConfig, type GcsStoreOptions, resolveGcsConfig } from './config.js';
import { type GcsErrorContext, gcsUriText, mapGcsError, statusError, statusOf } from './errors.js';
import {
  apiUrl,
  isGeneration,
  listedVersion,
  mediaInfo,
  newerGeneration,
  type ObjectResource,
  type ObjectsPage,
  objectInfo,
} from './json-api.js';
import { GcsResumable } from './resumable.js';
import { loadGcsSdk } from './sdk.js';

const gcsdebug = debuglog('provcat:gcs');
/** A JSON answer (a listing page of 1,000 resources) larger than this is the SDK's to read. */
const MAX_JSON_BYTES = 32 << 20;

/**
 * The GCS driver. Missing objects raise {@link NotFound}; refusals PermissionDenied; failed
 * conditions Exists or PreconditionFailed; other failures StoreError with the status and the
 * SDK's error as `cause`. Offline, every primitive raises OfflineMiss before any request.
 */
export class GcsStore extends ObjectStore {
  readonly scheme = 'gs';
  readonly driver = 'gcs';
  readonly capabilities: Capabilities = { versions: true, ranges: true };
  /** The configuration after defaults and the environment. */
  readonly config: GcsConfig;
  private readonly injected: Storage | undefined;
  private built: Promise<Storage> | undefined;
  private readonly pool: Http1Pool;
  private readonly versioning = new BucketMemo<Versioning>(
    (bucket) =>
      this.call({ bucket, op: 'versioning' }, async (storage) => {
        const [meta] = await storage.bucket(bucket).getMetadata();
        return meta.versioning?.enabled === true ? 'enabled' : 'off';
      }).catch((error: unknown) => {
        if (error instanceof NotFound) return 'missing';
        throw error;
      }),
    (state) => state !== 'missing',
  );

  /** Throws RangeError for options or environment values out of range. Sends nothing. */
  constructor(options: GcsStoreOptions = {}) {
    super(options);
    this.config = resolveGcsConfig(options);
    this.injected = options.client;
    this.pool = new Http1Pool({ maxIdlePerOrigin: Math.max(64, this.concurrency) });
  }

  /**
   * The SDK client: the injected one, or one built on first call from the configuration (ADC,
   * retries as the module comment says). The SDK is imported here. Building sends nothing.
   */
  client(): Promise<Storage> {
    if (this.injected) return Promise.resolve(this.injected);
    this.built ??= loadGcsSdk().then(
      (sdk) =>
        new sdk.Storage({
          apiEndpoint: this.config.custom ? this.config.endpoint : undefined,
          useAuthWithCustomEndpoint: this.config.custom && this.config.auth ? true : undefined,
          projectId: this.config.projectId,
          keyFilename: this.config.keyFilename,
          retryOptions: {
            maxRetries: RETRY_ATTEMPTS - 1,
            idempotencyStrategy: sdk.IdempotencyStrategy.RetryAlways,
          },
        }),
      (error: unknown) => {
        this.built = undefined;
        throw error;
      },
    );
    return this.built;
  }

  /** Close the driver's idle sockets (the SDK's agent keeps none open past the command). */
  override async close(): Promise<void> {
    this.pool.close();
  }

  /** One SDK call: offline check, client, abort race, error mapping. */
  private async call<T>(
    context: GcsErrorContext,
    fn: (storage: Storage) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    this.requireOnline(context.op, gcsUriText(context.bucket, context.key));
    const storage = await this.client();
    try {
      return await raceAbort(fn(storage), signal);
    } catch (error) {
      throw isAbort(error) ? error : mapGcsError(error, context);
    }
  }

  /**
   * One GET of the driver's own (the injected client's endpoint and credentials, if any): the
   * response, or the provcat error of what came instead (a bare StoreError when no status).
   */
  private async ownGet(
    context: GcsErrorContext,
    url: string,
    options: GetOptions & { media?: boolean },
  ) {
    this.requireOnline(context.op, gcsUriText(context.bucket, context.key));
    const c = this.injected as { customEndpoint?: boolean; useAuthWithCustomEndpoint?: boolean };
    const auth = c ? !c.customEndpoint || c.useAuthWithCustomEndpoint === true : this.config.auth;
    const headers: Record<string, string> = auth
      ? ((await (await this.client()).authClient.getRequestHeaders()) as Record<string, string>)
      : {};
    // The stored bytes, never transcoded.
    if (options.media) headers['accept-encoding'] = 'gzip';
    const { range, signal, wholeUpTo } = options;
    if (range) headers.range = `bytes=${range.start}-${range.end - 1}`;
    let got: Awaited<ReturnType<typeof leanGet>>;
    try {
      got = await leanGet({ url, headers }, { signal, pool: this.pool, uri: url, wholeUpTo });
    } catch (error) {
      // Before the head only an abort rejects; after it, a whole read that was cut off.
      throw isAbort(error) ? error : mapGcsError(error, context);
    }
    if (!isFallback(got)) return got;
    const detail = `${got.fallback} (${got.detail})`;
    this.debug(`GET ${url}: ${detail}`);
    if (got.fallback === 'status' && got.status !== undefined)
      throw statusError(got.status, context);
    if (got.cause !== undefined) throw mapGcsError(got.cause, context);
    throw new StoreError(`${context.op} ${gcsUriText(context.bucket, context.key)}: ${detail}`);
  }

  /** A JSON read on the lean path: the body, or `undefined` for the SDK to ask (404 thrown). */
  private async leanJson<T>(
    context: GcsErrorContext,
    url: string,
    signal?: AbortSignal,
  ): Promise<T | undefined> {
    this.requireOnline(context.op, gcsUriText(context.bucket, context.key));
    if (!this.config.lean || this.injected) return undefined;
    const got = await this.ownGet(context, url, { signal, wholeUpTo: MAX_JSON_BYTES }).catch(
      (error: unknown) => {
        if (error instanceof NotFound || isAbort(error)) throw error;
        return undefined; // the SDK asks again, with its retries and its error
      },
    );
    if (got === undefined || !('body' in got)) {
      if (got) got.discard();
      return undefined;
    }
    try {
      return JSON.parse(got.body.toString('utf8')) as T;
    } catch (error) {
      this.debug(`GET ${url}: ${String(error)}`);
      return undefined;
    } finally {
      got.release();
    }
  }

  private debug(message: string): void {
    gcsdebug(message);
    this.logger(message);
  }

  /** Where the driver's own requests go: the injected client's endpoint, or the configured one. */
  private endpoint(): string {
    return this.injected ? this.injected.apiEndpoint.replace(/\/+$/, '') : this.config.endpoint;
  }

  /** Resumable sessions in `bucket` (resumable.ts), for large puts and managed uploads. */
  override partProtocol(bucket: string): GcsResumable {
    return new GcsResumable(
      bucket,
      () => this.client(),
      (op, key) => this.requireOnline(op, gcsUriText(bucket, key)),
    );
  }

  /**
   * Create `bucket` with object versioning when asked; for a bucket that exists and this account
   * can read, turn versioning on when asked. {@link Exists} for a name taken by someone else.
   */
  override async makeBucket(bucket: string, options: { versioning?: boolean } = {}): Promise<void> {
    const versioning = options.versioning === true ? { versioning: { enabled: true } } : {};
    await this.call({ bucket, op: 'makeBucket' }, async (storage) => {
      try {
        await storage.createBucket(bucket, versioning);
      } catch (error) {
        if (statusOf(error) !== 409) throw error;
        const [meta] = await storage
          .bucket(bucket)
          .getMetadata()
          .catch((inner: unknown) => {
            throw statusOf(inner) === 403 ? error : inner;
          });
        if (options.versioning && !meta.versioning?.enabled)
          await storage.bucket(bucket).setMetadata(versioning);
      }
    });
    this.versioning.forget(bucket);
  }

  /** Refuse a version primitive on a bucket without versioning, or a version ID no generation. */
  private async requireVersions(bucket: string, op: string, versionId?: string): Promise<void> {
    requireVersioning(await this.versioning.get(bucket), op, gcsUriText(bucket));
    if (versionId !== undefined && !isGeneration(versionId))
      throw statusError(404, { bucket, key: versionId, op });
  }

  // ---- reads -----------------------------------------------------------------------------

  /** The object's metadata (size, generation, MD5). {@link NotFound} when absent. */
  override async _head(bucket: string, key: string, options: SignalOptions = {}) {
    return this.headAt({ bucket, key, op: 'head' }, undefined, options.signal);
  }

  private async headAt(
    context: GcsErrorContext & { key: string },
    generation: string | undefined,
    signal?: AbortSignal,
  ): Promise<ObjectInfo> {
    const { bucket, key } = context;
    const url = apiUrl(this.endpoint(), bucket, key, { generation });
    const lean = await this.leanJson<ObjectResource>(context, url, signal);
    if (lean) return objectInfo(bucket, lean);
    return this.call(
      context,
      async (storage) => {
        const file = storage.bucket(bucket).file(key, generation ? { generation } : {});
        return objectInfo(bucket, (await file.getMetadata())[0] as ObjectResource);
      },
      signal,
    );
  }

  /** Listing pages following page tokens (`limit`: `maxResults`, counting objects and prefixes). */
  private async *listPages(
    bucket: string,
    prefix: string,
    options: PagesOptions & { versions?: boolean },
  ): AsyncIterable<ObjectsPage> {
    const context = { bucket, key: prefix, op: options.versions ? 'history' : 'list' };
    const params = {
      prefix: prefix === '' ? undefined : prefix,
      delimiter: options.delimiter,
      versions: options.versions ? 'true' : undefined,
      maxResults: Math.min(1000, Math.max(1, Math.floor(options.limit ?? 1000))),
      pageToken: undefined as string | undefined,
    };
    for (;;) {
      let page: ObjectsPage | undefined;
      try {
        const url = apiUrl(this.endpoint(), bucket, undefined, params);
        page = await this.leanJson<ObjectsPage>(context, url, options.signal);
        page ??= await this.call(
          context,
          async (storage) => {
            const query = { ...params, versions: options.versions, autoPaginate: false };
            return (await storage.bucket(bucket).getFiles(query))[2] as ObjectsPage;
          },
          options.signal,
        );
      } catch (error) {
        // A missing bucket lists nothing; one that vanishes between pages is a failure.
        if (error instanceof NotFound && params.pageToken === undefined) return;
        throw error;
      }
      yield page;
      if (!page.nextPageToken) return;
      params.pageToken = page.nextPageToken;
    }
  }

  /** Pages of live objects under `prefix`, in the store's (UTF-8 byte) order. */
  override async *_pages(
    bucket: string,
    prefix: string,
    options: PagesOptions = {},
  ): AsyncIterable<ListPage> {
    for await (const page of this.listPages(bucket, prefix, options)) {
      const objects = (page.items ?? []).map((o) => objectInfo(bucket, o));
      if (objects.length > 0 || page.prefixes?.length)
        yield { prefixes: page.prefixes ?? [], objects };
    }
  }

  /**
   * The bytes (or `[start, end)` of them: one ranged GET whose Content-Range is returned as sent)
   * with the generation they belong to, on the driver's own GET, retried while nothing was
   * delivered. {@link NotFound} when absent.
   */
  override async _get(bucket: string, key: string, options: GetOptions = {}): Promise<GetResult> {
    return this.getAt({ bucket, key, op: 'get' }, undefined, options);
  }

  private async getAt(
    context: GcsErrorContext & { key: string },
    generation: string | undefined,
    options: GetOptions,
  ): Promise<GetResult> {
    checkByteRange(options.range);
    const url = apiUrl(this.endpoint(), context.bucket, context.key, { alt: 'media', generation });
    const wholeUpTo = options.range === undefined ? options.wholeUpTo : undefined;
    const got = await withRetries(
      () => this.ownGet(context, url, { ...options, wholeUpTo, media: true }),
      // Nothing reached the caller yet: a cut-off whole read or an odd response may be asked again.
      {
        signal: options.signal,
        retryable: (e) => isRetryable(e) || (e instanceof StoreError && e.status === undefined),
      },
    );
    return leanGetResult(
      mediaInfo(context.bucket, context.key, got.headers, got.contentLength),
      got,
    );
  }

  // ---- writes ----------------------------------------------------------------------------

  /** Write one object: one request when small, a resumable session when large. */
  override async _put(bucket: string, key: string, source: PutSource, options: PutOptions = {}) {
    return this.putInParts(bucket, key, source, options, (src, o) =>
      this.putOne(bucket, key, src, o),
    );
  }

  /**
   * One upload request (`uploadType=multipart`) through the SDK, checked by its CRC32C; with
   * `ifGenerationMatch`, conditional. A source that is not exactly its declared size fails with
   * SourceError and writes nothing.
   */
  private async putOne(
    bucket: string,
    key: string,
    source: PutSource,
    options: PutOptions,
    ifGenerationMatch?: number,
  ): Promise<ObjectInfo> {
    const context = { bucket, key, op: ifGenerationMatch === undefined ? 'put' : 'create' };
    return this.call(context, async (storage) => {
      const file = storage.bucket(bucket).file(key);
      const settings = {
        resumable: false,
        metadata: options.contentType === undefined ? {} : { contentType: options.contentType },
        preconditionOpts: ifGenerationMatch === undefined ? undefined : { ifGenerationMatch },
      };
      if (source instanceof Uint8Array) {
        await file.save(Buffer.from(source.buffer, source.byteOffset, source.byteLength), settings);
        options.onProgress?.(source.byteLength);
      } else {
        const input = typeof source === 'string' ? createReadStream(source) : source;
        const body = Readable.from(exactBytes(input, options.size, options.onProgress), {
          objectMode: false,
        });
        await pipeline(body, file.createWriteStream(settings), { signal: options.signal });
      }
      return objectInfo(bucket, file.metadata as ObjectResource);
    });
  }

  /** Delete the live object ({@link NotFound} when there is none); versioned, it becomes noncurrent. */
  override async _delete(bucket: string, key: string, options: SignalOptions = {}): Promise<void> {
    await this.call(
      { bucket, key, op: 'delete' },
      (s) => s.bucket(bucket).file(key).delete(),
      options.signal,
    );
  }

  /**
   * Delete only if still `version`: with `versionId`, exactly that generation (gone for good);
   * else the live object with `ifGenerationMatch` ({@link PreconditionFailed} when it moved).
   */
  override async _deleteIf(bucket: string, key: string, options: DeleteIfOptions): Promise<void> {
    const { versionId, signal } = options;
    const generation = versionId ?? options.version;
    const context = { bucket, key, op: 'delete' };
    if (!isGeneration(generation)) {
      // No generation is this version: the key's object (if any) is not it.
      if (versionId !== undefined) throw statusError(404, context);
      await this._head(bucket, key, options);
      throw statusError(412, context);
    }
    const file = (s: Storage) => s.bucket(bucket).file(key, versionId ? { generation } : {});
    const condition = versionId === undefined ? { ifGenerationMatch: generation } : {};
    await this.call(context, (s) => file(s).delete(condition), signal);
  }

  /** A V4 signed GET URL valid for `expiresIn` seconds (at most an hour, checked by the caller). */
  override async _presign(bucket: string, key: string, options: PresignPrimitiveOptions) {
    const expires = Date.now() + options.expiresIn * 1000;
    const signed = await this.call({ bucket, key, op: 'presign' }, (storage) =>
      storage.bucket(bucket).file(key).getSignedUrl({ version: 'v4', action: 'read', expires }),
    );
    return signed[0];
  }

  // ---- versions --------------------------------------------------------------------------

  /** The live generation. StoreError on a bucket without versioning. */
  override async _versionOf(bucket: string, key: string, options: SignalOptions = {}) {
    await this.requireVersions(bucket, 'versionOf');
    return (await this._head(bucket, key, options)).version;
  }

  /**
   * Every generation under `prefix` from a `versions=true` listing, in key order and newest
   * first within a key, a deleted key's marker first. StoreError on a bucket without
   * versioning; a missing bucket yields nothing.
   */
  override async *_history(
    bucket: string,
    prefix: string,
    options: SignalOptions = {},
  ): AsyncIterable<VersionRecord> {
    if ((await this.versioning.get(bucket)) === 'missing') return;
    await this.requireVersions(bucket, 'history');
    const pages = this.listPages(bucket, prefix, { versions: true, signal: options.signal });
    async function* listed() {
      for await (const page of pages)
        for (const o of page.items ?? []) yield listedVersion(bucket, o);
    }
    yield* historyOf(listed(), newerGeneration);
  }

  /** The metadata of one generation; {@link NotFound} when the key never had it. */
  override async _headVersion(bucket: string, key: string, id: string, o: SignalOptions = {}) {
    await this.requireVersions(bucket, 'headVersion', id);
    return this.headAt({ bucket, key, op: 'headVersion' }, id, o.signal);
  }

  /** The bytes of one generation (optionally a range, as `_get`). */
  override async _getVersion(bucket: string, key: string, id: string, o: GetOptions = {}) {
    await this.requireVersions(bucket, 'getVersion', id);
    return this.getAt({ bucket, key, op: 'getVersion' }, id, o);
  }

  /** Write only if no live object has the key (`ifGenerationMatch=0`); {@link Exists} otherwise. */
  override async _create(bucket: string, key: string, body: Uint8Array, o: SignalOptions = {}) {
    return this.putOne(bucket, key, body, { size: body.byteLength, signal: o.signal }, 0);
  }

  /**
   * Server-side copy of the live object, or of one generation, to `toKey`: a rewrite, whose
   * `rewriteToken` the SDK follows until done. The live object's generation is read first, so
   * exactly one generation is copied even if the key changes meanwhile.
   */
  override async _copy(
    bucket: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    if (versionId !== undefined) await this.requireVersions(bucket, 'copy', versionId);
    const generation = versionId ?? (await this._head(bucket, key, options)).version;
    return this.call(
      { bucket, key, op: 'copy' },
      async (storage) => {
        const b = storage.bucket(bucket);
        const [, response] = await b.file(key, { generation }).copy(b.file(toKey));
        return objectInfo(bucket, (response as { resource: ObjectResource }).resource);
      },
      options.signal,
    );
  }
}
