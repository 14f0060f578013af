/**
 * What the local stage's files (stage-files.ts) and uploads (stage-uploads.ts) share: the
 * temp suffix and markers folder, the one map of file-system errors, and small write helpers.
 *
 * @module
 */
import { type FileHandle, open } from 'node:fs/promises';
import { debuglog } from 'node:util';
import type { ObjectInfo } from '../../src/contract/primitives.js';
import {
  NotFound,
  ObjectIntegrityError,
  PermissionDenied,
  StoreError,
} from '../../src/core/errors.js';
import { segmentProblem } from '../../src/core/uri.js';

/** Debug output of the local stage (`NODE_DEBUG=provcat:lake`). */
export const debug = debuglog('provcat:lake');

/** The suffix of an upload's temp file. */
export const UPLOADING = '.uploading';
/** Where upload markers live, below the stage's key prefix. */
export const MARKERS = '.provcat/uploads';
/** A marker older than this names a writer that is gone, whatever its pid says: one week. */
export const STALE_UPLOAD_MS = 7 * 24 * 60 * 60 * 1000;

/** Map a file-system error: ENOENT/ENOTDIR NotFound, EACCES/EPERM PermissionDenied, else StoreError. */
export function fsError(error: unknown, message: string, uri: string): Error {
  const code = (error as { code?: string }).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') {
    return new NotFound(`${message}: no such file`, { uri, cause: error });
  }
  if (code === 'EACCES' || code === 'EPERM') {
    return new PermissionDenied(`${message}: ${code}`, { uri, cause: error });
  }
  if (code === 'ELOOP') {
    return new ObjectIntegrityError('OutsideStage', `${uri} is outside the stage: a symlink`, {
      uri,
      cause: error,
    });
  }
  return new StoreError(`${message}: ${code ?? String(error)}`, { uri, cause: error });
}

/** What a listing or HEAD reports of a file: its version is its inode and mtime. */
export function infoOf(
  key: string,
  stats: { size: number; ino: number; mtimeMs: number; mtime: Date },
): ObjectInfo {
  return {
    key,
    size: stats.size,
    version: `${stats.ino}-${stats.mtimeMs}`,
    lastModified: stats.mtime,
  };
}

/** Write all of `bytes` at `position` (short writes continued). */
export async function writeAt(
  handle: FileHandle,
  bytes: Uint8Array,
  position: number,
): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

/** Create `file` (exclusive) holding `bytes`, fsynced. */
export async function writeSynced(file: string, bytes: Uint8Array): Promise<void> {
  const handle = await open(file, 'wx', 0o644);
  try {
    await writeAt(handle, bytes, 0);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Why `key` is no key of a stage's files (empty, an empty, `.` or `..` segment, a control character), or `undefined`. */
export function keyProblemOf(key: string): string | undefined {
  if (key === '') return 'an empty key';
  for (const segment of key.split('/')) {
    const problem = segmentProblem(segment);
    if (problem !== undefined) return problem;
  }
  return undefined;
}
