/**
 * `fetch(uri, {to})` and `provcat fetch URI --to DIR`: a file or folder put where the user wants
 * it, as plain independent files, by way of the cache.
 *
 * - The data is fetched into the cache first (verified there, only what changed transferred),
 *   then copied from the cache to DIR: each file a reflink where the file system has them (Btrfs,
 *   XFS, APFS: no bytes copied, yet an independent file), else a copy. Nothing in DIR is a link
 *   to the cache, so the user may edit, move or delete files there without touching the cache.
 * - A rerun writes only what differs: a file is kept when it is a regular file of the cached
 *   copy's size and modification time (each copy is given its source's mtime, the quick check
 *   rsync makes), or of its size and bytes (compared when only the mtime differs; the file then
 *   gets the cached copy's mtime back); a file missing, or edited since in its size or mtime,
 *   is written again (an edit that keeps both is not seen). Each write goes to a temp file
 *   beside the target, renamed over it: a reader never sees half a file.
 * - `onProgress` hears of the fetch into the cache (`fetch`), then of the copies (`copy`: bytes
 *   and files written of those to write).
 * - With `delete`, files under DIR that the fetched folder lacks are removed (then the folders
 *   left empty by that).
 * - Refused before anything is written under DIR: a DIR that is not a real directory (a
 *   symbolic link, a file, a device); a DIR that is, holds or lies inside one of provcat's own
 *   folders (the cache, the embedded store's root: src/core/own-folders.ts — `delete` would
 *   remove them as files the fetched folder lacks); a DIR that holds a symbolic link or a
 *   special file anywhere (a link could lead a write outside DIR); a local folder where a fetched file goes, or a file
 *   where a fetched folder goes; a local name that differs from a fetched one only in case or
 *   Unicode form (one disk may hold them as one name). Keys no local name can hold (unnameable keys, names one
 *   case-insensitive or normalizing disk would store as one) are refused by the fetch itself,
 *   before anything is cached or written.
 *
 * @module
 */
import { constants as fsc } from 'node:fs';
import { copyFile, lstat, mkdir, open, readdir, rename, rm, rmdir, utimes } from 'node:fs/promises';
import path from 'node:path';
import type { FetchOptions, FetchResult } from '../cache/transfer.js';
import { InvalidArgument } from '../core/errors.js';
import { judgeTemp, tempPathFor } from '../core/fs-atomic.js';
import { checkOutputDirectory } from '../core/output-file.js';
import { type OwnFolder, overlapping } from '../core/own-folders.js';
import type { Uri } from '../core/uri.js';

/** Options of `ObjectStore.fetch` with `to`. */
export interface FetchToOptions extends FetchOptions {
  /** The local folder to copy the file or folder into (made when missing). */
  to: string;
  /** Also remove files under `to` that the fetched folder lacks. Default false. */
  delete?: boolean | undefined;
}

/** What `ObjectStore.fetch` with `to` returns. */
export interface FetchToResult {
  /** The local folder, absolute. */
  path: string;
  /** Files of the fetched file or folder. */
  files: number;
  /** Files written under `path` by this call (0 on a rerun with nothing changed). */
  written: number;
  /** Files removed from `path` by this call (`delete`). */
  deleted: number;
  /** Bytes written under `path` by this call. */
  bytes: number;
}

/** A file or folder found under the local folder. */
interface LocalEntry {
  dir: boolean;
  size: number;
  mtimeMs: number;
}

/** Every entry below `dir` (relative paths with `/`); refuses links and special files. */
async function scanLocal(dir: string, option: string): Promise<Map<string, LocalEntry>> {
  const found = new Map<string, LocalEntry>();
  let top: string[];
  try {
    top = await readdir(dir, { recursive: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return found;
    throw error;
  }
  for (const name of top.sort()) {
    const full = path.join(dir, name);
    const st = await lstat(full);
    const rel = name.split(path.sep).join('/');
    if (st.isSymbolicLink()) {
      throw new InvalidArgument(
        `${option} ${dir} holds a symbolic link (${rel}): fetch writes through no link and deletes none; remove it or choose another folder`,
      );
    }
    if (!st.isFile() && !st.isDirectory()) {
      throw new InvalidArgument(
        `${option} ${dir} holds ${rel}, which is neither a file nor a folder (a device, FIFO or socket)`,
      );
    }
    found.set(rel, { dir: st.isDirectory(), size: st.size, mtimeMs: st.mtimeMs });
  }
  return found;
}

/** The files of the cached copy: `rel → {size, mtimeMs}` (one file: its own name). */
async function cachedFiles(
  u: Uri,
  cached: string,
): Promise<Map<string, { src: string; size: number; mtimeMs: number }>> {
  const out = new Map<string, { src: string; size: number; mtimeMs: number }>();
  const top = await lstat(cached);
  if (top.isFile()) {
    out.set(u.name, { src: cached, size: top.size, mtimeMs: top.mtimeMs });
    return out;
  }
  for (const name of (await readdir(cached, { recursive: true })).map(String).sort()) {
    const src = path.join(cached, name);
    // A temp of this machine's cache writers (another process linking into the same copy) is
    // not a file of the folder.
    const verdict = judgeTemp(path.basename(name));
    if (verdict === 'live' || verdict === 'dead') continue;
    const st = await lstat(src);
    if (!st.isFile()) continue;
    out.set(name.split(path.sep).join('/'), { src, size: st.size, mtimeMs: st.mtimeMs });
  }
  return out;
}

/** A name as a case-insensitive, normalizing disk (APFS, NTFS) compares it. */
function folded(rel: string): string {
  return rel.normalize('NFC').toLowerCase();
}

/**
 * Refuse a fetched file whose local path, or a folder on its way, is of the other kind; and a
 * local name that differs from a fetched one only in case or Unicode normalization (`Data.csv`
 * and `data.csv`): on a disk that takes them for one, writing one would replace the other, and
 * `delete` would then remove the file just written.
 */
function checkShapes(dir: string, files: readonly string[], local: Map<string, LocalEntry>): void {
  const fetched = new Map<string, string>();
  for (const rel of files) {
    const parts = rel.split('/');
    for (let i = 1; i <= parts.length; i++) {
      const name = parts.slice(0, i).join('/');
      fetched.set(folded(name), name);
    }
  }
  for (const rel of local.keys()) {
    const twin = fetched.get(folded(rel));
    if (twin !== undefined && twin !== rel) {
      throw new InvalidArgument(
        `${path.join(dir, rel)} differs from the fetched ${twin} only in case or Unicode form; one disk may take them for one name: rename or remove it; nothing was written`,
      );
    }
  }
  for (const rel of files) {
    const here = local.get(rel);
    if (here?.dir) {
      throw new InvalidArgument(
        `${path.join(dir, rel)} is a folder where the fetched file ${rel} goes; nothing was written`,
      );
    }
    const parts = rel.split('/');
    for (let i = 1; i < parts.length; i++) {
      const folder = parts.slice(0, i).join('/');
      const at = local.get(folder);
      if (at !== undefined && !at.dir) {
        throw new InvalidArgument(
          `${path.join(dir, folder)} is a file where the fetched folder ${folder}/ goes; nothing was written`,
        );
      }
    }
  }
}

/**
 * Same bytes by the quick check: a regular file of the same size and modification time (to the
 * millisecond: `utimes` goes through a float of seconds, so the time set may differ by a few ns).
 */
function unchanged(local: LocalEntry | undefined, src: { size: number; mtimeMs: number }): boolean {
  return (
    local !== undefined &&
    !local.dir &&
    local.size === src.size &&
    Math.abs(local.mtimeMs - src.mtimeMs) < 1
  );
}

/** True when two files hold the same bytes (read side by side in 1 MiB chunks). */
async function sameBytes(a: string, b: string): Promise<boolean> {
  const [fa, fb] = await Promise.all([open(a, 'r'), open(b, 'r')]);
  try {
    const size = 1024 * 1024;
    const [ba, bb] = [Buffer.alloc(size), Buffer.alloc(size)];
    for (let at = 0; ; at += size) {
      const [ra, rb] = await Promise.all([fa.read(ba, 0, size, at), fb.read(bb, 0, size, at)]);
      if (ra.bytesRead !== rb.bytesRead) return false;
      if (ra.bytesRead === 0) return true;
      if (!ba.subarray(0, ra.bytesRead).equals(bb.subarray(0, rb.bytesRead))) return false;
    }
  } finally {
    await Promise.all([fa.close(), fb.close()]);
  }
}

/**
 * Fetch `u` into the cache with `fetch`, then make `options.to` hold exactly its files (see the
 * module comment).
 */
export async function fetchTo(
  u: Uri,
  options: FetchToOptions,
  fetch: (options: FetchOptions) => Promise<FetchResult>,
  own: readonly OwnFolder[],
): Promise<FetchToResult> {
  const option = '--to';
  const dir = path.resolve(options.to);
  checkOutputDirectory(dir, option);
  const clash = overlapping(dir, own, ['is', 'holds', 'is inside']);
  if (clash !== undefined) {
    throw new InvalidArgument(
      `${option} ${options.to} ${clash.how} ${clash.folder.what} (${clash.folder.path}), whose files are provcat's: copy out to a folder apart from it; nothing was written`,
    );
  }
  // Refusals that need no store call come first: a link or special file under DIR.
  await scanLocal(dir, option);
  const fetched = await fetch(options);
  const files = await cachedFiles(u, fetched.path);
  // Scanned again: the fetch may have taken a while.
  checkOutputDirectory(dir, option);
  const local = await scanLocal(dir, option);
  checkShapes(dir, [...files.keys()], local);
  let written = 0;
  let bytes = 0;
  await mkdir(dir, { recursive: true });
  const todo: [string, { src: string; size: number; mtimeMs: number }][] = [];
  for (const [rel, src] of files) {
    const here = local.get(rel);
    if (unchanged(here, src)) continue;
    const target = path.join(dir, ...rel.split('/'));
    // Same size, another mtime (the cache linked the version again, or a copy was touched):
    // compared byte for byte; the same bytes only get the cache's mtime back.
    if (
      here !== undefined &&
      !here.dir &&
      here.size === src.size &&
      (await sameBytes(src.src, target))
    ) {
      const seconds = src.mtimeMs / 1000;
      await utimes(target, seconds, seconds);
      continue;
    }
    todo.push([rel, src]);
  }
  const totalBytes = todo.reduce((n, [, src]) => n + src.size, 0);
  const report = (): void =>
    options.onProgress?.({
      operation: 'copy',
      uri: u.toString(),
      bytes,
      totalBytes,
      files: written,
      totalFiles: todo.length,
    });
  for (const [rel, src] of todo) {
    options.signal?.throwIfAborted();
    const target = path.join(dir, ...rel.split('/'));
    await mkdir(path.dirname(target), { recursive: true });
    const temp = tempPathFor(target);
    try {
      // A reflink where the file system has one, else a plain copy: never a link to the cache.
      await copyFile(src.src, temp, fsc.COPYFILE_FICLONE);
      const seconds = src.mtimeMs / 1000;
      await utimes(temp, seconds, seconds);
      await rename(temp, target);
    } catch (error) {
      await rm(temp, { force: true });
      throw error;
    }
    written++;
    bytes += src.size;
    report();
  }
  let deleted = 0;
  if (options.delete === true) {
    const keep = new Set<string>();
    for (const rel of files.keys()) {
      const parts = rel.split('/');
      for (let i = 1; i <= parts.length; i++) keep.add(parts.slice(0, i).join('/'));
    }
    // Deepest first, so a folder is emptied before it is looked at.
    const gone = [...local.entries()].filter(([rel]) => !keep.has(rel)).reverse();
    for (const [rel, entry] of gone) {
      const full = path.join(dir, ...rel.split('/'));
      if (entry.dir) {
        await rmdir(full).catch((error: NodeJS.ErrnoException) => {
          // A folder still holding something kept (nothing is, by construction) stays.
          if (error.code !== 'ENOTEMPTY') throw error;
        });
      } else {
        await rm(full);
        deleted++;
      }
    }
  }
  return { path: dir, files: files.size, written, deleted, bytes };
}
