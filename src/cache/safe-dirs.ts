/**
 * Link safety: the cache never writes through, or trusts a file below, a symlink planted in it.
 *
 * Every directory a fetch writes into or reuses from is checked with `lstat` once per fetch
 * ({@link SafeDirs.isRealDir}, {@link SafeDirs.makeDir}); whatever is in the way of a directory
 * the cache makes and is not a real one is removed (the link itself, never what it points to).
 * Reused files are `lstat`ed, never followed. Views are hard links to their blobs
 * ({@link linkInto}), so every returned path is a real file.
 *
 * The calls are direct, synchronous system calls (an `lstat`, a `mkdir`, a `link`): through
 * libuv's thread pool each would cost two thread handoffs, far more than the call itself (see
 * the module comment of src/cache/cache.ts).
 *
 * @module
 */
import { linkSync, lstatSync, mkdirSync, rmSync, type Stats } from 'node:fs';
import { copyFile, link, lstat, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { StoreError } from '../core/errors.js';
import { tempPathFor } from '../core/fs-atomic.js';

/**
 * The directories of one cache root that this fetch made or checked real (no symlink on the
 * way), and those it swept of temps, remembered until {@link forget}.
 */
export class SafeDirs {
  /**
   * Directories made or checked real since the last {@link forget}: see {@link isRealDir}
   * and {@link makeDir}.
   */
  private readonly known = new Set<string>();
  /** Directories swept of abandoned temps since the last {@link forget}. */
  private readonly swept = new Set<string>();

  /**
   * @param root the cache root, made when the layout root is.
   * @param base the layout root (`<root>/v1`): the top of every check.
   */
  constructor(
    private readonly root: string,
    private readonly base: string,
  ) {}

  /**
   * Forget which directories were checked and swept: the next write or reuse below the root
   * checks each directory it goes through again (once). Called when a fetch starts, so a
   * directory replaced by a link since an earlier fetch of a long-lived process is never
   * written through.
   */
  forget(): void {
    this.known.clear();
    this.swept.clear();
  }

  /** Forget one directory (it was removed). */
  forgetDir(dir: string): void {
    this.known.delete(dir);
  }

  /** True when `dir` was swept of temps since the last {@link forget} (see {@link markSwept}). */
  wasSwept(dir: string): boolean {
    return this.swept.has(dir);
  }

  /** Note that `dir` was swept of temps: a sweep runs once per fetch. */
  markSwept(dir: string): void {
    this.swept.add(dir);
  }

  /**
   * True when `dir` and every directory between it and the layout root (`<root>/v1`, itself
   * included) is a real directory: no component is a symlink, none is missing. One `lstat` per
   * directory not yet checked by this fetch. Use before trusting a file found below `dir`.
   */
  isRealDir(dir: string): boolean {
    if (this.known.has(dir)) return true;
    if (dir !== this.base) {
      const parent = path.dirname(dir);
      if (!parent.startsWith(this.base) || parent === dir || !this.isRealDir(parent)) return false;
    }
    if (!lstatOrUndefined(dir)?.isDirectory()) return false;
    this.remember(dir);
    return true;
  }

  /**
   * Make `dir` a real directory, its parents first (down from `<root>/v1`), each directory once
   * per fetch however many files want it. Direct system calls: a `mkdir`, and an `lstat` when
   * something is there already. Whatever is in the way and is not a real directory — a symlink
   * planted in the cache, a file of an object since replaced by a folder — is removed (the link
   * itself, never what it points to) and a directory made in its place, so nothing is ever
   * written through a link.
   */
  makeDir(dir: string): void {
    if (this.known.has(dir)) return;
    const parent = path.dirname(dir);
    if (dir === this.base) mkdirSync(this.root, { recursive: true });
    else if (parent.startsWith(this.base) && parent !== dir) this.makeDir(parent);
    this.makeLevel(dir);
  }

  /**
   * Run `fn`, which creates a name in `dir`, making `dir` first unless this fetch made or
   * checked it already (a folder fetch would otherwise repeat the checks once per file). If the
   * directory went away since (ENOENT, or ENOTDIR for a file in the way), it is made again and
   * `fn` retried.
   */
  async inDir<T>(dir: string, fn: () => Promise<T>): Promise<T> {
    if (!this.known.has(dir)) {
      this.makeDir(dir);
      return fn();
    }
    try {
      return await fn();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error;
      this.known.clear();
      this.makeDir(dir);
      return fn();
    }
  }

  /** One level of {@link makeDir}: its parent is a real directory already. */
  private makeLevel(dir: string): void {
    try {
      mkdirSync(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (!lstatSync(dir).isDirectory()) {
        rmSync(dir, { force: true });
        mkdirSync(dir);
      }
    }
    this.remember(dir);
  }

  /** Note that `dir` is a real directory (bounded: a huge tree only costs the checks again). */
  private remember(dir: string): void {
    if (this.known.size >= 10_000) this.known.clear();
    this.known.add(dir);
  }
}

/**
 * Make `dest` a link to `blob`, atomically replacing what was there (link to a temp name,
 * rename over), its directory made safely by `dirs` ({@link SafeDirs.inDir}). Falls back to a
 * copy where hard links are not allowed. Returns the `lstat` of `dest` (for its `FileRecord`).
 */
export async function linkInto(dirs: SafeDirs, blob: string, dest: string): Promise<Stats> {
  try {
    await dirs.inDir(path.dirname(dest), async () => linkSync(blob, dest));
    return lstatSync(dest);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'EEXIST' && code !== 'EXDEV' && code !== 'EPERM' && code !== 'EMLINK') {
      throw error;
    }
  }
  const temp = tempPathFor(dest);
  try {
    await link(blob, temp);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'EXDEV' && code !== 'EPERM' && code !== 'EMLINK') throw error;
    await copyFile(blob, temp);
  }
  try {
    await rename(temp, dest);
    // rename(2) does nothing when both names are links to one inode (dest already held this
    // blob): the temp name is then still there.
    await rm(temp, { force: true });
  } catch (error) {
    await rm(temp, { force: true });
    if ((error as NodeJS.ErrnoException).code === 'EISDIR') {
      throw new StoreError(`a folder is in the way of file ${dest} in the cache`, {
        cause: error,
      });
    }
    throw error;
  }
  return lstat(dest);
}

/**
 * `lstat` (never following a link), or `undefined` when nothing is there: a missing name, or a
 * name below something that is not a directory (ENOTDIR).
 */
export function lstatOrUndefined(p: string): Stats | undefined {
  try {
    return lstatSync(p, { throwIfNoEntry: false });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw error;
  }
}
