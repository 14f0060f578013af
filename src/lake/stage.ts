/**
 * {@link Stage}: the one managed stage, on every store. A descriptor's kind (kinds.ts) says how
 * its locations look and builds its storage backend (backend.ts) on first use; everything else
 * is here and in the modules it ties together — uploads through the one engine (upload.ts),
 * verified reads (reads.ts), presigned reads, and the listing, conditional deletes and reference
 * sets garbage collection needs (gc/, loaded with their first use).
 *
 * Every method checks what it can before any I/O, in this order: the digest (exactly 64 hex
 * characters), then containment (the location lies inside the stage's exact bucket or root and
 * prefix segment, and tenant child), then the range or option. Only then is storage touched, and
 * only then is the driver (and its SDK) loaded.
 *
 * @module
 */
import type { ReadableStream } from 'node:stream/web';
import type { BodySink, ObjectInfo, OpenUpload } from '../contract/primitives.js';
import { contentTypeFor } from '../core/content-type.js';
import { ObjectIntegrityError, StoreError } from '../core/errors.js';
import { PartBufferPool } from '../upload/buffer-pool.js';
import type { StageBackend } from './backend.js';
import { RESUMABLE_PART_SIZES } from './checkpoint.js';
import { checkContentType, checkDataLocation, type DataLocation } from './data-location.js';
import { abortError, StageConfigError } from './errors.js';
import type {
  AddReferencesResult,
  ReferenceOptions,
  ReferenceSetInfo,
  RetireReferencesResult,
} from './gc/refs.js';
import { newObjectKey, type StageLocations } from './location-keys.js';
import { PresignedUrl } from './presign.js';
import { StageReads } from './reads.js';
import {
  checkExpiresIn,
  checkPartsInFlight,
  type ManagedStage,
  type PresignOptions,
  type ReadOptions,
  type UploadOptions,
  type UploadSource,
} from './stage-contract.js';
import type { BackendOptions, StageDescriptor, StageKind } from './stage-kinds.js';
import { type UploadContext, uploadPlain, uploadResumable } from './upload.js';

const MiB = 1024 * 1024;
/** Default part size of managed uploads. */
export const DEFAULT_PART_SIZE = 64 * MiB;
/** Default stall timeout of managed uploads (ms). */
export const DEFAULT_STAGE_STALL_TIMEOUT_MS = 120_000;
const MAX_STALL_TIMEOUT_MS = 2_147_483_647;
/** How long a checkpoint lock left by a dead process blocks a retry (ms). */
const LOCK_STALE_MS = 10_000;

/** Options of a stage (besides its descriptor). */
export interface StageOptions extends BackendOptions {
  /** Default parts in flight for uploads, 1..16 (default 4). */
  partsInFlight?: number | undefined;
  /**
   * Default stall timeout of uploads (milliseconds, 1..2^31-1; default 120,000): an upload
   * during which nothing moves for this long fails with `UploadStalled`; see
   * {@link UploadOptions.stallTimeoutMs}.
   */
  stallTimeoutMs?: number | undefined;
  /**
   * Part size in bytes (default 64 MiB; within the store's limits). For tests: resumable uploads
   * accept only 5 MiB and 64 MiB.
   * @internal
   */
  partSize?: number | undefined;
  /**
   * Highest part number (default: the store's). For tests of the part ceiling only.
   * @internal
   */
  maxParts?: number | undefined;
  /**
   * How long a checkpoint lock left by a dead process blocks a retry (default 10 s, at least 5 s).
   * @internal
   */
  lockStaleMs?: number | undefined;
}

/** One object of a stage, as {@link Stage.list} reports it. */
export interface StageObject {
  /** The object's location URI (as in a DataLocation). */
  uri: string;
  /** The key below the stage's prefix and tenant (`ab/ab12…`, `.provcat/refs/…`). */
  key: string;
  size: number;
  /** What changes when the bytes change; what {@link Stage.deleteIf} is conditional on. */
  version: string;
  lastModified?: Date | undefined;
}

/** An upload left open in a stage (a crashed writer's), for garbage collection. */
export interface StageUpload extends OpenUpload {
  /** The location the object would have had. */
  uri: string;
}

/** Validate a stall timeout (1..2^31-1 ms). Throws {@link StageConfigError}. */
function checkStallTimeout(value: number): number {
  if (!Number.isSafeInteger(value) || value < 1 || value > MAX_STALL_TIMEOUT_MS) {
    throw new StageConfigError(
      `stallTimeoutMs must be an integer in 1..${MAX_STALL_TIMEOUT_MS}, not ${String(value)}`,
    );
  }
  return value;
}

/** A managed stage on any store. Build it with `stageFromDescriptor` or `stageFromString`. */
export class Stage implements ManagedStage {
  /** The descriptor kind: `local`, `s3`, ... */
  readonly kind: string;
  /** The key prefix objects are written below (prefix and tenant), `''` for none. */
  readonly keyPrefix: string;
  /** Part size of new uploads. */
  readonly partSize: number;
  /** A stable, credential-free name of this stage's storage (checkpoint file names). */
  readonly identity: string;
  private readonly locations: StageLocations;
  private readonly partsInFlight: number;
  private readonly stallTimeoutMs: number;
  private readonly lockStaleMs: number;
  private readonly reads: StageReads;
  /** Part buffers of stream uploads (a file upload needs none). */
  private readonly pool = new PartBufferPool();
  private made: Promise<StageBackend> | undefined;

  constructor(
    readonly descriptor: StageDescriptor,
    private readonly stageKind: StageKind,
    private readonly options: StageOptions = {},
  ) {
    this.kind = descriptor.kind;
    this.locations = stageKind.locations(descriptor);
    this.keyPrefix = this.locations.keyPrefix;
    this.identity = stageKind.identity(descriptor);
    this.partsInFlight = checkPartsInFlight(options.partsInFlight);
    this.stallTimeoutMs = checkStallTimeout(
      options.stallTimeoutMs ?? DEFAULT_STAGE_STALL_TIMEOUT_MS,
    );
    const partSize = options.partSize ?? DEFAULT_PART_SIZE;
    if (!Number.isSafeInteger(partSize) || partSize < MiB || partSize > 5 * 1024 * MiB) {
      throw new StageConfigError(
        `partSize must be an integer in ${MiB}..${5 * 1024 * MiB}, not ${partSize}`,
      );
    }
    this.partSize = partSize;
    if (
      options.maxParts !== undefined &&
      (!Number.isSafeInteger(options.maxParts) || options.maxParts < 1)
    ) {
      throw new StageConfigError(`maxParts must be a positive integer, not ${options.maxParts}`);
    }
    this.lockStaleMs = Math.max(5000, options.lockStaleMs ?? LOCK_STALE_MS);
    this.reads = new StageReads(
      () => this.backend(),
      (uri) => this.keyOf(uri),
    );
  }

  /** The storage backend, made on first use (this loads the driver and its SDK). */
  backend(): Promise<StageBackend> {
    this.made ??= this.stageKind.backend(this.descriptor, this.options).catch((error: unknown) => {
      this.made = undefined;
      throw error;
    });
    return this.made;
  }

  contain(uri: string): string {
    const key = this.locations.keyOf(uri);
    return this.keyPrefix === '' ? key : key.slice(this.keyPrefix.length + 1);
  }

  /** The full key of a location inside this stage (containment checked, no I/O). */
  keyOf(uri: string): string {
    return this.locations.keyOf(uri);
  }

  /** The location URI of a key below the stage's prefix (`ab/ab12…`). */
  uriOf(key: string): string {
    return this.locations.uriOf(this.keyPrefix === '' ? key : `${this.keyPrefix}/${key}`);
  }

  private newKey(): string {
    const rel = newObjectKey();
    return this.keyPrefix === '' ? rel : `${this.keyPrefix}/${rel}`;
  }

  // ---- upload ------------------------------------------------------------------------------

  /** Upload `source` as a new object; see upload.ts and {@link UploadOptions}. */
  async upload(source: UploadSource, given: UploadOptions = {}): Promise<DataLocation> {
    // The one rule of src/core/content-type.ts: the source file's extension, when it is a file.
    const named = typeof source === 'string' ? source : '';
    const contentType = checkContentType(await contentTypeFor(named, given.contentType));
    const window = checkPartsInFlight(given.partsInFlight ?? this.partsInFlight);
    const stallTimeoutMs = checkStallTimeout(given.stallTimeoutMs ?? this.stallTimeoutMs);
    const options: UploadOptions = { ...given, stallTimeoutMs };
    if (options.checkpointDir !== undefined) {
      if (typeof source !== 'string') {
        throw new StageConfigError('resumable uploads (checkpointDir) need a file path source');
      }
      if (!RESUMABLE_PART_SIZES.includes(this.partSize)) {
        throw new StageConfigError(
          `resumable uploads use 5 MiB or 64 MiB parts, not ${this.partSize} bytes`,
        );
      }
    }
    if (options.signal?.aborted) throw abortError(options.signal);
    const ctx = await this.uploadContext();
    if (options.checkpointDir !== undefined && ctx.backend.parts.resumable) {
      return uploadResumable(
        ctx,
        source as string,
        options.checkpointDir,
        contentType,
        window,
        options,
      );
    }
    return uploadPlain(ctx, source, contentType, window, options);
  }

  private async uploadContext(): Promise<UploadContext> {
    const backend = await this.backend();
    const protocol = backend.parts;
    if (this.partSize < protocol.minPartSize || this.partSize > protocol.maxPartSize) {
      throw new StageConfigError(
        `partSize must be in ${protocol.minPartSize}..${protocol.maxPartSize} on a ${this.kind} stage, not ${this.partSize}`,
      );
    }
    const maxParts = this.options.maxParts ?? protocol.maxParts;
    if (maxParts > protocol.maxParts) {
      throw new StageConfigError(
        `maxParts must be at most ${protocol.maxParts} on a ${this.kind} stage, not ${maxParts}`,
      );
    }
    return {
      backend,
      kind: this.kind,
      bucket: this.bucketName(),
      locations: this.locations,
      newKey: () => this.newKey(),
      identity: this.identity,
      partSize: this.partSize,
      maxParts,
      lockStaleMs: this.lockStaleMs,
      pool: this.pool,
    };
  }

  /** What checkpoints record as the stage's bucket: the descriptor's bucket (an Azure container), or its root. */
  private bucketName(): string {
    const { bucket, container, root } = this.descriptor as Record<string, unknown>;
    if (typeof bucket === 'string') return bucket;
    if (typeof container === 'string') return container;
    if (typeof root === 'string') return root;
    throw new StageConfigError(`a ${this.kind} stage descriptor names neither bucket nor root`);
  }

  // ---- reads -------------------------------------------------------------------------------

  /** See {@link ManagedStage.open}. */
  open(location: DataLocation, options?: ReadOptions): ReturnType<StageReads['open']> {
    return this.reads.open(location, options);
  }

  /** See {@link ManagedStage.readTo}. */
  readTo(location: DataLocation, sink: BodySink, options?: ReadOptions): Promise<void> {
    return this.reads.readTo(location, sink, options);
  }

  /** See {@link ManagedStage.openWeb}. */
  openWeb(location: DataLocation, options?: ReadOptions): Promise<ReadableStream<Uint8Array>> {
    return this.reads.openWeb(location, options);
  }

  /** See {@link ManagedStage.openRange}. */
  openRange(
    location: DataLocation,
    start: number,
    end: number,
    options?: ReadOptions,
  ): ReturnType<StageReads['openRange']> {
    return this.reads.openRange(location, start, end, options);
  }

  /** See {@link ManagedStage.presign}. */
  async presign(location: DataLocation, options: PresignOptions = {}): Promise<PresignedUrl> {
    const loc = checkDataLocation(location);
    const key = this.keyOf(loc.uri);
    const expiresIn = checkExpiresIn(options.expiresIn);
    const backend = await this.backend();
    const url = await backend.presign(key, expiresIn);
    return new PresignedUrl(url, loc.uri, new Date(Date.now() + expiresIn * 1000));
  }

  // ---- what garbage collection needs -------------------------------------------------------

  /**
   * Every object in the stage (below its prefix and tenant, every page, in key order), reserved
   * `.provcat/` keys included; unpublished upload temps are not objects (see {@link openUploads}).
   */
  async *list(options: ReadOptions = {}): AsyncIterable<StageObject> {
    const backend = await this.backend();
    const prefix = this.keyPrefix === '' ? '' : `${this.keyPrefix}/`;
    for await (const info of backend.list(prefix, options)) {
      if (!info.key.startsWith(prefix) || info.key.length === prefix.length) {
        throw new StoreError(`the ${this.kind} store listed ${info.key} outside ${prefix}`);
      }
      yield stageObject(this.locations.uriOf(info.key), info.key.slice(prefix.length), info);
    }
  }

  /**
   * Delete the object at `uri` only if it is still `version` (an object rewritten since is
   * kept: `PreconditionFailed`); `NotFound` when it is gone. `NotSupported` where the store has
   * no conditional delete. Containment is checked first.
   */
  async deleteIf(uri: string, version: string, options: ReadOptions = {}): Promise<void> {
    const key = this.keyOf(uri);
    await (await this.backend()).deleteIf(key, version, options);
  }

  /** Uploads left open below the stage's prefix (crashed writers), every page. */
  async *openUploads(options: ReadOptions = {}): AsyncIterable<StageUpload> {
    const backend = await this.backend();
    const prefix = this.keyPrefix === '' ? '' : `${this.keyPrefix}/`;
    for await (const u of backend.parts.listUploads(prefix, options)) {
      yield { ...u, uri: this.locations.uriOf(u.key) };
    }
  }

  /** Abort one open upload (an upload already gone is fine). */
  async abortUpload(upload: StageUpload, options: ReadOptions = {}): Promise<void> {
    // The key aborted is the key the URI names: both were checked, not just one.
    if (this.keyOf(upload.uri) !== upload.key) {
      throw new ObjectIntegrityError(
        'OutsideStage',
        `upload ${upload.uri} names the key ${JSON.stringify(upload.key)}, not its own`,
        { uri: upload.uri },
      );
    }
    await (await this.backend()).parts.abort(upload.key, upload.upload, options);
  }

  // ---- reference sets (garbage collection: src/lake/gc/, docs/gc.md) ----------------------

  /**
   * Record that reference set `name` references `locations` (DataLocations, location URIs, or
   * URIs ending in `/` for everything below); see `addReferences` in gc/refs.ts. Every location
   * is checked for containment before anything is written.
   */
  async addReferences(
    name: string,
    locations: Iterable<string | DataLocation>,
    options?: ReferenceOptions,
  ): Promise<AddReferencesResult> {
    return (await import('./gc/refs.js')).addReferences(this, name, locations, options);
  }

  /** Retire reference set `name` as a whole; see `retireReferences` in gc/refs.ts. */
  async retireReferences(
    name: string,
    options?: ReferenceOptions,
  ): Promise<RetireReferencesResult> {
    return (await import('./gc/refs.js')).retireReferences(this, name, options);
  }

  /** Every reference set, each read whole and verified; see `listReferenceSets` in gc/refs.ts. */
  async referenceSets(options?: ReferenceOptions): Promise<ReferenceSetInfo[]> {
    return (await import('./gc/refs.js')).listReferenceSets(this, options);
  }

  /** Release the backend's sockets and clients (the stage stays usable). */
  async close(): Promise<void> {
    const made = this.made;
    if (made) await (await made).close();
  }
}

function stageObject(uri: string, key: string, info: ObjectInfo): StageObject {
  return { uri, key, size: info.size, version: info.version, lastModified: info.lastModified };
}
