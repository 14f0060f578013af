/**
 * What frees space in a cache root: {@link prune} of a view's files no longer listed,
 * {@link sweepTemps} of what killed fetches left, {@link collectGarbage} of blobs no view links
 * to, and {@link cacheInfo}, the count behind `provcat cache info`. None follows a link: a
 * folder of the cache replaced by a link to one outside never loses that folder's files.
 *
 * @module
 */
import { readdirSync, rmSync } from 'node:fs';
import { readdir, rm, rmdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { isAbandonedTemp, TEMP_PREFIX } from '../core/fs-atomic.js';
import type { CacheLayout } from './cache-layout.js';
import { lstatOrUndefined, type SafeDirs } from './safe-dirs.js';

/** Summary of the cache, for `provcat cache info`. */
export interface CacheInfo {
  root: string;
  blobs: number;
  bytes: number;
}

/**
 * Delete every file below `dir` that `keep` does not name (relative paths with `/`), and the
 * folders left empty. Leftover temp files of killed fetches go too. Returns how many went.
 */
export async function prune(dirs: SafeDirs, dir: string, keep: Set<string>): Promise<number> {
  // Never walk through a link: a copy replaced by a link to a folder outside the cache must
  // not lose that folder's files. (Below `dir`, a recursive readdir never follows links.)
  if (!dirs.isRealDir(dir)) return 0;
  let entries: { name: string; parentPath: string; isDirectory(): boolean }[];
  try {
    entries = (await readdir(dir, { recursive: true, withFileTypes: true })) as never;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
  let removed = 0;
  const folders: string[] = [];
  const base = path.join(dir, path.sep);
  // Each folder's path with its separator, joined once for all its entries.
  const parents = new Map<string, string>();
  for (const e of entries) {
    let parent = parents.get(e.parentPath);
    if (parent === undefined) {
      parent = path.join(e.parentPath, path.sep);
      parents.set(e.parentPath, parent);
    }
    // readdir gives normalized parent paths below `dir`: slicing is path.relative, cheaper.
    const full = `${parent}${e.name}`;
    if (e.isDirectory()) {
      folders.push(full);
      continue;
    }
    const own = full.slice(base.length);
    const rel = path.sep === '/' ? own : own.split(path.sep).join('/');
    if (e.name.startsWith(TEMP_PREFIX)) {
      // A temp is a write in progress (another process may be about to rename it into
      // place) unless its writer is gone.
      if (abandonedTemp(full, e.name)) {
        rmSync(full, { force: true });
        removed++;
      }
      continue;
    }
    if (!keep.has(rel)) {
      await rm(full, { force: true });
      removed++;
    }
  }
  // Deepest first, so parents empty out after their children.
  folders.sort((a, b) => b.length - a.length);
  for (const d of folders) {
    await rmdir(d).then(
      () => dirs.forgetDir(d),
      () => {},
    );
  }
  return removed;
}

/** Count the blobs and their bytes. */
export async function cacheInfo(layout: CacheLayout, dirs: SafeDirs): Promise<CacheInfo> {
  const dir = path.join(layout.base, 'blobs');
  let blobs = 0;
  let bytes = 0;
  let entries: { name: string; parentPath: string; isFile(): boolean }[] = [];
  dirs.forget();
  if (dirs.isRealDir(dir)) {
    try {
      entries = (await readdir(dir, { recursive: true, withFileTypes: true })) as never;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  for (const e of entries) {
    if (!e.isFile() || e.name.startsWith(TEMP_PREFIX)) continue;
    blobs++;
    bytes += (await stat(path.join(e.parentPath, e.name))).size;
  }
  return { root: layout.root, blobs, bytes };
}

/**
 * Free what no view uses: blobs that no view links to any more (their link count is 1) and
 * older than `minAgeMs`, and, anywhere in the cache, temp files whose writer is gone
 * (`isAbandonedTemp` in src/core/fs-atomic.ts), whatever their age. See `Cache.collect`.
 */
export async function collectGarbage(
  layout: CacheLayout,
  dirs: SafeDirs,
  minAgeMs: number,
): Promise<{ files: number; bytes: number }> {
  dirs.forget();
  const blobs = path.join(layout.base, 'blobs', path.sep);
  let files = 0;
  let bytes = 0;
  const cutoff = Date.now() - minAgeMs;
  for (const dir of [layout.base, path.join(layout.root, 'commits')]) {
    let entries: { name: string; parentPath: string; isFile(): boolean }[] = [];
    // Never walk through a link (a folder of the cache replaced by a link to one outside).
    if (
      dir === layout.base ? !dirs.isRealDir(dir) : lstatOrUndefined(dir)?.isDirectory() !== true
    ) {
      continue;
    }
    try {
      entries = (await readdir(dir, { recursive: true, withFileTypes: true })) as never;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    for (const e of entries) {
      if (!e.isFile()) continue;
      const temp = e.name.startsWith(TEMP_PREFIX);
      const full = path.join(e.parentPath, e.name);
      if (!temp && !full.startsWith(blobs)) continue;
      const st = lstatOrUndefined(full);
      if (!st?.isFile()) continue;
      const garbage = temp
        ? isAbandonedTemp(e.name, st.mtimeMs)
        : st.nlink === 1 && st.mtimeMs <= cutoff;
      if (garbage) {
        rmSync(full, { force: true });
        files++;
        bytes += st.size;
      }
    }
  }
  return { files, bytes };
}

/**
 * Remove the temp files of gone writers from `dir` (see `isAbandonedTemp`), once per fetch:
 * what a fetch killed while it wrote there left. One `readdir` of the directory; run only by a
 * fetch that takes over from an interrupted one.
 */
export function sweepTemps(dirs: SafeDirs, dir: string): void {
  if (dirs.wasSwept(dir) || !dirs.isRealDir(dir)) return;
  dirs.markSwept(dir);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  for (const name of names) {
    if (name.startsWith(TEMP_PREFIX)) {
      const full = path.join(dir, name);
      if (abandonedTemp(full, name)) rmSync(full, { force: true });
    }
  }
}

/** True when the temp file `full` (named `name`) is a regular file left by a gone writer. */
function abandonedTemp(full: string, name: string): boolean {
  const st = lstatOrUndefined(full);
  return st?.isFile() === true && isAbandonedTemp(name, st.mtimeMs);
}
