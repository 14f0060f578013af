/**
 * {@link S3Store}: the `s3://bucket/key` driver over `@aws-sdk/client-s3`.
 *
 * The driver is a thin translation of the twelve primitives into S3 calls; everything else
 * (folders, walk, fetch and the cache, offline mode, commits) is the {@link ObjectStore} base
 * class. Design choices, each argued where it is made:
 *
 * - The SDK client is imported on first use (sdk.ts), so commands that make no S3 call never
 *   load it; reads (HEAD, GET, listing pages) go through the lean path (lean.ts) on the SDK's
 *   signer and credential chain, so read-only commands load the client only when a request
 *   fails or the route must be learned from it.
 * - Configuration follows the AWS conventions (config.ts); the client is injectable.
 * - One function maps SDK errors (errors.ts): 404 is {@link NotFound}, 403 stays a
 *   {@link StoreError} with its status. An abort is never mapped: it surfaces as the abort error.
 * - Flexible checksums (the SDK's default CRC32 on every upload since 2025) are asked for only
 *   when required: S3-compatible servers such as Ceph 16 answer `411 MissingContentLength` to
 *   the streaming-checksum encoding. `AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_SUPPORTED` turns
 *   them back on for AWS. Integrity of managed objects is SHA-256 end to end anyway (src/lake).
 * - `_delete` asks HEAD first: S3's DeleteObject succeeds for a missing key (and on a versioned
 *   bucket even adds a delete marker), so only a HEAD can say `NotFound`. A key deleted by
 *   someone else between the HEAD and the DELETE is not detected (the delete still succeeds).
 * - Version primitives check the bucket's versioning once per bucket (GetBucketVersioning,
 *   cached for the store's lifetime): on a bucket without versioning S3 would answer with a
 *   `null` version, which is not a version provcat can pin.
 * - Listings ask for URL-encoded keys (keys.ts) and version listings keep the store's exact
 *   interleaving of versions and delete markers (history.ts).
 * - `_createMode` probes whether the store honours `If-None-Match: *` (Ceph 16 ignores it on
 *   versioned buckets) once per bucket; see {@link S3Store._createMode}.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Agent as HttpAgent, type IncomingMessage } from 'node:http';
import type { Agent as HttpsAgent } from 'node:https';
import path from 'node:path';
import { addAbortSignal, Readable } from 'node:stream';
import { debuglog } from 'node:util';
import type {
  BucketLocationConstraint,
  ListObjectsV2CommandOutput,
  S3Client,
} from '@aws-sdk/client-s3';
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
} from '../../src/contract/primitives.js';
import {
  Exists,
  isAbort,
  NotFound,
  OfflineMiss,
  PreconditionFailed,
  type ProvcatError,
  SourceError,
  StoreError,
} from '../../src/core/errors.js';
import {
  BucketMemo,
  missingBucket,
  requireVersioning,
  versioningMemo,
} from '../../src/driver-kit/bucket-state.js';
import { checkByteRange, exactBytes } from '../../src/driver-kit/exact-bytes.js';
import { pageSize } from '../../src/driver-kit/paging.js';
import { nodeHttps } from '../../src/net/builtins.js';
import { Http1Pool, type Http1Response, type WholeResponse } from '../../src/net/http1-download.js';
import { leanGetResult } from '../../src/net/lean-get.js';
import { ObjectStore } from '../../src/store/object-store.js';
import {
  type CreateFallback,
  resolveS3Config,
  type S3Config,
  type S3StoreOptions,
} from './config.js';
import { errorName, mapS3Error, type S3ErrorContext, s3UriText, statusOf } from './errors.js';
import { recordVersionOrder, sdkVersionPage } from './history.js';
import { copySource, decodeListedKey } from './keys.js';
import {
  httpDate,
  type LeanListPage,
  LeanPath,
  pathStyleRoute,
  type Route,
  sdkSignerFactory,
} from './lean.js';
import { putMetadata, recordedSha256 } from './metadata.js';
import { S3Multipart } from './multipart.js';
import { endpointInputs, RouteStore } from './route-store.js';
import { loadHttpHandler, loadS3Sdk, type S3Sdk } from './sdk.js';

const s3debug = debuglog('provcat:s3');

/** Where `_createMode` writes its probe objects (removed again, every version). */
export const PROBE_PREFIX = '.provcat/probe/';

/** Options of {@link S3Store.makeBucket}. */
export interface MakeBucketOptions {
  /** Turn on versioning (needed for pins, commits and branches). Default `true`. */
  versioning?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/** The parts of a HEAD response the driver uses. */
interface HeadFields {
  ContentLength?: number | undefined;
  ETag?: string | undefined;
  VersionId?: string | undefined;
  LastModified?: Date | undefined;
  /** User metadata (`x-amz-meta-*`, names lowercased): `sha256` is the one the driver reads. */
  Metadata?: Record<string, string> | undefined;
}

/**
 * An ETag in S3's quoted form. Ceph 16 sends CopyObject's ETag without the quotes it uses
 * everywhere else; one form keeps `version` comparable across calls (the cache keys by it).
 */
function quotedEtag(etag: string): string {
  return etag.startsWith('"') ? etag : `"${etag}"`;
}

function objectInfo(key: string, head: HeadFields, size?: number): ObjectInfo {
  const length = size ?? head.ContentLength;
  if (!head.ETag || length === undefined) {
    throw new StoreError(`the store's answer for ${key} lacks an ETag or a size`);
  }
  const etag = quotedEtag(head.ETag);
  return {
    key,
    size: length,
    version: etag,
    etag,
    versionId: head.VersionId,
    lastModified: head.LastModified,
    sha256: recordedSha256(head.Metadata),
  };
}

/** The full object size from a `Content-Range: bytes a-b/size` header, when it carries one. */
function totalFromContentRange(contentRange: string | undefined): number | undefined {
  const m = contentRange === undefined ? null : /\/(\d+)\s*$/.exec(contentRange);
  return m ? Number(m[1]) : undefined;
}

/**
 * True when a GET's encryption headers say its ETag is not the MD5 of the bytes, though it may
 * look like one (32 hex): SSE-KMS (`aws:kms`, `aws:kms:dsse`) and SSE-C (a customer algorithm).
 * The cache then checks no MD5 (`GetResult.etagNotMd5`). SSE-S3 (`AES256`) keeps the MD5.
 */
export function etagNotMd5(
  serverSideEncryption: string | undefined,
  customerAlgorithm: string | undefined,
): boolean | undefined {
  const kms = serverSideEncryption?.toLowerCase().startsWith('aws:kms') === true;
  return kms || (customerAlgorithm !== undefined && customerAlgorithm !== '') ? true : undefined;
}

/** {@link etagNotMd5} of a lean response's headers (names lowercased). */
function leanEtagNotMd5(h: Readonly<Record<string, string>>): boolean | undefined {
  return etagNotMd5(
    h['x-amz-server-side-encryption'],
    h['x-amz-server-side-encryption-customer-algorithm'],
  );
}

/** How long a socket may stay idle (no byte either way) before its transfer counts as dead. */
const SOCKET_TIMEOUT_MS = 120_000;

/**
 * A GetResult from a lean GET's response (streamed or read whole; src/net/lean-get.ts), or
 * `undefined` (the response discarded) when it lacks an ETag, so the SDK path decides.
 */
function leanResult(key: string, res: Http1Response | WholeResponse): GetResult | undefined {
  const info = leanGetInfo(key, res);
  if (info === undefined) {
    if (!('body' in res)) res.discard();
    return undefined;
  }
  const result = leanGetResult(info, res);
  result.etagNotMd5 = leanEtagNotMd5(res.headers);
  return result;
}

/** The ObjectInfo of a lean GET's response head (the fields the SDK reads); `undefined` without an ETag. */
function leanGetInfo(
  key: string,
  res: Pick<Http1Response, 'headers' | 'contentLength'>,
): ObjectInfo | undefined {
  const h = res.headers;
  const etag = h.etag;
  if (etag === undefined) return undefined;
  const versionId = h['x-amz-version-id'];
  const modified = h['last-modified'];
  const sha256 = h['x-amz-meta-sha256'];
  return objectInfo(
    key,
    {
      ContentLength: res.contentLength,
      ETag: etag,
      VersionId: typeof versionId === 'string' ? versionId : undefined,
      LastModified: modified === undefined ? undefined : httpDate(modified),
      Metadata: typeof sha256 === 'string' ? { sha256 } : undefined,
    },
    totalFromContentRange(h['content-range']) ?? res.contentLength,
  );
}

/**
 * The ObjectInfo of a lean HEAD's response headers (the fields the SDK's HeadObject reads), or
 * `undefined` when there were none or they lack a size or an ETag, so the SDK path decides.
 */
function leanHeadInfo(
  key: string,
  h: IncomingMessage['headers'] | undefined,
): ObjectInfo | undefined {
  if (h === undefined) return undefined;
  const length = Number(h['content-length']);
  if (h['content-length'] === undefined || !Number.isSafeInteger(length) || !h.etag)
    return undefined;
  const versionId = h['x-amz-version-id'];
  const modified = h['last-modified'];
  const sha256 = h['x-amz-meta-sha256'];
  return objectInfo(key, {
    ContentLength: length,
    ETag: h.etag,
    VersionId: typeof versionId === 'string' ? versionId : undefined,
    LastModified: modified === undefined ? undefined : httpDate(modified),
    Metadata: typeof sha256 === 'string' ? { sha256 } : undefined,
  });
}

/**
 * The S3 driver. Serves `s3://bucket/key` on AWS S3 and S3-compatible stores (Ceph radosgw,
 * MinIO, ...). Thread of guarantees:
 *
 * - Missing objects raise {@link NotFound}; refusals (403), throttling and network failures raise
 *   {@link StoreError} with the SDK error as `cause` and the HTTP `status`.
 * - Uploads larger than `multipartThreshold` go in parts with bounded memory and never leave an
 *   incomplete multipart upload behind on failure or abort (short of a process crash).
 * - Offline (`offline` option or `PROVCAT_OFFLINE=1`), every primitive raises
 *   {@link OfflineMiss} before any network call.
 */
export class S3Store extends ObjectStore {
  readonly scheme = 's3';
  readonly driver = 's3';
  /** Versions work on buckets with versioning enabled; byte ranges always. */
  readonly capabilities: Capabilities = { versions: true, ranges: true, sha256Metadata: true };
  /** The region requests go to (unless an injected client says otherwise). */
  readonly region: string;
  /** The endpoint URL, or `undefined` for AWS. */
  readonly endpoint: string | undefined;
  /** Path-style addressing. */
  readonly forcePathStyle: boolean;
  /** Uploads above this many bytes are multipart. */
  readonly multipartThreshold: number;
  /** Part size of multipart uploads (raised per upload for huge known sizes). */
  readonly partSize: number;
  /** Parts in flight per multipart upload (and part buffers per store). */
  readonly partsInFlight: number;
  /** A multipart upload with no progress for this long (ms) fails with `UploadStalled`. */
  readonly stallTimeoutMs: number;
  /** Copies above this many bytes use UploadPartCopy. */
  readonly copyThreshold: number;
  /** What `_createMode` falls back to when the store ignores `If-None-Match: *`. */
  readonly createFallback: CreateFallback;

  private readonly config: S3Config;
  private readonly injected: S3Client | undefined;
  private built: Promise<S3Client> | undefined;
  /** Each bucket's versioning, asked once (GetBucketVersioning). */
  private readonly versioning = versioningMemo((bucket) =>
    this.call({ bucket, op: 'versioning' }, async (client, sdk) => {
      const r = await client.send(new sdk.GetBucketVersioningCommand({ Bucket: bucket }));
      return r.Status === 'Enabled'
        ? 'enabled'
        : r.Status === 'Suspended'
          ? 'suspended'
          : 'not enabled';
    }),
  );
  /** Each bucket's create mode, probed once (see {@link S3Store._createMode}). */
  private readonly createModes = new BucketMemo((bucket) => this.probeCreateMode(bucket));
  /** The multipart protocol per bucket, made on first use. */
  private readonly multiparts = new Map<string, S3Multipart>();
  /**
   * GetObject, HeadObject and ListObjectsV2 without the SDK (lean.ts), when the store builds its
   * own client; `undefined` with an injected client.
   */
  private readonly lean: LeanPath | undefined;
  /** The client once built (its measured clock skew signs lean requests too). */
  private builtClient: S3Client | undefined;
  private agentPair: { http: HttpAgent; https: HttpsAgent } | undefined;
  /** `agentPair.https` once made (see {@link agents}). */
  private httpsAgent: HttpsAgent | undefined;
  /** Idle keep-alive connections of lean GETs (closed by {@link close}). */
  private readonly downloads: Http1Pool | undefined;
  private readonly fixedRoutes = new Map<string, Route | undefined>();
  /** The lean path's learned routes kept in the cache, when routes are not fixed (route-store.ts). */
  private readonly routeStore: RouteStore | undefined;

  /** True when reads take the lean path (lean.ts); false when every request goes through the SDK. */
  get leanReads(): boolean {
    return this.lean !== undefined;
  }

  /** Throws RangeError for options or environment values out of range. Makes no network call. */
  constructor(options: S3StoreOptions = {}) {
    super(options);
    this.config = resolveS3Config(options);
    this.injected = options.client;
    this.region = this.config.region;
    this.endpoint = this.config.endpoint;
    this.forcePathStyle = this.config.forcePathStyle;
    this.multipartThreshold = this.config.multipartThreshold;
    this.partSize = this.config.partSize;
    this.partsInFlight = this.config.partsInFlight;
    this.stallTimeoutMs = this.config.stallTimeoutMs;
    this.copyThreshold = this.config.copyThreshold;
    this.createFallback = this.config.createFallback;
    const c = this.config;
    if (c.lean && !this.injected && c.responseChecksumValidation === 'WHEN_REQUIRED') {
      const endpoint = c.endpoint;
      const fixed = endpoint !== undefined && c.forcePathStyle;
      const agents = this.agents();
      this.downloads = new Http1Pool({ maxIdlePerOrigin: agents.http.maxSockets });
      this.routeStore = fixed
        ? undefined
        : new RouteStore({
            dir: path.join(this.cache.root, 'v1', 's3-routes'),
            inputs: () => endpointInputs(c),
            debug: (m) => this.debug(m),
          });
      this.lean = new LeanPath({
        agents,
        downloads: this.downloads,
        socketTimeoutMs: SOCKET_TIMEOUT_MS,
        stored: this.routeStore,
        fixedRoute: fixed
          ? (bucket) => {
              // Made once per bucket: a URL parse per request is measurable on small GETs.
              let route = this.fixedRoutes.get(bucket);
              if (route === undefined && !this.fixedRoutes.has(bucket)) {
                route = pathStyleRoute(endpoint, c.region, bucket);
                this.fixedRoutes.set(bucket, route);
              }
              return route;
            }
          : undefined,
        signer: sdkSignerFactory(),
        clockOffset: () =>
          (this.builtClient?.config as { systemClockOffset?: number } | undefined)
            ?.systemClockOffset ?? 0,
        debug: (m) => this.debug(m),
      });
    }
  }

  /** The keep-alive HTTP agents of every request of this store (lean and SDK), made once. */
  private agents(): { http: HttpAgent; https: HttpsAgent } {
    if (!this.agentPair) {
      const maxSockets = Math.min(1024, Math.max(64, this.concurrency * this.partsInFlight));
      const agent = { keepAlive: true, maxSockets, maxFreeSockets: maxSockets };
      const https = (): HttpsAgent => {
        this.httpsAgent ??= new (nodeHttps().Agent)(agent);
        return this.httpsAgent;
      };
      this.agentPair = {
        http: new HttpAgent(agent),
        // Made (and node:https loaded) only when an https request needs it.
        get https() {
          return https();
        },
      };
    }
    return this.agentPair;
  }

  // ---- the client and the error mapping (used by src/lake too) ---------------------------

  /**
   * The S3 client: the injected one, or one built on first call from the configuration (the
   * SDK's default credential chain; a keep-alive HTTP agent with at least 64 sockets). The SDK
   * is imported here, not at module load. Building makes no network call.
   */
  client(): Promise<S3Client> {
    if (this.injected) return Promise.resolve(this.injected);
    this.built ??= this.buildClient().catch((error: unknown) => {
      this.built = undefined;
      throw error;
    });
    return this.built;
  }

  private async buildClient(): Promise<S3Client> {
    const [sdk, { NodeHttpHandler }] = await Promise.all([loadS3Sdk(), loadHttpHandler()]);
    const agents = this.agents();
    const c = this.config;
    this.debug(
      `client: region ${c.region}, endpoint ${c.endpoint ?? '(AWS)'}, path-style ${c.forcePathStyle}, ${agents.http.maxSockets} sockets`,
    );
    // SDK warnings (retries of streamed bodies, socket pressure) go to the debug log, not stderr.
    const logger = {
      trace: () => {},
      debug: () => {},
      info: () => {},
      warn: (...args: unknown[]) => this.debug(`sdk warning: ${args.map(String).join(' ')}`),
      error: (...args: unknown[]) => this.debug(`sdk error: ${args.map(String).join(' ')}`),
    };
    const client = new sdk.S3Client({
      logger,
      region: c.region,
      endpoint: c.endpoint,
      ignoreConfiguredEndpointUrls: c.ignoreConfiguredEndpointUrls || undefined,
      forcePathStyle: c.forcePathStyle,
      followRegionRedirects: c.endpoint === undefined,
      requestChecksumCalculation: c.requestChecksumCalculation,
      responseChecksumValidation: c.responseChecksumValidation,
      requestHandler: new NodeHttpHandler({
        httpAgent: agents.http,
        httpsAgent: agents.https,
        logger,
        connectionTimeout: 10_000,
        // An idle socket (no byte either way) for 2 minutes is a dead transfer.
        socketTimeout: SOCKET_TIMEOUT_MS,
      }),
    });
    this.lean?.watch(client);
    this.builtClient = client;
    return client;
  }

  /**
   * Close the sockets of a client this store built (an injected client is the caller's to
   * close), after the learned routes are written to the cache.
   */
  override async close(): Promise<void> {
    await this.routeStore?.flush();
    const built = this.built;
    this.built = undefined;
    this.builtClient = undefined;
    if (built) (await built).destroy();
    this.agentPair?.http.destroy();
    this.httpsAgent?.destroy();
    this.downloads?.close();
  }

  /**
   * Map an error from an S3 call about `context` to a provcat error: the one mapping of this
   * driver (see drivers/s3/errors.ts). 404 → {@link NotFound}; 412, and 409 on a create →
   * {@link Exists}; anything else → {@link StoreError} with `status` and the SDK error as
   * `cause`. Callers that let aborts through check `isAbort` first, as the primitives do.
   */
  mapError(error: unknown, context: S3ErrorContext): ProvcatError {
    return mapS3Error(error, context);
  }

  private debug(message: string): void {
    s3debug(message);
    this.logger(message);
  }

  /** Throw {@link OfflineMiss} when offline: before any S3 request (the base's one guard). */
  private offlineGuard(context: S3ErrorContext): void {
    this.requireOnline(context.op, s3UriText(context.bucket, context.key));
  }

  /**
   * Run one S3 interaction: offline check, then `lean` (when the store has a lean path and one is
   * given; its `undefined` means "ask the SDK", its error is mapped as the SDK's would be), else
   * the client and SDK with the error mapping.
   */
  private async call<T>(
    context: S3ErrorContext,
    fn: (client: S3Client, sdk: S3Sdk) => Promise<T>,
    lean?: (path: LeanPath) => Promise<T | undefined>,
  ): Promise<T> {
    this.offlineGuard(context);
    if (lean && this.lean) {
      let answer: T | undefined;
      try {
        answer = await lean(this.lean);
      } catch (error) {
        // The lean path throws only for a status it answers itself (a HEAD's or GET's 404), and
        // for a whole read that failed after its head (a network error, or an abort).
        if (isAbort(error)) throw error;
        throw this.mapError(error, context);
      }
      if (answer !== undefined) return answer;
    }
    const [client, sdk] = await Promise.all([this.client(), loadS3Sdk()]);
    try {
      return await fn(client, sdk);
    } catch (error) {
      if (isAbort(error)) throw error;
      throw this.mapError(error, context);
    }
  }

  /**
   * S3 multipart uploads in `bucket` (multipart.ts), for the upload engine: `put` above
   * `multipartThreshold` and managed uploads. Offline, its calls raise {@link OfflineMiss}.
   */
  override partProtocol(bucket: string): S3Multipart {
    let multipart = this.multiparts.get(bucket);
    if (!multipart) {
      multipart = new S3Multipart(
        async () => {
          this.offlineGuard({ bucket, op: 'multipart upload' });
          const [client, sdk] = await Promise.all([this.client(), loadS3Sdk()]);
          return { client, sdk };
        },
        bucket,
        (m) => this.debug(m),
      );
      this.multiparts.set(bucket, multipart);
    }
    return multipart;
  }

  // ---- buckets -------------------------------------------------------------------------

  /**
   * Create `bucket` (idempotent for a bucket this account already owns) and, unless
   * `versioning: false`, enable versioning on it. {@link Exists} when another account owns the
   * name.
   */
  override async makeBucket(bucket: string, options: MakeBucketOptions = {}): Promise<void> {
    const versioning = options.versioning ?? true;
    await this.call({ bucket, op: 'makeBucket' }, async (client, sdk) => {
      const region = this.injected ? await client.config.region() : this.region;
      try {
        await client.send(
          new sdk.CreateBucketCommand({
            Bucket: bucket,
            CreateBucketConfiguration:
              region === 'us-east-1'
                ? undefined
                : { LocationConstraint: region as BucketLocationConstraint },
          }),
          { abortSignal: options.signal },
        );
      } catch (error) {
        if (errorName(error) !== 'BucketAlreadyOwnedByYou') throw error;
      }
      if (versioning) {
        await client.send(
          new sdk.PutBucketVersioningCommand({
            Bucket: bucket,
            VersioningConfiguration: { Status: 'Enabled' },
          }),
          { abortSignal: options.signal },
        );
      }
    });
    this.versioning.forget(bucket);
    this.createModes.forget(bucket);
    this.debug(`makeBucket ${bucket} (versioning ${versioning ? 'on' : 'unchanged'})`);
  }

  /**
   * Refuse a version primitive on a bucket without versioning (NotSupported) or without bucket
   * (NotFound); the message names the object (at `versionId`) the call was about.
   */
  private async requireVersions(
    bucket: string,
    op: string,
    key?: string,
    versionId?: string,
  ): Promise<void> {
    requireVersioning(await this.versioning.get(bucket), op, s3UriText(bucket, key, versionId));
  }

  // ---- core primitives -------------------------------------------------------------------

  /** HeadObject: size, and the ETag as version. {@link NotFound} when absent. */
  override async _head(
    bucket: string,
    key: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    return this.call(
      { bucket, key, op: 'head' },
      async (client, sdk) => {
        const r = await client.send(new sdk.HeadObjectCommand({ Bucket: bucket, Key: key }), {
          abortSignal: options.signal,
        });
        return objectInfo(key, r);
      },
      async (lean) => leanHeadInfo(key, await lean.head(bucket, key, { signal: options.signal })),
    );
  }

  /**
   * ListObjectsV2 pages (`limit` is MaxKeys, at most 1,000), following continuation tokens.
   * Keys come URL-encoded from the store and are decoded here. A missing bucket is `NotFound`
   * (the listing's own `NoSuchBucket`).
   */
  override async *_pages(
    bucket: string,
    prefix: string,
    options: PagesOptions = {},
  ): AsyncIterable<ListPage> {
    const limit = pageSize(options.limit, 1000);
    let token: string | undefined;
    for (;;) {
      const context = { bucket, key: prefix, op: 'list' };
      let r: { encoding: string | undefined; page: LeanListPage } | ListObjectsV2CommandOutput;
      try {
        r = await this.call<typeof r>(
          context,
          (client, sdk) =>
            client.send(
              new sdk.ListObjectsV2Command({
                Bucket: bucket,
                Prefix: prefix === '' ? undefined : prefix,
                Delimiter: options.delimiter,
                MaxKeys: limit,
                ContinuationToken: token,
                EncodingType: 'url',
              }),
              { abortSignal: options.signal },
            ),
          async (lean) => {
            const page = await lean.listPage(bucket, {
              prefix,
              delimiter: options.delimiter,
              maxKeys: limit,
              token,
              signal: options.signal,
            });
            return page && { encoding: page.encodingType, page };
          },
        );
      } catch (error) {
        if (error instanceof NotFound) throw missingBucket(s3UriText(bucket), error);
        throw error;
      }
      // The lean page and the SDK's answer, in one shape.
      const lean = 'page' in r ? r.page : undefined;
      const sdkPage = 'page' in r ? undefined : r;
      const decode = this.keyDecoder(lean ? lean.encodingType : sdkPage?.EncodingType, context);
      const page: ListPage = lean
        ? {
            prefixes: lean.prefixes.map(decode),
            objects: lean.objects.map((o) =>
              objectInfo(decode(o.key), { ETag: o.etag, LastModified: o.lastModified }, o.size),
            ),
          }
        : {
            prefixes: (sdkPage?.CommonPrefixes ?? []).flatMap((p) =>
              p.Prefix === undefined ? [] : [decode(p.Prefix)],
            ),
            objects: (sdkPage?.Contents ?? []).map((o) =>
              objectInfo(
                decode(o.Key ?? ''),
                { ETag: o.ETag, LastModified: o.LastModified },
                o.Size,
              ),
            ),
          };
      if (page.prefixes.length > 0 || page.objects.length > 0) yield page;
      if (!(lean ? lean.isTruncated : sdkPage?.IsTruncated)) return;
      token = lean ? lean.nextToken : sdkPage?.NextContinuationToken;
      if (!token) {
        throw new StoreError(`list ${s3UriText(bucket, prefix)}: truncated page without a token`);
      }
    }
  }

  private keyDecoder(encoding: string | undefined, context: S3ErrorContext) {
    if (encoding !== 'url') return (key: string) => key;
    return (key: string) => {
      try {
        return decodeListedKey(key);
      } catch (cause) {
        throw new StoreError(
          `${context.op} ${s3UriText(context.bucket, context.key)}: the store listed a key that is not valid URL encoding: ${key}`,
          { cause },
        );
      }
    };
  }

  /**
   * GetObject, streamed. With a range, one request with `Range: bytes=start-(end-1)`; the
   * Content-Range the store sent is returned as is (callers validate it). `info.size` is the
   * whole object's size (from Content-Range when there is one). {@link NotFound} when absent.
   */
  override async _get(bucket: string, key: string, options: GetOptions = {}): Promise<GetResult> {
    return this.getObject(bucket, key, undefined, options, 'get');
  }

  private async getObject(
    bucket: string,
    key: string,
    versionId: string | undefined,
    options: GetOptions,
    op: string,
  ): Promise<GetResult> {
    const range = options.range;
    checkByteRange(range);
    return this.call<GetResult>(
      { bucket, key, versionId, op },
      async (client, sdk) => {
        const r = await client.send(
          new sdk.GetObjectCommand({
            Bucket: bucket,
            Key: key,
            VersionId: versionId,
            Range: range ? `bytes=${range.start}-${range.end - 1}` : undefined,
          }),
          { abortSignal: options.signal },
        );
        const body = r.Body;
        if (!(body instanceof Readable)) {
          throw new StoreError(`${op} ${s3UriText(bucket, key)}: the SDK returned no Node stream`);
        }
        if (options.signal) addAbortSignal(options.signal, body);
        if (r.ContentLength === undefined) {
          body.destroy();
          throw new StoreError(`${op} ${s3UriText(bucket, key)}: no Content-Length`);
        }
        const size = totalFromContentRange(r.ContentRange) ?? r.ContentLength;
        return {
          body,
          info: objectInfo(key, r, size),
          contentLength: r.ContentLength,
          contentRange: r.ContentRange,
          etagNotMd5: etagNotMd5(r.ServerSideEncryption, r.SSECustomerAlgorithm),
        };
      },
      async (lean) => {
        const upTo = options.wholeUpTo;
        if (upTo !== undefined && range === undefined) {
          const whole = await lean.getWhole(bucket, key, {
            versionId,
            signal: options.signal,
            maxBytes: upTo,
          });
          if (whole === undefined) return undefined;
          if (whole !== 'larger') return leanResult(key, whole);
        }
        // The transfer has the signal: an abort rejects `pipeTo` and errors `body`.
        const res = await lean.get(bucket, key, { versionId, range, signal: options.signal });
        return res && leanResult(key, res);
      },
    );
  }

  /**
   * Write one object: one PutObject when the source is small (at most `multipartThreshold`, or
   * a stream that ends within one part), else a multipart upload on the upload engine
   * (`putInParts`, multipart.ts) with bounded memory that is aborted on any failure or abort. A
   * source that is not exactly its declared `size` fails the put; on failure a source stream is
   * destroyed. Progress is bytes sent (one put) or bytes in acknowledged parts (multipart).
   */
  override async _put(
    bucket: string,
    key: string,
    source: PutSource,
    options: PutOptions = {},
  ): Promise<ObjectInfo> {
    if (source instanceof Uint8Array && options.size !== undefined) {
      if (options.size !== source.length) {
        throw new RangeError(`size ${options.size} given for ${source.length} bytes`);
      }
    }
    this.offlineGuard({ bucket, key, op: 'put' });
    return this.putInParts(bucket, key, source, options, (one, o) =>
      this.call({ bucket, key, op: 'put' }, (client, sdk) =>
        this.putSingle(client, sdk, bucket, key, one, o.size as number, o),
      ),
    );
  }

  private async putSingle(
    client: S3Client,
    sdk: S3Sdk,
    bucket: string,
    key: string,
    source: PutSource,
    size: number,
    options: PutOptions,
  ): Promise<ObjectInfo> {
    let body: Uint8Array | Readable;
    let input: Readable | undefined;
    let sourceError: unknown;
    // A failing source must also end the request: the server would wait for the missing bytes.
    const request = new AbortController();
    const onAbort = () => request.abort(options.signal?.reason);
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (source instanceof Uint8Array) {
      body = source;
    } else {
      input = typeof source === 'string' ? createReadStream(source) : source;
      const check = Readable.from(exactBytes(input, size, options.onProgress), {
        objectMode: false,
      });
      check.on('error', (error) => {
        sourceError ??= error;
        request.abort(error);
      });
      body = check;
    }
    try {
      const r = await client.send(
        new sdk.PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: body,
          ContentLength: size,
          ContentType: options.contentType,
          Metadata: putMetadata(options.sha256),
        }),
        { abortSignal: request.signal },
      );
      if (source instanceof Uint8Array) options.onProgress?.(size);
      return objectInfo(key, { ETag: r.ETag, VersionId: r.VersionId }, size);
    } catch (error) {
      if (body instanceof Readable) body.destroy();
      input?.destroy();
      if (sourceError !== undefined && !options.signal?.aborted) {
        throw sourceError instanceof SourceError
          ? sourceError
          : new SourceError(`the source failed: ${(sourceError as Error).message}`, {
              cause: sourceError,
            });
      }
      throw error;
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * DeleteObject after a HEAD: {@link NotFound} when there is no current object (S3's delete
   * itself cannot tell). On a versioned bucket this adds a delete marker.
   */
  override async _delete(bucket: string, key: string, options: SignalOptions = {}): Promise<void> {
    await this._head(bucket, key, options);
    await this.call({ bucket, key, op: 'delete' }, (client, sdk) =>
      client.send(new sdk.DeleteObjectCommand({ Bucket: bucket, Key: key }), {
        abortSignal: options.signal,
      }),
    );
  }

  /**
   * Delete `key` only if it is still `version` (its ETag). With `versionId`, DeleteObject of
   * exactly that version (it goes for good; a newer version stays). Without, a HEAD compares
   * the ETag ({@link PreconditionFailed} when it moved), then DeleteObject with `If-Match`, which
   * AWS honours; a store that ignores `If-Match` (Ceph 16) leaves the window between HEAD and
   * DELETE open, which only a writer replacing the object in that moment can use.
   */
  override async _deleteIf(bucket: string, key: string, options: DeleteIfOptions): Promise<void> {
    const head = options.versionId
      ? await this._headVersion(bucket, key, options.versionId, options)
      : await this._head(bucket, key, options);
    if (quotedEtag(head.version) !== quotedEtag(options.version)) {
      throw new PreconditionFailed(
        `delete ${s3UriText(bucket, key)}: it is ${head.version} now, not ${options.version}`,
        { uri: s3UriText(bucket, key) },
      );
    }
    await this.call({ bucket, key, op: 'delete' }, (client, sdk) =>
      client.send(
        new sdk.DeleteObjectCommand({
          Bucket: bucket,
          Key: key,
          VersionId: options.versionId,
          IfMatch: options.versionId ? undefined : quotedEtag(options.version),
        }),
        { abortSignal: options.signal },
      ),
    );
  }

  /** A presigned GetObject URL (SigV4 query signature) valid for `expiresIn` seconds. */
  override async _presign(
    bucket: string,
    key: string,
    options: PresignPrimitiveOptions,
  ): Promise<string> {
    return this.call({ bucket, key, op: 'presign' }, async (client, sdk) => {
      const { getSignedUrl } = await import('@aws-sdk/s3-request-presigner');
      return getSignedUrl(client, new sdk.GetObjectCommand({ Bucket: bucket, Key: key }), {
        expiresIn: options.expiresIn,
      });
    });
  }

  // ---- version primitives --------------------------------------------------------------

  /** The VersionId of the current object (HEAD). NotSupported on a bucket without versioning. */
  override async _versionOf(
    bucket: string,
    key: string,
    options: SignalOptions = {},
  ): Promise<string> {
    await this.requireVersions(bucket, 'versionOf', key);
    const info = await this._head(bucket, key, options);
    if (info.versionId === undefined) {
      throw new StoreError(`versionOf ${s3UriText(bucket, key)}: the store sent no version ID`, {
        uri: s3UriText(bucket, key),
      });
    }
    return info.versionId;
  }

  /**
   * ListObjectVersions under `prefix`, paging with KeyMarker/VersionIdMarker: versions and
   * delete markers (`size: null`) in the store's exact order (key order, newest first within a
   * key). NotSupported on a bucket without versioning; a missing bucket yields nothing.
   */
  override async *_history(
    bucket: string,
    prefix: string,
    options: SignalOptions = {},
  ): AsyncIterable<VersionRecord> {
    const state = await this.versioning.get(bucket);
    if (state === 'missing') return;
    await this.requireVersions(bucket, 'history', prefix);
    let keyMarker: string | undefined;
    let versionIdMarker: string | undefined;
    for (;;) {
      const context = { bucket, key: prefix, op: 'history' };
      const page = await this.call(
        context,
        async (client, sdk) => {
          const command = new sdk.ListObjectVersionsCommand({
            Bucket: bucket,
            Prefix: prefix === '' ? undefined : prefix,
            KeyMarker: keyMarker,
            VersionIdMarker: versionIdMarker,
            EncodingType: 'url',
          });
          const recorder = recordVersionOrder(command);
          return sdkVersionPage(
            await client.send(command, { abortSignal: options.signal }),
            recorder,
          );
        },
        (lean) =>
          lean.listVersionsPage(bucket, {
            prefix,
            keyMarker,
            versionIdMarker,
            signal: options.signal,
          }),
      );
      const decode = this.keyDecoder(page.encodingType, context);
      for (const e of page.entries) {
        yield {
          key: decode(e.key),
          versionId: e.versionId,
          size: e.kind === 'version' ? (e.size ?? 0) : null,
          current: e.isLatest,
          etag: e.kind === 'version' && e.etag ? quotedEtag(e.etag) : undefined,
          lastModified: e.lastModified,
        };
      }
      if (!page.isTruncated) return;
      keyMarker = page.nextKeyMarker === undefined ? undefined : decode(page.nextKeyMarker);
      versionIdMarker = page.nextVersionIdMarker;
      if (!keyMarker) {
        throw new StoreError(
          `history ${s3UriText(bucket, prefix)}: truncated page without a marker`,
        );
      }
    }
  }

  /** HeadObject of one version. {@link NotFound} when that version does not exist. */
  override async _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    await this.requireVersions(bucket, 'headVersion', key, versionId);
    return this.call(
      { bucket, key, versionId, op: 'headVersion' },
      async (client, sdk) => {
        const r = await client.send(
          new sdk.HeadObjectCommand({ Bucket: bucket, Key: key, VersionId: versionId }),
          { abortSignal: options.signal },
        );
        return objectInfo(key, r);
      },
      async (lean) =>
        leanHeadInfo(key, await lean.head(bucket, key, { versionId, signal: options.signal })),
    );
  }

  /** GetObject of one version (optionally a range, as `_get`). */
  override async _getVersion(
    bucket: string,
    key: string,
    versionId: string,
    options: GetOptions = {},
  ): Promise<GetResult> {
    await this.requireVersions(bucket, 'getVersion', key, versionId);
    return this.getObject(bucket, key, versionId, options, 'getVersion');
  }

  /**
   * PutObject with `If-None-Match: *`: {@link Exists} (412, or 409 on a concurrent create) when
   * a current object has the key. Atomic only where the store honours the condition — see
   * {@link _createMode}; Ceph 16 ignores it on versioned buckets.
   */
  override async _create(
    bucket: string,
    key: string,
    body: Uint8Array,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    return this.call({ bucket, key, op: 'create' }, async (client, sdk) => {
      const r = await client.send(
        new sdk.PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: body,
          ContentLength: body.length,
          IfNoneMatch: '*',
        }),
        { abortSignal: options.signal },
      );
      return objectInfo(key, { ETag: r.ETag, VersionId: r.VersionId }, body.length);
    });
  }

  /**
   * Server-side copy of the current object, or of one version, to `toKey` in the same bucket:
   * CopyObject, or UploadPartCopy parts above `copyThreshold` (5 GiB). A HEAD of the source
   * first gives its size; the copy is conditional on the source's ETag, so a source replaced in
   * between fails the copy (StoreError, status 412) rather than copying something else.
   */
  override async _copy(
    bucket: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    if (versionId !== undefined) await this.requireVersions(bucket, 'copy', key, versionId);
    return this.call({ bucket, key, versionId, op: 'copy' }, async (client, sdk) => {
      const head = await client.send(
        new sdk.HeadObjectCommand({ Bucket: bucket, Key: key, VersionId: versionId }),
        { abortSignal: options.signal },
      );
      const source = objectInfo(key, head);
      try {
        if (source.size > this.copyThreshold) {
          const { copyMultipart } = await import('./copy.js');
          return await copyMultipart(
            this.partProtocol(bucket),
            key,
            toKey,
            {
              versionId,
              size: source.size,
              etag: source.version,
              contentType: head.ContentType,
              contentEncoding: head.ContentEncoding,
              contentDisposition: head.ContentDisposition,
              cacheControl: head.CacheControl,
              metadata: head.Metadata,
            },
            { partSize: this.partSize, partsInFlight: this.partsInFlight, signal: options.signal },
          );
        }
        const r = await client.send(
          new sdk.CopyObjectCommand({
            Bucket: bucket,
            Key: toKey,
            CopySource: copySource(bucket, key, versionId),
            CopySourceIfMatch: source.version,
          }),
          { abortSignal: options.signal },
        );
        const copied = objectInfo(
          toKey,
          {
            ETag: r.CopyObjectResult?.ETag,
            VersionId: r.VersionId,
            LastModified: r.CopyObjectResult?.LastModified,
          },
          source.size,
        );
        if (copied.versionId === undefined && (await this.versioning.get(bucket)) === 'enabled') {
          // Ceph 16 sends no x-amz-version-id for a copy: the new version is what a HEAD sees,
          // if it has the copy's ETag (a write in between leaves the ID unknown, not wrong).
          const after = await client.send(
            new sdk.HeadObjectCommand({ Bucket: bucket, Key: toKey }),
            {
              abortSignal: options.signal,
            },
          );
          if (after.ETag && quotedEtag(after.ETag) === copied.etag)
            copied.versionId = after.VersionId;
        }
        return copied;
      } catch (error) {
        if (statusOf(error) !== 412) throw error;
        throw new StoreError(`copy ${s3UriText(bucket, key)}: the source changed during the copy`, {
          uri: s3UriText(bucket, key),
          cause: error,
          status: 412,
        });
      }
    });
  }

  /**
   * How `_create` keeps "only if absent" on `bucket`. Probed once per bucket and store: a
   * random key under `.provcat/probe/` is created twice; if the second create succeeds, the
   * store ignores `If-None-Match: *` (as Ceph 16 does on versioned buckets; a store answering
   * 501 Not Implemented counts as ignoring it). Every version of the probe is deleted
   * afterwards. Returns `atomic` when the condition is honoured; otherwise
   * `oldest-version-wins` if the `createFallback` option (or `PROVCAT_S3_CREATE_FALLBACK`)
   * allows it and the bucket keeps versions, else `none`.
   */
  override async _createMode(bucket: string): Promise<CreateMode> {
    return this.createModes.get(bucket);
  }

  private async probeCreateMode(bucket: string): Promise<CreateMode> {
    const key = `${PROBE_PREFIX}${randomUUID()}`;
    const notImplemented = (error: unknown) => error instanceof StoreError && error.status === 501;
    let honoured: boolean | undefined;
    try {
      try {
        await this._create(bucket, key, Buffer.from('provcat create probe 1\n'));
      } catch (error) {
        if (!notImplemented(error)) throw error;
        honoured = false;
      }
      if (honoured === undefined) {
        try {
          await this._create(bucket, key, Buffer.from('provcat create probe 2\n'));
          honoured = false;
        } catch (error) {
          if (error instanceof Exists) honoured = true;
          else if (notImplemented(error)) honoured = false;
          else throw error;
        }
      }
    } finally {
      await this.removeProbe(bucket, key);
    }
    const versioned = (await this.versioning.get(bucket)) === 'enabled';
    const mode: CreateMode = honoured
      ? 'atomic'
      : versioned && this.createFallback === 'oldest-version-wins'
        ? 'oldest-version-wins'
        : 'none';
    this.debug(
      `createMode ${bucket}: If-None-Match ${honoured ? 'honoured' : 'ignored'}, versioning ${versioned}, mode ${mode}`,
    );
    return mode;
  }

  /** Delete every version of the probe key. A failure is logged: the probe's answer stands. */
  private async removeProbe(bucket: string, key: string): Promise<void> {
    try {
      await this.call({ bucket, key, op: 'probe cleanup' }, async (client, sdk) => {
        const r = await client.send(
          new sdk.ListObjectVersionsCommand({ Bucket: bucket, Prefix: key }),
        );
        const ids = [...(r.Versions ?? []), ...(r.DeleteMarkers ?? [])].filter(
          (v) => v.Key === key,
        );
        for (const v of ids) {
          await client.send(
            new sdk.DeleteObjectCommand({ Bucket: bucket, Key: key, VersionId: v.VersionId }),
          );
        }
      });
    } catch (error) {
      this.debug(`createMode ${bucket}: removing probe ${key} failed: ${String(error)}`);
    }
  }
}
