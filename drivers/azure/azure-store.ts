/**
 * {@link AzureStore}: the `az://container/key` driver over `@azure/storage-blob`, a translation
 * of the twelve primitives into Blob service calls (everything else is the base's). The SDK loads
 * on first use (sdk.ts); reads signed with an account key go lean (lean.ts). Listings reach the
 * base in UTF-8 byte order whatever the service's (src/listing-order.ts).
 *
 * The version is the ETag, a write marker and no digest (a copy gets a new one; Set Blob
 * Properties changes it without a new version), so `_history` records carry none and commits name
 * a file by version ID and size. **Versions fail closed**: Azurite, and an account without blob
 * versioning, write blobs with no version ID and serve the current blob for any `versionid`; so
 * every answer is checked (a version read must echo the ID asked for, a version listing must give
 * every blob one, `_versionOf` needs one on HEAD), else `NotSupported`. `_create` is Put Blob with
 * `If-None-Match: *` (409 and 412 both Exists): `atomic`.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { debuglog } from 'node:util';
import type { BlobItem, BlobServiceClient, BlockBlobClient, Pipeline } from '@azure/storage-blob';
import type * as D from '../../src/driver.js';
import * as E from '../../src/errors.js';
import { checkByteRange, exactBytes } from '../../src/exact-bytes.js';
import { inUtf8Order, utf8Pages } from '../../src/listing-order.js';
import { ObjectStore } from '../../src/object-store.js';
import { RETRY_ATTEMPTS, RETRY_BASE_MS, RETRY_CAP_MS } from '../../src/retry.js';
import { sendSized } from '../../src/sized-body.js';
import { ALL_BLOCKS, AzureBlocks } from './blocks.js';
import { type AzureConfig, type AzureStoreOptions, resolveAzureConfig } from './config.js';
import { azUriText, type AzureErrorContext as Ctx, mapAzureError } from './errors.js';
import { type BlobAnswer, blobInfo, encodeBlobName, LeanReads, quoted } from './lean.js';
import { type BlobSdk, blobSdk, defaultCredential } from './sdk.js';

const azdebug = debuglog('provcat:azure');
type Opts = D.SignalOptions;

/** Where `makeBucket` writes its versioning probe (removed again). */
export const PROBE_PREFIX = '.provcat/probe/';

/** The ObjectInfo of an SDK answer (ETag quoted, as headers give it). */
function info(key: string, answer: BlobAnswer): D.ObjectInfo {
  const got = blobInfo(key, answer);
  if (got) return got;
  throw new E.StoreError(`the answer for ${azUriText('?', key)} lacks an ETag or a size`);
}

/**
 * The Azure Blob driver (see the module comment). Missing blobs raise `NotFound`, refusals
 * `PermissionDenied`, other failures `StoreError` with `status` and the SDK's error as `cause`;
 * aborts pass through. Offline, every primitive raises `OfflineMiss` before any request.
 */
export class AzureStore extends ObjectStore {
  readonly scheme = 'az';
  readonly driver = 'azure';
  /** Versions on accounts with blob versioning; ranges; a put's SHA-256 as blob metadata. */
  readonly capabilities: D.Capabilities = { versions: true, ranges: true, sha256Metadata: true };
  private readonly config: AzureConfig | undefined;
  private service: Promise<BlobServiceClient> | undefined;
  private readonly lean: LeanReads | undefined;

  /** Whether reads (Get Blob, List Blobs) go the lean path (lean.ts) rather than the SDK. */
  get leanReads(): boolean {
    return this.lean !== undefined;
  }

  /** Throws RangeError for a configuration that names no account. Makes no network call. */
  constructor(options: AzureStoreOptions = {}) {
    super(options);
    const { client } = options;
    this.service = client && Promise.resolve(client);
    this.config = client ? undefined : resolveAzureConfig(options);
    const { auth, endpoint = '', leanReads } = this.config ?? {};
    if (auth?.kind === 'key' && leanReads) {
      const sockets = Math.max(16, this.concurrency);
      const debug = (m: string) => this.debug(m);
      this.lean = new LeanReads(endpoint, auth.account, auth.key, sockets, debug);
    }
  }

  /** The service client: the injected one, or one built on first call (no network call). */
  client(): Promise<BlobServiceClient> {
    this.service ??= this.build().catch((error: unknown) => {
      this.service = undefined;
      throw error;
    });
    return this.service;
  }

  private async build(): Promise<BlobServiceClient> {
    const sdk = await blobSdk.load();
    const { endpoint, auth } = this.config as AzureConfig;
    this.debug(`client: ${endpoint} (${auth.kind})`);
    const credential =
      auth.kind === 'key'
        ? new sdk.StorageSharedKeyCredential(auth.account, auth.key)
        : auth.kind === 'token'
          ? (auth.credential ?? (await defaultCredential()))
          : undefined;
    const url = auth.kind === 'sas' ? `${endpoint}?${auth.sas}` : endpoint;
    const retryOptions = { maxTries: RETRY_ATTEMPTS, retryDelayInMs: RETRY_BASE_MS };
    return new sdk.BlobServiceClient(url, credential, {
      retryOptions: { ...retryOptions, maxRetryDelayInMs: RETRY_CAP_MS },
      userAgentOptions: { userAgentPrefix: 'provcat' },
    });
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
  private async call<T>(ctx: Ctx, fn: (s: BlobServiceClient, sdk: BlobSdk) => Promise<T>) {
    this.requireOnline(ctx.op, azUriText(ctx.container, ctx.key));
    const [service, sdk] = await Promise.all([this.client(), blobSdk.load()]);
    return fn(service, sdk).catch((error: unknown) => {
      throw E.isAbort(error) ? error : mapAzureError(error, ctx);
    });
  }

  /** {@link call} on one blob's client. */
  private onBlob<T>(c: string, key: string, op: string, fn: (b: BlockBlobClient) => Promise<T>) {
    return this.call({ container: c, key, op }, async (s, sdk) => fn(this.blob(s, sdk, c, key)));
  }

  /** The items of an SDK listing, errors mapped; a missing container lists nothing. */
  private async *listing<T>(ctx: Ctx, items: (s: BlobServiceClient) => AsyncIterable<T>) {
    try {
      yield* items(await this.call(ctx, async (s) => s));
    } catch (error) {
      const mappedError = E.isAbort(error) ? error : mapAzureError(error, ctx);
      if (!(mappedError instanceof E.NotFound)) throw mappedError;
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
    const { pipeline } = container as unknown as { pipeline: Pipeline };
    return new sdk.BlockBlobClient(url.toString(), pipeline);
  }

  /** NotSupported: the container keeps no versions, `why`. */
  private unversioned(op: string, c: string, key: string | undefined, why: string) {
    const uri = azUriText(c, key);
    const need = 'pins, commits and branches need blob versioning on the storage account';
    const message = `${op} ${uri}: the container keeps no versions (${why}); ${need}`;
    return new E.NotSupported(`${message} (Azurite has none)`, { uri });
  }

  /** {@link unversioned}: asked for version `id`, answered with `got`. */
  private notThat(op: string, c: string, key: string, id: string, got: string | undefined) {
    const why = `asked for version ${id}, the store answered with ${got ?? 'no version ID'}`;
    return this.unversioned(op, c, key, why);
  }

  // ---- core primitives -----------------------------------------------------------------------

  /** Get Blob Properties: size, the ETag as version. `NotFound` when absent. */
  override async _head(c: string, key: string, o: Opts = {}): Promise<D.ObjectInfo> {
    const r = await this.onBlob(c, key, 'head', (b) => b.getProperties({ abortSignal: o.signal }));
    return info(key, r);
  }

  /** List Blobs pages (at most 5,000), flat or one level, in UTF-8 order; none for no container. */
  override async *_pages(c: string, prefix: string, o: D.PagesOptions = {}) {
    this.requireOnline('list', azUriText(c, prefix));
    const limit = Math.min(5000, Math.max(1, Math.floor(o.limit ?? 5000)));
    const self = this;
    async function* pages() {
      for (let marker: string | undefined, first = true; first || marker; first = false) {
        const page = await self.listPage(c, prefix, { ...o, marker, limit }).catch((e) => {
          if (first && e instanceof E.NotFound) return undefined;
          throw e;
        });
        if (!page) return;
        yield page;
        marker = page.next;
      }
    }
    yield* utf8Pages(pages(), prefix.length, limit);
  }

  private async listPage(c: string, prefix: string, o: D.PagesOptions & { marker?: string }) {
    const lean = await this.lean?.list(c, prefix, o);
    return (
      lean ??
      this.call({ container: c, key: prefix, op: 'list' }, async (s) => {
        const container = s.getContainerClient(c);
        const opts = { prefix: prefix || undefined, includeMetadata: true, abortSignal: o.signal };
        const pages = o.delimiter
          ? container.listBlobsByHierarchy(o.delimiter, opts)
          : container.listBlobsFlat(opts);
        const page = { continuationToken: o.marker, maxPageSize: o.limit };
        const r = (await pages.byPage(page).next()).value;
        const segment = r.segment as { blobItems: BlobItem[]; blobPrefixes?: { name: string }[] };
        return {
          prefixes: (segment.blobPrefixes ?? []).map((x) => x.name),
          objects: segment.blobItems.map((b) =>
            info(b.name, { ...b.properties, metadata: b.metadata }),
          ),
          next: (r.continuationToken as string) || undefined,
        };
      })
    );
  }

  /**
   * Get Blob, streamed (or read whole up to `wholeUpTo` bytes on the lean path); a range is one
   * request with `x-ms-range`, its Content-Range returned as is. A body that ends short or whose
   * connection drops fails with a `StoreError`. `NotFound` when absent.
   */
  override async _get(c: string, key: string, o: D.GetOptions = {}): Promise<D.GetResult> {
    return this.getBlob(c, key, undefined, o, 'get');
  }

  private async getBlob(
    c: string,
    key: string,
    id: string | undefined,
    o: D.GetOptions,
    op: string,
  ) {
    const { range, signal } = o;
    checkByteRange(range);
    const uri = azUriText(c, key);
    this.requireOnline(op, uri);
    const check = (r: D.GetResult): D.GetResult => {
      if (id === undefined || r.info.versionId === id) return r;
      if (r.bytes) r.release?.();
      else r.body.destroy();
      throw this.notThat(op, c, key, id, r.info.versionId);
    };
    const lean = await this.lean?.get(c, key, { ...o, versionId: id });
    if (lean === 404) throw new E.NotFound(`${op} ${uri}: not found (HTTP 404)`, { uri });
    if (lean) return check(lean);
    return this.onBlob(c, key, op, async (blob) => {
      const count = range && range.end - range.start;
      const from = id ? blob.withVersion(id) : blob;
      const r = await from.download(range?.start ?? 0, count, { abortSignal: signal });
      const source = r.readableStreamBody as Readable;
      const contentLength = r.contentLength as number;
      // The SDK reports a dropped connection as an AbortError: only the caller's is one.
      async function* exact() {
        try {
          yield* exactBytes(source, contentLength);
        } catch (cause) {
          if (signal?.aborted) throw cause;
          throw new E.StoreError(`${op} ${uri}: ${(cause as Error).message}`, { uri, cause });
        }
      }
      const body = Readable.from(exact(), { objectMode: false, signal });
      return check({ body, info: info(key, r), contentLength, contentRange: r.contentRange });
    });
  }

  /**
   * Write one blob: one Put Blob up to `multipartThreshold` (or a stream that ends within one
   * part), else staged blocks on the upload engine (blocks.ts). A source that is not exactly its
   * declared size fails with `SourceError`; nothing is written then.
   */
  override async _put(c: string, key: string, src: D.PutSource, o: D.PutOptions = {}) {
    if (src instanceof Uint8Array && o.size !== undefined && o.size !== src.length) {
      throw new RangeError(`size ${o.size} given for ${src.length} bytes`);
    }
    this.requireOnline('put', azUriText(c, key));
    return this.putInParts(c, key, src, o, (one, p) => this.putBlob(c, key, one, p, 'put'));
  }

  private putBlob(c: string, key: string, src: D.PutSource, o: D.PutOptions, op: string) {
    const size = o.size as number;
    return sendSized(src, size, o.signal, async (body, abortSignal) => {
      const r = await this.onBlob(c, key, op, (b) =>
        b.upload(body, size, {
          blobHTTPHeaders: { blobContentType: o.contentType },
          conditions: op === 'create' ? { ifNoneMatch: '*' } : undefined,
          metadata: o.sha256 ? { sha256: o.sha256 } : undefined,
          abortSignal,
          onProgress: (p) => o.onProgress?.(p.loadedBytes),
        }),
      );
      return info(key, { ...r, contentLength: size });
    });
  }

  /** Delete Blob (on a versioned account the versions stay); `NotFound` when absent. */
  override async _delete(c: string, key: string, o: Opts = {}): Promise<void> {
    await this.onBlob(c, key, 'delete', (b) => b.delete({ abortSignal: o.signal }));
  }

  /**
   * Delete only if still `version` (Delete Blob with `If-Match`: `PreconditionFailed` when it
   * moved). With `versionId`, exactly that version goes, after its ETag was compared.
   */
  override async _deleteIf(c: string, key: string, o: D.DeleteIfOptions): Promise<void> {
    const { versionId: id, signal: abortSignal } = o;
    const version = quoted(o.version);
    const head = id === undefined ? undefined : await this._headVersion(c, key, id, o);
    if (head && head.version !== version) {
      const uri = azUriText(c, key);
      throw new E.PreconditionFailed(`delete ${uri}: it is ${head.version}, not ${version}`, {
        uri,
      });
    }
    await this.onBlob(c, key, 'delete', (b) =>
      id
        ? b.withVersion(id).delete({ abortSignal })
        : b.delete({ conditions: { ifMatch: version }, abortSignal }),
    ).catch(async (error: unknown) => {
      // Azurite answers a missing blob's conditional delete with 412: NotFound if it is gone.
      if (error instanceof E.PreconditionFailed) await this._head(c, key, o);
      throw error;
    });
  }

  /**
   * A read-only SAS URL of one blob valid for `expiresIn` seconds: a service SAS signed with the
   * account key, or a user-delegation SAS with a token credential; `NotSupported` otherwise (a
   * connection string's own SAS is never handed out).
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
        throw new E.NotSupported(`presign ${azUriText(c, key)}: needs an account key or a login`);
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
    await this.call({ container: c, op: 'makeBucket' }, (s) =>
      s.getContainerClient(c).createIfNotExists({ abortSignal: o.signal }),
    );
    if (!o.versioning) return;
    const key = `${PROBE_PREFIX}${randomUUID()}`;
    const { versionId } = await this._put(c, key, Buffer.from('provcat versioning probe\n'));
    await this.onBlob(c, key, 'probe cleanup', async (b) => {
      await b.delete();
      if (versionId) await b.withVersion(versionId).delete();
    });
    if (versionId) return;
    const why =
      'a write came back without x-ms-version-id; the container was made, but versioning is an ' +
      'account setting: `az storage account blob-service-properties update --enable-versioning true`';
    throw this.unversioned('makeBucket', c, undefined, why);
  }

  // ---- version primitives --------------------------------------------------------------------

  /** The version ID of the current blob (HEAD); `NotSupported` when the store sends none. */
  override async _versionOf(c: string, key: string, o: Opts = {}): Promise<string> {
    const { versionId } = await this._head(c, key, o);
    if (versionId) return versionId;
    throw this.unversioned('versionOf', c, key, 'HEAD answered without x-ms-version-id');
  }

  /**
   * List Blobs with `include=versions`: per blob its versions newest first, after a delete marker
   * when none is current; blobs in UTF-8 order. `NotSupported` for a blob listed without a
   * version ID. A missing container yields nothing.
   */
  override async *_history(
    c: string,
    prefix: string,
    o: Opts = {},
  ): AsyncIterable<D.VersionRecord> {
    const options = { prefix: prefix || undefined, includeVersions: true, abortSignal: o.signal };
    const ctx = { container: c, key: prefix, op: 'history' };
    const pages = this.listing(ctx, (s) =>
      s.getContainerClient(c).listBlobsFlat(options).byPage({ maxPageSize: 5000 }),
    );
    const self = this;
    // Per page, the blobs whose versions all came (a blob's are listed oldest first).
    async function* blobs(): AsyncIterable<D.VersionRecord[][]> {
      const open: D.VersionRecord[] = [];
      for await (const page of pages) {
        const done: D.VersionRecord[][] = [];
        for (const { name: key, versionId, properties: p, isCurrentVersion } of page.segment
          .blobItems) {
          if (!versionId)
            throw self.unversioned('history', c, key, 'a blob is listed without a version ID');
          if (open[0] && open[0].key !== key) done.push(open.splice(0));
          const current = isCurrentVersion === true;
          const size = p.contentLength ?? 0;
          open.push({ key, versionId, size, current, lastModified: p.lastModified });
        }
        yield done;
      }
      yield [open];
    }
    for await (const ready of inUtf8Order(blobs(), prefix.length, (g) => g[0]?.key ?? '')) {
      for (const versions of ready.map((v) => v.reverse())) {
        const [newest] = versions;
        if (newest && !versions.some((v) => v.current)) {
          const versionId = `deleted:${newest.versionId}`;
          yield { key: newest.key, versionId, size: null, current: true };
        }
        yield* versions;
      }
    }
  }

  /** Get Blob Properties of one version; `NotSupported` when the answer is not that version. */
  override async _headVersion(c: string, key: string, id: string, o: Opts = {}) {
    const r = await this.onBlob(c, key, 'headVersion', (b) =>
      b.withVersion(id).getProperties({ abortSignal: o.signal }),
    );
    if (r.versionId === id) return info(key, r);
    throw this.notThat('headVersion', c, key, id, r.versionId);
  }

  /** Get Blob of one version (optionally a range); checked as {@link _headVersion} is. */
  override async _getVersion(c: string, key: string, id: string, o: D.GetOptions = {}) {
    return this.getBlob(c, key, id, o, 'getVersion');
  }

  /** Put Blob with `If-None-Match: *`: `Exists` (409 or 412) when a current blob has the key. */
  override async _create(c: string, key: string, body: Uint8Array, o: Opts = {}) {
    return this.putBlob(c, key, body, { ...o, size: body.length }, 'create');
  }

  /**
   * Copy Blob of the current blob or one version to `toKey`, conditional on the source's ETag (a
   * source replaced meanwhile is `PreconditionFailed`); a pending copy is waited for.
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
      const poller = await this.blob(s, sdk, c, toKey).beginCopyFromURL(
        (id ? from.withVersion(id) : from).url,
        { sourceConditions: { ifMatch: source.etag }, abortSignal: o.signal, intervalInMs: 250 },
      );
      return info(toKey, { ...(await poller.pollUntilDone()), contentLength: source.size });
    });
  }

  /** `atomic`: Azure honours `If-None-Match: *` (see the module comment). */
  override async _createMode(_c: string): Promise<D.CreateMode> {
    return 'atomic';
  }

  /** Staged blocks in container `c` (blocks.ts), for large puts and managed uploads. */
  override partProtocol(c: string): AzureBlocks {
    return new AzureBlocks(c, {
      onBlob: (key, op, fn) => this.onBlob(c, key, op, fn),
      uncommitted: (prefix, signal) => this.uncommitted(c, prefix, signal),
    });
  }

  /** Blobs with uncommitted blocks only: listed with `include=uncommittedblobs`, size 0, no HEAD. */
  private async *uncommitted(c: string, prefix: string, signal?: AbortSignal) {
    const options = { prefix, includeUncommitedBlobs: true, abortSignal: signal };
    const ctx = { container: c, key: prefix, op: 'listUploads' };
    for await (const b of this.listing(ctx, (s) =>
      s.getContainerClient(c).listBlobsFlat(options),
    )) {
      if (b.properties.contentLength !== 0) continue;
      const head = await this._head(c, b.name, { signal }).catch((e: unknown) => e);
      const initiated = b.properties.lastModified;
      if (head instanceof E.NotFound) yield { key: b.name, upload: ALL_BLOCKS, initiated };
      else if (head instanceof Error) throw head;
    }
  }
}
