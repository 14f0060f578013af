/**
 * {@link GcsStore}: the `gs://bucket/key` driver over `@google-cloud/storage` 7.22 — the twelve
 * primitives as JSON API calls (docs/drivers/gcs.md); everything else is the base's and the
 * rules of src/ it calls. The SDK loads on first use. Media GETs are the driver's own (an SDK
 * download whose connection drops never settles); metadata reads and listings go through the
 * reader chosen once at construction (reader.ts: the lean one, or the SDK's).
 * The client retries with `IdempotencyStrategy.RetryAlways`: under the default one, an upload or
 * delete without a precondition turns its retries off for good. Versions need object versioning
 * (asked once per bucket); `_create` is `ifGenerationMatch=0`, atomic; large puts are resumable
 * sessions (resumable.ts), and a small put is one request of the driver's own (simple-upload.ts).
 *
 * @module
 */
import { debuglog } from 'node:util';
import type { Storage } from '@google-cloud/storage';
import type * as D from '../../src/contract/primitives.js';
import { raceAbort } from '../../src/core/concurrency.js';
import { isAbort, NotFound, ObjectIntegrityError, StoreError } from '../../src/core/errors.js';
import { lazy, lazyModule } from '../../src/core/lazy-module.js';
import { isRetryable, RETRY_ATTEMPTS, withRetries } from '../../src/core/retry.js';
import {
  missingBucket,
  requireVersioning,
  versioningMemo,
} from '../../src/driver-kit/bucket-state.js';
import { checkByteRange } from '../../src/driver-kit/exact-bytes.js';
import { pageSize, tokenPages } from '../../src/driver-kit/paging.js';
import { historyOf } from '../../src/driver-kit/version-history.js';
import { Http1Pool, isFallback } from '../../src/net/http1-download.js';
import { leanGet, leanGetResult } from '../../src/net/lean-get.js';
import { ObjectStore } from '../../src/store/object-store.js';
import { type GcsConfig, type GcsStoreOptions, resolveGcsConfig } from './config.js';
import { type GcsErrorContext, gcsUriText, mapGcsError, statusError, statusOf } from './errors.js';
import * as api from './json-api.js';
import { type GcsReader, LeanJsonReader, type ObjectAt, SdkJsonReader } from './reader.js';
import { GcsResumable } from './resumable.js';
import { simpleUpload } from './simple-upload.js';

const gcsdebug = debuglog('provcat:gcs');
/** The SDK, imported on first use: commands without a GCS call, and lean reads, never load it. */
const loadGcsSdk = lazyModule(
  'gcs',
  '@google-cloud/storage',
  () => import('@google-cloud/storage'),
);
/** True once this process asked for the SDK (for tests and debugging). */
export const gcsSdkRequested = (): boolean => loadGcsSdk.made;
/** Nothing reached the caller yet: a cut-off whole read or an odd answer may be asked again. */
const beforeDelivery = (e: unknown) =>
  isRetryable(e) || (e instanceof StoreError && e.status === undefined);
type Opts = D.SignalOptions;
type At = ObjectAt;

/**
 * The GCS driver. Missing objects raise {@link NotFound}; refusals PermissionDenied; failed
 * conditions Exists or PreconditionFailed; other failures StoreError with the status and the
 * SDK's error as `cause`. Offline, every primitive raises OfflineMiss before any request.
 */
export class GcsStore extends ObjectStore {
  readonly scheme = 'gs';
  readonly driver = 'gcs';
  readonly capabilities: D.Capabilities = { versions: true, ranges: true };
  /** The configuration after defaults and the environment. */
  readonly config: GcsConfig;
  private readonly injected: Storage | undefined;
  private readonly pool: Http1Pool;
  /** Where the driver's own GETs go, and whether they carry a token: the injected client's say. */
  private readonly own: { endpoint: string; auth: boolean };
  /** How metadata and listings are read: chosen once, here (reader.ts). */
  private readonly reader: GcsReader;
  private readonly versioning = versioningMemo(async (bucket) => {
    const meta = await this.reader.bucket({ bucket, op: 'versioning' });
    return meta.versioning?.enabled === true ? 'enabled' : 'off';
  });

  /** Throws RangeError for options or environment values out of range. Sends nothing. */
  constructor(options: GcsStoreOptions = {}) {
    super(options);
    this.config = resolveGcsConfig(options);
    this.injected = options.client;
    const c = options.client as { customEndpoint?: boolean; useAuthWithCustomEndpoint?: boolean };
    this.own = options.client
      ? {
          endpoint: options.client.apiEndpoint.replace(/\/+$/, ''),
          auth: !c.customEndpoint || c.useAuthWithCustomEndpoint === true,
        }
      : this.config;
    this.pool = new Http1Pool({ maxIdlePerOrigin: Math.max(64, this.concurrency) });
    const sdk = new SdkJsonReader((context, fn, signal) => this.call(context, fn, signal));
    const debug = (message: string) => this.debug(message);
    this.reader =
      this.config.lean && !this.injected
        ? new LeanJsonReader(this.own.endpoint, (c, url, o) => this.ownGet(c, url, o), debug, sdk)
        : sdk;
  }

  /** Whether metadata reads and listings go the driver's own GETs (reader.ts). */
  get leanReads(): boolean {
    return this.reader instanceof LeanJsonReader;
  }

  /**
   * The SDK client: the injected one, or one built on first call from the configuration (ADC,
   * retries as the module comment says, each request bounded by `requestTimeoutMs`). The SDK is
   * imported here. Building sends nothing.
   */
  client(): Promise<Storage> {
    return this.injected ? Promise.resolve(this.injected) : this.built();
  }

  private readonly built = lazy(async () => {
    const sdk = await loadGcsSdk();
    const { custom, endpoint, auth, projectId, keyFilename, requestTimeoutMs } = this.config;
    return new sdk.Storage({
      apiEndpoint: custom ? endpoint : undefined,
      useAuthWithCustomEndpoint: custom && auth ? true : undefined,
      projectId,
      keyFilename,
      timeout: requestTimeoutMs,
      retryOptions: {
        maxRetries: RETRY_ATTEMPTS - 1,
        idempotencyStrategy: sdk.IdempotencyStrategy.RetryAlways,
      },
    });
  });

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
   * One GET of the driver's own (src/net/lean-get.ts): the response, or the provcat error of
   * what came instead (a StoreError without status when the server's answer was not read).
   */
  private async ownGet(context: GcsErrorContext, url: string, o: D.GetOptions & { media?: true }) {
    this.requireOnline(context.op, gcsUriText(context.bucket, context.key));
    const headers: Record<string, string> = this.own.auth
      ? ((await (await this.client()).authClient.getRequestHeaders()) as Record<string, string>)
      : {};
    if (o.media) headers['accept-encoding'] = 'gzip'; // the stored bytes, never transcoded
    if (o.range) headers.range = `bytes=${o.range.start}-${o.range.end - 1}`;
    let got: Awaited<ReturnType<typeof leanGet>>;
    try {
      const options = { signal: o.signal, pool: this.pool, uri: url, wholeUpTo: o.wholeUpTo };
      got = await leanGet({ url, headers }, options);
    } catch (error) {
      // Before the head only an abort rejects; after it, a whole read that was cut off.
      throw isAbort(error) ? error : mapGcsError(error, context);
    }
    if (!isFallback(got)) return got;
    const detail = `${got.fallback} (${got.detail})`;
    this.debug(`GET ${url}: ${detail}`);
    if (got.fallback === 'status' && got.status) throw statusError(got.status, context);
    if (got.cause !== undefined) throw mapGcsError(got.cause, context);
    const where = gcsUriText(context.bucket, context.key, context.versionId);
    throw new StoreError(`${context.op} ${where}: ${detail}`);
  }

  private debug(message: string): void {
    gcsdebug(message);
    this.logger(message);
  }

  /** Resumable sessions in `bucket` (resumable.ts), for large puts and managed uploads. */
  override partProtocol(bucket: string): GcsResumable {
    const guard = (op: string, key: string) => this.requireOnline(op, gcsUriText(bucket, key));
    return new GcsResumable(bucket, () => this.client(), guard);
  }

  /**
   * Create `bucket` with object versioning when asked; for a bucket that exists and this account
   * can read, turn versioning on when asked. {@link Exists} for a name taken by someone else.
   */
  override async makeBucket(bucket: string, o: { versioning?: boolean } = {}): Promise<void> {
    const versioning = o.versioning === true ? { versioning: { enabled: true } } : {};
    await this.call({ bucket, op: 'makeBucket' }, (storage) =>
      storage.createBucket(bucket, versioning).catch(async (error: unknown) => {
        if (statusOf(error) !== 409) throw error;
        // It exists: ours when we may read it; else someone else's, and the 409 stands (Exists).
        const b = storage.bucket(bucket);
        const [meta] = await b.getMetadata().catch((inner: unknown) => {
          throw statusOf(inner) === 403 ? error : inner;
        });
        if (o.versioning && !meta.versioning?.enabled) await b.setMetadata(versioning);
      }),
    );
    this.versioning.forget(bucket);
  }

  /**
   * Refuse a version primitive on a bucket without versioning (NotSupported), or a version ID
   * that is no generation (NotFound); the message names the object at that version.
   */
  private async requireVersions(
    bucket: string,
    op: string,
    key: string,
    versionId?: string,
  ): Promise<void> {
    requireVersioning(await this.versioning.get(bucket), op, gcsUriText(bucket, key, versionId));
    if (versionId !== undefined && !api.isGeneration(versionId))
      throw statusError(404, { bucket, key, versionId, op });
  }

  // ---- reads -----------------------------------------------------------------------------

  /** The object's metadata (size, generation, MD5). {@link NotFound} when absent. */
  override async _head(bucket: string, key: string, o: Opts = {}): Promise<D.ObjectInfo> {
    return this.headAt({ bucket, key, op: 'head' }, undefined, o.signal);
  }

  private async headAt(at: At, generation: string | undefined, signal?: AbortSignal) {
    this.requireOnline(at.op, gcsUriText(at.bucket, at.key));
    return api.objectInfo(at.bucket, await this.reader.object(at, generation, signal));
  }

  /** Listing pages (`limit`: `maxResults`, counting objects and prefixes; src/driver-kit/paging.ts). */
  private listPages(bucket: string, prefix: string, o: D.PagesOptions & { versions?: true }) {
    const context = { bucket, key: prefix, op: o.versions ? 'history' : 'list' };
    const params = {
      prefix: prefix === '' ? undefined : prefix,
      delimiter: o.delimiter,
      versions: o.versions ? ('true' as const) : undefined,
      maxResults: pageSize(o.limit, 1000),
    };
    return tokenPages(
      (pageToken) => {
        this.requireOnline(context.op, gcsUriText(bucket, prefix));
        return this.reader.page(context, { ...params, pageToken }, o.signal);
      },
      (page) => page.nextPageToken,
    );
  }

  /**
   * Pages of live objects under `prefix`, in the store's (UTF-8 byte) order. A missing bucket is
   * `NotFound` (the listing's own 404).
   */
  override async *_pages(bucket: string, prefix: string, o: D.PagesOptions = {}) {
    try {
      for await (const page of this.listPages(bucket, prefix, o)) {
        const objects = (page.items ?? []).map((item) => api.objectInfo(bucket, item));
        if (objects.length > 0 || page.prefixes?.length)
          yield { prefixes: page.prefixes ?? [], objects };
      }
    } catch (error) {
      if (error instanceof NotFound) throw missingBucket(gcsUriText(bucket), error);
      throw error;
    }
  }

  /**
   * The bytes (or `[start, end)` of them: one ranged GET whose Content-Range is returned as sent)
   * with the generation they belong to, on the driver's own GET, retried while nothing was
   * delivered. {@link NotFound} when absent.
   */
  override async _get(bucket: string, key: string, o: D.GetOptions = {}): Promise<D.GetResult> {
    return this.getAt({ bucket, key, op: 'get' }, undefined, o);
  }

  private async getAt(at: At, generation: string | undefined, o: D.GetOptions) {
    checkByteRange(o.range);
    const url = api.apiUrl(this.own.endpoint, at.bucket, at.key, { alt: 'media', generation });
    const wholeUpTo = o.range === undefined ? o.wholeUpTo : undefined;
    const get = () => this.ownGet(at, url, { ...o, wholeUpTo, media: true });
    const got = await withRetries(get, { signal: o.signal, retryable: beforeDelivery });
    const info = api.mediaInfo(at.bucket, at.key, got);
    if (o.range === undefined && got.contentLength !== info.size) {
      // A whole read promising other than the stored size: for an object without an MD5 (a
      // composite) nothing later would notice.
      if ('body' in got) got.release();
      else got.discard();
      const kind = got.contentLength < info.size ? 'PrematureEof' : 'TooLong';
      const uri = gcsUriText(at.bucket, at.key);
      throw new ObjectIntegrityError(
        kind,
        `${at.op} ${uri}: the response has ${got.contentLength} bytes, the object ${info.size}`,
        { uri, expected: info.size, observed: got.contentLength },
      );
    }
    return leanGetResult(info, got);
  }

  // ---- writes ----------------------------------------------------------------------------

  /** Write one object: one request when small, a resumable session when large. */
  override async _put(bucket: string, key: string, source: D.PutSource, o: D.PutOptions = {}) {
    return this.putInParts(bucket, key, source, o, (src, opts) =>
      this.putOne(bucket, key, src, opts),
    );
  }

  /**
   * One upload request (`uploadType=multipart`), conditional with `ifGenerationMatch`, sent by
   * the driver itself (simple-upload.ts: the SDK's never settles after a reset answer). A source
   * not exactly its declared size is a SourceError, nothing written.
   */
  private async putOne(
    bucket: string,
    key: string,
    source: D.PutSource,
    o: D.PutOptions,
    ifGenerationMatch?: number,
  ): Promise<D.ObjectInfo> {
    this.requireOnline(ifGenerationMatch === undefined ? 'put' : 'create', gcsUriText(bucket, key));
    const target = { endpoint: this.own.endpoint, headers: () => this.authHeaders() };
    return simpleUpload(target, bucket, key, source, o, ifGenerationMatch);
  }

  /** The headers that authorize the driver's own requests (none to an emulator). */
  private async authHeaders(): Promise<Record<string, string>> {
    if (!this.own.auth) return {};
    return (await (await this.client()).authClient.getRequestHeaders()) as Record<string, string>;
  }

  /** Delete the live object ({@link NotFound} when there is none); versioned, it becomes noncurrent. */
  override async _delete(bucket: string, key: string, o: Opts = {}): Promise<void> {
    const context = { bucket, key, op: 'delete' };
    await this.call(context, (s) => s.bucket(bucket).file(key).delete(), o.signal);
  }

  /**
   * Delete only if still `version`: with `versionId`, exactly that generation (gone for good);
   * else the live object with `ifGenerationMatch` ({@link PreconditionFailed} when it moved).
   */
  override async _deleteIf(bucket: string, key: string, o: D.DeleteIfOptions): Promise<void> {
    const { versionId } = o;
    const generation = versionId ?? o.version;
    const context = { bucket, key, op: 'delete' };
    if (!api.isGeneration(generation)) {
      // No generation is this version: the key's object (if any) is not it.
      if (versionId !== undefined) throw statusError(404, context);
      await this._head(bucket, key, o);
      throw statusError(412, context);
    }
    const file = (s: Storage) => s.bucket(bucket).file(key, versionId ? { generation } : {});
    const condition = versionId === undefined ? { ifGenerationMatch: generation } : {};
    await this.call(context, (s) => file(s).delete(condition), o.signal);
  }

  /** A V4 signed GET URL valid for `expiresIn` seconds (at most an hour, checked by the caller). */
  override async _presign(bucket: string, key: string, o: D.PresignPrimitiveOptions) {
    const expires = Date.now() + o.expiresIn * 1000;
    const [url] = await this.call({ bucket, key, op: 'presign' }, (storage) =>
      storage.bucket(bucket).file(key).getSignedUrl({ version: 'v4', action: 'read', expires }),
    );
    return url;
  }

  // ---- versions --------------------------------------------------------------------------

  /** The live generation. NotSupported on a bucket without versioning. */
  override async _versionOf(bucket: string, key: string, o: Opts = {}): Promise<string> {
    await this.requireVersions(bucket, 'versionOf', key);
    return (await this._head(bucket, key, o)).version;
  }

  /**
   * Every generation under `prefix` from a `versions=true` listing, in key order and newest
   * first within a key, a deleted key's marker first. NotSupported on a bucket without
   * versioning; a missing bucket yields nothing.
   */
  override async *_history(bucket: string, prefix: string, o: Opts = {}) {
    if ((await this.versioning.get(bucket)) === 'missing') return;
    await this.requireVersions(bucket, 'history', prefix);
    const pages = this.listPages(bucket, prefix, { versions: true, signal: o.signal });
    async function* listed() {
      for await (const page of pages)
        for (const item of page.items ?? []) yield api.listedVersion(bucket, item);
    }
    yield* historyOf(listed());
  }

  /** The metadata of one generation; {@link NotFound} when the key never had it. */
  override async _headVersion(bucket: string, key: string, id: string, o: Opts = {}) {
    await this.requireVersions(bucket, 'headVersion', key, id);
    return this.headAt({ bucket, key, versionId: id, op: 'headVersion' }, id, o.signal);
  }

  /** The bytes of one generation (optionally a range, as `_get`). */
  override async _getVersion(bucket: string, key: string, id: string, o: D.GetOptions = {}) {
    await this.requireVersions(bucket, 'getVersion', key, id);
    return this.getAt({ bucket, key, versionId: id, op: 'getVersion' }, id, o);
  }

  /** Write only if no live object has the key (`ifGenerationMatch=0`); {@link Exists} otherwise. */
  override async _create(bucket: string, key: string, body: Uint8Array, o: Opts = {}) {
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
    id: string | undefined,
    toKey: string,
    o: Opts = {},
  ) {
    if (id !== undefined) await this.requireVersions(bucket, 'copy', key, id);
    const generation = id ?? (await this._head(bucket, key, o)).version;
    const copy = async (storage: Storage) => {
      const b = storage.bucket(bucket);
      const [, response] = await b.file(key, { generation }).copy(b.file(toKey));
      return api.objectInfo(bucket, (response as { resource: api.ObjectResource }).resource);
    };
    return this.call({ bucket, key, versionId: id, op: 'copy' }, copy, o.signal);
  }
}
