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
 * @module
 */
import {
  closeSync,
  copyFileSync,
  fchmodSync,
  constants as fsc,
  fstatSync,
  fsync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  type Stats,
  writevSync,
} from 'node:fs';
import {
  copyFile,
  link,
  lstat,
  open,
  readdir,
  readFile,
  rename,
  rm,
  rmdir,
  stat,
} from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import envPaths from 'env-paths';
import type { GetResult } from '../contract/primitives.js';
import { sha256Hex } from '../core/digest.js';
import { StoreError, UriError } from '../core/errors.js';
import {
  fsyncDir,
  isAbandonedTemp,
  TEMP_PREFIX,
  tempName,
  tempPathFor,
  writeFileAtomic,
} from '../core/fs-atomic.js';
import { segmentProblem } from '../core/uri.js';
import { FileSink } from '../net/file-sink.js';
import {
  type ContentDigest,
  checkDigest,
  digestOf,
  type ExpectedContent,
  fdDigest,
  fileDigest,
  hasherFor,
} from './content-digest.js';
import { holdViewLock, type ViewLock } from './view-lock.js';

/** Options of {@link Cache}. */
export interface CacheOptions {
  /** The cache root. Default: `PROVCAT_CACHE_DIR`, else env-paths('provcat').cache. */
  root?: string | undefined;
}

/** The default cache root: `PROVCAT_CACHE_DIR`, else env-paths('provcat').cache. */
export function defaultCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.PROVCAT_CACHE_DIR;
  return path.resolve(
    fromEnv && fromEnv !== '' ? fromEnv : envPaths('provcat', { suffix: '' }).cache,
  );
}

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

/** The metadata of one pinned version, kept for offline `stat` and to check its blob. */
export interface VersionMeta {
  key: string;
  versionId: string;
  size: number;
  etag?: string | undefined;
  /** The SHA-256 recorded with the object, when its GET reported one. */
  sha256?: string | undefined;
  /** Its GET said the ETag is not the bytes' MD5 (`GetResult.etagNotMd5`). */
  etagNotMd5?: boolean | undefined;
}

/** Summary of the cache, for `provcat cache info`. */
export interface CacheInfo {
  root: string;
  blobs: number;
  bytes: number;
}

const LAYOUT = 'v1';

/**
 * Bodies up to this size are gathered in memory and written with direct system calls
 * (see {@link Cache.installBlob}); fetches ask drivers for them whole (`GetOptions.wholeUpTo`).
 */
const SMALL_BLOB_BYTES = 64 * 1024;

/**
 * The `GetOptions.wholeUpTo` a fetch passes for an object the listing or a commit says is
 * `size` bytes: small ones are asked for whole, bigger ones stream.
 */
export function wholeUpToFor(size: number): number | undefined {
  return size <= SMALL_BLOB_BYTES ? SMALL_BLOB_BYTES : undefined;
}
/** Downloads are written in batches of about this many bytes (one writev each). */
const WRITE_BATCH_BYTES = 1024 * 1024;
/** A download starts the disk writing (fdatasync) after every this many bytes. */
const WRITEBACK_BYTES = 64 * 1024 * 1024;
/** sha256 hex of the parts joined by NUL (several per fetched file: blob, view, state paths). */
export function hashOf(...parts: string[]): string {
  return sha256Hex(parts.join('\0'));
}

/** The local cache shared by every store (and every process) using the same root. */
export class Cache {
  /** The absolute root directory. */
  readonly root: string;
  private readonly base: string;
  /**
   * Directories made or checked real (no symlink on the way) since the last
   * {@link forgetDirs}: see {@link isRealDir} and {@link makeDir}.
   */
  private readonly knownDirs = new Set<string>();
  /** Directories {@link sweepTemps} cleaned since the last {@link forgetDirs}. */
  private readonly swept = new Set<string>();
  /** The blob folder of each bucket, by scheme (see {@link blobPath}). */
  private readonly blobRoots = new Map<string, Map<string, string>>();

  constructor(options: CacheOptions = {}) {
    this.root = path.resolve(options.root ?? defaultCacheRoot());
    this.base = path.join(this.root, LAYOUT);
  }

  /**
   * Where a verified commit object is kept once read: `commits/<scheme>/<bucket>/<id>.json`.
   * Write it with writeFileAtomic (src/core/fs-atomic.ts) and re-hash it on every read.
   */
  commitPath(scheme: string, bucket: string, id: string): string {
    return path.join(this.root, 'commits', safeName(scheme), safeName(bucket), `${id}.json`);
  }

  /** The blob holding `key` at `identity` (a version ID, or `v:` + a version). */
  blobPath(scheme: string, bucket: string, key: string, identity: string): string {
    const h = hashOf(scheme, bucket, key, identity);
    // Asked once or twice per fetched file: the checked folder of the bucket is kept, and the
    // two hex segments are appended without path.join's normalizing.
    const root = this.blobRoot(scheme, bucket);
    return `${root}${path.sep}${h.slice(0, 2)}${path.sep}${h}`;
  }

  /** The blob folder of a bucket: its `<aa>` shards, and the temps of blobs being downloaded. */
  private blobRoot(scheme: string, bucket: string): string {
    let root = this.blobRoots.get(scheme)?.get(bucket);
    if (root === undefined) {
      root = path.join(this.base, 'blobs', safeName(scheme), safeName(bucket));
      const byBucket = this.blobRoots.get(scheme) ?? new Map<string, string>();
      byBucket.set(bucket, root);
      this.blobRoots.set(scheme, byBucket);
    }
    return root;
  }

  /**
   * Where a download into `blob` (a {@link blobPath}) is written until complete: a fresh temp
   * name in the bucket's blob folder, the parent of the blob's shard (see the module comment).
   */
  private blobTempPath(blob: string): string {
    return `${path.dirname(path.dirname(blob))}${path.sep}${tempName()}`;
  }

  /**
   * Remove the temps of gone writers (see `isAbandonedTemp`) from the folder where every blob of
   * the bucket is downloaded ({@link blobTempPath}), once per fetch: what a killed fetch was
   * downloading, of any version of any key. One `readdir`; run by a fetch that takes over from
   * an interrupted one, never touching a live writer's temp.
   */
  sweepBlobTemps(scheme: string, bucket: string): void {
    this.sweepTemps(this.blobRoot(scheme, bucket));
  }

  /** The directory of a folder fetch of `folderKey` (`''` for the bucket, else `a/b/`). */
  treePath(scheme: string, bucket: string, folderKey: string): string {
    return this.under(path.join(this.base, 'tree', safeName(scheme), safeName(bucket)), folderKey);
  }

  /** Where a single-file fetch of `key` lives (stable across versions). */
  filePath(scheme: string, bucket: string, key: string): string {
    const h = hashOf(scheme, bucket, key).slice(0, 32);
    return this.namedIn(path.join(this.base, 'file', safeName(scheme), safeName(bucket), h), key);
  }

  /** Where `key` at `?at=version:versionId` lives (immutable). */
  pinPath(scheme: string, bucket: string, key: string, versionId: string): string {
    const h = hashOf(scheme, bucket, key, versionId).slice(0, 32);
    return this.namedIn(path.join(this.base, 'pin', safeName(scheme), safeName(bucket), h), key);
  }

  /** A commit's copy of `key` (a file key, or a folder prefix ending `/`, or `` for all). */
  commitTreePath(scheme: string, bucket: string, commitId: string, key: string): string {
    return this.under(
      path.join(this.base, 'commit', safeName(scheme), safeName(bucket), safeName(commitId)),
      key,
    );
  }

  /** The state file of a view named by `viewId` (a URI string). */
  statePath(viewId: string): string {
    return path.join(this.base, 'state', `${hashOf(viewId)}.json`);
  }

  /** Read a view's state, or `undefined` when there is none (or it is unreadable). */
  async readState(viewId: string): Promise<ViewState | undefined> {
    const file = this.statePath(viewId);
    // A state file is trusted only as a regular file in a real state folder (no link followed).
    if (!this.isRealDir(path.dirname(file))) return undefined;
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
   * one: a stale lock, a state not marked done), the temps gone writers left in the state folder
   * are removed first (see {@link sweepTemps}): a fetch killed while it wrote its state leaves one
   * there, in a folder that holds every view's state. A live writer's temp stays.
   */
  async writeState(state: ViewState, { sweep = false }: { sweep?: boolean } = {}): Promise<void> {
    const file = this.statePath(state.uri);
    this.makeDir(path.dirname(file));
    if (sweep) this.sweepTemps(path.dirname(file));
    await writeFileAtomic(file, JSON.stringify(state));
  }

  /** Remove a view's state (its `done` mark) before changing the view. */
  async clearState(viewId: string): Promise<void> {
    await rm(this.statePath(viewId), { force: true });
  }

  /** The metadata file of a pinned version. */
  private metaPath(scheme: string, bucket: string, key: string, versionId: string): string {
    const h = hashOf(scheme, bucket, key, versionId);
    return path.join(this.base, 'meta', safeName(scheme), safeName(bucket), `${h}.json`);
  }

  /** Remember what a pinned version is (size, etag), so `stat` at it works offline. */
  async writeVersionMeta(scheme: string, bucket: string, meta: VersionMeta): Promise<void> {
    const file = this.metaPath(scheme, bucket, meta.key, meta.versionId);
    this.makeDir(path.dirname(file));
    await writeFileAtomic(file, JSON.stringify(meta));
  }

  /** What {@link writeVersionMeta} recorded, or `undefined`. */
  async readVersionMeta(
    scheme: string,
    bucket: string,
    key: string,
    versionId: string,
  ): Promise<VersionMeta | undefined> {
    const file = this.metaPath(scheme, bucket, key, versionId);
    if (!this.isRealDir(path.dirname(file))) return undefined;
    try {
      const text = await readFile(file, { encoding: 'utf8', flag: fsc.O_RDONLY | fsc.O_NOFOLLOW });
      const meta = JSON.parse(text) as VersionMeta;
      return meta.key === key && meta.versionId === versionId ? meta : undefined;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ELOOP') return undefined;
      throw error;
    }
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
    const target = path.join(this.base, 'locks', hashOf(viewId));
    this.makeDir(path.dirname(target));
    const { lock, release } = await holdViewLock(target, viewId);
    try {
      return await fn(lock);
    } finally {
      await release();
    }
  }

  /**
   * Download a GET's body into the blob for (`key`, `identity`): temp file, fsync, rename. The
   * blob appears only complete; `expectedSize` guards against a body cut short. A result with
   * `bytes` (read whole) is written from them, one with `pipeTo` (reused read buffers) from
   * that, one with a `file` (a driver's local file) copied by the kernel, else from `body`.
   * With `digest`, the bytes are hashed as they are written (a kernel copy: read back from the
   * copy once it is complete) and the blob appears only when they match (else
   * `ObjectIntegrityError('DigestMismatch')`, and nothing is left). Returns the blob path.
   */
  async installBlob(
    blob: string,
    res: Pick<GetResult, 'body' | 'pipeTo' | 'bytes' | 'release' | 'file'>,
    expectedSize: number,
    onBytes?: (n: number) => void,
    signal?: AbortSignal,
    digest?: ExpectedContent,
  ): Promise<string> {
    if (res.file !== undefined) {
      return this.installFromFile(blob, res.file.path, expectedSize, onBytes, signal, digest);
    }
    if (res.bytes) {
      try {
        if (res.bytes.length !== expectedSize) {
          throw new StoreError(
            `download of ${res.bytes.length} bytes, ${expectedSize} expected; nothing was cached`,
          );
        }
        if (digest) checkDigest(digest, digestOf(digest.algorithm, res.bytes));
      } catch (error) {
        res.release?.();
        throw error;
      }
      return this.writeSmallBlob(blob, [res.bytes], expectedSize, onBytes, res.release);
    }
    if (res.pipeTo) return this.installFromSink(blob, res.pipeTo, expectedSize, onBytes, digest);
    const body = res.body;
    if (expectedSize <= SMALL_BLOB_BYTES) {
      return this.installSmallBlob(blob, body, expectedSize, onBytes, signal, digest);
    }
    const hash = hasherFor(digest);
    const temp = this.blobTempPath(blob);
    // Read-only from the start: the mode applies to later opens, not to this descriptor.
    const handle = await this.inDir(path.dirname(blob), () =>
      open(temp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o444),
    );
    let written = 0;
    let flushed = 0;
    let flushing: Promise<void> | undefined;
    try {
      let batch: Buffer[] = [];
      let batched = 0;
      const write = async () => {
        await handle.writev(batch);
        written += batched;
        onBytes?.(batched);
        batch = [];
        batched = 0;
        // Start the disk writing big downloads while they download, so the final fsync (the
        // durability the cache promises) finds little left to do; at most one in flight.
        if (written - flushed >= WRITEBACK_BYTES) {
          await flushing;
          flushed = written;
          flushing = handle.datasync();
        }
      };
      for await (const chunk of body as AsyncIterable<Buffer>) {
        signal?.throwIfAborted();
        hash?.update(chunk);
        batch.push(chunk);
        batched += chunk.length;
        if (batched >= WRITE_BATCH_BYTES) await write();
      }
      if (batched > 0) await write();
      if (written !== expectedSize) {
        throw new StoreError(
          `download ended after ${written} of ${expectedSize} bytes; nothing was cached`,
        );
      }
      if (digest && hash) checkDigest(digest, hash.digest('hex'));
      await flushing;
      flushing = undefined;
      await handle.sync();
    } catch (error) {
      await flushing?.catch(() => {});
      await handle.close().catch(() => {});
      await rm(temp, { force: true });
      body.destroy();
      throw error;
    }
    await handle.close();
    await rename(temp, blob);
    return blob;
  }

  /**
   * {@link installBlob} from a `pipeTo` body (src/net/http1-download.ts): chunks of up to
   * {@link WRITE_BATCH_BYTES} written as they come (direct system calls for a small body), an
   * early fdatasync every {@link WRITEBACK_BYTES}, fsync, rename. The transfer carries the
   * AbortSignal itself: an abort rejects `pipeTo` once no write is running.
   */
  private async installFromSink(
    blob: string,
    pipeTo: NonNullable<GetResult['pipeTo']>,
    expectedSize: number,
    onBytes: ((n: number) => void) | undefined,
    digest: ExpectedContent | undefined,
  ): Promise<string> {
    const temp = this.blobTempPath(blob);
    // Read-only from the start: the mode applies to later opens, not to this descriptor.
    const fd = await this.inDir(path.dirname(blob), async () =>
      openSync(temp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o444),
    );
    const hash = hasherFor(digest);
    const sink = new FileSink(fd, {
      syncEveryBytes: WRITEBACK_BYTES,
      batchBytes: WRITE_BATCH_BYTES,
      direct: expectedSize <= SMALL_BLOB_BYTES,
      onBytes,
      hash,
    });
    try {
      await pipeTo(sink);
      if (sink.written !== expectedSize) {
        throw new StoreError(
          `download of ${sink.written} bytes, ${expectedSize} expected; nothing was cached`,
        );
      }
      if (digest && hash) checkDigest(digest, hash.digest('hex'));
      await sink.finish();
    } catch (error) {
      await sink.settle();
      closeSync(fd);
      rmSync(temp, { force: true });
      throw error;
    }
    closeSync(fd);
    renameSync(temp, blob);
    return blob;
  }

  /**
   * {@link installBlob} from a driver's local file ({@link GetResult.file}): the kernel copies
   * it (a reflink where the file system can, else `copy_file_range`; no byte passes through
   * JavaScript) into a temp file this cache created, which is then made read-only, checked for
   * `expectedSize`, checked against `digest` (the one read of the copy that bytes passing through
   * JavaScript would have cost anyway), fsynced and renamed. The source is only read: a hard
   * link would let an edit of the fetched file change the store's immutable version. An abort is
   * seen before the copy starts and before the check, not during the copy (the kernel's copy
   * cannot be interrupted).
   */
  private async installFromFile(
    blob: string,
    source: string,
    expectedSize: number,
    onBytes: ((n: number) => void) | undefined,
    signal: AbortSignal | undefined,
    digest: ExpectedContent | undefined,
  ): Promise<string> {
    signal?.throwIfAborted();
    const temp = this.blobTempPath(blob);
    // Writable until it is complete (the copy opens it by name); read-only before it is visible.
    const fd = await this.inDir(path.dirname(blob), async () =>
      openSync(temp, fsc.O_RDWR | fsc.O_CREAT | fsc.O_EXCL, 0o644),
    );
    try {
      // A small file's copy takes microseconds: made directly, like the small writes above.
      if (expectedSize <= SMALL_BLOB_BYTES) copyFileSync(source, temp, fsc.COPYFILE_FICLONE);
      else await copyFile(source, temp, fsc.COPYFILE_FICLONE);
      const { size } = fstatSync(fd);
      if (size !== expectedSize) {
        throw new StoreError(`copied ${size} bytes, ${expectedSize} expected; nothing was cached`);
      }
      if (digest) {
        signal?.throwIfAborted();
        checkDigest(digest, (await fdDigest(fd, digest.algorithm, size)) ?? '(a short read)');
      }
      fchmodSync(fd, 0o444);
      await new Promise<void>((resolve, reject) =>
        fsync(fd, (error) => (error ? reject(error) : resolve())),
      );
    } catch (error) {
      closeSync(fd);
      rmSync(temp, { force: true });
      throw error;
    }
    closeSync(fd);
    renameSync(temp, blob);
    onBytes?.(expectedSize);
    return blob;
  }

  /**
   * {@link installBlob} for a body of at most {@link SMALL_BLOB_BYTES}: the body is gathered
   * (never more than the expected size plus one chunk), then written with direct system calls;
   * only the fsync goes through the thread pool. Same guarantees: temp file, fsync, rename.
   */
  private async installSmallBlob(
    blob: string,
    body: Readable,
    expectedSize: number,
    onBytes: ((n: number) => void) | undefined,
    signal: AbortSignal | undefined,
    digest: ExpectedContent | undefined,
  ): Promise<string> {
    const chunks: Buffer[] = [];
    let received = 0;
    try {
      for await (const chunk of body as AsyncIterable<Buffer>) {
        signal?.throwIfAborted();
        received += chunk.length;
        if (received > expectedSize) break;
        chunks.push(chunk);
      }
      if (received !== expectedSize) {
        throw new StoreError(
          `download ${received > expectedSize ? 'ran past' : `ended after ${received} of`} ${expectedSize} bytes; nothing was cached`,
        );
      }
      if (digest) {
        const hash = hasherFor(digest) as NonNullable<ReturnType<typeof hasherFor>>;
        for (const chunk of chunks) hash.update(chunk);
        checkDigest(digest, hash.digest('hex'));
      }
    } catch (error) {
      body.destroy();
      throw error;
    }
    return this.writeSmallBlob(blob, chunks, expectedSize, onBytes);
  }

  /**
   * Write a small body held in memory as the blob: temp file, direct system calls, fsync
   * (through the thread pool), rename. `release` (the driver's, see {@link GetResult.release})
   * is called as soon as `chunks` are no longer read: after the write, or when it failed.
   */
  private async writeSmallBlob(
    blob: string,
    chunks: Buffer[],
    expectedSize: number,
    onBytes: ((n: number) => void) | undefined,
    release?: () => void,
  ): Promise<string> {
    const temp = this.blobTempPath(blob);
    let fd: number;
    try {
      // Read-only from the start: the mode applies to later opens, not to this descriptor.
      fd = await this.inDir(path.dirname(blob), async () =>
        openSync(temp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o444),
      );
    } catch (error) {
      release?.();
      throw error;
    }
    try {
      let written: number;
      try {
        written = expectedSize > 0 ? writevSync(fd, chunks) : 0;
      } finally {
        release?.();
      }
      if (written !== expectedSize) {
        throw new StoreError(`wrote ${written} of ${expectedSize} bytes to ${temp}`);
      }
      await new Promise<void>((resolve, reject) =>
        fsync(fd, (error) => (error ? reject(error) : resolve())),
      );
    } catch (error) {
      closeSync(fd);
      rmSync(temp, { force: true });
      throw error;
    }
    closeSync(fd);
    renameSync(temp, blob);
    onBytes?.(expectedSize);
    return blob;
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
    const st = lstatOrUndefined(blob);
    if (st === undefined || !this.isRealDir(path.dirname(blob))) return false;
    let ok = st.isFile() && st.size === size;
    if (ok && seen !== undefined && seen[1] === st.ino && seen[3] !== undefined) {
      // Verified when it was linked; trusted while nothing changed it.
      if (st.mtimeMs === seen[3] && st.size === seen[2]) return true;
      ok = false;
    } else if (ok && digest) {
      ok = (await fileDigest(blob, digest.algorithm, size)) === digest.hex;
    }
    if (!ok) rmSync(blob, { force: true, recursive: true });
    return ok;
  }

  /**
   * Make `dest` a link to `blob`, atomically replacing what was there (link to a temp name,
   * rename over). Falls back to a copy where hard links are not allowed. Returns the `lstat`
   * of `dest` (for its {@link FileRecord}).
   */
  async linkInto(blob: string, dest: string): Promise<Stats> {
    try {
      await this.inDir(path.dirname(dest), async () => linkSync(blob, dest));
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
   * Run `fn`, which creates a name in `dir`, making `dir` first unless this fetch made or
   * checked it already (a folder fetch would otherwise repeat the checks once per file). If the
   * directory went away since (ENOENT, or ENOTDIR for a file in the way), it is made again and
   * `fn` retried.
   */
  private async inDir<T>(dir: string, fn: () => Promise<T>): Promise<T> {
    if (!this.knownDirs.has(dir)) {
      this.makeDir(dir);
      return fn();
    }
    try {
      return await fn();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error;
      this.knownDirs.clear();
      this.makeDir(dir);
      return fn();
    }
  }

  /**
   * Forget which directories were checked: the next write or reuse below the root checks each
   * directory it goes through again (once). Called when a fetch starts, so a directory replaced
   * by a link since an earlier fetch of a long-lived process is never written through.
   */
  forgetDirs(): void {
    this.knownDirs.clear();
    this.swept.clear();
  }

  /**
   * True when `dir` and every directory between it and the layout root (`<root>/v1`, itself
   * included) is a real directory: no component is a symlink, none is missing. One `lstat` per
   * directory not yet checked by this fetch. Use before trusting a file found below `dir`.
   */
  isRealDir(dir: string): boolean {
    if (this.knownDirs.has(dir)) return true;
    if (dir !== this.base) {
      const parent = path.dirname(dir);
      if (!parent.startsWith(this.base) || parent === dir || !this.isRealDir(parent)) return false;
    }
    if (!lstatOrUndefined(dir)?.isDirectory()) return false;
    this.rememberDir(dir);
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
  private makeDir(dir: string): void {
    if (this.knownDirs.has(dir)) return;
    const parent = path.dirname(dir);
    if (dir === this.base) mkdirSync(this.root, { recursive: true });
    else if (parent.startsWith(this.base) && parent !== dir) this.makeDir(parent);
    this.makeLevel(dir);
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
    this.rememberDir(dir);
  }

  /**
   * mkdir -p below the layout root, safely (see {@link makeDir}): no component is a link when
   * it returns.
   */
  async ensureDir(dir: string): Promise<void> {
    this.makeDir(dir);
  }

  /** Note that `dir` is a real directory (bounded: a huge tree only costs the checks again). */
  private rememberDir(dir: string): void {
    if (this.knownDirs.size >= 10_000) this.knownDirs.clear();
    this.knownDirs.add(dir);
  }

  /**
   * Delete every file below `dir` that `keep` does not name (relative paths with `/`), and the
   * folders left empty. Leftover temp files of killed fetches go too. Returns how many went.
   */
  async prune(dir: string, keep: Set<string>): Promise<number> {
    // Never walk through a link: a copy replaced by a link to a folder outside the cache must
    // not lose that folder's files. (Below `dir`, a recursive readdir never follows links.)
    if (!this.isRealDir(dir)) return 0;
    let entries: { name: string; parentPath: string; isDirectory(): boolean }[];
    try {
      entries = (await readdir(dir, { recursive: true, withFileTypes: true })) as never;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw error;
    }
    let removed = 0;
    const dirs: string[] = [];
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
        dirs.push(full);
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
    dirs.sort((a, b) => b.length - a.length);
    for (const d of dirs) {
      await rmdir(d).then(
        () => this.knownDirs.delete(d),
        () => {},
      );
    }
    return removed;
  }

  /** Make `dir` durable after renames into it. */
  async syncDir(dir: string): Promise<void> {
    await fsyncDir(dir).catch(() => {});
  }

  /** Count the blobs and their bytes. */
  async info(): Promise<CacheInfo> {
    const dir = path.join(this.base, 'blobs');
    let blobs = 0;
    let bytes = 0;
    let entries: { name: string; parentPath: string; isFile(): boolean }[] = [];
    this.forgetDirs();
    if (this.isRealDir(dir)) {
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
    return { root: this.root, blobs, bytes };
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
    this.forgetDirs();
    const blobs = path.join(this.base, 'blobs', path.sep);
    let files = 0;
    let bytes = 0;
    const cutoff = Date.now() - minAgeMs;
    for (const dir of [this.base, path.join(this.root, 'commits')]) {
      let entries: { name: string; parentPath: string; isFile(): boolean }[] = [];
      // Never walk through a link (a folder of the cache replaced by a link to one outside).
      if (
        dir === this.base ? !this.isRealDir(dir) : lstatOrUndefined(dir)?.isDirectory() !== true
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
  sweepTemps(dir: string): void {
    if (this.swept.has(dir) || !this.isRealDir(dir)) return;
    this.swept.add(dir);
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

  /** `dir` joined with a relative key whose segments are checked first. */
  private under(dir: string, relKey: string): string {
    const segments = relKey.split('/').filter((s, i, all) => !(s === '' && i === all.length - 1));
    if (relKey === '') return dir;
    for (const s of segments) checkSegment(s, relKey);
    return path.join(dir, ...segments);
  }

  /** `dir/<last segment of key>`, the last segment checked. */
  private namedIn(dir: string, key: string): string {
    const name = key.slice(key.lastIndexOf('/') + 1);
    checkSegment(name, key);
    return path.join(dir, name);
  }
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

/** True when the temp file `full` (named `name`) is a regular file left by a gone writer. */
function abandonedTemp(full: string, name: string): boolean {
  const st = lstatOrUndefined(full);
  return st?.isFile() === true && isAbandonedTemp(name, st.mtimeMs);
}

/** Throw unless `segment` is a safe single path component (see src/core/uri.ts). */
function checkSegment(segment: string, key: string): void {
  const problem = segmentProblem(segment);
  if (problem) throw new UriError(`key ${JSON.stringify(key)} cannot be cached: ${problem}`);
  if (Buffer.byteLength(segment) > 255) {
    throw new StoreError(
      `key ${JSON.stringify(key)}: a name over 255 bytes cannot be a local file`,
    );
  }
}

/** A scheme, bucket or ID used as one path component: must be one safe segment. */
function safeName(name: string): string {
  checkSegment(name, name);
  return name;
}
