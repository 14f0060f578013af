/**
 * Uploads of the one stage, on any backend: a new object under a fresh random key, sent through
 * the upload engine (src/upload/engine.ts) and the backend's part protocol, its SHA-256 computed
 * from the bytes read in order; an empty object is one plain put.
 *
 * A file's parts are streamed from disk, and its SHA-256 comes from one sequential read that
 * every part's sent bytes are checked against (src/upload/file-parts.ts), so no part is held in
 * memory; a stream's parts go through pooled part buffers, at most `partsInFlight` of them.
 * Nothing is visible under the key before the protocol's `complete`. A failure or cancellation
 * cancels the parts in flight, waits for them, and aborts the upload (bounded to 30 s); a crash
 * cannot, so stores need their lifecycle rule for abandoned uploads (docs/managed-objects.md).
 *
 * **Resumable** (a path source and `checkpointDir`, on protocols that can resume): the first
 * attempt records each acknowledged part in a checkpoint (checkpoint.ts); a retry takes the
 * checkpoint's lock, reconciles the store's part listing (every page), re-reads every
 * acknowledged part from the source and compares its SHA-256 (rebuilding the whole-object digest
 * on the way), sends again every part it cannot trust, and sends the rest. If the upload had in
 * fact been completed and only the response was lost, the retry streams the destination once and
 * accepts it only if its size and SHA-256 equal the source's. A source whose size or mtime
 * changed since the checkpoint starts a fresh upload (the old one is aborted). Cancellation
 * aborts the exact upload and removes the checkpoint; a store or network failure, a stall
 * included, keeps both for the next retry.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { createReadStream, type Stats } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { ReadableStream } from 'node:stream/web';
import { debuglog } from 'node:util';
import { EMPTY_SHA256 } from '../core/digest.js';
import {
  NotFound,
  ObjectIntegrityError,
  PartLimitExceeded,
  SourceChanged,
  SourceError,
} from '../core/errors.js';
import type { PartBufferPool } from '../upload/buffer-pool.js';
import { BufferedParts } from '../upload/buffered-parts.js';
import { type TrustedPart, uploadParts } from '../upload/engine.js';
import { FileParts } from '../upload/file-parts.js';
import type { PartSource } from '../upload/part-source.js';
import {
  abortUpload,
  createUpload,
  linkedController,
  listUploadParts,
  type UploadTarget,
} from '../upload/requests.js';
import { StreamReader } from '../upload/stream-readers.js';
import type { StageBackend } from './backend.js';
import {
  type Checkpoint,
  CheckpointWriter,
  checkpointPath,
  lockCheckpoint,
  readCheckpoint,
  removeCheckpoint,
  writeCheckpoint,
} from './checkpoint.js';
import type { DataLocation } from './data-location.js';
import { abortError, CheckpointError, StageConfigError } from './errors.js';
import type { StageLocations } from './location-keys.js';
import type { UploadOptions, UploadSource } from './stage-contract.js';

const debug = debuglog('provcat:lake');

/** Everything an upload needs of its stage. */
export interface UploadContext {
  backend: StageBackend;
  /** The descriptor kind, recorded in checkpoints. */
  kind: string;
  /** The bucket (or root) the backend writes to, recorded in checkpoints. */
  bucket: string;
  locations: StageLocations;
  /** A fresh full key for a new object. */
  newKey(): string;
  /** Checkpoint file names: the stage's credential-free identity. */
  identity: string;
  partSize: number;
  maxParts: number;
  lockStaleMs: number;
  pool: PartBufferPool;
}

/** The engine's target for `key`; `stallTimeoutMs` bounds its requests that are not parts. */
function targetOf(ctx: UploadContext, key: string, stallTimeoutMs?: number): UploadTarget {
  return {
    protocol: ctx.backend.parts,
    key,
    uri: ctx.locations.uriOf(key),
    debug: (message) => debug('%s', message),
    stallTimeoutMs,
  };
}

function isWebStream(source: unknown): source is ReadableStream<Uint8Array> {
  return (
    typeof source === 'object' &&
    source !== null &&
    typeof (source as { getReader?: unknown }).getReader === 'function'
  );
}

/** The parts of an upload source: a file's ranges, or a stream's pooled buffers. */
async function openParts(ctx: UploadContext, source: UploadSource): Promise<PartSource> {
  if (typeof source === 'string') {
    return FileParts.open(source, { partSize: ctx.partSize, digest: true });
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
    partSize: ctx.partSize,
    pool: ctx.pool,
    digest: true,
  });
}

function location(uri: string, contentType: string, size: number, sha256: string): DataLocation {
  return Object.freeze({ uri, contentType, sizeBytes: size, sha256 });
}

/** Upload without a checkpoint (see the module comment). */
export async function uploadPlain(
  ctx: UploadContext,
  source: UploadSource,
  contentType: string,
  window: number,
  options: UploadOptions,
): Promise<DataLocation> {
  const key = ctx.newKey();
  const uri = ctx.locations.uriOf(key);
  const parts = await openParts(ctx, source);
  let failed = true;
  try {
    const empty =
      parts instanceof BufferedParts
        ? (await parts.peek(options.signal)) === undefined
        : parts.size === 0;
    if (empty) {
      await ctx.backend.put(key, new Uint8Array(0), { contentType, signal: options.signal });
      failed = false;
      return location(uri, contentType, 0, EMPTY_SHA256);
    }
    const result = await uploadParts(targetOf(ctx, key, options.stallTimeoutMs), parts, {
      partSize: ctx.partSize,
      partsInFlight: window,
      maxParts: ctx.maxParts,
      contentType,
      stallTimeoutMs: options.stallTimeoutMs,
      signal: options.signal,
      onProgress: (bytes) =>
        options.onProgress?.({ operation: 'upload', uri, bytes, totalBytes: parts.size }),
    });
    failed = false;
    return location(uri, contentType, result.size, result.sha256 as string);
  } catch (error) {
    if (options.signal?.aborted) throw abortError(options.signal);
    throw error;
  } finally {
    await parts.close(failed);
  }
}

/** Upload a file with a checkpoint in `checkpointDir` (see the module comment). */
export async function uploadResumable(
  ctx: UploadContext,
  file: string,
  checkpointDir: string,
  contentType: string,
  window: number,
  options: UploadOptions,
): Promise<DataLocation> {
  const sourcePath = path.resolve(file);
  const cpFile = checkpointPath(checkpointDir, ctx.identity, sourcePath);
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
    ctx.lockStaleMs,
  );
  try {
    let checkpoint = await readCheckpoint(cpFile);
    if (checkpoint !== undefined) checkCheckpoint(ctx, checkpoint, cpFile, sourcePath);
    let parts: FileParts | undefined;
    try {
      const identity = await sourceIdentity(sourcePath);
      if (
        checkpoint !== undefined &&
        (checkpoint.source.size !== identity.size || checkpoint.source.mtimeMs !== identity.mtimeMs)
      ) {
        debug(
          '%s changed since its checkpoint: aborting upload %s and starting afresh',
          sourcePath,
          checkpoint.upload,
        );
        await abortUpload(
          targetOf(ctx, checkpoint.key, options.stallTimeoutMs),
          checkpoint.upload,
          undefined,
        );
        await removeCheckpoint(cpFile);
        checkpoint = undefined;
      }
      let trusted = new Map<number, TrustedPart>();
      if (checkpoint !== undefined) {
        const listed = await listUploadParts(
          targetOf(ctx, checkpoint.key, options.stallTimeoutMs),
          checkpoint.upload,
          { partSize: checkpoint.partSize, signal: controller.signal },
        );
        if (listed === 'gone') {
          const recovered = await recoverCompletion(
            ctx,
            checkpoint,
            cpFile,
            contentType,
            controller.signal,
          );
          if (recovered !== undefined) return recovered;
          // Neither an upload nor an object: the upload was aborted (say, by a lifecycle rule).
          debug(
            'upload %s of %s is gone and nothing was published: starting afresh',
            checkpoint.upload,
            sourcePath,
          );
          await removeCheckpoint(cpFile);
          checkpoint = undefined;
        } else {
          trusted = trustedParts(checkpoint, listed, window);
        }
      }
      if (checkpoint === undefined && identity.size === 0) {
        const key = ctx.newKey();
        await ctx.backend.put(key, new Uint8Array(0), { contentType, signal: controller.signal });
        return location(ctx.locations.uriOf(key), contentType, 0, EMPTY_SHA256);
      }
      const partSize = checkpoint?.partSize ?? ctx.partSize;
      parts = await FileParts.open(sourcePath, { partSize, digest: true, partDigests: true });
      if (parts.size !== identity.size || parts.mtimeMs !== identity.mtimeMs) {
        throw new SourceChanged(`${sourcePath} changed while the upload was being prepared`);
      }
      if (parts.count > ctx.maxParts) {
        throw new PartLimitExceeded(
          `${sourcePath}: ${identity.size} bytes need more than ${ctx.maxParts} parts of ${partSize} bytes`,
        );
      }
      const fresh = checkpoint === undefined;
      if (checkpoint === undefined) {
        const key = ctx.newKey();
        const upload = await createUpload(targetOf(ctx, key, options.stallTimeoutMs), {
          contentType,
          size: identity.size,
        });
        checkpoint = {
          version: 2,
          backend: ctx.kind,
          bucket: ctx.bucket,
          key,
          upload,
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
          const target = targetOf(ctx, checkpoint.key, options.stallTimeoutMs);
          await abortUpload(target, checkpoint.upload, error);
        }
        throw error;
      }
      return await runResumable(
        ctx,
        checkpoint,
        cpFile,
        trusted,
        parts,
        window,
        controller.signal,
        {
          ...options,
          contentType,
        },
      );
    } finally {
      await parts?.close();
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
 * The recorded parts the store still lists with the same token and size: these may be kept if
 * the source still has their bytes. The checkpoint keeps only those from now on, and the larger
 * window.
 */
function trustedParts(
  checkpoint: Checkpoint,
  listed: Map<number, { token: string; size: number }>,
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
      sameToken(remote.token, part.token) &&
      remote.size === expectedSize
    ) {
      trusted.set(part.number, { token: part.token, sha256: part.sha256 });
    } else {
      debug(
        'part %d of upload %s is not listed as recorded: sending it again',
        part.number,
        checkpoint.upload,
      );
    }
  }
  debug(
    'resuming upload %s of %s: %d of %d parts recorded and listed, %d listed in all',
    checkpoint.upload,
    checkpoint.source.path,
    trusted.size,
    total,
    listed.size,
  );
  checkpoint.window = Math.max(checkpoint.window, window);
  checkpoint.parts = checkpoint.parts.filter((p) => trusted.has(p.number));
  return trusted;
}

/** Size and mtime of the source file (SourceError when it cannot be read or is not a file). */
async function sourceIdentity(file: string): Promise<Checkpoint['source']> {
  let stats: Stats;
  try {
    stats = await stat(file);
  } catch (cause) {
    throw new SourceError(`cannot upload ${file}: ${(cause as Error).message}`, { cause });
  }
  if (!stats.isFile()) throw new SourceError(`cannot upload ${file}: not a regular file`);
  return { path: file, size: stats.size, mtimeMs: stats.mtimeMs };
}

/** Fail closed on a checkpoint that does not belong to this stage and source. */
function checkCheckpoint(
  ctx: UploadContext,
  checkpoint: Checkpoint,
  cpFile: string,
  sourcePath: string,
): void {
  if (checkpoint.backend !== ctx.kind) {
    throw new CheckpointError(
      `checkpoint is for a ${checkpoint.backend} stage, not this ${ctx.kind} one`,
      cpFile,
    );
  }
  if (checkpoint.bucket !== ctx.bucket) {
    throw new CheckpointError(
      `checkpoint names bucket ${checkpoint.bucket}, not this stage's`,
      cpFile,
    );
  }
  try {
    ctx.locations.keyOf(ctx.locations.uriOf(checkpoint.key));
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

async function runResumable(
  ctx: UploadContext,
  checkpoint: Checkpoint,
  cpFile: string,
  trusted: Map<number, TrustedPart>,
  parts: FileParts,
  window: number,
  signal: AbortSignal,
  options: UploadOptions & { contentType: string },
): Promise<DataLocation> {
  const { key, upload } = checkpoint;
  const target = targetOf(ctx, key, options.stallTimeoutMs);
  const writer = new CheckpointWriter(cpFile, checkpoint);
  try {
    const result = await uploadParts(target, parts, {
      partSize: checkpoint.partSize,
      partsInFlight: window,
      maxParts: ctx.maxParts,
      contentType: options.contentType,
      upload,
      trusted,
      abortOnFailure: false,
      stallTimeoutMs: options.stallTimeoutMs,
      signal,
      onPart: async (part) => {
        // Trusted parts are in the checkpoint already; record what was (re)sent.
        if (part.sent) {
          await writer.record({
            number: part.number,
            token: part.token,
            sha256: part.sha256 as string,
          });
        }
      },
      onProgress: (bytes) =>
        options.onProgress?.({
          operation: 'upload',
          uri: target.uri,
          bytes,
          totalBytes: parts.size,
        }),
    });
    await removeCheckpoint(cpFile);
    return location(target.uri, options.contentType, result.size, result.sha256 as string);
  } catch (error) {
    const cancelled = options.signal?.aborted === true;
    const terminal =
      cancelled || error instanceof PartLimitExceeded || error instanceof SourceChanged;
    if (terminal) {
      await abortUpload(target, upload, error);
      await removeCheckpoint(cpFile);
    } else {
      debug('upload %s of %s failed; checkpoint kept for a retry: %s', upload, key, String(error));
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
async function recoverCompletion(
  ctx: UploadContext,
  checkpoint: Checkpoint,
  cpFile: string,
  contentType: string,
  signal: AbortSignal,
): Promise<DataLocation | undefined> {
  const uri = ctx.locations.uriOf(checkpoint.key);
  let body: Readable;
  try {
    body = (await ctx.backend.get(checkpoint.key, { signal })).body;
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
  const remote = await digestStream(body);
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
  debug('upload %s was completed by an earlier attempt; verified %s', checkpoint.upload, uri);
  await removeCheckpoint(cpFile);
  return location(uri, contentType, remote.size, remote.sha256);
}

/** Tokens compare without ETag quoting (`W/`, `"`), as stores quote them differently. */
function sameToken(a: string, b: string): boolean {
  const bare = (s: string) => s.replace(/^W\//, '').replace(/^"|"$/g, '');
  return bare(a) === bare(b);
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
