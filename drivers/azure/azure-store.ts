/**
 * {@link AzureStore}: `az://container/key`, the twelve primitives as `@azure/storage-blob` calls
 * (docs/drivers/azure.md). The version is the ETag. **Versions fail closed**: every version answer
 * must carry the ID asked for (Azurite, and accounts without blob versioning, ignore `versionid`),
 * a version listing one for every blob, else `NotSupported`.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { debuglog } from 'node:util';
import type { BlobItem, BlobServiceClient, BlockBlobClient, Pipeline } from '@azure/storage-blob';
import type * as D from '../../src/contract/primitives.js';
import * as E from '../../src/core/errors.js';
import { type Lazy, lazy, lazyModule } from '../../src/core/lazy-module.js';
import { RETRY_ATTEMPTS, RETRY_BASE_MS, RETRY_CAP_MS } from '../../src/core/retry.js';
import { missingBucket } from '../../src/driver-kit/bucket-state.js';
import { checkByteRange } from '../../src/driver-kit/exact-bytes.js';
import { inUtf8Order, utf8Pages } from '../../src/driver-kit/listing-order.js';
import { pageSize, tokenPages } from '../../src/driver-kit/paging.js';
import { sendSized } from '../../src/driver-kit/sized-body.js';
import { historyOf, newerIdFirst } from '../../src/driver-kit/version-history.js';
import { ObjectStore } from '../../src/store/object-store.js';
import { encodeBlobName, infoOf as info, quoted } from './blob-answer.js';
import { AzureBlocks } from './blocks.js';
import { type AzureConfig, type AzureStoreOptions, resolveAzureConfig } from './config.js';
import { azUriText, type AzureErrorContext as Ctx, mapAzureError } from './errors.js';
import { LeanBlobReader } from './lean.js';
import { type BlobReader, SdkBlobReader } from './reader.js';

const azdebug = debuglog('provcat:azure');
type Opts = D.SignalOptions;
type BlobSdk = typeof import('@azure/storage-blob');

/** `@azure/storage-blob`, imported on first use (`blobSdk.made`: this process asked for it). */
export const blobSdk = lazyModule(
  'azure',
  '@azure/storage-blob',
  () => import('@azure/storage-blob'),
);
const identity = lazyModule('azure', '@azure/identity', () => import('@azure/identity'));

/**
 * Why Azure cannot hold `key` as a blob name exactly: the Blob service (and Azurite) store a
 * backslash as `/`, encoded or not, so `a\b` would come back as `a/b` — listed under another
 * name, pushed again each time and deleted by `push --delete`. See docs/drivers/azure.md.
 */
export function blobNameProblem(key: string): string | undefined {
  return key.includes('\\') ? "a backslash (Azure stores it as '/')" : undefined;
}

/** Where `makeBucket` writes its versioning probe (removed again). */
const PROBE_PREFIX = '.provcat/probe/';

/**
 * The Azure Blob driver (see the module comment). Missing blobs raise `NotFound`, refusals
 * `PermissionDenied`, other failures `StoreError` with `status` and the SDK's error as `cause`;
 * aborts pass through. Offline, every primitive raises `OfflineMiss` before any request.
 */
export class AzureStore extends ObjectStore {
  readonly scheme = 'az';
  readonly driver = 'azure';
  /** Versions on accounts with blob versioning; ranges; a put's SHA-256 as blob metadata. */
  readonly capabilities: D.Capabilities = {
    versions: true,
    ranges: true,
    sha256Metadata: true,
    keyProblem: blobNameProblem,
  };
  /** The service client: the injected one, or one built on first call (no network call). */
  readonly client: Lazy<BlobServiceClient>;
  private readonly config: AzureConfig | undefined;
  /** How Get Blob and List Blobs are sent: chosen once, here (reader.ts). */
  private readonly reader: BlobReader;

  /** Throws RangeError for a configuration that names no account. Makes no network call. */
  constructor(options: AzureStoreOptions = {}) {
    super(options);
    const { client } = options;
    this.client = lazy(async () => client ?? this.build());
    this.config = client ? undefined : resolveAzureConfig(options);
    const { auth, endpoint = '', leanReads } = this.config ?? {};
    const sdk = new SdkBlobReader({
      call: (ctx, fn) => this.call(ctx, fn),
      onBlob: (c, key, op, fn, id) => this.onBlob(c, key, op, fn, id),
    });
    const sockets = Math.max(16, this.concurrency);
    this.reader =
      auth?.kind === 'key' && leanReads
        ? new LeanBlobReader(endpoint, auth.account, auth.key, sockets, this.debug, sdk)
        : sdk;
  }

  /** Whether reads (Get Blob, List Blobs) go the lean path (lean.ts) rather than the SDK. */
  get leanReads(): boolean {
    return this.reader instanceof LeanBlobReader;
  }

  private async build(): Promise<BlobServiceClient> {
    const sdk = await blobSdk();
    const { endpoint, auth } = this.config as AzureConfig;
    this.debug(`client: ${endpoint} (${auth.kind})`);
    const credential =
      auth.kind === 'key'
        ? new sdk.StorageSharedKeyCredential(auth.account, auth.key)
        : auth.kind === 'token'
          ? (auth.credential ?? new (await identity()).DefaultAzureCredential())
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
    this.reader.close();
  }

  private debug = (message: string) => {
    azdebug(message);
    this.logger(message);
  };

  /** One SDK interaction: offline guard, client, the error mapping (aborts untouched). */
  private async call<T>(ctx: Ctx, fn: (s: BlobServiceClient, sdk: BlobSdk) => Promise<T>) {
    this.requireOnline(ctx.op, azUriText(ctx.container, ctx.key));
    const [service, sdk] = await Promise.all([this.client(), blobSdk()]);
    return fn(service, sdk).catch((error: unknown) => {
      throw E.isAbort(error) ? error : mapAzureError(error, ctx);
    });
  }

  /** {@link call} on one blob's client (for the block protocol too); `versionId` names a version. */
  onBlob<T>(
    c: string,
    key: string,
    op: string,
    fn: (b: BlockBlobClient) => Promise<T>,
    versionId?: string,
  ) {
    const ctx = { container: c, key, versionId, op };
    return this.call(ctx, async (s, sdk) => fn(this.blob(s, sdk, c, key)));
  }

  /** The items of an SDK listing, errors mapped; a missing container lists nothing. */
  async *listing<T>(ctx: Ctx, items: (s: BlobServiceClient) => AsyncIterable<T>) {
    try {
      yield* items(await this.call(ctx, async (s) => s));
    } catch (error) {
      const mappedError = E.isAbort(error) ? error : mapAzureError(error, ctx);
      if (!(mappedError instanceof E.NotFound)) throw mappedError;
    }
  }

  /** One blob's client, at a URL the SDK would not normalize (dot segments encoded whole). */
  private blob(s: BlobServiceClient, sdk: BlobSdk, c: string, key: string): BlockBlobClient {
    const container = s.getContainerClient(c);
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

  /** `got` unless a version `id` was asked for and the answer is of another (or none). */
  private checked<T extends { versionId?: string | undefined }>(
    what: [op: string, c: string, key: string],
    id: string | undefined,
    got: T,
    release = () => {},
  ): T {
    if (id === undefined || got.versionId === id) return got;
    release();
    const why = `asked for version ${id}, the store answered with ${got.versionId ?? 'no version ID'}`;
    throw this.unversioned(...what, why);
  }

  // ---- core primitives -----------------------------------------------------------------------

  /** Get Blob Properties (of version `id`, checked): size, the ETag as version. */
  override async _head(c: string, key: string, o: Opts = {}, id?: string) {
    const op = id ? 'headVersion' : 'head';
    const r = await this.onBlob(
      c,
      key,
      op,
      (b) => (id ? b.withVersion(id) : b).getProperties({ abortSignal: o.signal }),
      id,
    );
    return info(key, { ...this.checked([op, c, key], id, r), blobMd5: r.contentMD5 });
  }

  /**
   * List Blobs pages (at most 5,000), flat or one level, in UTF-8 order; `NotFound` for no
   * container (the listing's own `ContainerNotFound`).
   */
  override async *_pages(c: string, prefix: string, o: D.PagesOptions = {}) {
    this.requireOnline('list', azUriText(c, prefix));
    const limit = pageSize(o.limit, 5000);
    const pages = tokenPages(
      (marker) => this.reader.page(c, prefix, { ...o, marker, limit }),
      (page) => page.next,
    );
    try {
      yield* utf8Pages(pages, prefix.length, limit);
    } catch (error) {
      if (error instanceof E.NotFound) throw missingBucket(azUriText(c), error);
      throw error;
    }
  }

  /** Get Blob (of version `id`, checked); a range is one request, its Content-Range as sent. */
  override async _get(c: string, key: string, o: D.GetOptions = {}, id?: string) {
    checkByteRange(o.range);
    const op = id ? 'getVersion' : 'get';
    const uri = azUriText(c, key, id);
    this.requireOnline(op, uri);
    const check = (r: D.GetResult) => {
      this.checked([op, c, key], id, r.info, () => (r.bytes ? r.release?.() : r.body.destroy()));
      return r;
    };
    return check(await this.reader.get(c, key, { ...o, versionId: id, op, uri }));
  }

  /** Put Blob up to `multipartThreshold`, else staged blocks (blocks.ts) on the upload engine. */
  override async _put(c: string, key: string, src: D.PutSource, o: D.PutOptions = {}) {
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

  /** Delete Blob with `If-Match`; with `versionId`, that version after its ETag was compared. */
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

  /** A read-only SAS URL: a service SAS with the account key, a user-delegation SAS with a login. */
  override async _presign(c: string, key: string, o: D.PresignPrimitiveOptions) {
    return this.call({ container: c, key, op: 'presign' }, async (s, sdk) => {
      const blob = this.blob(s, sdk, c, key);
      const expiresOn = new Date(Date.now() + o.expiresIn * 1000);
      const permissions = sdk.BlobSASPermissions.parse('r');
      if (s.credential instanceof sdk.StorageSharedKeyCredential) {
        return blob.generateSasUrl({ permissions, expiresOn });
      }
      // A connection string's own SAS is never handed out.
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
      'a write came back without a version ID; versioning is an account setting: ' +
      '`az storage account blob-service-properties update --enable-versioning true`';
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
   * List Blobs with `include=versions`, in UTF-8 order, into history (src/driver-kit/version-history.ts): a
   * blob without a current version gets a delete marker. A missing container yields nothing.
   */
  override async *_history(c: string, prefix: string, o: Opts = {}) {
    const options = { prefix: prefix || undefined, includeVersions: true, abortSignal: o.signal };
    const pages = this.listing({ container: c, key: prefix, op: 'history' }, (s) =>
      s.getContainerClient(c).listBlobsFlat(options).byPage({ maxPageSize: 5000 }),
    );
    const record = ({ name: key, versionId, properties: p, isCurrentVersion }: BlobItem) => {
      if (!versionId)
        throw this.unversioned('history', c, key, 'a blob is listed without a version ID');
      const [size, current] = [p.contentLength ?? 0, isCurrentVersion === true];
      return { key, versionId, size, current, lastModified: p.lastModified };
    };
    async function* batches() {
      for await (const page of pages) yield page.segment.blobItems.map(record);
    }
    async function* versions() {
      for await (const ready of inUtf8Order(batches(), prefix.length, (v) => v.key)) yield* ready;
    }
    yield* historyOf(versions(), newerIdFirst, (v) => `deleted:${v.versionId}`);
  }

  /** Get Blob Properties of one version; `NotSupported` when the answer is of another. */
  override async _headVersion(c: string, key: string, id: string, o: Opts = {}) {
    return this._head(c, key, o, id);
  }

  /** Get Blob of one version; `NotSupported` when the answer is of another. */
  override async _getVersion(c: string, key: string, id: string, o: D.GetOptions = {}) {
    return this._get(c, key, o, id);
  }

  /** Put Blob with `If-None-Match: *`: `Exists` (409 or 412) when a current blob has the key. */
  override async _create(c: string, key: string, body: Uint8Array, o: Opts = {}) {
    return this.putBlob(c, key, body, { ...o, size: body.length }, 'create');
  }

  /** Copy Blob of the current blob or a version, if the source's ETag holds; waits for it. */
  override async _copy(c: string, key: string, id: string | undefined, to: string, o: Opts = {}) {
    const source = await this._head(c, key, o, id);
    return this.call({ container: c, key, op: id ? 'copyVersion' : 'copy' }, async (s, sdk) => {
      const from = this.blob(s, sdk, c, key);
      const poller = await this.blob(s, sdk, c, to).beginCopyFromURL(
        (id ? from.withVersion(id) : from).url,
        { sourceConditions: { ifMatch: source.etag }, abortSignal: o.signal, intervalInMs: 250 },
      );
      return info(to, { ...(await poller.pollUntilDone()), contentLength: source.size });
    });
  }

  /** Staged blocks in container `c` (blocks.ts), for large puts and managed uploads. */
  override partProtocol(c: string): AzureBlocks {
    return new AzureBlocks(c, this);
  }
}
