/**
 * Resumable-upload checkpoints: what a crashed upload needs to continue, and nothing more, on
 * any store (version 2, backend-neutral):
 *
 * ```json
 * { "version": 2, "backend": "s3", "bucket": "lake", "key": "managed/ab/ab…", "upload": "2~…",
 *   "source": { "path": "/data/episode.mp4", "size": 734003200, "mtimeMs": 1733000000000.5 },
 *   "partSize": 67108864, "window": 4,
 *   "parts": [ { "number": 1, "token": "\"9b2c…\"", "sha256": "5f1e…" } ] }
 * ```
 *
 * `backend` is the stage's descriptor kind, `upload` the part protocol's reference (an S3 upload
 * ID, a GCS session URI, an Azure block-ID seed) and each part's `token` what the store named it
 * (an ETag, a block ID, `""` for a GCS offset). Version 1 — S3 only, with `uploadId` and part
 * `etag` — is still read (as backend `s3`), so uploads checkpointed by earlier releases resume;
 * only version 2 is written.
 *
 * A checkpoint holds no credentials and no object bytes. It lives in a directory the caller
 * chooses, one file per (stage, absolute source path), named by the SHA-256 of that pair. Every
 * write is complete-or-absent (temp file, fsync, rename, directory fsync), so a crash leaves
 * the previous checkpoint or the new one; the temp of a write that was killed is removed by the
 * next upload that locks a checkpoint in that directory (once per directory and process: one
 * `readdir`; `sweepAbandonedTemps` in src/core/fs-atomic.ts, never a live writer's). The sweep is at
 * the lock, not at a write: a rerun whose parts were all recorded writes no checkpoint. A part is recorded only after the store acknowledged
 * it; parts sent but not yet answered when the process died (at most `window` of them)
 * are not in the file, and a retry uploads them again.
 *
 * Reading is strict and fails closed, before any source or store I/O: a version other than 1
 * or 2, a part size other than 5 MiB or 64 MiB (the two sizes provcat has ever written), or any
 * malformed field is a {@link CheckpointError}; the file is left for a human to look at.
 *
 * One upload per checkpoint at a time: the caller holds an OS-level lock file
 * (proper-lockfile: `mkdir` is atomic, the holder refreshes it, and a lock left by a killed
 * process goes stale after 10 s and is taken over).
 *
 * @module
 */
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import lockfile from 'proper-lockfile';
import { sha256Hex } from '../core/digest.js';
import { fsyncDir, sweepAbandonedTemps, writeFileAtomic } from '../core/fs-atomic.js';
import { CheckpointError } from './errors.js';

/** One MiB. */
export const MiB = 1024 * 1024;
/** The only part sizes a resumable checkpoint may record. */
export const RESUMABLE_PART_SIZES: readonly number[] = [5 * MiB, 64 * MiB];

/** Highest part number a checkpoint may record (the largest protocol's limit, Azure's). */
export const MAX_CHECKPOINT_PART = 50_000;

/** A part the store acknowledged. */
export interface CheckpointPart {
  /** 1..50,000 (the stage checks its protocol's own limit). */
  number: number;
  /** What the store named the part (an S3 ETag as given, an Azure block ID, `''` for GCS). */
  token: string;
  /** SHA-256 (hex) of the part's bytes. */
  sha256: string;
}

/** A resumable-upload checkpoint, version 2 (see the module comment). */
export interface Checkpoint {
  version: 2;
  /** The stage's descriptor kind (`s3`, `gs`, `az`). */
  backend: string;
  /** The part protocol's reference to the upload. */
  upload: string;
  /** The full object key (prefix and tenant included). */
  key: string;
  bucket: string;
  /** Identity of the source file when the upload began. */
  source: { path: string; size: number; mtimeMs: number };
  /** Bytes per part (the last part may be shorter): 5 MiB or 64 MiB. */
  partSize: number;
  /** Most parts that were in flight at once: how many answered parts a crash can have left unrecorded. */
  window: number;
  /** Acknowledged parts, by number. */
  parts: CheckpointPart[];
}

const TOP_V1 = ['version', 'uploadId', 'key', 'bucket', 'source', 'partSize', 'window', 'parts'];
const TOP = [
  'version',
  'backend',
  'upload',
  'key',
  'bucket',
  'source',
  'partSize',
  'window',
  'parts',
];
const SOURCE = ['path', 'size', 'mtimeMs'];
const PART_V1 = ['number', 'etag', 'sha256'];
const PART = ['number', 'token', 'sha256'];
const HEX64 = /^[0-9a-f]{64}$/;

function exact(
  value: unknown,
  fields: string[],
  what: string,
  file: string,
): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CheckpointError(`${what} is not a JSON object`, file);
  }
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!fields.includes(key))
      throw new CheckpointError(`${what} has unknown field ${JSON.stringify(key)}`, file);
  }
  for (const key of fields) {
    if (!(key in record)) throw new CheckpointError(`${what} lacks field ${key}`, file);
  }
  return record;
}

function nonEmptyString(value: unknown, what: string, file: string): string {
  if (typeof value !== 'string' || value === '')
    throw new CheckpointError(`${what} must be a non-empty string`, file);
  return value;
}

function string(value: unknown, what: string, file: string): string {
  if (typeof value !== 'string') throw new CheckpointError(`${what} must be a string`, file);
  return value;
}

function integer(value: unknown, min: number, what: string, file: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new CheckpointError(
      `${what} must be an integer >= ${min}, not ${JSON.stringify(value)}`,
      file,
    );
  }
  return value;
}

/**
 * Parse a checkpoint strictly (see the module comment); a version 1 checkpoint comes back as
 * version 2 of backend `s3`. Version and part size are checked first, so an unknown format is
 * named as such. Throws {@link CheckpointError}.
 */
export function parseCheckpoint(text: string, file: string): Checkpoint {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new CheckpointError('checkpoint is not JSON', file, { cause });
  }
  const version = (value as { version?: unknown } | null)?.version;
  if (version !== 1 && version !== 2) {
    throw new CheckpointError(
      `unknown checkpoint version ${JSON.stringify(version)} (this provcat reads versions 1 and 2)`,
      file,
    );
  }
  const partSize = (value as { partSize?: unknown }).partSize;
  if (typeof partSize !== 'number' || !RESUMABLE_PART_SIZES.includes(partSize)) {
    throw new CheckpointError(
      `checkpoint part size ${JSON.stringify(partSize)} is not one of ${RESUMABLE_PART_SIZES.join(', ')}`,
      file,
    );
  }
  const v1 = version === 1;
  const top = exact(value, v1 ? TOP_V1 : TOP, 'checkpoint', file);
  const source = exact(top.source, SOURCE, 'checkpoint source', file);
  const sourcePath = nonEmptyString(source.path, 'source.path', file);
  if (!path.isAbsolute(sourcePath)) throw new CheckpointError('source.path must be absolute', file);
  const mtimeMs = source.mtimeMs;
  if (typeof mtimeMs !== 'number' || !Number.isFinite(mtimeMs)) {
    throw new CheckpointError('source.mtimeMs must be a number', file);
  }
  if (!Array.isArray(top.parts)) throw new CheckpointError('parts must be an array', file);
  let previous = 0;
  const parts = top.parts.map((raw, i): CheckpointPart => {
    const part = exact(raw, v1 ? PART_V1 : PART, `parts[${i}]`, file);
    const number = integer(part.number, 1, `parts[${i}].number`, file);
    if (number > (v1 ? 10_000 : MAX_CHECKPOINT_PART)) {
      throw new CheckpointError(
        `parts[${i}].number exceeds ${v1 ? '10,000' : MAX_CHECKPOINT_PART}`,
        file,
      );
    }
    if (number <= previous)
      throw new CheckpointError('parts must be in increasing order of number', file);
    previous = number;
    const sha256 = part.sha256;
    if (typeof sha256 !== 'string' || !HEX64.test(sha256)) {
      throw new CheckpointError(`parts[${i}].sha256 must be 64 lowercase hex characters`, file);
    }
    const token = v1
      ? nonEmptyString(part.etag, `parts[${i}].etag`, file)
      : string(part.token, `parts[${i}].token`, file);
    return { number, token, sha256 };
  });
  return {
    version: 2,
    backend: v1 ? 's3' : nonEmptyString(top.backend, 'backend', file),
    upload: nonEmptyString(v1 ? top.uploadId : top.upload, v1 ? 'uploadId' : 'upload', file),
    key: nonEmptyString(top.key, 'key', file),
    bucket: nonEmptyString(top.bucket, 'bucket', file),
    source: { path: sourcePath, size: integer(source.size, 0, 'source.size', file), mtimeMs },
    partSize,
    window: integer(top.window, 1, 'window', file),
    parts,
  };
}

/** The checkpoint file of one source on one stage, in `dir`. */
export function checkpointPath(dir: string, stageIdentity: string, sourcePath: string): string {
  const name = sha256Hex(`${stageIdentity}\n${sourcePath}`);
  return path.join(path.resolve(dir), `${name}.json`);
}

/** Read a checkpoint; `undefined` when there is none. Throws {@link CheckpointError}. */
export async function readCheckpoint(file: string): Promise<Checkpoint | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (cause) {
    if ((cause as { code?: string }).code === 'ENOENT') return undefined;
    throw new CheckpointError('cannot read checkpoint', file, { cause });
  }
  return parseCheckpoint(text, file);
}

/** Write a checkpoint complete-or-absent and durably (temp, fsync, rename, dir fsync). */
export async function writeCheckpoint(file: string, checkpoint: Checkpoint): Promise<void> {
  const { version, backend, bucket, key, upload, source, partSize, window, parts } = checkpoint;
  const ordered = { version, backend, bucket, key, upload, source, partSize, window, parts };
  try {
    await writeFileAtomic(file, `${JSON.stringify(ordered, null, 1)}\n`);
  } catch (cause) {
    throw new CheckpointError('cannot write checkpoint', file, { cause });
  }
}

/** Remove a checkpoint durably (a missing one is fine). */
export async function removeCheckpoint(file: string): Promise<void> {
  try {
    await rm(file, { force: true });
    await fsyncDir(path.dirname(file));
  } catch (cause) {
    throw new CheckpointError('cannot remove checkpoint', file, { cause });
  }
}

/** How long a lock left by a dead process blocks others (proper-lockfile's minimum is 5 s). */
export const LOCK_STALE_MS = 10_000;

/** Checkpoint directories this process swept (see {@link lockCheckpoint}). */
const sweptDirs = new Set<string>();

/**
 * Remove the temps killed writers left in a checkpoint directory, once per directory and
 * process (see the module comment). Throws {@link CheckpointError} when the directory cannot
 * be read.
 */
async function sweepCheckpointDir(file: string): Promise<void> {
  const dir = path.dirname(file);
  if (sweptDirs.has(dir)) return;
  try {
    await sweepAbandonedTemps(dir);
  } catch (cause) {
    throw new CheckpointError('cannot clean the checkpoint directory', file, { cause });
  }
  sweptDirs.add(dir);
}

/**
 * Take the lock of a checkpoint file, waiting past {@link LOCK_STALE_MS} so that a lock left by
 * a killed process is taken over. A live holder keeps its lock fresh: then this throws
 * {@link CheckpointError}. `onCompromised` is called if the lock is lost while held (the
 * upload must then stop). Returns the release function. Before the lock is taken, the temps of
 * killed writers in the checkpoint's directory are removed, once per directory and process
 * (never a live writer's: see `isAbandonedTemp` in src/core/fs-atomic.ts).
 */
export async function lockCheckpoint(
  file: string,
  onCompromised: (error: Error) => void,
  staleMs = LOCK_STALE_MS,
): Promise<() => Promise<void>> {
  await sweepCheckpointDir(file);
  try {
    return await lockfile.lock(file, {
      realpath: false,
      stale: staleMs,
      update: Math.max(1000, Math.floor(staleMs / 5)),
      retries: {
        retries: Math.ceil(staleMs / 500) + 4,
        factor: 1,
        minTimeout: 500,
        maxTimeout: 500,
      },
      onCompromised,
    });
  } catch (cause) {
    throw new CheckpointError(
      'another process is uploading this source (checkpoint lock held)',
      file,
      { cause },
    );
  }
}

/**
 * Records acknowledged parts into the checkpoint, one durable write at a time and in the order
 * the acknowledgements arrive. {@link record} resolves once the part is on disk.
 */
export class CheckpointWriter {
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly file: string,
    private readonly checkpoint: Checkpoint,
  ) {}

  /** Add (or replace) one part and write the checkpoint. */
  record(part: CheckpointPart): Promise<void> {
    const parts = this.checkpoint.parts.filter((p) => p.number !== part.number);
    parts.push(part);
    parts.sort((a, b) => a.number - b.number);
    this.checkpoint.parts = parts;
    const snapshot: Checkpoint = { ...this.checkpoint, parts: [...parts] };
    const write = this.chain.then(() => writeCheckpoint(this.file, snapshot));
    // Keep the chain alive after a failed write; the failure reaches the caller through `write`.
    this.chain = write.then(
      () => undefined,
      () => undefined,
    );
    return write;
  }

  /** Write the checkpoint as it stands now. */
  flush(): Promise<void> {
    const snapshot: Checkpoint = { ...this.checkpoint, parts: [...this.checkpoint.parts] };
    const write = this.chain.then(() => writeCheckpoint(this.file, snapshot));
    this.chain = write.then(
      () => undefined,
      () => undefined,
    );
    return write;
  }
}
