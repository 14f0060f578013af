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
 *   no version ID and serves the current blob for any `versionid`. Rather than trust a probe,
 *   every answer is checked: a version read must come back with `x-ms-version-id` equal to the ID
 *   asked for, a version listing must give every blob a version ID, `_versionOf` needs one on
 *   HEAD — else {@link NotSupported}. No write is needed (read-only credentials can read pins),
 *   and no store can pass a current blob off as a version. A deleted blob is one whose versions
 *   have none current: `_history` gives it a delete marker (`size: null`, current).
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
import type { BlobItem, BlobServiceClient, BlockBlobClient, Pipeline } from '@azure/storage-blob';
import type * as D from '../../src/driver.js';
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
type Opts = D.SignalOptions;

/** Where `makeBucket` writes its versioning probe (removed again). */
export const PROBE_PREFIX = '.provcat/probe/';

/** The ObjectInfo of an SDK answer (ETag quoted, as headers give it). */
function info(key: string, r: Parameters<typeof answerInfo>[1], size?: number): D.ObjectInfo {
  const got = answerInfo(key, r, size ?? (r['content-length'] as number | undefined));
  if (!got) throw new StoreError(`the answer for ${azUriText('?', key)} lacks an ETag or a size`);
  return got;
}
const fields = (r: { etag?: string; contentLength?: number; versionId?: string }) => ({
  etag: r.etag,
  'content-length': r.contentLength,
  'x-ms-version-id': r.versionId,
});

/** A rejection handler: aborts as they are, anything else through the one error mapping. */
const mapped = (ctx: AzureErrorContext) => (error: unknown) => {
  throw isAbort(error) ? error : mapAzureError(error, ctx);
};

/**
 * The Azure Blob driver (see the module comment). Missing blobs raise {@link NotFound}, refusals
 * `PermissionDenied`, other failures {@link StoreError} with `status` and the SDK's error as
 * `cause`; aborts pass through. Offline, every primitive raises `OfflineMiss` before any request.
 */
export class AzureStore extends ObjectStore {
  readonly scheme = 'az';
  readonly driver = 'azure';
  /**
   * Versions work on containers of accounts with blob versioning; byte ranges always; a put's
   * SHA-256 is kept as blob metadata `sha256`, and comes back on HEAD and in listings.
   */
  readonly capabilities: D.Capabilities = { versions: true, ranges: true, sha256Metadata: true };
  /** The blob service URL. */
  readonly endpoint: string;
  private readonly config: AzureConfig | undefined;
  private readonly injected: BlobServiceClient | undefined;
  private built: Promise<BlobServiceClient> | undefined;
  private readonly lean: LeanReads | undefined;
  private readonly blockLists = new Map<string, AzureBlocks>();

  /** Whether reads (Get Blob, List Blobs) go the lean path (lean.ts) rather than the SDK. */
  get leanReads(): boolean {
    return this.lean !== undefined;
  }

  /** Throws RangeError for a configuration that names no account. Makes no network call. */
  constructor(options: AzureStoreOptions = {}) {
    super(options);
    this.injected = options.client;
    this.config = options.client ? undefined : resolveAzureConfig(options);
    this.endpoint = this.config?.endpoint ?? (options.client as BlobServiceClient).url;
    const auth = this.config?.auth;
    if (auth?.kind === 'key' && this.config?.leanReads) {
      const sockets = Math.max(16, this.concurrency);
      this.lean = new LeanReads(this.endpoint, auth.account, auth.key, sockets, (m) =>
        this.debug(m),
      );
    }
  }

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
    const { endpoint, auth } = this.config as AzureConfig;
    const options = {
      retryOptions: {
        maxTries: RETRY_ATTEMPTS,
        retryDelayInMs: RETRY_BASE_MS,
        maxRetryDelayInMs: RETRY_CAP_MS,
      },
      userAgentOptions: { userAgentPrefix: 'provcat' },
    };
    this.debug(`client: ${endpoint} (${auth.kind})`);
    const credential =
      auth.kind === 'key'
        ? new sdk.StorageSharedKeyCredential(auth.account, auth.key)
        : auth.kind === 'token'
          ? (auth.credential ?? (await defaultCredential()))
          : undefined;
    const url = auth.kind === 'sas' ? `${endpoint}?${auth.sas}` : endpoint;
    return new sdk.BlobServiceClient(url, credential, options);
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

  /** One blob's client; a name with dot segments gets a URL the SDK would not normalize. */
  private blob(s: BlobServiceClient, sdk: BlobSdk, c: string, key: string): BlockBlobClient {
    const container = s.getContainerClient(c);
    if (!key.split('/').some((x) => x === '.' || x === '..')) {
      return container.getBlockBlobClient(key);
    }
    const url = new URL(container.url);
    url.pathname = `${url.pathname}/${encodeBlobName(key)}`;
    // The container's pipeline (credential, retries) is protected in the SDK's types only.
    return new sdk.BlockBlobClient(
      url.toString(),
      (container as unknown as { pipeline: Pipeline }).pipeline,
    );
  }

  private notThat(op: string, c: string, key: string, id: string, got: string | undefined) {
    const why = `asked for version ${id}, the store answered with ${got ?? 'no version ID'}`;
    return this.unversioned(op, c, key, why);
  }

  private unversioned(op: string, c: string, key: string | undefined, why: string): NotSupported {
    const uri = azUriText(c, key);
    return new NotSupported(
      `${op} ${uri}: the container keeps no versions (${why}); pins, commits and branches need ` +
        'blob versioning on the storage account (Azurite has none)',
      { uri },
    );
  }

  // ---- core primitives -----------------------------------------------------------------------

  /** Get Blob Properties: size, the ETag as version. {@link NotFound} when absent. */
  override async _head(c: string, key: string, o: Opts = {}): Promise<D.ObjectInfo> {
    return this.call({ container: c, key, op: 'head' }, async (s, sdk) => {
      const r = await this.blob(s, sdk, c, key).getProperties({ abortSignal: o.signal });
      return { ...info(key, fields(r)), lastModified: r.lastModified, sha256: r.metadata?.sha256 };
    });
  }

  /**
   * List Blobs pages (`limit` at most 5,000), flat or one level, following markers, re-ordered
   * into UTF-8 byte order (order.ts). A missing container yields nothing.
   */
  override async *_pages(c: string, prefix: string, o: D.PagesOptions = {}) {
    this.requireOnline('list', azUriText(c, prefix));
    const limit = Math.min(5000, Math.max(1, Math.floor(o.limit ?? 5000)));
    type Entry = { name: string; info?: D.ObjectInfo };
    const order = new Utf8Order<Entry>(prefix.length, (e) => e.name);
    let marker: string | undefined;
    for (;;) {
      let page: LeanListPage;
      try {
        page = await this.listPage(c, prefix, o.delimiter, marker, limit, o.signal);
      } catch (error) {
        if (marker === undefined && error instanceof NotFound) return;
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
    c: string,
    prefix: string,
    delimiter: string | undefined,
    marker: string | undefined,
    limit: number,
    signal: AbortSignal | undefined,
  ): Promise<LeanListPage> {
    const lean = await this.lean?.list(c, { prefix, delimiter, marker, limit, signal });
    if (lean) return lean;
    return this.call({ container: c, key: prefix, op: 'list' }, async (s) => {
      const container = s.getContainerClient(c);
      const options = { prefix: prefix || undefined, includeMetadata: true, abortSignal: signal };
      const pages = delimiter
        ? container.listBlobsByHierarchy(delimiter, options)
        : container.listBlobsFlat(options);
      const r = (await pages.byPage({ continuationToken: marker, maxPageSize: limit }).next())
        .value;
      const segment = r.segment as { blobItems: BlobItem[]; blobPrefixes?: { name: string }[] };
      const blobs = segment.blobItems.map((b) => ({
        ...info(b.name, fields(b.properties)),
        lastModified: b.properties.lastModified,
        sha256: b.metadata?.sha256,
      }));
      const prefixes = (segment.blobPrefixes ?? []).map((x) => x.name);
      return { prefixes, blobs, next: r.continuationToken || undefined };
    });
  }

  /**
   * Get Blob, streamed (or read whole up to `wholeUpTo` bytes on the lean path). With a range,
   * one request with `x-ms-range`; the Content-Range sent is returned as is. A body that ends
   * short or whose connection drops fails with a {@link StoreError}. {@link NotFound} when absent.
   */
  override async _get(c: string, key: string, o: D.GetOptions = {}): Promise<D.GetResult> {
    return this.getBlob(c, key, undefined, o, 'get');
  }

  private async getBlob(
    c: string,
    key: string,
    versionId: string | undefined,
    o: D.GetOptions,
    op: string,
  ): Promise<D.GetResult> {
    const { range, signal } = o;
    if (
      range &&
      !(range.start >= 0 && range.end > range.start && Number.isSafeInteger(range.end))
    ) {
      throw new RangeError(`bad byte range [${range.start}, ${range.end})`);
    }
    const uri = azUriText(c, key);
    this.requireOnline(op, uri);
    const check = (r: D.GetResult): D.GetResult => {
      if (versionId === undefined || r.info.versionId === versionId) return r;
      if (r.bytes) r.release?.();
      else r.body.destroy();
      throw this.notThat(op, c, key, versionId, r.info.versionId);
    };
    const lean = await this.lean
      ?.get(c, key, { versionId, range, wholeUpTo: o.wholeUpTo, signal })
      .catch(mapped({ container: c, key, op }));
    if (lean === 404) throw new NotFound(`${op} ${uri}: not found (HTTP 404)`, { uri });
    if (lean) return check(lean);
    return this.call({ container: c, key, op }, async (s, sdk) => {
      const blob = this.blob(s, sdk, c, key);
      const count = range && range.end - range.start;
      const r = await (versionId ? blob.withVersion(versionId) : blob).download(
        range?.start ?? 0,
        count,
        { abortSignal: signal },
      );
      const source = r.readableStreamBody as Readable | undefined;
      const length = r.contentLength as number;
      if (!source) throw new StoreError(`${op} ${uri}: the answer has no body`, { uri });
      const got = info(key, { ...fields(r), 'content-range': r.contentRange });
      got.lastModified = r.lastModified;
      // The SDK reports a dropped connection as an AbortError: only the caller's is one.
      const body = exact(source, length, signal, (why, cause) =>
        signal?.aborted && cause ? cause : new StoreError(`${op} ${uri}: ${why}`, { uri, cause }),
      );
      return check({ body, info: got, contentLength: length, contentRange: r.contentRange });
    });
  }

  /**
   * Write one blob: one Put Blob up to `multipartThreshold` (or a stream that ends within one
   * part), else staged blocks on the upload engine (blocks.ts). A source that is not exactly its
   * declared size fails with {@link SourceError}; nothing is written then.
   */
  override async _put(c: string, key: string, src: D.PutSource, o: D.PutOptions = {}) {
    if (src instanceof Uint8Array && o.size !== undefined && o.size !== src.length) {
      throw new RangeError(`size ${o.size} given for ${src.length} bytes`);
    }
    this.requireOnline('put', azUriText(c, key));
    return this.putInParts(c, key, src, o, (one, p) =>
      this.putBlob(c, key, one, p.size as number, p, 'put'),
    );
  }

  private async putBlob(
    c: string,
    key: string,
    src: D.PutSource,
    size: number,
    o: D.PutOptions,
    op: 'put' | 'create',
  ): Promise<D.ObjectInfo> {
    // A failing source must also end the request: the service would wait for the missing bytes.
    const request = new AbortController();
    const onAbort = () => request.abort(o.signal?.reason);
    if (o.signal?.aborted) onAbort();
    o.signal?.addEventListener('abort', onAbort, { once: true });
    let failed: unknown;
    const checked = (input: Readable) => {
      const out = exact(input, size, o.signal, (why, cause) => {
        failed ??= new SourceError(`the source ${why}`, { cause });
        request.abort(failed);
        return failed as Error;
      });
      // The request reads `out` with pipe(), which leaves its errors to us: they are `failed`.
      return out.on('error', (error) => {
        failed ??= error;
      });
    };
    let sent = false;
    const once = (input: Readable) => () => {
      if (sent) throw new SourceError('a stream source cannot be sent twice');
      sent = true;
      return checked(input);
    };
    const body =
      src instanceof Uint8Array
        ? Buffer.from(src.buffer, src.byteOffset, src.byteLength)
        : typeof src === 'string'
          ? () => checked(createReadStream(src))
          : once(src);
    try {
      return await this.call({ container: c, key, op }, async (s, sdk) => {
        const r = await this.blob(s, sdk, c, key).upload(body, size, {
          blobHTTPHeaders: { blobContentType: o.contentType },
          conditions: op === 'create' ? { ifNoneMatch: '*' } : undefined,
          metadata: o.sha256 ? { sha256: o.sha256 } : undefined,
          abortSignal: request.signal,
          onProgress: (p) => o.onProgress?.(p.loadedBytes),
        });
        return info(key, fields(r), size);
      });
    } catch (error) {
      if (failed !== undefined && !o.signal?.aborted) throw failed;
      throw error;
    } finally {
      o.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Delete Blob (on a versioned account the versions stay); {@link NotFound} when absent. */
  override async _delete(c: string, key: string, o: Opts = {}): Promise<void> {
    await this.call({ container: c, key, op: 'delete' }, (s, sdk) =>
      this.blob(s, sdk, c, key).delete({ abortSignal: o.signal }),
    );
  }

  /**
   * Delete only if still `version` (Delete Blob with `If-Match`: {@link PreconditionFailed} when
   * it moved). With `versionId`, exactly that version goes, after its ETag was compared.
   */
  override async _deleteIf(c: string, key: string, o: D.DeleteIfOptions): Promise<void> {
    const { versionId, signal } = o;
    const version = quoted(o.version);
    if (versionId !== undefined) {
      const head = await this._headVersion(c, key, versionId, o);
      if (head.version !== version) {
        const uri = azUriText(c, key);
        throw new PreconditionFailed(`delete ${uri}: it is ${head.version}, not ${version}`, {
          uri,
        });
      }
    }
    try {
      await this.call({ container: c, key, op: 'delete' }, (s, sdk) => {
        const blob = this.blob(s, sdk, c, key);
        return versionId === undefined
          ? blob.delete({ conditions: { ifMatch: version }, abortSignal: signal })
          : blob.withVersion(versionId).delete({ abortSignal: signal });
      });
    } catch (error) {
      // Azurite answers a missing blob's conditional delete with 412: NotFound if it is gone.
      if (error instanceof PreconditionFailed) await this._head(c, key, o);
      throw error;
    }
  }

  /**
   * A read-only SAS URL of one blob valid for `expiresIn` seconds: a service SAS signed with the
   * account key, or a user-delegation SAS with a token credential. A connection string's own SAS
   * is never handed out: {@link NotSupported}.
   */
  override async _presign(c: string, key: string, o: D.PresignPrimitiveOptions) {
    return this.call({ container: c, key, op: 'presign' }, async (s, sdk) => {
      const blob = this.blob(s, sdk, c, key);
      const expiresOn = new Date(Date.now() + o.expiresIn * 1000);
      const permissions = sdk.BlobSASPermissions.parse('r');
      if (s.credential instanceof sdk.StorageSharedKeyCredential) {
        return blob.generateSasUrl({ permissions, expiresOn });
      }
      if (s.credential instanceof sdk.AnonymousCredential) {
        throw new NotSupported(`presign ${azUriText(c, key)}: needs an account key or a login`);
      }
      const startsOn = new Date(Date.now() - 5 * 60_000);
      const delegation = await s.getUserDelegationKey(startsOn, expiresOn);
      const sas = sdk.generateBlobSASQueryParameters(
        { containerName: c, blobName: key, permissions, startsOn, expiresOn },
        delegation,
        s.accountName,
      );
      return `${blob.url}?${sas.toString()}`;
    });
  }

  /** Create a container (idempotent); with `versioning`, check the account keeps versions. */
  override async makeBucket(c: string, o: { versioning?: boolean } & Opts = {}): Promise<void> {
    await this.call({ container: c, op: 'makeBucket' }, async (s) => {
      await s
        .getContainerClient(c)
        .create({ abortSignal: o.signal })
        .catch((error: { code?: string }) => {
          if (error.code !== 'ContainerAlreadyExists') throw error;
        });
    });
    if (!o.versioning) return;
    const key = `${PROBE_PREFIX}${randomUUID()}`;
    const probe = await this._put(c, key, Buffer.from('provcat versioning probe\n'));
    await this.call({ container: c, key, op: 'probe cleanup' }, async (s, sdk) => {
      const blob = this.blob(s, sdk, c, key);
      await blob.delete();
      if (probe.versionId) await blob.withVersion(probe.versionId).delete();
    });
    if (!probe.versionId) {
      throw this.unversioned(
        'makeBucket',
        c,
        undefined,
        'a write came back without x-ms-version-id; the container was made, but versioning is an account setting: `az storage account blob-service-properties update --enable-versioning true`',
      );
    }
  }

  // ---- version primitives --------------------------------------------------------------------

  /** The version ID of the current blob (HEAD); {@link NotSupported} when the store sends none. */
  override async _versionOf(c: string, key: string, o: Opts = {}): Promise<string> {
    const { versionId } = await this._head(c, key, o);
    if (versionId) return versionId;
    throw this.unversioned('versionOf', c, key, 'HEAD answered without x-ms-version-id');
  }

  /**
   * List Blobs with `include=versions`, every page: per blob its versions newest first, after a
   * delete marker when none is current; blobs in UTF-8 order. {@link NotSupported} for a blob
   * listed without a version ID. A missing container yields nothing.
   */
  override async *_history(c: string, prefix: string, o: Opts = {}) {
    this.requireOnline('history', azUriText(c, prefix));
    const order = new Utf8Order<D.VersionRecord[]>(prefix.length, (g) => g[0]?.key ?? '');
    const pages = (await this.client())
      .getContainerClient(c)
      .listBlobsFlat({ prefix: prefix || undefined, includeVersions: true, abortSignal: o.signal })
      .byPage({ maxPageSize: 5000 });
    let open: D.VersionRecord[] = [];
    const close = (): D.VersionRecord[][] => {
      const group = open.reverse();
      open = [];
      const newest = group[0];
      if (newest && !group.some((v) => v.current)) {
        group.unshift({
          key: newest.key,
          versionId: `deleted:${newest.versionId}`,
          size: null,
          current: true,
        });
      }
      return newest ? [group] : [];
    };
    for (;;) {
      const r = await pages
        .next()
        .catch(mapped({ container: c, key: prefix, op: 'history' }))
        .catch((error: unknown) => {
          if (error instanceof NotFound) return { done: true as const, value: undefined };
          throw error;
        });
      if (r.done) break;
      const groups: D.VersionRecord[][] = [];
      for (const b of r.value.segment.blobItems) {
        if (!b.versionId)
          throw this.unversioned('history', c, b.name, 'a blob is listed without a version ID');
        if (open[0] !== undefined && open[0].key !== b.name) groups.push(...close());
        const size = b.properties.contentLength ?? 0;
        const current = b.isCurrentVersion === true;
        open.push({
          key: b.name,
          versionId: b.versionId,
          size,
          current,
          lastModified: b.properties.lastModified,
        });
      }
      for (const g of order.push(groups)) yield* g;
    }
    for (const g of [...order.push(close()), ...order.end()]) yield* g;
  }

  /** Get Blob Properties of one version; {@link NotSupported} when the answer is not that version. */
  override async _headVersion(c: string, key: string, id: string, o: Opts = {}) {
    const head = await this.call({ container: c, key, op: 'headVersion' }, async (s, sdk) =>
      info(
        key,
        fields(
          await this.blob(s, sdk, c, key).withVersion(id).getProperties({ abortSignal: o.signal }),
        ),
      ),
    );
    if (head.versionId === id) return head;
    throw this.notThat('headVersion', c, key, id, head.versionId);
  }

  /** Get Blob of one version (optionally a range); checked as {@link _headVersion} is. */
  override async _getVersion(c: string, key: string, id: string, o: D.GetOptions = {}) {
    return this.getBlob(c, key, id, o, 'getVersion');
  }

  /** Put Blob with `If-None-Match: *`: `Exists` (409 or 412) when a current blob has the key. */
  override async _create(c: string, key: string, body: Uint8Array, o: Opts = {}) {
    return this.putBlob(c, key, body, body.length, o, 'create');
  }

  /**
   * Copy Blob of the current blob or one version (`?versionid=` source) to `toKey`, conditional
   * on the source's ETag (a source replaced meanwhile fails the copy, {@link PreconditionFailed});
   * a pending copy is waited for.
   */
  override async _copy(
    c: string,
    key: string,
    id: string | undefined,
    toKey: string,
    o: Opts = {},
  ) {
    const source = id ? await this._headVersion(c, key, id, o) : await this._head(c, key, o);
    return this.call({ container: c, key, op: id ? 'copyVersion' : 'copy' }, async (s, sdk) => {
      const from = this.blob(s, sdk, c, key);
      const to = this.blob(s, sdk, c, toKey);
      const poller = await to.beginCopyFromURL((id ? from.withVersion(id) : from).url, {
        sourceConditions: { ifMatch: source.etag },
        abortSignal: o.signal,
      });
      let r: { copyStatus?: string; etag?: string; versionId?: string } =
        await poller.pollUntilDone();
      for (let attempt = 1; r.copyStatus === 'pending'; attempt++) {
        await sleep(Math.min(5000, 100 * 2 ** attempt), o.signal);
        r = await to.getProperties({ abortSignal: o.signal });
      }
      if (r.copyStatus !== undefined && r.copyStatus !== 'success') {
        throw new StoreError(`copy ${azUriText(c, key)} to ${toKey}: ${r.copyStatus}`);
      }
      return info(toKey, fields(r), source.size);
    });
  }

  /** `atomic`: Azure honours `If-None-Match: *` (see the module comment). */
  override async _createMode(_c: string): Promise<D.CreateMode> {
    return 'atomic';
  }

  /** Staged blocks in container `c` (blocks.ts), for large puts and managed uploads. */
  override partProtocol(c: string): AzureBlocks {
    let blocks = this.blockLists.get(c);
    if (!blocks) {
      const blob = async (key: string, op: string) => {
        this.requireOnline(op, azUriText(c, key));
        const [s, sdk] = await Promise.all([this.client(), loadBlobSdk()]);
        return this.blob(s, sdk, c, key);
      };
      blocks = new AzureBlocks(
        { blob, uncommitted: (p, signal) => this.uncommitted(c, p, signal) },
        c,
      );
      this.blockLists.set(c, blocks);
    }
    return blocks;
  }

  /** Blobs with uncommitted blocks only: listed with `include=uncommittedblobs`, size 0, no HEAD. */
  private async *uncommitted(c: string, prefix: string, signal?: AbortSignal) {
    const s = await this.call({ container: c, key: prefix, op: 'listUploads' }, async (x) => x);
    const blobs = s
      .getContainerClient(c)
      .listBlobsFlat({ prefix, includeUncommitedBlobs: true, abortSignal: signal });
    try {
      for await (const b of blobs) {
        if (b.properties.contentLength !== 0) continue;
        const head = await this._head(c, b.name, { signal }).catch((e: unknown) => e);
        if (head instanceof NotFound)
          yield { key: b.name, lastModified: b.properties.lastModified };
        else if (head instanceof Error) throw head;
      }
    } catch (error) {
      mapped({ container: c, key: prefix, op: 'listUploads' })(error);
    }
  }
}

/**
 * `input` passed through, checked to be exactly `size` bytes: a longer or shorter body, or a
 * failing input, destroys the result with `fail(why, cause)`.
 */
function exact(
  input: Readable,
  size: number,
  signal: AbortSignal | undefined,
  fail: (why: string, cause?: Error) => Error,
): Readable {
  let seen = 0;
  const out = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      done(seen > size ? fail(`is longer than its ${size} bytes`) : null, chunk);
    },
    flush(done) {
      done(seen === size ? null : fail(`ended after ${seen} of its ${size} bytes`));
    },
  });
  input.on('error', (e) =>
    out.destroy(fail(`failed after ${seen} of ${size} bytes: ${e.message}`, e)),
  );
  out.on('close', () => input.destroy());
  input.pipe(out);
  if (signal) addAbortSignal(signal, out);
  return out;
}
