/**
 * {@link AzureStore}: the `az://container/key` driver over `@azure/storage-blob`.
 *
 * A thin translation of the twelve primitives into Blob service calls; everything else (folders,
 * walk, fetch and the cache, offline mode, commits, managed stages) is the base's. Choices:
 *
 * - The SDK loads on first use (sdk.ts); reads signed with an account key go lean (lean.ts).
 * - The cache's version is the ETag. Azure's ETag is a write marker, not a content digest: a
 *   server-side copy gets a new one, and Set Blob Properties changes a version's ETag without a
 *   new version. So version records (`_history`) carry no ETag, and commits identify a file by
 *   version ID and size alone (a recorded ETag would fail branch completion and pinned reads
 *   after a properties change). Content-MD5 is not exposed: block-list blobs have none.
 * - **Versions fail closed.** Azurite (and an account without blob versioning) writes blobs with
 *   no version ID and serves the current blob for any `versionid`. Rather than trust a probe, every
 *   answer is checked: a version read must come back with `x-ms-version-id` equal to the ID asked
 *   for, a version listing must give every blob a version ID, `_versionOf` needs one on HEAD —
 *   else {@link NotSupported}. No write is needed (read-only credentials can read pins), and no
 *   store can serve a current blob as a version. A deleted blob is one whose versions have none
 *   current: `_history` gives it a delete marker (`size: null`, current), which commits skip.
 * - Listings come in UTF-8 byte order whatever the service's (order.ts).
 * - `_create` is Put Blob with `If-None-Match: *` (409 and 412 both Exists), which Azure, Azurite
 *   and the versions server all honour: the create mode is `atomic`.
 * - Large puts are staged blocks (blocks.ts) on the one upload engine.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { addAbortSignal, type Readable, Transform } from 'node:stream';
import { debuglog } from 'node:util';
import type { BlobServiceClient, BlockBlobClient } from '@azure/storage-blob';
import type {
  Capabilities,
  CreateMode,
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
import {
  isAbort,
  NotFound,
  NotSupported,
  PreconditionFailed,
  SourceError,
  StoreError,
} from '../../src/errors.js';
import { ObjectStore } from '../../src/object-store.js';
import { RETRY_ATTEMPTS, RETRY_BASE_MS, RETRY_CAP_MS, sleep } from '../../src/retry.js';
import { AzureBlocks } from './blocks.js';
import { type AzureConfig, type AzureStoreOptions, resolveAzureConfig } from './config.js';
import { type AzureErrorContext, azUriText, mapAzureError } from './errors.js';
import { answerInfo, encodeBlobName, type LeanListPage, LeanReads, quoted } from './lean.js';
import { Utf8Order } from './order.js';
import { type BlobSdk, defaultCredential, loadBlobSdk } from './sdk.js';

const azdebug = debuglog('provcat:azure');

/** Where `makeBucket` writes its versioning probe (removed again). */
export const PROBE_PREFIX = '.provcat/probe/';

function info(
  key: string,
  r: {
    etag?: string | undefined;
    contentLength?: number | undefined;
    versionId?: string | undefined;
    lastModified?: Date | undefined;
  },
  size = r.contentLength,
): ObjectInfo {
  if (!r.etag || size === undefined)
    throw new StoreError(`the answer for ${key} lacks an ETag or a size`);
  const etag = quoted(r.etag);
  return { key, size, version: etag, etag, versionId: r.versionId, lastModified: r.lastModified };
}

/**
 * The Azure Blob driver (see the module comment). Missing blobs raise {@link NotFound}, refusals
 * {@link PermissionDenied}, other failures {@link StoreError} with `status` and the SDK's error as
 * `cause`; aborts pass through. Offline, every primitive raises `OfflineMiss` before any request.
 */
export class AzureStore extends ObjectStore {
  readonly scheme = 'az';
  readonly driver = 'azure';
  /** Versions work on containers of accounts with blob versioning; byte ranges always. */
  readonly capabilities: Capabilities = { versions: true, ranges: true };
  /** The blob service URL. */
  readonly endpoint: string;
  private readonly config: AzureConfig | undefined;
  private readonly injected: BlobServiceClient | undefined;
  private built: Promise<BlobServiceClient> | undefined;
  private readonly lean: LeanReads | undefined;
  private readonly blockLists = new Map<string, AzureBlocks>();

  /** Throws RangeError for a configuration that names no account. Makes no network call. */
  constructor(options: AzureStoreOptions = {}) {
    super(options);
    this.injected = options.client;
    this.config = options.client ? undefined : resolveAzureConfig(options);
    this.endpoint = this.config?.endpoint ?? (options.client as BlobServiceClient).url;
    const auth = this.config?.auth;
    if (auth?.kind === 'key' && this.config?.leanReads) {
      this.lean = new LeanReads(
        this.endpoint,
        auth.account,
        auth.key,
        Math.max(16, this.concurrency),
        (m) => this.debug(m),
      );
    }
  }

  // ---- the client and one call ---------------------------------------------------------------

  /** The service client: the injected one, or one built on first call (no network call). */
  client(): Promise<BlobServiceClient> {
    if (this.injected) return Promise.resolve(this.injected);
    this.built ??= this.build().catch((error: unknown) => {
      this.built = undefined;
      throw error;
    });
    return this.built;
  }

  private async build(): Promise<BlobServiceClient> {
    const sdk = await loadBlobSdk();
    const c = this.config as AzureConfig;
    const options = {
      retryOptions: {
        maxTries: RETRY_ATTEMPTS,
        retryDelayInMs: RETRY_BASE_MS,
        maxRetryDelayInMs: RETRY_CAP_MS,
      },
      userAgentOptions: { userAgentPrefix: 'provcat' },
    };
    this.debug(`client: ${c.endpoint} (${c.auth.kind})`);
    if (c.auth.kind === 'key') {
      return new sdk.BlobServiceClient(
        c.endpoint,
        new sdk.StorageSharedKeyCredential(c.auth.account, c.auth.key),
        options,
      );
    }
    if (c.auth.kind === 'sas')
      return new sdk.BlobServiceClient(`${c.endpoint}?${c.auth.sas}`, undefined, options);
    return new sdk.BlobServiceClient(
      c.endpoint,
      c.auth.credential ?? (await defaultCredential()),
      options,
    );
  }

  /** Release the lean path's sockets (an injected client is the caller's). */
  override async close(): Promise<void> {
    this.lean?.close();
  }

  private debug(message: string): void {
    azdebug(message);
    this.logger(message);
  }

  /** One SDK interaction: offline guard, client, the error mapping (aborts untouched). */
  private async call<T>(
    ctx: AzureErrorContext,
    fn: (service: BlobServiceClient, sdk: BlobSdk) => Promise<T>,
  ): Promise<T> {
    this.requireOnline(ctx.op, azUriText(ctx.container, ctx.key));
    const [service, sdk] = await Promise.all([this.client(), loadBlobSdk()]);
    try {
      return await fn(service, sdk);
    } catch (error) {
      if (isAbort(error)) throw error;
      throw mapAzureError(error, ctx);
    }
  }

  /** The client of one blob; a name with dot segments gets a URL the SDK would not normalize. */
  private blob(
    service: BlobServiceClient,
    sdk: BlobSdk,
    container: string,
    key: string,
  ): BlockBlobClient {
    const c = service.getContainerClient(container);
    if (!key.split('/').some((s) => s === '.' || s === '..')) return c.getBlockBlobClient(key);
    const url = new URL(c.url);
    url.pathname = `${url.pathname}/${encodeBlobName(key)}`;
    // The container's pipeline (credential, retries) is protected in the SDK's types only.
    return new sdk.BlockBlobClient(
      url.toString(),
      (c as unknown as { pipeline: import('@azure/storage-blob').Pipeline }).pipeline,
    );
  }

  private unversioned(
    op: string,
    container: string,
    key: string | undefined,
    why: string,
  ): NotSupported {
    const uri = azUriText(container, key);
    return new NotSupported(
      `${op} ${uri}: the container keeps no versions (${why}); pins, commits and branches need ` +
        'blob versioning on the storage account (Azurite has none)',
      { uri },
    );
  }

  // ---- core primitives -----------------------------------------------------------------------

  /** Get Blob Properties: size, the ETag as version. {@link NotFound} when absent. */
  override async _head(
    container: string,
    key: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    return this.call({ container, key, op: 'head' }, async (s, sdk) =>
      info(
        key,
        await this.blob(s, sdk, container, key).getProperties({ abortSignal: options.signal }),
      ),
    );
  }

  /**
   * List Blobs pages (`limit` at most 5,000), flat or one level, following markers, re-ordered
   * into UTF-8 byte order (order.ts). A missing container yields nothing.
   */
  override async *_pages(
    container: string,
    prefix: string,
    options: PagesOptions = {},
  ): AsyncIterable<ListPage> {
    this.requireOnline('list', azUriText(container, prefix));
    const limit = Math.min(5000, Math.max(1, Math.floor(options.limit ?? 5000)));
    type Entry = { name: string; info?: ObjectInfo };
    const order = new Utf8Order<Entry>(prefix.length, (e) => e.name);
    let marker: string | undefined;
    for (let first = true; ; first = false) {
      let page: LeanListPage;
      try {
        page = await this.listPage(
          container,
          prefix,
          options.delimiter,
          marker,
          limit,
          options.signal,
        );
      } catch (error) {
        if (first && error instanceof NotFound) return;
        throw error;
      }
      const entries: Entry[] = page.prefixes.map((name) => ({ name }));
      for (const blob of page.blobs) entries.push({ name: blob.key, info: blob });
      const ready = order.push(entries);
      if (page.next === undefined) ready.push(...order.end());
      for (let i = 0; i < ready.length; i += limit) {
        const chunk = ready.slice(i, i + limit);
        yield {
          prefixes: chunk.flatMap((e) => (e.info ? [] : [e.name])),
          objects: chunk.flatMap((e) => (e.info ? [e.info] : [])),
        };
      }
      if (page.next === undefined) return;
      marker = page.next;
    }
  }

  private async listPage(
    container: string,
    prefix: string,
    delimiter: string | undefined,
    marker: string | undefined,
    limit: number,
    signal: AbortSignal | undefined,
  ): Promise<LeanListPage> {
    const lean = await this.lean?.list(container, { prefix, delimiter, marker, limit, signal });
    if (lean) return lean;
    return this.call({ container, key: prefix, op: 'list' }, async (s) => {
      const c = s.getContainerClient(container);
      const p = prefix === '' ? undefined : prefix;
      const pages = delimiter
        ? c.listBlobsByHierarchy(delimiter, { prefix: p, abortSignal: signal })
        : c.listBlobsFlat({ prefix: p, abortSignal: signal });
      const r = (await pages.byPage({ continuationToken: marker, maxPageSize: limit }).next())
        .value;
      const segment = r.segment as {
        blobItems: import('@azure/storage-blob').BlobItem[];
        blobPrefixes?: { name: string }[];
      };
      return {
        prefixes: (segment.blobPrefixes ?? []).map((x) => x.name),
        blobs: segment.blobItems.map((b) => info(b.name, b.properties)),
        next: r.continuationToken || undefined,
      };
    });
  }

  /**
   * Get Blob, streamed (or read whole up to `wholeUpTo` bytes on the lean path). With a range,
   * one request with `x-ms-range`; the Content-Range sent is returned as is. A body that ends
   * short or whose connection drops fails with a {@link StoreError}. {@link NotFound} when absent.
   */
  override async _get(
    container: string,
    key: string,
    options: GetOptions = {},
  ): Promise<GetResult> {
    return this.getBlob(container, key, undefined, options, 'get');
  }

  private async getBlob(
    container: string,
    key: string,
    versionId: string | undefined,
    options: GetOptions,
    op: string,
  ): Promise<GetResult> {
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
    const uri = azUriText(container, key);
    this.requireOnline(op, uri);
    const check = (r: GetResult): GetResult => {
      if (versionId === undefined || r.info.versionId === versionId) return r;
      r.release?.();
      if (!r.bytes) r.body.destroy();
      throw this.unversioned(
        op,
        container,
        key,
        `asked for version ${versionId}, the store answered with ${r.info.versionId ?? 'no version ID'}`,
      );
    };
    if (this.lean) {
      const r = await this.lean
        .get(container, key, { versionId, range, wholeUpTo: options.wholeUpTo, signal })
        .catch((error: unknown) => {
          throw isAbort(error) ? error : mapAzureError(error, { container, key, op });
        });
      if (r === 404) throw new NotFound(`${op} ${uri}: not found (HTTP 404)`, { uri });
      if (r) return check(r);
    }
    return this.call({ container, key, op }, async (s, sdk) => {
      const blob = this.blob(s, sdk, container, key);
      const r = await (versionId ? blob.withVersion(versionId) : blob).download(
        range?.start ?? 0,
        range && range.end - range.start,
        { abortSignal: signal },
      );
      const source = r.readableStreamBody as Readable | undefined;
      if (!source || r.contentLength === undefined) {
        source?.destroy();
        throw new StoreError(`${op} ${uri}: the answer has no body or no Content-Length`, { uri });
      }
      const headers = {
        etag: r.etag,
        'content-range': r.contentRange,
        'x-ms-version-id': r.versionId,
      };
      const got = answerInfo(key, headers, r.contentLength);
      if (!got) throw new StoreError(`${op} ${uri}: the answer has no ETag`, { uri });
      got.lastModified = r.lastModified;
      return check({
        body: exactBody(source, r.contentLength, uri, signal),
        info: got,
        contentLength: r.contentLength,
        contentRange: r.contentRange,
      });
    });
  }

  /**
   * Write one blob: one Put Blob up to `multipartThreshold` (or a stream that ends within one
   * part), else staged blocks on the upload engine (blocks.ts). A source that is not exactly its
   * declared size fails with {@link SourceError}; nothing is written then.
   */
  override async _put(
    container: string,
    key: string,
    source: PutSource,
    options: PutOptions = {},
  ): Promise<ObjectInfo> {
    if (
      source instanceof Uint8Array &&
      options.size !== undefined &&
      options.size !== source.length
    ) {
      throw new RangeError(`size ${options.size} given for ${source.length} bytes`);
    }
    this.requireOnline('put', azUriText(container, key));
    return this.putInParts(container, key, source, options, (one, o) =>
      this.putBlob(container, key, one, o.size as number, o, 'put'),
    );
  }

  private async putBlob(
    container: string,
    key: string,
    source: PutSource,
    size: number,
    options: PutOptions,
    op: 'put' | 'create',
  ): Promise<ObjectInfo> {
    const request = new AbortController();
    const onAbort = () => request.abort(options.signal?.reason);
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    let failed: unknown;
    const checked = (input: Readable) => {
      const out = exactSource(input, size, options.signal);
      out.on('error', (error) => {
        failed ??= error;
        request.abort(error);
      });
      return out;
    };
    let sent = false;
    const body =
      source instanceof Uint8Array
        ? Buffer.from(source.buffer, source.byteOffset, source.byteLength)
        : typeof source === 'string'
          ? () => checked(createReadStream(source))
          : () => {
              if (sent) throw new SourceError('a stream source cannot be sent twice');
              sent = true;
              return checked(source);
            };
    try {
      return await this.call({ container, key, op }, async (s, sdk) => {
        const r = await this.blob(s, sdk, container, key).upload(body, size, {
          blobHTTPHeaders: { blobContentType: options.contentType },
          conditions: op === 'create' ? { ifNoneMatch: '*' } : undefined,
          abortSignal: request.signal,
          onProgress: (p) => options.onProgress?.(p.loadedBytes),
        });
        return info(key, r, size);
      });
    } catch (error) {
      if (failed !== undefined && !options.signal?.aborted) {
        throw failed instanceof SourceError
          ? failed
          : new SourceError(`the source failed: ${String(failed)}`, { cause: failed });
      }
      throw error;
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Delete Blob (on a versioned account the versions stay); {@link NotFound} when absent. */
  override async _delete(
    container: string,
    key: string,
    options: SignalOptions = {},
  ): Promise<void> {
    await this.call({ container, key, op: 'delete' }, (s, sdk) =>
      this.blob(s, sdk, container, key).delete({ abortSignal: options.signal }),
    );
  }

  /**
   * Delete only if still `version` (Delete Blob with `If-Match`: {@link PreconditionFailed} when
   * it moved). With `versionId`, exactly that version goes, after its ETag was compared.
   */
  override async _deleteIf(
    container: string,
    key: string,
    options: DeleteIfOptions,
  ): Promise<void> {
    const { versionId, signal } = options;
    if (versionId !== undefined) {
      const head = await this._headVersion(container, key, versionId, options);
      if (head.version !== quoted(options.version)) {
        const uri = azUriText(container, key);
        throw new PreconditionFailed(
          `delete ${uri}: it is ${head.version} now, not ${options.version}`,
          { uri },
        );
      }
    }
    await this.call({ container, key, op: 'delete' }, (s, sdk) => {
      const blob = this.blob(s, sdk, container, key);
      return versionId === undefined
        ? blob.delete({ conditions: { ifMatch: quoted(options.version) }, abortSignal: signal })
        : blob.withVersion(versionId).delete({ abortSignal: signal });
    });
  }

  /**
   * A read-only SAS URL of one blob valid for `expiresIn` seconds: a service SAS signed with the
   * account key, or a user-delegation SAS with a token credential. A connection string's own SAS
   * is never handed out: {@link NotSupported}.
   */
  override async _presign(
    container: string,
    key: string,
    options: PresignPrimitiveOptions,
  ): Promise<string> {
    return this.call({ container, key, op: 'presign' }, async (s, sdk) => {
      const blob = this.blob(s, sdk, container, key);
      const expiresOn = new Date(Date.now() + options.expiresIn * 1000);
      const permissions = sdk.BlobSASPermissions.parse('r');
      if (s.credential instanceof sdk.StorageSharedKeyCredential)
        return blob.generateSasUrl({ permissions, expiresOn });
      if (s.credential instanceof sdk.AnonymousCredential) {
        throw new NotSupported(
          `presign ${azUriText(container, key)}: needs an account key or a token credential, not a SAS`,
        );
      }
      const startsOn = new Date(Date.now() - 5 * 60_000);
      const delegation = await s.getUserDelegationKey(startsOn, expiresOn);
      const sas = sdk.generateBlobSASQueryParameters(
        { containerName: container, blobName: key, permissions, startsOn, expiresOn },
        delegation,
        s.accountName,
      );
      return `${blob.url}?${sas.toString()}`;
    });
  }

  /** Create a container (idempotent); with `versioning`, check the account keeps versions. */
  override async makeBucket(
    container: string,
    options: { versioning?: boolean; signal?: AbortSignal } = {},
  ): Promise<void> {
    await this.call({ container, op: 'makeBucket' }, async (s) => {
      try {
        await s.getContainerClient(container).create({ abortSignal: options.signal });
      } catch (error) {
        if ((error as { code?: string }).code !== 'ContainerAlreadyExists') throw error;
      }
    });
    if (!options.versioning) return;
    const key = `${PROBE_PREFIX}${randomUUID()}`;
    const probe = await this._put(container, key, Buffer.from('provcat versioning probe\n'));
    await this.call({ container, key, op: 'probe cleanup' }, async (s, sdk) => {
      const blob = this.blob(s, sdk, container, key);
      await blob.delete();
      if (probe.versionId) await blob.withVersion(probe.versionId).delete();
    });
    if (!probe.versionId) {
      throw this.unversioned(
        'makeBucket',
        container,
        undefined,
        'a write came back without x-ms-version-id; the container was made, but versioning is an account setting: `az storage account blob-service-properties update --enable-versioning true`',
      );
    }
  }

  // ---- version primitives --------------------------------------------------------------------

  /** The version ID of the current blob (HEAD); {@link NotSupported} when the store sends none. */
  override async _versionOf(
    container: string,
    key: string,
    options: SignalOptions = {},
  ): Promise<string> {
    const head = await this._head(container, key, options);
    if (head.versionId === undefined)
      throw this.unversioned('versionOf', container, key, 'HEAD answered without x-ms-version-id');
    return head.versionId;
  }

  /**
   * List Blobs with `include=versions`, every page: per blob its versions newest first, after a
   * delete marker when none is current; blobs in UTF-8 order. {@link NotSupported} for a blob
   * listed without a version ID. A missing container yields nothing.
   */
  override async *_history(
    container: string,
    prefix: string,
    options: SignalOptions = {},
  ): AsyncIterable<VersionRecord> {
    this.requireOnline('history', azUriText(container, prefix));
    const order = new Utf8Order<VersionRecord[]>(prefix.length, (g) => (g[0] as VersionRecord).key);
    const pages = (await this.client())
      .getContainerClient(container)
      .listBlobsFlat({
        prefix: prefix === '' ? undefined : prefix,
        includeVersions: true,
        abortSignal: options.signal,
      })
      .byPage({ maxPageSize: 5000 });
    let open: VersionRecord[] = [];
    const close = (): VersionRecord[][] => {
      if (open.length === 0) return [];
      const group = open.reverse();
      open = [];
      const newest = group[0] as VersionRecord;
      if (!group.some((v) => v.current))
        group.unshift({
          key: newest.key,
          versionId: `deleted:${newest.versionId}`,
          size: null,
          current: true,
        });
      return [group];
    };
    for (;;) {
      let r: Awaited<ReturnType<typeof pages.next>>;
      try {
        r = await pages.next();
      } catch (error) {
        if (isAbort(error)) throw error;
        const mapped = mapAzureError(error, { container, key: prefix, op: 'history' });
        if (mapped instanceof NotFound) return;
        throw mapped;
      }
      if (r.done) break;
      const groups: VersionRecord[][] = [];
      for (const b of r.value.segment.blobItems) {
        if (!b.versionId)
          throw this.unversioned(
            'history',
            container,
            b.name,
            'a blob is listed without a version ID',
          );
        if (open.length > 0 && (open[0] as VersionRecord).key !== b.name) groups.push(...close());
        const size = b.properties.contentLength ?? 0;
        open.push({
          key: b.name,
          versionId: b.versionId,
          size,
          current: b.isCurrentVersion === true,
          lastModified: b.properties.lastModified,
        });
      }
      for (const g of order.push(groups)) yield* g;
    }
    for (const g of [...order.push(close()), ...order.end()]) yield* g;
  }

  /** Get Blob Properties of one version; {@link NotSupported} when the answer is not that version. */
  override async _headVersion(
    container: string,
    key: string,
    versionId: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    const head = await this.call({ container, key, op: 'headVersion' }, async (s, sdk) =>
      info(
        key,
        await this.blob(s, sdk, container, key)
          .withVersion(versionId)
          .getProperties({ abortSignal: options.signal }),
      ),
    );
    if (head.versionId !== versionId) {
      throw this.unversioned(
        'headVersion',
        container,
        key,
        `asked for version ${versionId}, the store answered with ${head.versionId ?? 'no version ID'}`,
      );
    }
    return head;
  }

  /** Get Blob of one version (optionally a range); checked as {@link _headVersion} is. */
  override async _getVersion(
    container: string,
    key: string,
    versionId: string,
    options: GetOptions = {},
  ): Promise<GetResult> {
    return this.getBlob(container, key, versionId, options, 'getVersion');
  }

  /** Put Blob with `If-None-Match: *`: {@link Exists} (409 or 412) when a current blob has the key. */
  override async _create(
    container: string,
    key: string,
    body: Uint8Array,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    return this.putBlob(container, key, body, body.length, options, 'create');
  }

  /**
   * Copy Blob of the current blob or one version (`?versionid=` source) to `toKey`, conditional
   * on the source's ETag (a source replaced meanwhile fails the copy, {@link PreconditionFailed});
   * a pending copy is waited for.
   */
  override async _copy(
    container: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    const source = versionId
      ? await this._headVersion(container, key, versionId, options)
      : await this._head(container, key, options);
    return this.call({ container, key, op: versionId ? 'copyVersion' : 'copy' }, async (s, sdk) => {
      const from = this.blob(s, sdk, container, key);
      const to = this.blob(s, sdk, container, toKey);
      const poller = await to.beginCopyFromURL(
        (versionId ? from.withVersion(versionId) : from).url,
        {
          sourceConditions: { ifMatch: source.etag },
          abortSignal: options.signal,
        },
      );
      let r: { copyStatus?: string; etag?: string; versionId?: string; lastModified?: Date } =
        await poller.pollUntilDone();
      for (let attempt = 1; r.copyStatus === 'pending'; attempt++) {
        await sleep(Math.min(5000, 100 * 2 ** attempt), options.signal);
        r = await to.getProperties({ abortSignal: options.signal });
      }
      if (r.copyStatus !== undefined && r.copyStatus !== 'success') {
        throw new StoreError(`copy ${azUriText(container, key)} to ${toKey}: ${r.copyStatus}`);
      }
      return info(toKey, r, source.size);
    });
  }

  /** `atomic`: Azure honours `If-None-Match: *` (see the module comment). */
  override async _createMode(_container: string): Promise<CreateMode> {
    return 'atomic';
  }

  /** Staged blocks in `container` (blocks.ts), for large puts and managed uploads. */
  override partProtocol(container: string): AzureBlocks {
    let blocks = this.blockLists.get(container);
    if (!blocks) {
      blocks = new AzureBlocks(
        {
          blob: async (key, op) => {
            this.requireOnline(op, azUriText(container, key));
            const [s, sdk] = await Promise.all([this.client(), loadBlobSdk()]);
            return this.blob(s, sdk, container, key);
          },
          uncommitted: (prefix, signal) => this.uncommitted(container, prefix, signal),
        },
        container,
      );
      this.blockLists.set(container, blocks);
    }
    return blocks;
  }

  /** Blobs holding only uncommitted blocks: listed with `include=uncommittedblobs`, size 0, and no HEAD. */
  private async *uncommitted(
    container: string,
    prefix: string,
    signal?: AbortSignal,
  ): AsyncIterable<{ key: string; lastModified?: Date | undefined }> {
    const service = await this.call({ container, key: prefix, op: 'listUploads' }, async (s) => s);
    const pages = service
      .getContainerClient(container)
      .listBlobsFlat({ prefix, includeUncommitedBlobs: true, abortSignal: signal });
    try {
      for await (const b of pages) {
        if (b.properties.contentLength !== 0) continue;
        try {
          await this._head(container, b.name, { signal });
        } catch (error) {
          if (error instanceof NotFound)
            yield { key: b.name, lastModified: b.properties.lastModified };
          else throw error;
        }
      }
    } catch (error) {
      if (isAbort(error)) throw error;
      throw mapAzureError(error, { container, key: prefix, op: 'listUploads' });
    }
  }
}

/** A SDK body as a stream of exactly `expected` bytes: a drop or an early end is a {@link StoreError}. */
function exactBody(
  source: Readable,
  expected: number,
  uri: string,
  signal: AbortSignal | undefined,
): Readable {
  let seen = 0;
  const out = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      done(
        seen > expected
          ? new StoreError(`${uri}: the body is longer than its ${expected} bytes`, { uri })
          : null,
        chunk,
      );
    },
    flush(done) {
      done(
        seen === expected
          ? null
          : new StoreError(`${uri}: the body ended after ${seen} of ${expected} bytes`, { uri }),
      );
    },
  });
  source.on('error', (error) => {
    // The SDK reports a dropped connection as an AbortError: only the caller's abort is one.
    out.destroy(
      signal?.aborted
        ? error
        : new StoreError(
            `${uri}: the connection failed after ${seen} of ${expected} bytes: ${error.message}`,
            { uri, cause: error },
          ),
    );
  });
  out.on('close', () => source.destroy());
  source.pipe(out);
  if (signal) addAbortSignal(signal, out);
  return out;
}

/** `input` checked to be exactly `size` bytes ({@link SourceError} otherwise). */
function exactSource(input: Readable, size: number, signal: AbortSignal | undefined): Readable {
  let seen = 0;
  const out = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      done(
        seen > size
          ? new SourceError(`the source is longer than its declared size of ${size} bytes`)
          : null,
        chunk,
      );
    },
    flush(done) {
      done(
        seen === size
          ? null
          : new SourceError(`the source ended after ${seen} of its declared ${size} bytes`),
      );
    },
  });
  input.on('error', (error) =>
    out.destroy(new SourceError(`the source failed: ${error.message}`, { cause: error })),
  );
  out.on('close', () => input.destroy());
  input.pipe(out);
  if (signal) addAbortSignal(signal, out);
  return out;
}
