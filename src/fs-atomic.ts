/**
 * Complete-or-absent local files: write to a temp file in the same directory, fsync it, rename it
 * over the target, fsync the directory. A crash at any point leaves either the old file or the
 * new one, never a partial one, and temp files carry a `.tmp-` prefix that readers ignore.
 *
 * A temp's name says who wrote it — `.tmp-<host tag><random>-<pid>-<n>` — so that whoever finds
 * one later can tell a live writer's (keep it) from a killed one's (garbage):
 * {@link isAbandonedTemp}.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import { sha256Hex } from './digest.js';

/** The name prefix of temp files; anything starting with it is never a finished file. */
export const TEMP_PREFIX = '.tmp-';

/** 4 hex digits of this host's name: a pid means something only on the host that wrote it. */
const HOST_TAG = sha256Hex(hostname()).slice(0, 4);

/**
 * This process's part of temp names: the host tag and 8 random hex digits once (hosts sharing a
 * cache on a network disk may reuse a pid), the pid (base 36), then a counter. A fresh random
 * name per file cost ~46 µs of CPU each, ~5% of a cold fetch of small files; every temp is still
 * opened with O_EXCL.
 */
const TEMP_STEM = `${HOST_TAG}${randomBytes(4).toString('hex')}-${process.pid.toString(36)}-`;
let tempCount = 0;

/** A name {@link tempPathFor} makes: host tag, random part, pid, counter. */
const TEMP_NAME = /^\.tmp-([0-9a-f]{4})[0-9a-f]{8}-([0-9a-z]{1,8})-[0-9a-z]+$/;

/**
 * A temp file this old is garbage whoever wrote it (ms): one day. It bounds what a reused pid (a
 * live process that took a dead writer's pid) or a writer on another host can keep alive.
 */
export const ABANDONED_TEMP_AGE_MS = 24 * 3600 * 1000;

/** True when process `pid` exists on this host (`kill(pid, 0)`; EPERM: it exists). */
function alive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * True when the temp file named `name` (last modified at `mtimeMs`) was left by a writer that is
 * gone, so it may be removed: a name of {@link tempPathFor} from this host whose pid is dead, or
 * any `.tmp-` file older than {@link ABANDONED_TEMP_AGE_MS}. Never true for a temp of a live
 * writer on this host younger than that, nor for a name without the prefix.
 */
export function isAbandonedTemp(name: string, mtimeMs: number, now = Date.now()): boolean {
  if (!name.startsWith(TEMP_PREFIX)) return false;
  if (now - mtimeMs > ABANDONED_TEMP_AGE_MS) return true;
  const m = TEMP_NAME.exec(name);
  if (m === null || m[1] !== HOST_TAG) return false;
  return !alive(Number.parseInt(m[2] as string, 36));
}

/** A temp path beside `target`, unique per call. */
export function tempPathFor(target: string): string {
  tempCount += 1;
  // Not path.join: its normalizing showed in profiles of many small files. A dirname is
  // already normal; only the root ends with a separator.
  const dir = path.dirname(target);
  const name = `${TEMP_PREFIX}${TEMP_STEM}${tempCount.toString(36)}`;
  return dir.endsWith(path.sep) ? `${dir}${name}` : `${dir}${path.sep}${name}`;
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
