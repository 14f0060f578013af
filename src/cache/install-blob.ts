/**
 * How a GET's bytes become a blob: one install path per shape of body a driver hands back, each
 * ending the same way — temp file, fsync, rename ({@link sealTemp}) — so a blob only ever
 * appears complete, with the expected size and (when one is given) the expected digest, and a
 * failure leaves nothing behind.
 *
 * - bytes read whole (`GetResult.bytes`): checked, then written with one direct `writev`;
 * - a body delivered into reused read buffers (`GetResult.pipeTo`, src/net/http1-download.ts):
 *   written through a `FileSink` as it comes;
 * - a driver's local file (`GetResult.file`) of at most {@link SMALL_BLOB_BYTES}: read whole,
 *   checked, then written like bytes read whole; a bigger one: copied by the kernel;
 * - a Readable (`GetResult.body`) of at most {@link SMALL_BLOB_BYTES}: gathered, then written
 *   like bytes read whole;
 * - a bigger Readable: written in ~1 MiB `writev` batches through the thread pool, with an early
 *   `fdatasync` every 64 MiB so the final fsync finds little left to do.
 *
 * With `group` (a folder fetch, src/cache/blob-group.ts) the fsync and the rename are the
 * group's, one sync pass for many blobs; the blob still appears only complete and durable.
 *
 * Small bodies are written with direct system calls (a thread handoff would cost more than the
 * write); only the fsync, which waits on the disk, goes through the thread pool (see the module
 * comment of src/cache/cache.ts).
 *
 * @module
 */
import {
  closeSync,
  fchmodSync,
  constants as fsc,
  fstatSync,
  fsync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  writevSync,
} from 'node:fs';
import { copyFile, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { GetResult } from '../contract/primitives.js';
import { StoreError } from '../core/errors.js';
import { FileSink } from '../net/file-sink.js';
import type { BlobGroup } from './blob-group.js';
import { blobTempPath } from './cache-layout.js';
import {
  type ContentDigest,
  checkDigest,
  digestOf,
  type ExpectedContent,
  fdDigest,
  fileDigest,
  hasherFor,
} from './content-digest.js';
import { lstatOrUndefined, type SafeDirs } from './safe-dirs.js';
import type { FileRecord } from './view-state.js';

/**
 * Bodies up to this size are gathered in memory and written with direct system calls
 * (see {@link installBlob}); fetches ask drivers for them whole (`GetOptions.wholeUpTo`).
 */
export const SMALL_BLOB_BYTES = 64 * 1024;

/**
 * The `GetOptions.wholeUpTo` a fetch passes for an object the listing or a commit says is
 * `size` bytes: small ones are asked for whole, bigger ones stream.
 */
export function wholeUpToFor(size: number): number | undefined {
  return size <= SMALL_BLOB_BYTES ? SMALL_BLOB_BYTES : undefined;
}

/**
 * A driver's local file (`GetResult.file`) up to this size is read whole and written from
 * memory rather than copied by the kernel: for a 1 KiB file the copy's set-up (open, fstat,
 * ioctl, copy_file_range, fchmod, ftruncate) and the read-back for its digest cost several
 * times the read and write of the bytes (see docs/performance.md, issue 28).
 */
const SMALL_FILE_BYTES = SMALL_BLOB_BYTES;

/** Downloads are written in batches of about this many bytes (one writev each). */
const WRITE_BATCH_BYTES = 1024 * 1024;
/** A download starts the disk writing (fdatasync) after every this many bytes. */
const WRITEBACK_BYTES = 64 * 1024 * 1024;

/** The parts of a GET's result {@link installBlob} reads. */
export type InstallableBody = Pick<GetResult, 'body' | 'pipeTo' | 'bytes' | 'release' | 'file'>;

/** Options of {@link installBlob} (and `Cache.installBlob`). */
export interface InstallOptions {
  /** The size of the version: a body of any other length is refused, and nothing is cached. */
  expectedSize: number;
  /** Called with the count of bytes as they are written (progress). */
  onBytes?: ((n: number) => void) | undefined;
  /** Aborts the install; the call rejects with an AbortError and nothing is cached. */
  signal?: AbortSignal | undefined;
  /**
   * The digest the bytes must hash to: hashed as they are written, and the blob appears only
   * when they match (else `ObjectIntegrityError('DigestMismatch')`, and nothing is left).
   */
  digest?: ExpectedContent | undefined;
  /**
   * Defer the fsync and the rename to this group's next flush (src/cache/blob-group.ts) for a
   * body installed through a temp the group can hold (every shape but a big stream): the blob
   * then appears only once the group is flushed (`group.holds(blob)` says which). `item` is the
   * caller's record of it, handed back by the flush.
   */
  group?: { group: BlobGroup<unknown>; item: unknown } | undefined;
}

/**
 * Download a GET's body into `blob`: temp file, fsync, rename, the temp's directory made safely
 * by `dirs`. The blob appears only complete; `expectedSize` guards against a body cut short. A
 * result with `bytes` (read whole) is written from them, one with `pipeTo` (reused read
 * buffers) from that, one with a `file` (a driver's local file) copied by the kernel, else from
 * `body`. With `digest`, the bytes are hashed as they are written (a kernel copy: read back
 * from the copy once it is complete) and the blob appears only when they match (else
 * `ObjectIntegrityError('DigestMismatch')`, and nothing is left). Returns the blob path.
 */
export async function installBlob(
  dirs: SafeDirs,
  blob: string,
  res: InstallableBody,
  options: InstallOptions,
): Promise<string> {
  const { expectedSize, onBytes, signal, digest } = options;
  if (res.file !== undefined) return installFromFile(dirs, blob, res.file.path, options);
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
    return writeSmallBlob(dirs, blob, [res.bytes], options, res.release);
  }
  if (res.pipeTo) return installFromSink(dirs, blob, res.pipeTo, options);
  const body = res.body;
  if (expectedSize <= SMALL_BLOB_BYTES) return installSmallBlob(dirs, blob, body, options);
  const hash = hasherFor(digest);
  const temp = blobTempPath(blob);
  // Read-only from the start: the mode applies to later opens, not to this descriptor.
  const handle = await dirs.inDir(path.dirname(blob), () =>
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
export async function checkedBlob(
  dirs: SafeDirs,
  blob: string,
  size: number,
  digest?: ContentDigest,
  seen?: FileRecord,
): Promise<boolean> {
  const st = lstatOrUndefined(blob);
  if (st === undefined || !dirs.isRealDir(path.dirname(blob))) return false;
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
 * The last steps of an install from a temp file open as `fd`, once every byte is written and
 * checked: fsync (through the thread pool), close, rename over `blob` — or, with `group`, close
 * and defer the fsync and rename to the group. When the fsync fails the
 * temp is closed and removed ({@link discardTemp}) and the error thrown: nothing is left.
 */
async function sealTemp(
  fd: number,
  temp: string,
  blob: string,
  group: InstallOptions['group'],
): Promise<void> {
  if (group !== undefined) {
    closeSync(fd);
    group.group.defer(temp, blob, group.item);
    return;
  }
  try {
    await new Promise<void>((resolve, reject) =>
      fsync(fd, (error) => (error ? reject(error) : resolve())),
    );
  } catch (error) {
    discardTemp(fd, temp);
    throw error;
  }
  closeSync(fd);
  renameSync(temp, blob);
}

/** After a failed install: close the temp file open as `fd` and remove it. */
function discardTemp(fd: number, temp: string): void {
  closeSync(fd);
  rmSync(temp, { force: true });
}

/**
 * {@link installBlob} from a `pipeTo` body (src/net/http1-download.ts): chunks of up to
 * {@link WRITE_BATCH_BYTES} written as they come (direct system calls for a small body), an
 * early fdatasync every {@link WRITEBACK_BYTES}, fsync, rename. The transfer carries the
 * AbortSignal itself: an abort rejects `pipeTo` once no write is running.
 */
async function installFromSink(
  dirs: SafeDirs,
  blob: string,
  pipeTo: NonNullable<GetResult['pipeTo']>,
  { expectedSize, onBytes, digest, group }: InstallOptions,
): Promise<string> {
  const temp = blobTempPath(blob);
  // Read-only from the start: the mode applies to later opens, not to this descriptor.
  const fd = await dirs.inDir(path.dirname(blob), async () =>
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
    // The sink's early syncs settle here; the fsync is sealTemp's.
    await sink.finish({ sync: false });
  } catch (error) {
    await sink.settle();
    discardTemp(fd, temp);
    throw error;
  }
  await sealTemp(fd, temp, blob, group);
  return blob;
}

/**
 * {@link installBlob} from a driver's local file (`GetResult.file`). One of at most
 * {@link SMALL_FILE_BYTES} is read whole with direct calls, checked for `expectedSize` and
 * `digest` in memory, then written like bytes read whole (temp made read-only, sealed the
 * same way). A bigger one: the kernel copies it (a
 * reflink where the file system can, else `copy_file_range`; no byte passes through
 * JavaScript) into a temp file this cache created, which is then made read-only, checked for
 * `expectedSize`, checked against `digest` (the one read of the copy that bytes passing through
 * JavaScript would have cost anyway), fsynced and renamed. The source is only read: a hard
 * link would let an edit of the fetched file change the store's immutable version. An abort is
 * seen before the copy starts and before the check, not during the copy (the kernel's copy
 * cannot be interrupted).
 */
async function installFromFile(
  dirs: SafeDirs,
  blob: string,
  source: string,
  { expectedSize, onBytes, signal, digest, group }: InstallOptions,
): Promise<string> {
  signal?.throwIfAborted();
  // A small file is read whole (a few direct calls) and written like bytes read whole: no
  // kernel copy to set up, no read-back of the copy for its digest.
  if (expectedSize <= SMALL_FILE_BYTES) {
    const bytes = readSmallFile(source, expectedSize);
    if (digest) checkDigest(digest, digestOf(digest.algorithm, bytes));
    return writeSmallBlob(dirs, blob, [bytes], { expectedSize, onBytes, group });
  }
  const temp = blobTempPath(blob);
  // Writable until it is complete (the copy opens it by name); read-only before it is visible.
  const fd = await dirs.inDir(path.dirname(blob), async () =>
    openSync(temp, fsc.O_RDWR | fsc.O_CREAT | fsc.O_EXCL, 0o644),
  );
  try {
    await copyFile(source, temp, fsc.COPYFILE_FICLONE);
    const { size } = fstatSync(fd);
    if (size !== expectedSize) {
      throw new StoreError(`copied ${size} bytes, ${expectedSize} expected; nothing was cached`);
    }
    if (digest) {
      signal?.throwIfAborted();
      checkDigest(digest, (await fdDigest(fd, digest.algorithm, size)) ?? '(a short read)');
    }
    fchmodSync(fd, 0o444);
  } catch (error) {
    discardTemp(fd, temp);
    throw error;
  }
  await sealTemp(fd, temp, blob, group);
  onBytes?.(expectedSize);
  return blob;
}

/**
 * The bytes of a driver's file of `expectedSize` (at most {@link SMALL_FILE_BYTES}), read with
 * direct calls (open, fstat, read, close): `StoreError` when the file is not that size or a
 * read comes back short, so a torn or wrong file is refused before any temp is made.
 */
function readSmallFile(source: string, expectedSize: number): Buffer {
  const fd = openSync(source, 'r');
  try {
    const { size } = fstatSync(fd);
    if (size !== expectedSize) {
      throw new StoreError(
        `${source} holds ${size} bytes, ${expectedSize} expected; nothing was cached`,
      );
    }
    const bytes = Buffer.allocUnsafe(size);
    let at = 0;
    while (at < size) {
      const n = readSync(fd, bytes, at, size - at, at);
      if (n === 0) {
        throw new StoreError(`${source} ended after ${at} of ${size} bytes; nothing was cached`);
      }
      at += n;
    }
    return bytes;
  } finally {
    closeSync(fd);
  }
}

/**
 * {@link installBlob} for a body of at most {@link SMALL_BLOB_BYTES}: the body is gathered
 * (never more than the expected size plus one chunk), then written with direct system calls;
 * only the fsync goes through the thread pool. Same guarantees: temp file, fsync, rename.
 */
async function installSmallBlob(
  dirs: SafeDirs,
  blob: string,
  body: Readable,
  options: InstallOptions,
): Promise<string> {
  const { expectedSize, signal, digest } = options;
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
  return writeSmallBlob(dirs, blob, chunks, options);
}

/**
 * Write a small body held in memory as the blob: temp file, direct system calls, fsync
 * (through the thread pool), rename. `release` (the driver's, see `GetResult.release`) is
 * called as soon as `chunks` are no longer read: after the write, or when it failed.
 */
async function writeSmallBlob(
  dirs: SafeDirs,
  blob: string,
  chunks: Buffer[],
  { expectedSize, onBytes, group }: InstallOptions,
  release?: () => void,
): Promise<string> {
  const temp = blobTempPath(blob);
  let fd: number;
  try {
    // Read-only from the start: the mode applies to later opens, not to this descriptor.
    fd = await dirs.inDir(path.dirname(blob), async () =>
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
  } catch (error) {
    discardTemp(fd, temp);
    throw error;
  }
  await sealTemp(fd, temp, blob, group);
  onBytes?.(expectedSize);
  return blob;
}
