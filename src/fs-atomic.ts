/**
 * Complete-or-absent local files: write to a temp file in the same directory, fsync it, rename it
 * over the target, fsync the directory. A crash at any point leaves either the old file or the
 * new one, never a partial one, and temp files carry a `.tmp-` prefix that readers ignore.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';

/** The name prefix of temp files; anything starting with it is never a finished file. */
export const TEMP_PREFIX = '.tmp-';

/** A temp path beside `target`, unique per call. */
export function tempPathFor(target: string): string {
  return path.join(path.dirname(target), `${TEMP_PREFIX}${randomBytes(8).toString('hex')}`);
}

/** fsync a directory so a rename inside it is durable. */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Write `data` to `target` atomically and durably (see the module comment). */
export async function writeFileAtomic(target: string, data: string | Uint8Array): Promise<void> {
  await mkdir(path.dirname(target), { recursive: true });
  const temp = tempPathFor(target);
  const handle = await open(temp, 'wx', 0o644);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  try {
    await rename(temp, target);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  await fsyncDir(path.dirname(target));
}
