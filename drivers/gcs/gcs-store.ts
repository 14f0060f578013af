/**
 * {@link GcsStore}: the `gs://bucket/key` driver over `@google-cloud/storage` 7.22 — the twelve
 * primitives as JSON API calls; everything else is the {@link ObjectStore} base.
 *
 * - Version and version ID are the generation, the ETag the MD5 (json-api.ts).
 * - The SDK loads on first use (sdk.ts); media GETs are the driver's own, and so are metadata
 *   reads and listings on the lean path (lean.ts), which falls back to the SDK.
 * - The client retries with `IdempotencyStrategy.RetryAlways`: under the default strategy one
 *   upload or delete without a precondition turns the client's retries off for good
 *   (`retryOptions.autoRetry = false`, SDK 7.22), and a whole-object put is safe to repeat.
 * - Versions need a bucket with object versioning (asked once per bucket), since elsewhere an
 *   overwritten generation is gone and a pin could not survive. A key with no live generation
 *   is deleted: `_history` puts a delete marker before its generations, as S3 lists one
 *   (`size: null`, `current: true`, ID `deleted@<newest generation>`), and commits skip it.
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
import { isAbort, NotFound, ProvcatError, SourceError, StoreError } from '../../src/errors.js';
import { Http1Pool, responseReadable } from '../../src/net/http1-download.js';
import { ObjectStore } from '../../src/object-store.js';
import { isRetryable, RETRY_ATTEMPTS, withRetries } from '../../src/retry.js';
import { type GcsConfig, type GcsStoreOptions, resolveGcsConfig } from './config.js';
import { type GcsErrorContext, gcsUriText, mapGcsError, statusError, statusOf } from './errors.js';
import {
  apiUrl,
  isGeneration,
  mediaInfo,
  type ObjectResource,
  type ObjectsPage,
  objectInfo,
} from './json-api.js';
import { LeanFailure, LeanReads } from './lean.js';
import { GcsResumable } from './resumable.js';
import { loadGcsSdk } from './sdk.js';

const gcsdebug = debuglog('provcat:gcs');
const NO_HEADERS: Record<string, string> = {};

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
  private readonly reads: LeanReads;
  private readonly versioning = new Map<string, Promise<'enabled' | 'off' | 'missing'>>();

  /** Throws RangeError for options or environment values out of range. Sends nothing. */
  constructor(options: GcsStoreOptions = {}) {
    super(options);
    this.config = resolveGcsConfig(options);
    this.injected = options.client;
    this.pool = new Http1Pool({ maxIdlePerOrigin: Math.max(64, this.concurrency) });
    this.reads = new LeanReads(
      this.pool,
      () => this.authHeaders(),
      (m) => this.debug(m),
    );
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

  private debug(message: string): void {
    gcsdebug(message);
    this.logger(message);
  }

  /** Where the driver's own requests go: the injected client's endpoint, or the configured one. */
  private endpoint(): string {
    return this.injected ? this.injected.apiEndpoint.replace(/\/+$/, '') : this.config.endpoint;
  }

  /** Headers of the driver's own requests: a Bearer token from ADC, or none (custom endpoint). */
  private authHeaders(): Record<string, string> | Promise<Record<string, string>> {
    const c = this.injected as { customEndpoint?: boolean; useAuthWithCustomEndpoint?: boolean };
    const auth = this.injected
      ? !c.customEndpoint || c.useAuthWithCustomEndpoint === true
      : this.config.auth;
    if (!auth) return NO_HEADERS;
    return this.client().then(
      async (s) => (await s.authClient.getRequestHeaders()) as Record<string, string>,
    );
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

  /** A JSON read on the lean path: the body, or `undefined` for the SDK to ask (404 thrown). */
  private async leanJson<T>(
    context: GcsErrorContext,
    url: string,
    signal?: AbortSignal,
  ): Promise<T | undefined> {
    this.requireOnline(context.op, gcsUriText(context.bucket, context.key));
    if (!this.config.lean || this.injected) return undefined;
    const got = await this.reads.json<T>(url, signal);
    if (!(got instanceof LeanFailure)) return got;
    if (got.status === 404) throw statusError(404, context);
    return undefined;
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
    this.versioning.delete(bucket);
  }

  /** The bucket's versioning, asked once per bucket (a missing bucket or a failure is not kept). */
  private versioningOf(bucket: string): Promise<'enabled' | 'off' | 'missing'> {
    let state = this.versioning.get(bucket);
    if (!state) {
      state = this.call({ bucket, op: 'versioning' }, async (storage) => {
        const [meta] = await storage.bucket(bucket).getMetadata();
        return meta.versioning?.enabled === true ? 'enabled' : 'off';
      }).catch((error: unknown) => {
        if (error instanceof NotFound) return 'missing';
        throw error;
      });
      this.versioning.set(bucket, state);
      const forget = () => this.versioning.delete(bucket);
      state.then((v) => v === 'missing' && forget(), forget);
    }
    return state;
  }

  /** Refuse a version primitive on a bucket without versioning (StoreError) or bucket (NotFound). */
  private async requireVersions(bucket: string, op: string, versionId?: string): Promise<void> {
    const state = await this.versioningOf(bucket);
    const uri = gcsUriText(bucket);
    if (state === 'missing') throw new NotFound(`${op} ${uri}: no bucket ${bucket}`, { uri });
    if (state === 'off')
      throw new StoreError(
        `${op} ${uri}: the bucket keeps no versions (object versioning is off)`,
        { uri },
      );
    if (versionId !== undefined && !isGeneration(versionId))
      throw statusError(404, { bucket, key: versionId, op });
  }

  // ---- reads -----------------------------------------------------------------------------

  /** The object's metadata (size, generation, MD5). {@link NotFound} when absent. */
  override async _head(
    bucket: string,
    key: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
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
        const file = storage
          .bucket(bucket)
          .file(key, generation === undefined ? {} : { generation });
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
        page = await this.leanJson<ObjectsPage>(
          context,
          apiUrl(this.endpoint(), bucket, undefined, params),
          options.signal,
        );
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
    const { bucket, key } = context;
    const { range, signal } = options;
    if (
      range &&
      !(
        Number.isSafeInteger(range.start) &&
        Number.isSafeInteger(range.end) &&
        range.start >= 0 &&
        range.end > range.start
      )
    ) {
      throw new RangeError(`bad byte range [${range.start}, ${range.end})`);
    }
    this.requireOnline(context.op, gcsUriText(bucket, key));
    const url = apiUrl(this.endpoint(), bucket, key, { alt: 'media', generation });
    let wholeUpTo = range === undefined ? options.wholeUpTo : undefined;
    const got = await withRetries(
      async () => {
        for (;;) {
          const r = await this.reads.media(url, { range, wholeUpTo, signal });
          if (r === 'larger') wholeUpTo = undefined;
          else if (!(r instanceof LeanFailure)) return r;
          else if (r.status !== undefined) throw statusError(r.status, context);
          else if (r.error !== undefined) throw mapGcsError(r.error, context);
          else throw new StoreError(`${context.op} ${gcsUriText(bucket, key)}: ${r.detail}`);
        }
      },
      // Nothing reached the caller yet: a cut-off whole read or an odd response may be asked again.
      {
        signal,
        retryable: (e) => isRetryable(e) || (e instanceof StoreError && e.status === undefined),
      },
    );
    const info = mediaInfo(bucket, key, got.headers, got.contentLength);
    const contentRange = got.headers['content-range'];
    let body: Readable | undefined;
    const common = { info, contentLength: got.contentLength, contentRange };
    if ('body' in got) {
      return {
        ...common,
        bytes: got.body,
        release: got.release,
        get body() {
          body ??= Readable.from([got.body], { objectMode: false });
          return body;
        },
      };
    }
    return {
      ...common,
      pipeTo: (sink) => got.pipeTo(sink).finally(() => body?.destroy()),
      get body() {
        body ??= responseReadable(got);
        return body;
      },
    };
  }

  // ---- writes ----------------------------------------------------------------------------

  /** Write one object: one request when small, a resumable session when large. */
  override async _put(
    bucket: string,
    key: string,
    source: PutSource,
    options: PutOptions = {},
  ): Promise<ObjectInfo> {
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
        const body = Readable.from(exactly(input, options.size, options.onProgress), {
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
    const generation = options.versionId ?? options.version;
    const context = { bucket, key, op: 'delete' };
    if (!isGeneration(generation)) {
      // No generation is this version: the key's object (if any) is not it.
      if (options.versionId !== undefined) throw statusError(404, context);
      await this._head(bucket, key, options);
      throw statusError(412, context);
    }
    await this.call(
      context,
      async (s) => {
        const file = s
          .bucket(bucket)
          .file(key, options.versionId === undefined ? {} : { generation });
        await file.delete(options.versionId === undefined ? { ifGenerationMatch: generation } : {});
      },
      options.signal,
    );
  }

  /** A V4 signed GET URL valid for `expiresIn` seconds (at most an hour, checked by the caller). */
  override async _presign(
    bucket: string,
    key: string,
    options: PresignPrimitiveOptions,
  ): Promise<string> {
    return this.call({ bucket, key, op: 'presign' }, async (storage) => {
      const expires = Date.now() + options.expiresIn * 1000;
      return (
        await storage
          .bucket(bucket)
          .file(key)
          .getSignedUrl({ version: 'v4', action: 'read', expires })
      )[0];
    });
  }

  // ---- versions --------------------------------------------------------------------------

  /** The live generation. StoreError on a bucket without versioning. */
  override async _versionOf(
    bucket: string,
    key: string,
    options: SignalOptions = {},
  ): Promise<string> {
    await this.requireVersions(bucket, 'versionOf');
    return (await this._head(bucket, key, options)).version;
  }

  /**
   * Every generation under `prefix` from a `versions=true` listing, in key order and newest
   * first within a key, a deleted key's marker first (see the module comment). StoreError on a
   * bucket without versioning; a missing bucket yields nothing.
   */
  override async *_history(
    bucket: string,
    prefix: string,
    options: SignalOptions = {},
  ): AsyncIterable<VersionRecord> {
    if ((await this.versioningOf(bucket)) === 'missing') return;
    await this.requireVersions(bucket, 'history');
    const group: ObjectResource[] = [];
    for await (const page of this.listPages(bucket, prefix, {
      versions: true,
      signal: options.signal,
    })) {
      for (const item of page.items ?? []) {
        if (group.length > 0 && group[0]?.name !== item.name)
          yield* historyOf(bucket, group.splice(0));
        group.push(item);
      }
    }
    if (group.length > 0) yield* historyOf(bucket, group);
  }

  /** The metadata of one generation; {@link NotFound} when the key never had it. */
  override async _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    await this.requireVersions(bucket, 'headVersion', versionId);
    return this.headAt({ bucket, key, op: 'headVersion' }, versionId, options.signal);
  }

  /** The bytes of one generation (optionally a range, as `_get`). */
  override async _getVersion(
    bucket: string,
    key: string,
    versionId: string,
    options: GetOptions = {},
  ): Promise<GetResult> {
    await this.requireVersions(bucket, 'getVersion', versionId);
    return this.getAt({ bucket, key, op: 'getVersion' }, versionId, options);
  }

  /** Write only if no live object has the key (`ifGenerationMatch=0`); {@link Exists} otherwise. */
  override async _create(
    bucket: string,
    key: string,
    body: Uint8Array,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    return this.putOne(bucket, key, body, { size: body.byteLength, signal: options.signal }, 0);
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

/** The chunks of `source`; SourceError when it fails or is not exactly `size` bytes (if given). */
async function* exactly(
  source: AsyncIterable<Buffer>,
  size: number | undefined,
  onProgress?: (bytes: number) => void,
): AsyncIterable<Buffer> {
  let seen = 0;
  try {
    for await (const chunk of source) {
      seen += chunk.length;
      if (size !== undefined && seen > size) break;
      yield chunk;
      onProgress?.(seen);
    }
  } catch (cause) {
    if (isAbort(cause) || cause instanceof ProvcatError) throw cause;
    throw new SourceError(`the source failed: ${(cause as Error).message}`, { cause });
  }
  if (size !== undefined && seen !== size) {
    throw new SourceError(
      `the source has ${seen > size ? 'more' : 'fewer'} bytes than its declared ${size}`,
    );
  }
}

/** One key's generations as records: a delete marker when none is live, then newest first. */
function* historyOf(bucket: string, generations: ObjectResource[]): Iterable<VersionRecord> {
  // Generations are int64 digits: longer is newer, then text order.
  const infos = generations
    .map((g) => ({ g, info: objectInfo(bucket, g) }))
    .sort(
      (a, b) =>
        b.info.version.length - a.info.version.length || (a.info.version < b.info.version ? 1 : -1),
    );
  const newest = infos[0] as (typeof infos)[number];
  if (infos.every(({ g }) => g.timeDeleted !== undefined)) {
    const when = newest.g.timeDeleted as string;
    yield {
      key: newest.info.key,
      versionId: `deleted@${newest.info.version}`,
      size: null,
      current: true,
      lastModified: new Date(when),
    };
  }
  for (const { g, info } of infos) {
    yield {
      key: info.key,
      versionId: info.version,
      size: info.size,
      current: g.timeDeleted === undefined,
      etag: info.etag,
      lastModified: info.lastModified,
    };
  }
}
