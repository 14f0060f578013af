/**
 * The first half of every local write: the bytes go into a temp file inside the key's directory
 * and are fsynced *before* anything else, with no lock held; `./publish.ts` then makes the temp
 * a version. A large file is copied by the kernel (`./file-copy.ts`, no MD5), a copy of a version
 * is a hard link of its immutable file, and anything else is streamed and hashed (MD5, the ETag).
 * On failure the temp is removed.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { addAbortSignal, type Readable } from 'node:stream';
import type { PutOptions, PutSource } from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';
import { tempName } from '../../src/core/fs-atomic.js';
import { copyFromFile } from './file-copy.js';
import { errorCode, fsError, type Trace } from './fs-errors.js';
import type { KeyPath } from './key-paths.js';

/** A written, fsynced temp file in a key's directory, ready to be published. */
export interface TempFile {
  path: string;
  size: number;
  /** The MD5 of the bytes, hex; unset for a file the kernel copied (see `./file-copy.ts`). */
  md5?: string | undefined;
}

/**
 * Write `source` into a new temp file in the key's directory, fsynced: a large file is copied
 * by the kernel (`./file-copy.ts`, no MD5), anything else streamed and hashed (MD5).
 */
export async function writeTemp(
  where: KeyPath,
  source: PutSource,
  options: PutOptions,
  trace: Trace,
): Promise<TempFile> {
  const { signal, onProgress } = options;
  const temp = path.join(where.dir, tempName());
  if (typeof source === 'string') {
    let copied: { size: number } | undefined;
    try {
      copied = await copyFromFile(source, temp, { uri: where.uri, signal, onProgress });
    } catch (error) {
      throw fsError(error, `cannot write ${where.uri}`, where.uri);
    }
    if (copied !== undefined) {
      try {
        checkAnnounced(where, copied.size, options.size);
      } catch (error) {
        await removeTemp(temp, trace);
        throw error;
      }
      return { path: temp, ...copied };
    }
  }
  const chunks = await openSource(source, signal);
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(temp, 'wx');
  } catch (error) {
    chunks.destroy?.();
    throw fsError(error, `cannot write ${where.uri}`, where.uri);
  }
  const hash = createHash('md5');
  let size = 0;
  try {
    for await (const chunk of chunks.iterable) {
      signal?.throwIfAborted();
      await writeAll(handle, chunk);
      hash.update(chunk);
      size += chunk.length;
      onProgress?.(size);
    }
    checkAnnounced(where, size, options.size);
    await handle.sync();
  } catch (error) {
    chunks.destroy?.();
    await handle.close();
    await removeTemp(temp, trace);
    throw fsError(error, `cannot write ${where.uri}`, where.uri);
  }
  await handle.close();
  return { path: temp, size, md5: hash.digest('hex') };
}

/**
 * A hard link of an immutable version (or a copy where links do not work) at `temp`; `from`
 * and `to` are the URIs, for messages.
 */
export async function linkOrCopy(
  source: string,
  temp: string,
  from: string,
  to: string,
  trace: Trace,
): Promise<void> {
  try {
    await fs.link(source, temp);
    return;
  } catch (error) {
    const code = errorCode(error);
    if (code !== 'EXDEV' && code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EMLINK') {
      throw fsError(error, `cannot copy ${from} to ${to}`, to);
    }
    trace(`link ${source} failed (${code}); copying the bytes instead`);
  }
  try {
    await fs.copyFile(source, temp, fsConstants.COPYFILE_EXCL);
    const handle = await fs.open(temp, 'r+');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch (error) {
    await removeTemp(temp, trace);
    throw fsError(error, `cannot copy ${from} to ${to}`, to);
  }
}

/** Remove a temp file after a failure; a failure to remove it is logged, not raised. */
export async function removeTemp(temp: string, trace: Trace): Promise<void> {
  try {
    await fs.rm(temp, { force: true });
  } catch (error) {
    trace(`cannot remove temp file ${temp}: ${String(error)}`);
  }
}

/**
 * A `StoreError` when a source gave another size than the caller announced (a put from a file
 * announces its size as `stat` saw it; a file that changed since is refused, not stored).
 */
function checkAnnounced(where: KeyPath, size: number, announced: number | undefined): void {
  if (announced !== undefined && announced !== size) {
    throw new StoreError(
      `the source of ${where.uri} gave ${size} bytes, not the ${announced} announced`,
      { uri: where.uri },
    );
  }
}

/** The bytes of a put source, as chunks, and how to stop reading them early. */
async function openSource(
  source: PutSource,
  signal: AbortSignal | undefined,
): Promise<{ iterable: AsyncIterable<Uint8Array> | Iterable<Uint8Array>; destroy?: () => void }> {
  if (source instanceof Uint8Array) return { iterable: source.length > 0 ? [source] : [] };
  let stream: Readable;
  if (typeof source === 'string') {
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(source, 'r');
    } catch (error) {
      throw fsError(error, `cannot read the source file ${source}`);
    }
    stream = handle.createReadStream();
  } else stream = source;
  if (signal !== undefined) addAbortSignal(signal, stream);
  return { iterable: bytesOf(stream), destroy: () => stream.destroy() };
}

async function* bytesOf(stream: Readable): AsyncGenerator<Uint8Array> {
  for await (const chunk of stream) {
    if (typeof chunk === 'string') yield Buffer.from(chunk, 'utf8');
    else if (chunk instanceof Uint8Array) yield chunk;
    else throw new TypeError('a put stream must give bytes or strings, not objects');
  }
}

async function writeAll(handle: fs.FileHandle, chunk: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < chunk.length) {
    const { bytesWritten } = await handle.write(chunk, offset, chunk.length - offset);
    offset += bytesWritten;
  }
}
