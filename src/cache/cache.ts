/**
 * The local cache: complete-or-absent files keyed by URI and version, shared by every process
 * that uses the same root.
 *
 * Layout (version 1; see docs/cache.md):
 *
 * ```
 * <root>/v1/
 *   blobs/<scheme>/<bucket>/<aa>/<sha256(key, version)>   the bytes of one version; read-only
 *   blobs/<scheme>/<bucket>/.tmp-…                         a blob being downloaded (any version)
 *   tree/<scheme>/<bucket>/<key...>                        folder fetches: a real directory tree
 *   file/<scheme>/<bucket>/<h>/<name>                      single-file fetches (h: key hash)
 *   pin/<scheme>/<bucket>/<h>/<name>                       a file at ?at=version: (h: key+version)
 *   commit/<scheme>/<bucket>/<commit id>/<key...>          files at ?at=commit:
 *   state/<h>.json                                         what a view holds; `done` marks it complete
 *   locks/<h>                                              one fetch of a view at a time
 *   meta/<scheme>/<bucket>/<h>.json                        size/etag of a pinned version, for offline stat
 *   s3-routes/<fingerprint>.json                           S3 lean-path routes learned from the SDK (drivers/s3/route-store.ts)
 * <root>/commits/<scheme>/<bucket>/<id>.json             verified commit objects
 * ```
 *
 * Bytes are downloaded once per version into `blobs/` (temp file, fsync, rename: a killed
 * download leaves only a `.tmp-` file that nothing reads) and every view is a hard link to its
 * blob, so many commits of one folder share bytes on disk and every returned path is a real file.
 * A view records in its state file the version, inode, size and mtime of each file it linked;
 * a refetch compares that with one listing and one `lstat` per file, never a HEAD per file, and
 * reuses a file (or its blob) only while they are unchanged.
 *
 * A blob's temp is written in its bucket's blob folder, not in the blob's `<aa>` shard, and
 * renamed into the shard when complete (one file system, so the rename is as atomic). A fetch
 * killed mid-download leaves its temp under the name of the version it was downloading; if the
 * object changes before the rerun, the rerun downloads another version into another shard, and a
 * sweep of the shards it writes would never see the temp. With every blob temp of a bucket in one
 * folder, the rerun's one `readdir` of it ({@link Cache.sweepBlobTemps}) finds whatever the
 * killed fetch was downloading, whichever versions the store holds now; remembering what a fetch
 * downloads (a journal written before each GET) would cost a write per file for the same result.
 * The view's state folder is swept by the same rerun ({@link Cache.writeState}); both sweeps run
 * only when a fetch takes over from an interrupted one, so a normal fetch pays nothing.
 *
 * Key names are checked before any path is built: every segment is URI-nameable (no `..`, no
 * empty segment, no NUL), so no key can produce a path outside the root. Nor can a link planted
 * in the cache: every directory a fetch writes into or reuses from is checked with `lstat` once
 * per fetch ({@link Cache.isRealDir}, {@link Cache.ensureDir}), and reused files are `lstat`ed,
 * never followed.
 *
 * Cost per file matters: a folder fetch of 1,000 small objects makes about 8,000 file-system
 * calls. Through libuv's thread pool each costs two thread handoffs, about 0.1–0.3 ms of CPU on
 * small VMs, against ~10 µs when made directly. So the short metadata calls of a fetch (lstat
 * of a blob, mkdir, link, lstat) and the writes of small bodies (≤ 64 KiB) are direct,
 * synchronous calls; only fsync, which waits on the disk, and the writes of big bodies go
 * through the pool. The event loop blocks for microseconds at a time, never for a disk flush.
 *
 * The class below is the cache's one entry point; each job is a file of its own beside it:
 * - cache-layout.ts: where everything lives, and the key checks that keep paths in the root;
 * - safe-dirs.ts: link safety (directories checked or made real once per fetch, `linkInto`);
 * - view-state.ts: what a view holds (its state file, the record of each linked file);
 * - version-meta.ts: the metadata of pinned versions, for offline `stat`;
 * - view-lock.ts: one fetch of a view at a time;
 * - install-blob.ts: the install paths, one per shape of body, sealed the same way;
 * - cache-sweep.ts: prune, temp sweeps, garbage collection, info.
 *
 * @module
 */

import type { Stats } from 'node:fs';
import path from 'node:path';
import { fsyncDir } from '../core/fs-atomic.js';
import { CacheLayout, defaultCacheRoot } from './cache-layout.js';
import { type CacheInfo, cacheInfo, collectGarbage, prune, sweepTemps } from './cache-sweep.js';
import type { ContentDigest } from './content-digest.js';
import {
  checkedBlob,
  type InstallableBody,
  type InstallOptions,
  installBlob,
} from './install-blob.js';
import { linkInto, SafeDirs } from './safe-dirs.js';
import { readVersionMeta, type VersionMeta, writeVersionMeta } from './version-meta.js';
import { holdViewLock, type ViewLock } from './view-lock.js';
import {
  clearViewState,
  type FileRecord,
  readViewState,
  type ViewState,
  writeViewState,
} from './view-state.js';

export { defaultCacheRoot, hashOf } from './cache-layout.js';
export type { CacheInfo } from './cache-sweep.js';
export {
  type InstallableBody,
  type InstallOptions,
  SMALL_BLOB_BYTES,
  wholeUpToFor,
} from './install-blob.js';
export { lstatOrUndefined } from './safe-dirs.js';
export type { VersionMeta } from './version-meta.js';
export { type FileRecord, matchesRecord, recordOf, type ViewState } from './view-state.js';

/** Options of {@link Cache}. */
export interface CacheOptions {
  /** The cache root. Default: `PROVCAT_CACHE_DIR`, else env-paths('provcat').cache. */
  root?: string | undefined;
}

/** The local cache shared by every store (and every process) using the same root. */
export class Cache {
  /** The absolute root directory. */
  readonly root: string;
  /** Where everything lives below the root. */
  private readonly layout: CacheLayout;
  /** The directories this fetch made or checked real, and swept (link safety). */
  private readonly dirs: SafeDirs;

  constructor(options: CacheOptions = {}) {
    this.root = path.resolve(options.root ?? defaultCacheRoot());
    this.layout = new CacheLayout(this.root);
    this.dirs = new SafeDirs(this.root, this.layout.base);
  }

  // --- layout -----------------------------------------------------------------------------

  /**
   * Where a verified commit object is kept once read: `commits/<scheme>/<bucket>/<id>.json`.
   * Write it with writeFileAtomic (src/core/fs-atomic.ts) and re-hash it on every read.
   */
  commitPath(scheme: string, bucket: string, id: string): string {
    return this.layout.commitPath(scheme, bucket, id);
  }

  /** The blob holding `key` at `identity` (a version ID, or `v:` + a version). */
  blobPath(scheme: string, bucket: string, key: string, identity: string): string {
    return this.layout.blobPath(scheme, bucket, key, identity);
  }

  /** The directory of a folder fetch of `folderKey` (`''` for the bucket, else `a/b/`). */
  treePath(scheme: string, bucket: string, folderKey: string): string {
    return this.layout.treePath(scheme, bucket, folderKey);
  }

  /** Where a single-file fetch of `key` lives (stable across versions). */
  filePath(scheme: string, bucket: string, key: string): string {
    return this.layout.filePath(scheme, bucket, key);
  }

  /** Where `key` at `?at=version:versionId` lives (immutable). */
  pinPath(scheme: string, bucket: string, key: string, versionId: string): string {
    return this.layout.pinPath(scheme, bucket, key, versionId);
  }

  /** A commit's copy of `key` (a file key, or a folder prefix ending `/`, or `` for all). */
  commitTreePath(scheme: string, bucket: string, commitId: string, key: string): string {
    return this.layout.commitTreePath(scheme, bucket, commitId, key);
  }

  /** The state file of a view named by `viewId` (a URI string). */
  statePath(viewId: string): string {
    return this.layout.statePath(viewId);
  }

  // --- view state, version metadata, locks ------------------------------------------------

  /** Read a view's state, or `undefined` when there is none (or it is unreadable). */
  async readState(viewId: string): Promise<ViewState | undefined> {
    return readViewState(this.layout, this.dirs, viewId);
  }

  /**
   * Write a view's state atomically. With `sweep` (a fetch that takes over from an interrupted
   * one: a stale lock, a state not marked done), the temps gone writers left in the state folder
   * are removed first (see {@link sweepTemps}): a fetch killed while it wrote its state leaves one
   * there, in a folder that holds every view's state. A live writer's temp stays.
   */
  async writeState(state: ViewState, { sweep = false }: { sweep?: boolean } = {}): Promise<void> {
    await writeViewState(this.layout, this.dirs, state, sweep);
  }

  /** Remove a view's state (its `done` mark) before changing the view. */
  async clearState(viewId: string): Promise<void> {
    await clearViewState(this.layout, viewId);
  }

  /** Remember what a pinned version is (size, etag), so `stat` at it works offline. */
  async writeVersionMeta(scheme: string, bucket: string, meta: VersionMeta): Promise<void> {
    await writeVersionMeta(this.layout, this.dirs, scheme, bucket, meta);
  }

  /** What {@link writeVersionMeta} recorded, or `undefined`. */
  async readVersionMeta(
    scheme: string,
    bucket: string,
    key: string,
    versionId: string,
  ): Promise<VersionMeta | undefined> {
    return readVersionMeta(this.layout, this.dirs, { scheme, bucket, key, versionId });
  }

  /**
   * Hold the lock of a view while `fn` runs (see src/cache/view-lock.ts). The lock is a
   * directory whose mtime the holder refreshes; a holder that was killed stops refreshing and its
   * lock goes stale after a few seconds, so a crashed fetch never blocks the cache for good.
   * `fn` gets the {@link ViewLock}, and must `check()` it right before each write to the view or
   * its state: a holder that was stopped and lost its lock then stops with a `StoreError`
   * instead of overwriting the newer fetch's work.
   */
  async withLock<T>(viewId: string, fn: (lock: ViewLock) => Promise<T>): Promise<T> {
    const target = this.layout.lockPath(viewId);
    this.dirs.makeDir(path.dirname(target));
    const { lock, release } = await holdViewLock(target, viewId);
    try {
      return await fn(lock);
    } finally {
      await release();
    }
  }

  // --- blobs and views --------------------------------------------------------------------

  /**
   * Download a GET's body into the blob for (`key`, `identity`): temp file, fsync, rename. The
   * blob appears only complete; `options.expectedSize` guards against a body cut short. A
   * result with `bytes` (read whole) is written from them, one with `pipeTo` (reused read
   * buffers) from that, one with a `file` (a driver's local file) copied by the kernel, else
   * from `body`. With `options.digest`, the bytes are hashed as they are written (a kernel copy:
   * read back from the copy once it is complete) and the blob appears only when they match
   * (else `ObjectIntegrityError('DigestMismatch')`, and nothing is left). Returns the blob path.
   * See src/cache/install-blob.ts.
   */
  async installBlob(blob: string, res: InstallableBody, options: InstallOptions): Promise<string> {
    return installBlob(this.dirs, blob, res, options);
  }

  /**
   * True when the blob can be linked into a view as the bytes of a version of `size` bytes: a
   * regular file of that size (never a link: blobs only ever appear complete) in a real blob
   * directory, and
   * - when `seen` (the record of a view file being replaced) names this very inode: unchanged
   *   since (same size and mtime) — else it was edited in place through the view, and is bad;
   * - otherwise, when `digest` is given: its bytes hash to it (one read of the file).
   *
   * A blob that fails is removed, so it is downloaded again; one without a digest to check is
   * trusted on its size. One `lstat` when nothing is there.
   */
  async checkedBlob(
    blob: string,
    size: number,
    digest?: ContentDigest,
    seen?: FileRecord,
  ): Promise<boolean> {
    return checkedBlob(this.dirs, blob, size, digest, seen);
  }

  /**
   * Make `dest` a link to `blob`, atomically replacing what was there (link to a temp name,
   * rename over). Falls back to a copy where hard links are not allowed. Returns the `lstat`
   * of `dest` (for its {@link FileRecord}).
   */
  async linkInto(blob: string, dest: string): Promise<Stats> {
    return linkInto(this.dirs, blob, dest);
  }

  // --- link safety ------------------------------------------------------------------------

  /**
   * Forget which directories were checked: the next write or reuse below the root checks each
   * directory it goes through again (once). Called when a fetch starts, so a directory replaced
   * by a link since an earlier fetch of a long-lived process is never written through.
   */
  forgetDirs(): void {
    this.dirs.forget();
  }

  /**
   * True when `dir` and every directory between it and the layout root (`<root>/v1`, itself
   * included) is a real directory: no component is a symlink, none is missing. One `lstat` per
   * directory not yet checked by this fetch. Use before trusting a file found below `dir`.
   */
  isRealDir(dir: string): boolean {
    return this.dirs.isRealDir(dir);
  }

  /**
   * mkdir -p below the layout root, safely (see `SafeDirs.makeDir` in src/cache/safe-dirs.ts):
   * no component is a link when it returns.
   */
  async ensureDir(dir: string): Promise<void> {
    this.dirs.makeDir(dir);
  }

  /** Make `dir` durable after renames into it. */
  async syncDir(dir: string): Promise<void> {
    await fsyncDir(dir).catch(() => {});
  }

  // --- prune, sweep, collect, info --------------------------------------------------------

  /**
   * Delete every file below `dir` that `keep` does not name (relative paths with `/`), and the
   * folders left empty. Leftover temp files of killed fetches go too. Returns how many went.
   */
  async prune(dir: string, keep: Set<string>): Promise<number> {
    return prune(this.dirs, dir, keep);
  }

  /**
   * Remove the temp files of gone writers from `dir` (see `isAbandonedTemp`), once per fetch:
   * what a fetch killed while it wrote there left. One `readdir` of the directory; run only by a
   * fetch that takes over from an interrupted one.
   */
  sweepTemps(dir: string): void {
    sweepTemps(this.dirs, dir);
  }

  /**
   * Remove the temps of gone writers (see `isAbandonedTemp`) from the folder where every blob of
   * the bucket is downloaded (`blobTempPath` in src/cache/cache-layout.ts), once per fetch: what
   * a killed fetch was downloading, of any version of any key. One `readdir`; run by a fetch
   * that takes over from an interrupted one, never touching a live writer's temp.
   */
  sweepBlobTemps(scheme: string, bucket: string): void {
    sweepTemps(this.dirs, this.layout.blobRoot(scheme, bucket));
  }

  /** Count the blobs and their bytes. */
  async info(): Promise<CacheInfo> {
    return cacheInfo(this.layout, this.dirs);
  }

  /**
   * Free what no view uses: blobs that no fetched file, folder, pin or commit links to any more
   * (their link count is 1) and older than `minAgeMs` (default one hour, so a fetch running now
   * never loses a blob it is about to link), and, anywhere in the cache, temp files whose writer
   * is gone (`isAbandonedTemp` in src/core/fs-atomic.ts: a dead pid on this host, or a day old),
   * whatever their age; a live writer's temp stays. Everything a view holds stays; a collected
   * version is downloaded again if needed. No link is followed.
   */
  async collect(minAgeMs = 3_600_000): Promise<{ files: number; bytes: number }> {
    return collectGarbage(this.layout, this.dirs, minAgeMs);
  }
}
