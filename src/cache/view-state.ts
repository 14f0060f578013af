/**
 * What a view (a fetched file or folder, a pinned or commit copy) holds: its state file, read
 * and written atomically, and the {@link FileRecord} of each file it linked.
 *
 * A view records the version, inode, size and mtime of each file it linked; a refetch compares
 * that with one listing and one `lstat` per file, never a HEAD per file, and reuses a file (or
 * its blob) only while they are unchanged. The state's `done` marks the view complete: it is
 * cleared before the view changes and written last.
 *
 * @module
 */
import { constants as fsc, type Stats } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { writeFileAtomic } from '../core/fs-atomic.js';
import type { CacheLayout } from './cache-layout.js';
import { sweepTemps } from './cache-sweep.js';
import type { SafeDirs } from './safe-dirs.js';

/**
 * One file a view linked: its version, and the inode, size and mtime (ms) it had when linked.
 * The file is reused only while all of these are unchanged (an mtime is missing from states
 * written before it was recorded, and is then not compared).
 */
export type FileRecord = [version: string, ino: number, size: number, mtimeMs?: number];

/** What a view (a fetched file or folder, a pinned or commit copy) holds, per path. */
export interface ViewState {
  /** The URI the view was fetched for. */
  uri: string;
  /** True once every file is current and every deleted object is gone. */
  done: boolean;
  /** Per relative path (a commit copy: per key; a single file: `''`). */
  files: Record<string, FileRecord>;
}

/** The {@link FileRecord} of a file a view linked, from its `lstat`. */
export function recordOf(version: string, st: Stats): FileRecord {
  return [version, st.ino, st.size, st.mtimeMs];
}

/**
 * True when `st` (an `lstat`) is still the file `rec` recorded: a regular file with the same
 * inode, size and (when recorded) mtime. An edit in place changes the mtime; a truncation the
 * size; a replacement the inode; a link is not a regular file.
 */
export function matchesRecord(st: Stats | undefined, rec: FileRecord): boolean {
  return (
    st?.isFile() === true &&
    st.ino === rec[1] &&
    st.size === rec[2] &&
    (rec[3] === undefined || st.mtimeMs === rec[3])
  );
}

/** Read a view's state, or `undefined` when there is none (or it is unreadable). */
export async function readViewState(
  layout: CacheLayout,
  dirs: SafeDirs,
  viewId: string,
): Promise<ViewState | undefined> {
  const file = layout.statePath(viewId);
  // A state file is trusted only as a regular file in a real state folder (no link followed).
  if (!dirs.isRealDir(path.dirname(file))) return undefined;
  let text: string;
  try {
    text = await readFile(file, { encoding: 'utf8', flag: fsc.O_RDONLY | fsc.O_NOFOLLOW });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP') return undefined;
    throw error;
  }
  try {
    const state = JSON.parse(text) as ViewState;
    return state.uri === viewId && typeof state.files === 'object' ? state : undefined;
  } catch {
    // A state file is written atomically, so a torn one cannot exist; an unparsable one was
    // written by something else and is ignored (the view is then refetched, never trusted).
    return undefined;
  }
}

/**
 * Write a view's state atomically. With `sweep` (a fetch that takes over from an interrupted
 * one), the temps gone writers left in the state folder are removed first (see
 * `sweepTemps` in src/cache/cache-sweep.ts); a live writer's temp stays.
 */
export async function writeViewState(
  layout: CacheLayout,
  dirs: SafeDirs,
  state: ViewState,
  sweep: boolean,
): Promise<void> {
  const file = layout.statePath(state.uri);
  dirs.makeDir(path.dirname(file));
  if (sweep) sweepTemps(dirs, path.dirname(file));
  await writeFileAtomic(file, JSON.stringify(state));
}

/** Remove a view's state (its `done` mark) before changing the view. */
export async function clearViewState(layout: CacheLayout, viewId: string): Promise<void> {
  await rm(layout.statePath(viewId), { force: true });
}
