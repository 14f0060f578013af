/**
 * How a store uploads large objects (threshold, part size, parts in flight, stall timeout), and
 * the part size an upload uses. Small and free of I/O, so every store loads it; the engine
 * (engine.ts, put.ts) loads with the first upload that needs it.
 *
 * @module
 */
import type { PartProtocol } from '../contract/primitives.js';

/** Default stall timeout: 2 minutes, the drivers' idle-socket timeout. */
export const DEFAULT_STALL_TIMEOUT_MS = 120_000;

/** Largest stall timeout accepted (the largest delay a Node timer takes, about 24.8 days). */
export const MAX_STALL_TIMEOUT_MS = 2_147_483_647;

const MiB = 1024 * 1024;

/** How a store uploads large objects. */
export interface UploadSettings {
  /** Objects larger than this (bytes) go in parts. */
  multipartThreshold: number;
  /** Bytes per part (raised for huge known sizes). */
  partSize: number;
  /** Parts sent at once (memory of a stream upload is `partSize × partsInFlight`). */
  partsInFlight: number;
  /** An upload with no progress for this long (ms) fails with `UploadStalled`. */
  stallTimeoutMs: number;
}

/** The options {@link uploadSettings} reads (a subset of `StoreOptions`). */
export interface UploadSettingsOptions {
  /** Objects larger than this (bytes) are uploaded in parts. Default 64 MiB; at most 5 GiB. */
  multipartThreshold?: number | undefined;
  /** Part size (bytes), 1 MiB..5 GiB; the driver's protocol may demand more (5 MiB on S3). Default 64 MiB. */
  partSize?: number | undefined;
  /** Parts uploaded at once, 1..16. Default 4. */
  partsInFlight?: number | undefined;
  /** See `UploadStalled`: milliseconds, 1..2^31-1. Default 120,000. */
  stallTimeoutMs?: number | undefined;
}

/** Default part size and multipart threshold: 64 MiB. */
export const DEFAULT_PART_SIZE = 64 * MiB;
/** Default parts in flight. */
export const DEFAULT_PARTS_IN_FLIGHT = 4;
/** Most parts in flight accepted. */
export const MAX_PARTS_IN_FLIGHT = 16;
/** No part (and no single put through the engine's choice) is larger than 5 GiB. */
export const MAX_PART_SIZE = 5 * 1024 * MiB;

function checked(name: string, value: number, min: number, max: number): number {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer in ${min}..${max}, not ${value}`);
  }
  return value;
}

/** The upload settings of `options`, defaults applied. Throws RangeError for values out of range. */
export function uploadSettings(options: UploadSettingsOptions = {}): UploadSettings {
  return {
    multipartThreshold: checked(
      'multipartThreshold',
      options.multipartThreshold ?? DEFAULT_PART_SIZE,
      0,
      MAX_PART_SIZE,
    ),
    partSize: checked('partSize', options.partSize ?? DEFAULT_PART_SIZE, MiB, MAX_PART_SIZE),
    partsInFlight: checked(
      'partsInFlight',
      options.partsInFlight ?? DEFAULT_PARTS_IN_FLIGHT,
      1,
      MAX_PARTS_IN_FLIGHT,
    ),
    stallTimeoutMs: checked(
      'stallTimeoutMs',
      options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS,
      1,
      MAX_STALL_TIMEOUT_MS,
    ),
  };
}

/**
 * The part size for an upload of `size` bytes (when known) through `protocol`: the configured
 * size within the protocol's limits, raised to a whole number of MiB large enough that the
 * object fits in the protocol's part count.
 */
export function partSizeFor(
  configured: number,
  size: number | undefined,
  protocol: Pick<PartProtocol, 'maxParts' | 'minPartSize' | 'maxPartSize'>,
): number {
  const base = Math.min(Math.max(configured, protocol.minPartSize), protocol.maxPartSize);
  if (size === undefined || size <= base * protocol.maxParts) return base;
  const needed = Math.ceil(size / protocol.maxParts / MiB) * MiB;
  return Math.min(Math.max(base, needed), protocol.maxPartSize);
}
