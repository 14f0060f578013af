/**
 * {@link S3Store}: the `s3://bucket/key` driver over `@aws-sdk/client-s3`.
 *
 * The driver is a thin translation of the twelve primitives into S3 calls; everything else
 * (folders, walk, fetch and the cache, offline mode, commits) is the {@link ObjectStore} base
 * class. Design choices, each argued where it is made:
 *
 * - The SDK client is imported on first use (sdk.ts), so commands that make no S3 call never
 *   load it. Reads (HEAD, GET, listing pages) go through one reader chosen at construction
 *   (reader.ts): the lean reader (lean-reader.ts, lean-path.ts) on the SDK's signer and
 *   credential chain, so read-only commands load the client only when a request fails or the
 *   route must be learned from it; or, with an injected client, the SDK reader (sdk-reader.ts).
 * - Configuration follows the AWS conventions (config.ts); the client is injectable
 *   (sdk-client.ts builds the store's own).
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
 *   versioned buckets) once per bucket (create-mode.ts).
 *
 * @module
 */
import type { Agent as HttpAgent } from 'node:http';
import type { Agent as HttpsAgent } from 'node:https';
import { debuglog } from 'node:util';
import type { S3Client } from '@aws-sdk/client-s3';
import type {
  Capabilities,
  CreateMode,
  DeleteIfOptions,
  GetOptions,
  GetResult,
  HistoryOptions,
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
  NotFound,
  OfflineMiss,
  PreconditionFailed,
  type ProvcatError,
  StoreError,
} from '../../src/core/errors.js';
import {
  BucketMemo,
  requireVersioning,
  versioningMemo,
} from '../../src/driver-kit/bucket-state.js';
import { checkByteRange } from '../../src/driver-kit/exact-bytes.js';
import { ObjectStore } from '../../src/store/object-store.js';
import { bucketVersioning, createBucket } from './buckets.js';
import {
  type CreateFallback,
  resolveS3Config,
  S3_CAPABILITIES,
  type S3Config,
  type S3StoreOptions,
} from './config.js';
import { probeCreateMode } from './create-mode.js';
import { mapS3Error, type S3ErrorContext, s3UriText } from './errors.js';
import { LeanReader } from './lean-reader.js';
import { objectPages, versionRecords } from './listing.js';
import { S3Multipart } from './multipart.js';
import { objectInfo, quotedEtag } from './object-info.js';
import { putObject } from './put-object.js';
import type { S3Reader } from './reader.js';
import { loadS3Sdk, type S3Sdk } from './sdk.js';
import { buildS3Client, keepAliveAgents, SOCKET_TIMEOUT_MS } from './sdk-client.js';
import { SdkReader, type SdkRun, sdkRunner } from './sdk-reader.js';

// Moved to object-info.ts; exported here too for older imports.
export { etagNotMd5 } from './object-info.js';

const s3debug = debuglog('provcat:s3');

/** Options of {@link S3Store.makeBucket}. */
export interface MakeBucketOptions {
  /** Turn on versioning (needed for pins, commits and branches). Default `true`. */
  versioning?: boolean | undefined;
  signal?: AbortSignal | undefined;
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
  /** Versions work on buckets with versioning enabled; the rest always (config.ts). */
  readonly capabilities: Capabilities = { ...S3_CAPABILITIES };
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
    this.call({ bucket, op: 'versioning' }, (client, sdk) => bucketVersioning(client, sdk, bucket)),
  );
  /** Each bucket's create mode, probed once (see {@link S3Store._createMode}). */
  private readonly createModes = new BucketMemo((bucket) =>
    probeCreateMode(bucket, {
      create: (key, body) => this._create(bucket, key, body),
      call: (context, fn) => this.call(context, fn),
      versioned: async () => (await this.versioning.get(bucket)) === 'enabled',
      fallback: this.createFallback,
      debug: (m) => this.debug(m),
    }),
  );
  /** The multipart protocol per bucket, made on first use. */
  private readonly multiparts = new Map<string, S3Multipart>();

  /**
   * How reads are sent, chosen once here: the lean reader when the store builds its own client
   * (and responses need no checksum validation), else the SDK reader.
   */
  private readonly reader: S3Reader;
  /** Every SDK call: the client, the SDK, the error mapping (sdk-reader.ts). */
  private readonly sdk: SdkRun = sdkRunner(() => this.client());
  /** The client once built (its measured clock skew signs lean requests too). */
  private builtClient: S3Client | undefined;
  private agentPair: { http: HttpAgent; https: HttpsAgent; close(): void } | undefined;

  /** True when reads take the lean path (lean-reader.ts); false when every request goes through the SDK. */
  get leanReads(): boolean {
    return this.reader.lean;
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
    const sdkReader = new SdkReader(this.sdk);
    this.reader =
      c.lean && !this.injected && c.responseChecksumValidation === 'WHEN_REQUIRED'
        ? new LeanReader({
            config: c,
            agents: this.agents(),
            cacheRoot: this.cache.root,
            socketTimeoutMs: SOCKET_TIMEOUT_MS,
            clockOffset: () =>
              (this.builtClient?.config as { systemClockOffset?: number } | undefined)
                ?.systemClockOffset ?? 0,
            fallback: sdkReader,
            debug: (m) => this.debug(m),
          })
        : sdkReader;
  }

  /** The keep-alive HTTP agents of every request of this store (lean and SDK), made once. */
  private agents(): { http: HttpAgent; https: HttpsAgent } {
    this.agentPair ??= keepAliveAgents(
      Math.min(1024, Math.max(64, this.concurrency * this.partsInFlight)),
    );
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
    const client = await buildS3Client(this.config, this.agents(), (m) => this.debug(m));
    this.reader.watch(client);
    this.builtClient = client;
    return client;
  }

  /**
   * Close the sockets of a client this store built (an injected client is the caller's to
   * close), after the learned routes are written to the cache.
   */
  override async close(): Promise<void> {
    await this.reader.close();
    const built = this.built;
    this.built = undefined;
    this.builtClient = undefined;
    if (built) (await built).destroy();
    this.agentPair?.close();
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

  /** Run one SDK interaction: the offline check, then the client and SDK with the error mapping. */
  private async call<T>(
    context: S3ErrorContext,
    fn: (client: S3Client, sdk: S3Sdk) => Promise<T>,
  ): Promise<T> {
    this.offlineGuard(context);
    return this.sdk(context, fn);
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
      await createBucket(client, sdk, bucket, { region, versioning, signal: options.signal });
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
    const at = { bucket, key, op: 'head' };
    this.offlineGuard(at);
    return this.reader.head(at, options.signal);
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
    yield* objectPages(this.reader, (at) => this.offlineGuard(at), bucket, prefix, options);
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
    checkByteRange(options.range);
    const at = { bucket, key, versionId, op };
    this.offlineGuard(at);
    return this.reader.get(at, options);
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
    // A body in memory goes lean (lean-reader.ts `put`) when the SDK would add no checksum.
    const lean =
      this.reader instanceof LeanReader &&
      this.config.requestChecksumCalculation === 'WHEN_REQUIRED'
        ? this.reader
        : undefined;
    return this.putInParts(bucket, key, source, options, async (one, o) => {
      const sent =
        lean !== undefined && one instanceof Uint8Array
          ? await lean.put({ bucket, key, op: 'put' }, one, o)
          : undefined;
      return (
        sent ??
        this.call({ bucket, key, op: 'put' }, (client, sdk) =>
          putObject(client, sdk, bucket, key, one, o.size as number, o),
        )
      );
    });
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
   * key), from the key after `startAfter` if given. NotSupported on a bucket without
   * versioning; a missing bucket yields nothing.
   */
  override async *_history(
    bucket: string,
    prefix: string,
    options: HistoryOptions = {},
  ): AsyncIterable<VersionRecord> {
    if ((await this.versioning.get(bucket)) === 'missing') return;
    await this.requireVersions(bucket, 'history', prefix);
    yield* versionRecords(this.reader, (at) => this.offlineGuard(at), bucket, prefix, options);
  }

  /** HeadObject of one version. {@link NotFound} when that version does not exist. */
  override async _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    await this.requireVersions(bucket, 'headVersion', key, versionId);
    const at = { bucket, key, versionId, op: 'headVersion' };
    this.offlineGuard(at);
    return this.reader.head(at, options.signal);
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
      const { copyObject } = await import('./copy.js');
      return copyObject(
        client,
        sdk,
        { bucket, key, versionId, toKey, signal: options.signal },
        {
          copyThreshold: this.copyThreshold,
          partSize: this.partSize,
          partsInFlight: this.partsInFlight,
          multipart: (b) => this.partProtocol(b),
          versioned: async (b) => (await this.versioning.get(b)) === 'enabled',
        },
      );
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
}
