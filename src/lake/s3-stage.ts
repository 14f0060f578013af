/**
 * {@link S3Stage}: managed objects in one S3 bucket below one key prefix.
 *
 * The stage is built on the S3 driver (drivers/s3): its `S3Store` configures the client from the
 * descriptor and the process's default credential chain, and its `mapError` is the one place
 * SDK errors become provcat errors. The driver and the SDK are loaded on first use, so building
 * a stage (or using a local one) costs nothing.
 *
 * Upload: a non-empty object is one multipart upload through the driver's multipart engine
 * (drivers/s3/multipart.ts, the same one `S3Store` puts with): 64 MiB parts, 4 in flight by
 * default (1..16); an empty object is one PutObject. A file's parts are streamed from disk, and
 * its SHA-256 comes from one sequential read that every part's sent bytes are checked against
 * (drivers/s3/parts.ts), so no part is held in memory; a stream's parts go through part buffers
 * from the stage's pool, at most `partsInFlight` of them per upload. Nothing is visible under the
 * key before CompleteMultipartUpload. A failure or cancellation cancels the parts in flight,
 * waits for them, and aborts the multipart upload (bounded to 30 s); a process crash cannot, so
 * buckets need an AbortIncompleteMultipartUpload lifecycle rule (docs/managed-objects.md). A
 * store that stops answering fails the upload with `UploadStalled` after `stallTimeoutMs` (the
 * engine's watchdog; stage option and per-upload option, default 120 s), aborted like any
 * failure, or kept with its checkpoint for a resumable upload.
 *
 * Resumable upload (a path source and `checkpointDir`): see checkpoint.ts for the format and
 * {@link S3Stage.upload} for the recovery steps.
 *
 * Reads (stage-base.ts): `open` is one GET of the whole object through the verifying wrapper
 * (verify.ts); `openRange` is one ranged GET whose `Content-Range` and `Content-Length` must be
 * exactly the ones asked for before the body is exposed (`RangeMismatch` otherwise — no HEAD,
 * no buffering). Both go through the S3 driver's `_get`, so they take its lean path (no SDK
 * client loaded, bodies read into reused buffers) wherever the driver does.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { debuglog } from 'node:util';
import type { S3Client } from '@aws-sdk/client-s3';
import {
  DEFAULT_PART_SIZE,
  DEFAULT_STALL_TIMEOUT_MS,
  MAX_PART_SIZE,
  MAX_PARTS,
  MAX_STALL_TIMEOUT_MS,
  MIN_PART_SIZE,
} from '../../drivers/s3/config.js';
import type { S3Store } from '../../drivers/s3/index.js';
import {
  abortMultipartUpload,
  createMultipartUpload,
  type MultipartTarget,
  type TrustedPart,
  uploadMultipart,
} from '../../drivers/s3/multipart.js';
import {
  BufferedParts,
  FileParts,
  PartBufferPool,
  type PartSource,
  StreamReader,
} from '../../drivers/s3/parts.js';
import { EMPTY_SHA256 } from '../digest.js';
import type { ByteRange, GetResult } from '../driver.js';
import { ObjectIntegrityError, type ProvcatError, StoreError } from '../errors.js';
import type { BodySink } from '../net/http1-download.js';
import {
  type Checkpoint,
  CheckpointWriter,
  checkpointPath,
  LOCK_STALE_MS,
  lockCheckpoint,
  RESUMABLE_PART_SIZES,
  readCheckpoint,
  removeCheckpoint,
  writeCheckpoint,
} from './checkpoint.js';
import { effectivePrefix, type S3StageDescriptor } from './descriptor.js';
import {
  abortError,
  CheckpointError,
  PartLimitExceeded,
  SourceChanged,
  StageConfigError,
} from './errors.js';
import { containS3, newObjectKey, s3Uri, splitKey } from './keys.js';
import {
  checkContentType,
  checkDataLocation,
  type DataLocation,
  DEFAULT_CONTENT_TYPE,
} from './location.js';
import { PresignedUrl } from './presign.js';
import { fsError, openFile } from './source.js';
import {
  checkExpiresIn,
  checkPartsInFlight,
  type ManagedStage,
  type PresignOptions,
  type UploadOptions,
  type UploadSource,
} from './stage.js';
import { StageBase, streamToSink } from './stage-base.js';

const debug = debuglog('provcat:lake');

type S3Sdk = typeof import('@aws-sdk/client-s3');

// The engine's and the driver's constants: the default part size (64 MiB), the part-number
// ceiling (10,000) and the bound on aborting an upload (30 s).
export { ABORT_TIMEOUT_MS } from '../../drivers/s3/multipart.js';
export { DEFAULT_PART_SIZE, MAX_PARTS };

/** SHA-256 of no bytes. */

/** Options of an S3 stage (besides its descriptor). */
export interface S3StageOptions {
  /** An S3 client to use (tests, embedders); otherwise the S3 driver builds one from the descriptor. */
  client?: S3Client | undefined;
  /** Default parts in flight for uploads, 1..16 (default 4). */
  partsInFlight?: number | undefined;
  /**
   * Default stall timeout of uploads (milliseconds, 1..2^31-1; default 120,000): an upload
   * during which nothing moves for this long fails with `UploadStalled`; see
   * {@link UploadOptions.stallTimeoutMs}.
   */
  stallTimeoutMs?: number | undefined;
  /**
   * Part size in bytes (default 64 MiB; 5 MiB..5 GiB). For tests: resumable uploads accept only
   * 5 MiB and 64 MiB.
   * @internal
   */
  partSize?: number | undefined;
  /**
   * Highest part number (default 10,000). For tests of the part ceiling only.
   * @internal
   */
  maxParts?: number | undefined;
  /**
   * How long a checkpoint lock left by a dead process blocks a retry (default 10 s, at least 5 s).
   * @internal
   */
  lockStaleMs?: number | undefined;
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

interface Connection {
  store: S3Store;
  client: S3Client;
  sdk: S3Sdk;
}

/** A managed stage in S3. Build it with `stageFromDescriptor`. */
export class S3Stage extends StageBase implements ManagedStage {
  readonly kind = 's3' as const;
  /** The key prefix objects are written below (prefix and tenant), `''` for the whole bucket. */
  readonly keyPrefix: string;
  /** Part size of new uploads. */
  readonly partSize: number;
  private readonly base: readonly string[];
  private readonly partsInFlight: number;
  private readonly stallTimeoutMs: number;
  private readonly maxParts: number;
  private readonly lockStaleMs: number;
  /** Part buffers of stream uploads (a file upload needs none). */
  private readonly pool = new PartBufferPool();
  private connection: Promise<Connection> | undefined;
  private s3Store: Promise<S3Store> | undefined;

  constructor(
    readonly descriptor: S3StageDescriptor,
    private readonly options: S3StageOptions = {},
  ) {
    super();
    this.keyPrefix = effectivePrefix(descriptor);
    this.base = splitKey(this.keyPrefix);
    this.partsInFlight = checkPartsInFlight(options.partsInFlight);
    this.stallTimeoutMs = checkStallTimeout(options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS);
    const partSize = options.partSize ?? DEFAULT_PART_SIZE;
    if (!Number.isSafeInteger(partSize) || partSize < MIN_PART_SIZE || partSize > MAX_PART_SIZE) {
      throw new StageConfigError(
        `partSize must be an integer in ${MIN_PART_SIZE}..${MAX_PART_SIZE}, not ${partSize}`,
      );
    }
    this.partSize = partSize;
    const maxParts = options.maxParts ?? MAX_PARTS;
    if (!Number.isSafeInteger(maxParts) || maxParts < 1 || maxParts > MAX_PARTS) {
      throw new StageConfigError(`maxParts must be an integer in 1..${MAX_PARTS}, not ${maxParts}`);
    }
    this.maxParts = maxParts;
    this.lockStaleMs = Math.max(5000, options.lockStaleMs ?? LOCK_STALE_MS);
  }

  /**
   * The S3 driver's store for this stage, made on first use without loading the SDK: reads go
   * through its `_get`, which takes the driver's lean path where it applies (drivers/s3/lean.ts)
   * and the SDK otherwise, with the driver's one error mapping either way.
   */
  private s3(): Promise<S3Store> {
    this.s3Store ??= (async () => {
      const { S3Store } = await import('../../drivers/s3/index.js');
      const { region, endpoint, forcePathStyle } = this.descriptor;
      // The descriptor decides the topology: without an endpoint in it, the environment's
      // AWS_ENDPOINT_URL_S3 must not redirect the stage elsewhere.
      const env =
        endpoint === undefined
          ? { ...process.env, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: 'true' }
          : process.env;
      return new S3Store({
        client: this.options.client,
        region,
        endpoint,
        forcePathStyle: forcePathStyle ?? false,
        env,
      });
    })().catch((error: unknown) => {
      this.s3Store = undefined;
      throw error;
    });
    return this.s3Store;
  }

  /** The S3 driver's store, its client and the SDK (for uploads), created on first use. */
  private connect(): Promise<Connection> {
    this.connection ??= (async () => {
      const [store, sdk] = await Promise.all([this.s3(), import('@aws-sdk/client-s3')]);
      return { store, client: await store.client(), sdk };
    })().catch((error: unknown) => {
      this.connection = undefined;
      throw error;
    });
    return this.connection;
  }

  /** A stable name of this stage's storage (for checkpoint file names): no credentials. */
  get identity(): string {
    const { endpoint, bucket } = this.descriptor;
    return `s3|${endpoint ?? ''}|${bucket}|${this.keyPrefix}`;
  }

  contain(uri: string): string {
    return containS3(uri, this.descriptor.bucket, this.base);
  }

  /** The full key of a location inside this stage (containment checked, no I/O). */
  keyOf(uri: string): string {
    const rel = this.contain(uri);
    return this.keyPrefix === '' ? rel : `${this.keyPrefix}/${rel}`;
  }

  private newKey(): string {
    const rel = newObjectKey();
    return this.keyPrefix === '' ? rel : `${this.keyPrefix}/${rel}`;
  }

  private mapError(c: Connection, error: unknown, op: string, key?: string): ProvcatError {
    return c.store.mapError(error, { bucket: this.descriptor.bucket, key, op });
  }

  /** What the multipart engine needs to write `key`. */
  private target(c: Connection, key: string): MultipartTarget {
    return {
      client: c.client,
      sdk: c.sdk,
      bucket: this.descriptor.bucket,
      key,
      debug: (message) => debug('%s', message),
    };
  }

  // ---- upload ------------------------------------------------------------------------------

  /**
   * Upload `source` as a new object (see {@link UploadOptions} and the module comment).
   *
   * With `checkpointDir` (path sources only) the upload is resumable: the first attempt records
   * each acknowledged part; a retry after a crash or failure takes the checkpoint's lock,
   * reconciles the store's part listing (every page), re-reads every acknowledged part from the
   * source and compares its SHA-256 (rebuilding the whole-object digest on the way), sends again
   * every part it cannot trust (including those in flight when the first attempt died), and
   * sends the rest. If the upload had in fact been completed and only the response was lost,
   * the retry streams the destination once and accepts it only if its size and SHA-256 equal the
   * source's. A source whose size or mtime changed since the checkpoint starts a fresh upload
   * (the old one is aborted). Cancellation aborts the exact upload and removes the checkpoint; a
   * store or network failure, a stall included (`UploadStalled`), keeps both for the next retry.
   */
  async upload(source: UploadSource, given: UploadOptions = {}): Promise<DataLocation> {
    const contentType = checkContentType(given.contentType ?? DEFAULT_CONTENT_TYPE);
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
      if (options.signal?.aborted) throw abortError(options.signal);
      return this.resumable(source, options.checkpointDir, contentType, window, options);
    }
    if (options.signal?.aborted) throw abortError(options.signal);
    return this.plain(source, contentType, window, options);
  }

  /** The parts of an upload source: a file's ranges, or a stream's pooled buffers. */
  private async openParts(source: UploadSource, partSize: number): Promise<PartSource> {
    if (typeof source === 'string') {
      return FileParts.fromHandle(await openFile(source), source, { partSize, digest: true });
    }
    let stream: Readable;
    if (source instanceof Readable) stream = source;
    else if (isWebStream(source)) stream = Readable.fromWeb(source);
    else {
      throw new StageConfigError(
        'an upload source is a file path, a Node Readable or a web ReadableStream',
      );
    }
    return new BufferedParts(new StreamReader(stream), {
      partSize,
      pool: this.pool,
      digest: true,
    });
  }

  private async plain(
    source: UploadSource,
    contentType: string,
    window: number,
    options: UploadOptions,
  ): Promise<DataLocation> {
    const c = await this.connect();
    const key = this.newKey();
    const uri = s3Uri(this.descriptor.bucket, key);
    const parts = await this.openParts(source, this.partSize);
    let failed = true;
    try {
      const empty =
        parts instanceof BufferedParts
          ? (await parts.peek(options.signal)) === undefined
          : parts.size === 0;
      if (empty) {
        await this.putEmpty(c, key, contentType, options.signal);
        failed = false;
        return Object.freeze({ uri, contentType, sizeBytes: 0, sha256: EMPTY_SHA256 });
      }
      const result = await uploadMultipart(this.target(c, key), parts, {
        partSize: this.partSize,
        partsInFlight: window,
        maxParts: this.maxParts,
        contentType,
        stallTimeoutMs: options.stallTimeoutMs,
        signal: options.signal,
        onProgress: (bytes) =>
          options.onProgress?.({ operation: 'upload', uri, bytes, totalBytes: parts.size }),
      });
      failed = false;
      return Object.freeze({
        uri,
        contentType,
        sizeBytes: result.size,
        sha256: result.sha256 as string,
      });
    } catch (error) {
      if (options.signal?.aborted) throw abortError(options.signal);
      throw error;
    } finally {
      await parts.close(failed);
    }
  }

  private async putEmpty(
    c: Connection,
    key: string,
    contentType: string,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    try {
      await c.client.send(
        new c.sdk.PutObjectCommand({
          Bucket: this.descriptor.bucket,
          Key: key,
          Body: Buffer.alloc(0),
          ContentLength: 0,
          ContentType: contentType,
        }),
        { abortSignal: signal },
      );
    } catch (error) {
      throw this.mapError(c, error, 'PutObject', key);
    }
  }

  private async resumable(
    file: string,
    checkpointDir: string,
    contentType: string,
    window: number,
    options: UploadOptions,
  ): Promise<DataLocation> {
    const sourcePath = path.resolve(file);
    const cpFile = checkpointPath(checkpointDir, this.identity, sourcePath);
    try {
      await mkdir(path.dirname(cpFile), { recursive: true });
    } catch (cause) {
      throw new CheckpointError('cannot create the checkpoint directory', cpFile, { cause });
    }
    const controller = linkedController(options.signal);
    const release = await lockCheckpoint(
      cpFile,
      (error) =>
        controller.abort(
          new CheckpointError('checkpoint lock lost during the upload', cpFile, { cause: error }),
        ),
      this.lockStaleMs,
    );
    try {
      let checkpoint = await readCheckpoint(cpFile);
      if (checkpoint !== undefined) this.checkCheckpoint(checkpoint, cpFile, sourcePath);
      const handle = await openFile(sourcePath);
      let parts: FileParts | undefined;
      try {
        let info: { size: number; mtimeMs: number };
        try {
          info = await handle.stat();
        } catch (cause) {
          throw fsError(cause, `cannot upload ${sourcePath}`, sourcePath);
        }
        const identity = { path: sourcePath, size: info.size, mtimeMs: info.mtimeMs };
        const c = await this.connect();
        if (
          checkpoint !== undefined &&
          (checkpoint.source.size !== identity.size ||
            checkpoint.source.mtimeMs !== identity.mtimeMs)
        ) {
          debug(
            '%s changed since its checkpoint: aborting upload %s and starting afresh',
            sourcePath,
            checkpoint.uploadId,
          );
          await abortMultipartUpload(
            this.target(c, checkpoint.key),
            checkpoint.uploadId,
            undefined,
          );
          await removeCheckpoint(cpFile);
          checkpoint = undefined;
        }
        let trusted = new Map<number, TrustedPart>();
        if (checkpoint !== undefined) {
          const listed = await this.listParts(c, checkpoint);
          if (listed === 'gone') {
            const recovered = await this.recoverCompletion(
              c,
              checkpoint,
              cpFile,
              contentType,
              controller.signal,
            );
            if (recovered !== undefined) return recovered;
            // Neither an upload nor an object: the upload was aborted (say, by a lifecycle rule).
            debug(
              'upload %s of %s is gone and nothing was published: starting afresh',
              checkpoint.uploadId,
              sourcePath,
            );
            await removeCheckpoint(cpFile);
            checkpoint = undefined;
          } else {
            trusted = this.trustedParts(checkpoint, listed, window);
          }
        }
        if (checkpoint === undefined && identity.size === 0) {
          const key = this.newKey();
          await this.putEmpty(c, key, contentType, controller.signal);
          return Object.freeze({
            uri: s3Uri(this.descriptor.bucket, key),
            contentType,
            sizeBytes: 0,
            sha256: EMPTY_SHA256,
          });
        }
        const fresh = checkpoint === undefined;
        const partSize = checkpoint?.partSize ?? this.partSize;
        parts = await FileParts.fromHandle(handle, sourcePath, {
          partSize,
          digest: true,
          partDigests: true,
        });
        if (parts.size !== identity.size || parts.mtimeMs !== identity.mtimeMs) {
          throw new SourceChanged(`${sourcePath} changed while the upload was being prepared`);
        }
        if (checkpoint === undefined) {
          if (Math.ceil(identity.size / partSize) > this.maxParts) {
            throw new PartLimitExceeded(
              `${sourcePath}: ${identity.size} bytes need more than ${this.maxParts} parts of ${partSize} bytes`,
            );
          }
          const key = this.newKey();
          const uploadId = await createMultipartUpload(this.target(c, key), contentType);
          debug('created multipart upload %s for %s', uploadId, key);
          checkpoint = {
            version: 1,
            uploadId,
            key,
            bucket: this.descriptor.bucket,
            source: identity,
            partSize,
            window,
            parts: [],
          };
        }
        try {
          await writeCheckpoint(cpFile, checkpoint);
        } catch (error) {
          if (fresh) {
            await abortMultipartUpload(this.target(c, checkpoint.key), checkpoint.uploadId, error);
          }
          throw error;
        }
        return await this.runResumable(
          c,
          checkpoint,
          cpFile,
          trusted,
          parts,
          window,
          controller.signal,
          options,
        );
      } finally {
        if (parts) await parts.close();
        else await handle.close();
      }
    } finally {
      controller.dispose();
      try {
        await release();
      } catch (error) {
        debug('releasing the lock of %s failed: %s', cpFile, String(error));
      }
    }
  }

  /**
   * The recorded parts S3 still lists with the same ETag and size: these may be kept if the
   * source still has their bytes. The checkpoint keeps only those from now on, and the larger
   * window.
   */
  private trustedParts(
    checkpoint: Checkpoint,
    listed: Map<number, { etag: string; size: number }>,
    window: number,
  ): Map<number, TrustedPart> {
    const trusted = new Map<number, TrustedPart>();
    const total = Math.ceil(checkpoint.source.size / checkpoint.partSize);
    for (const part of checkpoint.parts) {
      const remote = listed.get(part.number);
      const expectedSize =
        part.number < total
          ? checkpoint.partSize
          : checkpoint.source.size - (total - 1) * checkpoint.partSize;
      if (
        remote !== undefined &&
        sameEtag(remote.etag, part.etag) &&
        remote.size === expectedSize
      ) {
        trusted.set(part.number, { etag: part.etag, sha256: part.sha256 });
      } else {
        debug(
          'part %d of upload %s is not listed as recorded: sending it again',
          part.number,
          checkpoint.uploadId,
        );
      }
    }
    debug(
      'resuming upload %s of %s: %d of %d parts recorded and listed, %d listed in all',
      checkpoint.uploadId,
      checkpoint.source.path,
      trusted.size,
      total,
      listed.size,
    );
    checkpoint.window = Math.max(checkpoint.window, window);
    checkpoint.parts = checkpoint.parts.filter((p) => trusted.has(p.number));
    return trusted;
  }

  /** Fail closed on a checkpoint that does not belong to this stage and source. */
  private checkCheckpoint(checkpoint: Checkpoint, cpFile: string, sourcePath: string): void {
    if (checkpoint.bucket !== this.descriptor.bucket) {
      throw new CheckpointError(
        `checkpoint names bucket ${checkpoint.bucket}, not this stage's`,
        cpFile,
      );
    }
    try {
      this.contain(s3Uri(checkpoint.bucket, checkpoint.key));
    } catch (cause) {
      throw new CheckpointError('checkpoint key is outside this stage', cpFile, { cause });
    }
    if (checkpoint.source.path !== sourcePath) {
      throw new CheckpointError(
        `checkpoint is for ${checkpoint.source.path}, not ${sourcePath}`,
        cpFile,
      );
    }
  }

  /** Every part S3 lists for the upload (all pages), or `'gone'` when the upload no longer exists. */
  private async listParts(
    c: Connection,
    checkpoint: Checkpoint,
  ): Promise<Map<number, { etag: string; size: number }> | 'gone'> {
    const listed = new Map<number, { etag: string; size: number }>();
    let marker: string | undefined;
    for (;;) {
      let out: import('@aws-sdk/client-s3').ListPartsCommandOutput;
      try {
        out = await c.client.send(
          new c.sdk.ListPartsCommand({
            Bucket: checkpoint.bucket,
            Key: checkpoint.key,
            UploadId: checkpoint.uploadId,
            PartNumberMarker: marker,
          }),
        );
      } catch (error) {
        // S3 says NoSuchUpload; Ceph says NoSuchKey for an upload that was completed. Either
        // way (any 404) the upload no longer exists.
        const mapped = this.mapError(c, error, 'ListParts', checkpoint.key);
        if (mapped.code === 'NotFound') return 'gone';
        throw mapped;
      }
      for (const part of out.Parts ?? []) {
        if (part.PartNumber !== undefined && part.ETag !== undefined && part.Size !== undefined) {
          listed.set(part.PartNumber, { etag: part.ETag, size: part.Size });
        }
      }
      if (!out.IsTruncated) return listed;
      const next = out.NextPartNumberMarker;
      if (next === undefined || next === marker) {
        throw new StoreError('ListParts is truncated but gives no next marker', {
          uri: s3Uri(checkpoint.bucket, checkpoint.key),
        });
      }
      marker = next;
    }
  }

  private async runResumable(
    c: Connection,
    checkpoint: Checkpoint,
    cpFile: string,
    trusted: Map<number, TrustedPart>,
    parts: FileParts,
    window: number,
    signal: AbortSignal,
    options: UploadOptions,
  ): Promise<DataLocation> {
    const { key, uploadId } = checkpoint;
    const uri = s3Uri(this.descriptor.bucket, key);
    const target = this.target(c, key);
    const writer = new CheckpointWriter(cpFile, checkpoint);
    try {
      const result = await uploadMultipart(target, parts, {
        partSize: checkpoint.partSize,
        partsInFlight: window,
        maxParts: this.maxParts,
        uploadId,
        trusted,
        abortOnFailure: false,
        stallTimeoutMs: options.stallTimeoutMs,
        signal,
        onPart: async (part) => {
          // Trusted parts are in the checkpoint already; record what was (re)sent.
          if (part.sent) {
            await writer.record({
              number: part.number,
              etag: part.etag,
              sha256: part.sha256 as string,
            });
          }
        },
        onProgress: (bytes) =>
          options.onProgress?.({ operation: 'upload', uri, bytes, totalBytes: parts.size }),
      });
      await removeCheckpoint(cpFile);
      return Object.freeze({
        uri,
        contentType: checkContentType(options.contentType ?? DEFAULT_CONTENT_TYPE),
        sizeBytes: result.size,
        sha256: result.sha256 as string,
      });
    } catch (error) {
      const cancelled = options.signal?.aborted === true;
      const terminal =
        cancelled || error instanceof PartLimitExceeded || error instanceof SourceChanged;
      if (terminal) {
        await abortMultipartUpload(target, uploadId, error);
        await removeCheckpoint(cpFile);
      } else {
        debug(
          'upload %s of %s failed; checkpoint kept for a retry: %s',
          uploadId,
          key,
          String(error),
        );
      }
      if (cancelled && options.signal) throw abortError(options.signal);
      throw error;
    }
  }

  /**
   * The upload is gone: either it was completed (and the response lost) or aborted. Stream the
   * destination once; if it exists with the source's size and SHA-256 it is ours, complete —
   * return its location. If there is no object, return `undefined` (start afresh). Anything
   * else fails closed and keeps the checkpoint.
   */
  private async recoverCompletion(
    c: Connection,
    checkpoint: Checkpoint,
    cpFile: string,
    contentType: string,
    signal: AbortSignal,
  ): Promise<DataLocation | undefined> {
    const uri = s3Uri(checkpoint.bucket, checkpoint.key);
    let out: import('@aws-sdk/client-s3').GetObjectCommandOutput;
    try {
      out = await c.client.send(
        new c.sdk.GetObjectCommand({ Bucket: checkpoint.bucket, Key: checkpoint.key }),
        {
          abortSignal: signal,
        },
      );
    } catch (error) {
      const mapped = this.mapError(c, error, 'GetObject', checkpoint.key);
      if (mapped.code === 'NotFound') return undefined;
      throw mapped;
    }
    const remote = await digestStream(bodyOf(out, uri));
    const local = await digestStream(createReadStream(checkpoint.source.path));
    if (remote.size !== checkpoint.source.size || local.size !== checkpoint.source.size) {
      throw new ObjectIntegrityError(
        remote.size < checkpoint.source.size ? 'PrematureEof' : 'TooLong',
        `${uri} (completed by an earlier attempt) has ${remote.size} bytes, not ${checkpoint.source.size}`,
        { uri, expected: checkpoint.source.size, observed: remote.size },
      );
    }
    if (remote.sha256 !== local.sha256) {
      throw new ObjectIntegrityError(
        'DigestMismatch',
        `${uri} (completed by an earlier attempt) does not have the source's SHA-256`,
        { uri },
      );
    }
    debug('upload %s was completed by an earlier attempt; verified %s', checkpoint.uploadId, uri);
    await removeCheckpoint(cpFile);
    const stored = out.ContentType;
    return Object.freeze({
      uri,
      contentType:
        stored !== undefined && stored !== '' ? checkContentType(stored, uri) : contentType,
      sizeBytes: remote.size,
      sha256: remote.sha256,
    });
  }

  // ---- reads -------------------------------------------------------------------------------

  protected resolve(uri: string): string {
    return this.keyOf(uri);
  }

  protected async readWhole(
    key: string,
    _location: DataLocation,
    signal: AbortSignal | undefined,
  ): Promise<Readable> {
    return (await this.get(key, undefined, signal)).body;
  }

  /** A lean GET's body goes to the sink in its reused read buffers (no copy per chunk). */
  protected override async openWholeSink(
    key: string,
    _location: DataLocation,
    signal: AbortSignal | undefined,
  ): Promise<(sink: BodySink) => Promise<void>> {
    const out = await this.get(key, undefined, signal);
    const pipeTo = out.pipeTo;
    return pipeTo === undefined ? streamToSink(out.body) : (sink) => pipeTo(sink);
  }

  protected async readRange(
    key: string,
    loc: DataLocation,
    start: number,
    end: number,
    signal: AbortSignal | undefined,
  ): Promise<Readable> {
    const out = await this.get(key, { start, end }, signal);
    const wantRange = `bytes ${start}-${end - 1}/${loc.sizeBytes}`;
    if (out.contentRange !== wantRange || out.contentLength !== end - start) {
      out.body.destroy();
      throw new ObjectIntegrityError(
        'RangeMismatch',
        `asked ${loc.uri} for ${wantRange} (${end - start} bytes); the response declared Content-Range ${
          out.contentRange === undefined ? '(none)' : JSON.stringify(out.contentRange)
        } and Content-Length ${out.contentLength}`,
        { uri: loc.uri },
      );
    }
    return out.body;
  }

  /**
   * One GET of `key` (a byte range when given) through the driver's `_get`: errors mapped by the
   * driver, aborts as AbortError.
   */
  private async get(
    key: string,
    range: ByteRange | undefined,
    signal: AbortSignal | undefined,
  ): Promise<GetResult> {
    const store = await this.s3();
    try {
      return await store._get(this.descriptor.bucket, key, { range, signal });
    } catch (error) {
      if (signal?.aborted) throw abortError(signal);
      throw error;
    }
  }

  async presign(location: DataLocation, options: PresignOptions = {}): Promise<PresignedUrl> {
    const loc = checkDataLocation(location);
    const key = this.keyOf(loc.uri);
    const expiresIn = checkExpiresIn(options.expiresIn);
    const c = await this.connect();
    const { getSignedUrl } = await import('@aws-sdk/s3-request-presigner');
    try {
      const url = await getSignedUrl(
        c.client,
        new c.sdk.GetObjectCommand({ Bucket: this.descriptor.bucket, Key: key }),
        { expiresIn },
      );
      return new PresignedUrl(url, loc.uri, new Date(Date.now() + expiresIn * 1000));
    } catch (error) {
      throw this.mapError(c, error, 'presign', key);
    }
  }
}

/** An AbortController that follows `parent` until disposed. */
function linkedController(parent: AbortSignal | undefined): AbortController & { dispose(): void } {
  const controller = new AbortController() as AbortController & { dispose(): void };
  if (!parent) {
    controller.dispose = () => {};
    return controller;
  }
  const onAbort = () => controller.abort(parent.reason);
  if (parent.aborted) onAbort();
  else parent.addEventListener('abort', onAbort, { once: true });
  controller.dispose = () => parent.removeEventListener('abort', onAbort);
  return controller;
}

function isWebStream(
  source: unknown,
): source is import('node:stream/web').ReadableStream<Uint8Array> {
  return (
    typeof source === 'object' &&
    source !== null &&
    typeof (source as { getReader?: unknown }).getReader === 'function'
  );
}

function sameEtag(a: string, b: string): boolean {
  const bare = (s: string) => s.replace(/^W\//, '').replace(/^"|"$/g, '');
  return bare(a) === bare(b);
}

function bodyOf(out: { Body?: unknown }, uri: string): Readable {
  if (out.Body instanceof Readable) return out.Body;
  throw new StoreError('GetObject returned no readable body', { uri });
}

async function digestStream(
  stream: AsyncIterable<Uint8Array>,
): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of stream) {
    hash.update(chunk);
    size += chunk.length;
  }
  return { size, sha256: hash.digest('hex') };
}
