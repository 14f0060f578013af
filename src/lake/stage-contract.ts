/**
 * {@link ManagedStage}: the one storage boundary for managed objects, implemented once
 * (managed-stage.ts) for every store and built from a descriptor (factory.ts).
 *
 * Every method checks what it can before any I/O, in this order: the digest (exactly 64 hex
 * characters), then containment (the location lies inside this stage's exact root or bucket and
 * prefix segment, and tenant child), then the range or option. Only then is storage touched.
 *
 * @module
 */
import type { Readable } from 'node:stream';
import type { ReadableStream } from 'node:stream/web';
import type { BodySink } from '../contract/primitives.js';
import type { ProgressCallback } from '../contract/store-context.js';
import type { DataLocation } from './data-location.js';
import { InvalidRange, StageConfigError } from './errors.js';
import type { PresignedUrl } from './presign.js';
import type { StageDescriptor } from './stage-kinds.js';

/** What an upload reads: a local file path, a Node stream, or a web stream of bytes. */
export type UploadSource = string | Readable | ReadableStream<Uint8Array>;

/** Options of {@link ManagedStage.upload}. */
export interface UploadOptions {
  /**
   * MIME type recorded in the DataLocation (and as the object's Content-Type). Default: the type
   * of a source file's extension, else `application/octet-stream` (src/core/content-type.ts).
   */
  contentType?: string | undefined;
  /**
   * Cancels the upload: the upload is aborted (bounded: 30 s; on a local stage its `.uploading`
   * temp file is removed) and any checkpoint removed. A published object is never removed.
   */
  signal?: AbortSignal | undefined;
  /** Cumulative bytes stored so far (`operation: 'upload'`). */
  onProgress?: ProgressCallback | undefined;
  /**
   * Path sources only: keep a resumable checkpoint in this directory, so that a rerun after a
   * crash uploads only the parts that are missing. Stages whose store cannot resume an upload
   * (a local stage: its upload is one file write) ignore it.
   */
  checkpointDir?: string | undefined;
  /** Parts uploaded concurrently, 1..16 (default 4). Memory of a stream upload is `partsInFlight` × part size. */
  partsInFlight?: number | undefined;
  /**
   * Fail with `UploadStalled` when nothing moves for this long (milliseconds, 1..2^31-1;
   * default the stage's `stallTimeoutMs`, else 120,000): no part acknowledged and no new body
   * byte taken by the store while parts are being sent. The parts in flight are cancelled and
   * none is sent again; the upload is aborted, or, with `checkpointDir`, kept with its
   * checkpoint so that a retry resumes it.
   */
  stallTimeoutMs?: number | undefined;
}

/** Options of reads. */
export interface ReadOptions {
  /** Cancels the read: the stream is destroyed with an AbortError. */
  signal?: AbortSignal | undefined;
}

/** Options of {@link ManagedStage.presign}. */
export interface PresignOptions {
  /** Seconds the URL stays valid: an integer in 1..3600. Default 900. */
  expiresIn?: number | undefined;
}

/**
 * A managed stage: where managed objects are uploaded and read, with SHA-256 integrity.
 *
 * Guarantees on every store:
 * - `upload` publishes an object under a fresh random key inside the stage, and nothing is
 *   visible under that key before every byte is there; the returned DataLocation's size and
 *   SHA-256 are those of the bytes read from the source, in order.
 * - `open` verifies: the stream ends successfully only if the object was exactly `sizeBytes`
 *   long and its SHA-256 matches; otherwise it fails with `ObjectIntegrityError` (`PrematureEof`
 *   with expected/observed counts, `TooLong`, `DigestMismatch`). Memory is constant.
 * - `openRange` reads `[start, end)` with one request (one seek locally) and ends successfully
 *   only after exactly `end - start` bytes; it claims nothing about the whole-object digest.
 * - Locations outside the stage are `ObjectIntegrityError('OutsideStage')` before any I/O.
 */
export interface ManagedStage {
  /** The descriptor kind: `local`, `s3`, ... */
  readonly kind: string;
  /** The descriptor this stage was built from (credential-free; safe to print and store). */
  readonly descriptor: StageDescriptor;

  /** Upload one immutable object; see {@link UploadOptions}. */
  upload(source: UploadSource, options?: UploadOptions): Promise<DataLocation>;

  /** Open a location for a verified sequential read (see the interface comment). */
  open(location: DataLocation, options?: ReadOptions): Promise<Readable>;

  /**
   * {@link open} delivered to a sink (`BodySink`, src/contract/primitives.ts) instead of a stream: resolves
   * once the whole object went to `sink` and verified; rejects like the stream of `open` fails.
   * `sink` sees bytes before the digest is known (keep them provisional until this resolves); a
   * chunk is valid only until its `data` call resolves. Where the driver reads into reused
   * buffers (S3's lean path) the body goes to the sink with no copy.
   */
  readTo(location: DataLocation, sink: BodySink, options?: ReadOptions): Promise<void>;

  /** {@link open} as a web `ReadableStream` (the same checks; errors surface on the stream). */
  openWeb(location: DataLocation, options?: ReadOptions): Promise<ReadableStream<Uint8Array>>;

  /** Open the half-open byte range `[start, end)` of a location. */
  openRange(
    location: DataLocation,
    start: number,
    end: number,
    options?: ReadOptions,
  ): Promise<Readable>;

  /**
   * A time-limited GET URL for a location (`NotSupported` where the store has none, as on a
   * local stage). The URL is redacted when printed, logged or serialized; call `reveal()` to
   * use it.
   */
  presign(location: DataLocation, options?: PresignOptions): Promise<PresignedUrl>;

  /**
   * Check that `uri` names an object inside this stage; returns the object's key relative to
   * the stage (below prefix and tenant). Throws `ObjectIntegrityError('OutsideStage')`. No I/O.
   */
  contain(uri: string): string;
}

/** Default parts in flight. */
export const DEFAULT_PARTS_IN_FLIGHT = 4;
/** Most parts in flight accepted. */
export const MAX_PARTS_IN_FLIGHT = 16;

/** Validate `partsInFlight` (1..16, default 4). Throws {@link StageConfigError}. */
export function checkPartsInFlight(value: number | undefined): number {
  const n = value ?? DEFAULT_PARTS_IN_FLIGHT;
  if (!Number.isInteger(n) || n < 1 || n > MAX_PARTS_IN_FLIGHT) {
    throw new StageConfigError(
      `partsInFlight must be an integer in 1..${MAX_PARTS_IN_FLIGHT}, not ${String(value)}`,
    );
  }
  return n;
}

/**
 * Validate a half-open byte range against an object size: `0 <= start < end <= sizeBytes`, all
 * safe integers. Throws {@link InvalidRange} (before any I/O).
 */
export function checkRange(location: DataLocation, start: number, end: number): void {
  const size = location.sizeBytes;
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end)) {
    throw new InvalidRange(`range bounds must be integers, not ${start}..${end}`, {
      uri: location.uri,
    });
  }
  if (end < start) {
    throw new InvalidRange(`range ${start}..${end} is reversed`, { uri: location.uri });
  }
  if (end === start) {
    throw new InvalidRange(`range ${start}..${end} is empty`, { uri: location.uri });
  }
  if (start < 0 || end > size) {
    throw new InvalidRange(`range ${start}..${end} is outside the object's 0..${size}`, {
      uri: location.uri,
    });
  }
}

/** Default presign lifetime in seconds. */
export const DEFAULT_PRESIGN_SECONDS = 900;
/** Longest presign lifetime in seconds (one hour). */
export const MAX_PRESIGN_SECONDS = 3600;

/** Validate `expiresIn` (1..3600 seconds, default 900). Throws {@link StageConfigError}. */
export function checkExpiresIn(value: number | undefined): number {
  const n = value ?? DEFAULT_PRESIGN_SECONDS;
  if (!Number.isInteger(n) || n < 1 || n > MAX_PRESIGN_SECONDS) {
    throw new StageConfigError(
      `expiresIn must be an integer number of seconds in 1..${MAX_PRESIGN_SECONDS}, not ${String(value)}`,
    );
  }
  return n;
}
