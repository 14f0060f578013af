/**
 * Complete-or-absent local files: write to a temp file in the same directory, fsync it, rename it
 * over the target, fsync the directory. A crash at any point leaves either the old file or the
 * new one, never a partial one, and temp files carry a `.tmp-` prefix that readers ignore.
 *
 * A temp's name says who wrote it — `.tmp-<pid>-<host>-<n>` — so that whoever finds one later
 * (the cache, the local store, a local stage) can tell a live writer's from a killed one's with
 * the one rule of {@link judgeTemp}:
 *
 * - A temp of a process of this machine (same `<host>`: the host name, the boot and the PID
 *   namespace) is garbage when that PID no longer runs (`kill(pid, 0)` fails with `ESRCH`). A
 *   running PID (`EPERM` counts: it exists) keeps its temp however old, so a writer that was only
 *   stopped (SIGSTOP, a suspended laptop) never loses it. A PID reused by another process keeps a
 *   dead writer's temp until that process ends too.
 * - Any other temp (another machine sharing the directory over a network disk, another
 *   container, a name of an older provcat) is garbage once unmodified for
 *   {@link ABANDONED_TEMP_AGE_MS}: a live writer modifies its temp all the time.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { lstat, mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import { sha256Hex } from './digest.js';

/** The name prefix of temp files; anything starting with it is never a finished file. */
export const TEMP_PREFIX = '.tmp-';

/** Age (since its last modification) after which a temp this machine cannot judge is garbage. */
export const ABANDONED_TEMP_AGE_MS = 60 * 60 * 1000;

/** A Linux identity of this machine (boot ID, PID namespace), or `''` where it cannot be read. */
function linuxId(read: () => string): string {
  if (process.platform !== 'linux') return '';
  try {
    return read().trim();
  } catch {
    // Not readable (a restricted /proc): the host name still separates machines, as on other
    // platforms; nothing else depends on it.
    return '';
  }
}

let hostTagValue: string | undefined;

/**
 * 8 hex digits naming this machine, boot and PID namespace: PIDs are only comparable between
 * processes that share all three. Computed once per process.
 */
export function hostTag(): string {
  hostTagValue ??= sha256Hex(
    [
      hostname(),
      linuxId(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8')),
      linuxId(() => readlinkSync('/proc/self/ns/pid')),
    ].join('\0'),
  ).slice(0, 8);
  return hostTagValue;
}

/**
 * This process's part of temp names, made once: the pid, the host tag and 8 random hex digits;
 * each name adds a counter. A fresh random name per file cost ~46 µs of CPU each, ~5% of a cold
 * fetch of small files; every temp is still opened with O_EXCL.
 */
let tempStem: string | undefined;
let tempCount = 0;

/** A name {@link tempName} makes: pid, host tag, the process's random part and a counter. */
const TEMP_NAME = /^\.tmp-(\d{1,10})-([0-9a-f]{8})-[0-9a-z]+$/;

/** A fresh temp file name (no directory) for this process; see the module comment. */
export function tempName(): string {
  tempStem ??= `${TEMP_PREFIX}${process.pid}-${hostTag()}-${randomBytes(4).toString('hex')}`;
  tempCount += 1;
  return `${tempStem}${tempCount.toString(36)}`;
}

/** True when a process with this PID exists on this machine (EPERM: it exists, as another user). */
export function isRunning(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** What {@link judgeTemp} decides about a temp file. */
export type TempVerdict =
  /** Its writer runs (or is this process): keep it. */
  | 'live'
  /** Its writer is a process of this machine that is gone: remove it. */
  | 'dead'
  /** Not this machine's, or not our name: remove it once older than {@link ABANDONED_TEMP_AGE_MS}. */
  | 'by-age';

/**
 * Whose temp `name` is, and whether that writer still runs (see the module comment);
 * `undefined` when `name` is no temp file. At most one `kill(pid, 0)`, no file-system call.
 */
export function judgeTemp(name: string): TempVerdict | undefined {
  if (!name.startsWith(TEMP_PREFIX)) return undefined;
  const m = TEMP_NAME.exec(name);
  if (m === null || m[2] !== hostTag()) return 'by-age';
  return isRunning(Number(m[1])) ? 'live' : 'dead';
}

/**
 * True when the temp file named `name` (last modified at `mtimeMs`) was left by a writer that is
 * gone, so it may be removed (the rule of {@link judgeTemp}). Never true for a live writer's.
 */
export function isAbandonedTemp(name: string, mtimeMs: number, now = Date.now()): boolean {
  const verdict = judgeTemp(name);
  if (verdict === 'dead') return true;
  return verdict === 'by-age' && now - mtimeMs > ABANDONED_TEMP_AGE_MS;
}

/**
 * Remove from `dir` the temp files whose writer is gone ({@link isAbandonedTemp}); a live
 * writer's temp, and anything not a regular temp file, stays. One `readdir`, and an `lstat` per
 * temp found. A missing `dir` is nothing to sweep; a temp that vanishes meanwhile (its writer
 * renamed it, another sweep removed it) is skipped. Returns the paths removed.
 */
export async function sweepAbandonedTemps(dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    throw error;
  }
  const removed: string[] = [];
  for (const name of names) {
    const verdict = judgeTemp(name);
    if (verdict === undefined || verdict === 'live') continue;
    const file = path.join(dir, name);
    let st: Awaited<ReturnType<typeof lstat>>;
    try {
      st = await lstat(file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw error;
    }
    if (!st.isFile() || !isAbandonedTemp(name, st.mtimeMs)) continue;
    await rm(file, { force: true });
    removed.push(file);
  }
  return removed;
}

/** A temp path beside `target`, unique per call. */
export function tempPathFor(target: string): string {
  // Not path.join: its normalizing showed in profiles of many small files. A dirname is
  // already normal; only the root ends with a separator.
  const dir = path.dirname(target);
  const name = tempName();
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

/** The bytes of `file`, or `undefined` when there is none (any other failure throws). */
export async function readIfExists(file: string): Promise<Buffer | undefined> {
  try {
    return await readFile(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}
