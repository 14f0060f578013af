/**
 * A put from a large local file, copied by the kernel: the local store's fast write path.
 *
 * Streaming a file through JavaScript costs a read and a write system call per chunk, a
 * JavaScript turn per chunk and an MD5 over every byte: seconds of CPU per GiB, several times
 * `cp`. Here the bytes never enter the process: `cp` copies them (a reflink where the file
 * system can clone, else `copy_file_range` inside the kernel) into the store's temp file, while
 * this process reads the source once more, concurrently, for its CRC-32, the version's checksum.
 *
 * Why these choices:
 * - **`cp` in a child, not `fs.copyFile`.** libuv's copy loop (Node 20, libuv 1.46) copies the
 *   size it saw at the start and, when the source shrinks meanwhile (a program rewriting the
 *   file), calls `copy_file_range` for ever at 100% CPU: the promise never settles, the thread
 *   pool thread is lost and the process cannot even exit (its exit joins that thread). A user's
 *   file may change during a put; `cp` stops at end of file, and a child can be killed (an
 *   abort). Starting it costs milliseconds, hence {@link KERNEL_COPY_BYTES}: smaller files
 *   stream as before.
 * - **CRC-32, not MD5, for these versions.** MD5 runs at a few hundred MB/s on one core here,
 *   slower than the disk: an MD5 would make a large put several times `cp` + `sync` however
 *   it overlaps the copy, while zlib's CRC-32 runs at several GB/s and overlaps it entirely
 *   (docs/performance.md has the measurements). A CRC-32 still detects bit rot in a stored
 *   version and tells a changed file of the same size from an unchanged one (except for one in
 *   2^32 changes); the version ID, not the ETag, is what changes with every write. The ETag
 *   says which it is (`"crc32:…"`, see `./layout.ts`), so nothing checks it as an MD5.
 * - **Never a mix of two versions of the source.** The CRC is taken from the source, not from
 *   the copy, so both must have read the same bytes: the source's size, modification and change
 *   times and inode are compared before and after, the CRC must cover exactly the size, and the
 *   copy must have that size. A source that changed is a `StoreError` and nothing is stored.
 *   Every durability rule of the store stays: the temp is fsynced before the caller renames it.
 *
 * Only on Linux (other platforms keep the streaming path), with a `cp` at `/bin/cp` or
 * `/usr/bin/cp` and `zlib.crc32` (Node ≥ 20.15).
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { type BigIntStats, existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { debuglog } from 'node:util';
import zlib from 'node:zlib';
import { abortError, StoreError } from '../../src/errors.js';
import { crc32Checksum } from './layout.js';

const debug = debuglog('provcat:local');

/** Files from this size up are copied by the kernel; smaller ones stream. */
export const KERNEL_COPY_BYTES = 8 * 1024 * 1024;

/** Bytes read per CRC step (two buffers: one is read while the other is summed). */
const READ_BYTES = 1024 * 1024;

/** Most bytes of `cp`'s error output kept for the error message. */
const STDERR_BYTES = 4096;

/** What {@link copyFromFile} wrote. */
export interface CopiedFile {
  size: number;
  /** The checksum token of the version file name (`crc32-<8 hex>`). */
  checksum: string;
}

/** Options of {@link copyFromFile}. */
export interface CopyOptions {
  /** `local://bucket/key`, for messages. */
  uri: string;
  signal?: AbortSignal | undefined;
  /** Called with the cumulative number of bytes summed (the copy runs alongside). */
  onProgress?: ((bytes: number) => void) | undefined;
}

let cpPath: string | null | undefined;

/** The `cp` to run, or `null` when the kernel copy does not apply on this system. */
function kernelCopier(): string | null {
  if (cpPath === undefined) {
    cpPath = null;
    if (process.platform === 'linux' && typeof zlib.crc32 === 'function') {
      cpPath = ['/usr/bin/cp', '/bin/cp'].find((p) => existsSync(p)) ?? null;
    }
  }
  return cpPath;
}

/**
 * Copy the regular file `source` into a new file `temp` (created here, exclusively) with the
 * kernel, summing it concurrently (see the module comment), and fsync `temp`. Returns
 * `undefined`, touching nothing, when the kernel copy does not apply: not Linux, no `cp`, a
 * source that is not a regular file of at least {@link KERNEL_COPY_BYTES}, or one that cannot
 * be opened (the caller's streaming path then reports that). On failure (the source changed,
 * `cp` failed, an abort) `temp` is removed and the error thrown.
 */
export async function copyFromFile(
  source: string,
  temp: string,
  options: CopyOptions,
): Promise<CopiedFile | undefined> {
  const cp = kernelCopier();
  if (cp === null) return undefined;
  options.signal?.throwIfAborted();
  let input: fs.FileHandle;
  try {
    input = await fs.open(source, 'r');
  } catch (error) {
    debug('kernel copy: cannot open %s (%s); streaming instead', source, String(error));
    return undefined;
  }
  try {
    const before = await input.stat({ bigint: true });
    if (!before.isFile() || before.size < BigInt(KERNEL_COPY_BYTES)) return undefined;
    return await copyOpened(cp, input, before, path.resolve(source), temp, options);
  } finally {
    await input.close();
  }
}

async function copyOpened(
  cp: string,
  input: fs.FileHandle,
  before: BigIntStats,
  source: string,
  temp: string,
  options: CopyOptions,
): Promise<CopiedFile | undefined> {
  const output = await fs.open(temp, 'wx');
  try {
    const copied = await copyAndSum(cp, input, before, source, output, temp, options);
    if (copied !== undefined) await output.sync();
    await output.close();
    if (copied === undefined) await fs.rm(temp, { force: true });
    return copied;
  } catch (error) {
    await output.close().catch((closeError: unknown) => {
      debug('kernel copy: cannot close %s: %s', temp, String(closeError));
    });
    await fs.rm(temp, { force: true });
    throw error;
  }
}

/** Run `cp` into `temp` while summing `input`; check that both saw the same, unchanged file. */
async function copyAndSum(
  cp: string,
  input: fs.FileHandle,
  before: BigIntStats,
  source: string,
  output: fs.FileHandle,
  temp: string,
  options: CopyOptions,
): Promise<CopiedFile | undefined> {
  const { uri, signal } = options;
  const child = runCopy(cp, source, temp);
  signal?.addEventListener('abort', child.kill, { once: true });
  let summed: { crc: number; bytes: number } | undefined;
  let failure: unknown;
  try {
    summed = await crcOf(input, signal, options.onProgress);
  } catch (error) {
    failure = error;
    child.kill();
  }
  const exit = await child.exited;
  signal?.removeEventListener('abort', child.kill);
  if (failure !== undefined) throw failure;
  if (signal?.aborted) throw abortError(signal);
  if (exit.spawnError !== undefined) {
    // No cp after all (removed, not executable): this process streams from now on.
    debug('kernel copy: cannot run %s (%s); streaming instead', cp, String(exit.spawnError));
    cpPath = null;
    return undefined;
  }
  if (exit.code !== 0) {
    throw new StoreError(
      `cannot copy ${source} to ${uri}: ${cp} ended with ${exit.code ?? exit.signal}: ${exit.stderr.trim()}`,
      { uri },
    );
  }
  const after = await input.stat({ bigint: true });
  const named = await fs.stat(source, { bigint: true });
  const copied = (await output.stat()).size;
  const size = Number(before.size);
  if (
    changed(before, after) ||
    changed(before, named) ||
    summed?.bytes !== size ||
    copied !== size
  ) {
    throw new StoreError(
      `${source} changed while it was copied to ${uri} (${size} bytes before, ${after.size} after); nothing was stored`,
      { uri },
    );
  }
  return { size, checksum: crc32Checksum(summed.crc) };
}

/** How a `cp` child ended. */
interface CopyExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Set when the child could not be started at all. */
  spawnError?: Error | undefined;
  /** The start of its error output. */
  stderr: string;
}

/** Start `cp -- source temp`; `kill` stops it (SIGKILL), `exited` settles once it is gone. */
function runCopy(
  cp: string,
  source: string,
  temp: string,
): { kill: () => void; exited: Promise<CopyExit> } {
  let stderr = '';
  let child: ReturnType<typeof spawn>;
  try {
    child = spawn(cp, ['--', source, temp], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (error) {
    const spawnError = error instanceof Error ? error : new Error(String(error));
    return {
      kill: () => {},
      exited: Promise.resolve({ code: null, signal: null, spawnError, stderr }),
    };
  }
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (text: string) => {
    if (stderr.length < STDERR_BYTES) stderr += text;
  });
  const exited = new Promise<CopyExit>((resolve) => {
    child.once('error', (spawnError) => resolve({ code: null, signal: null, spawnError, stderr }));
    child.once('close', (code, signal) => resolve({ code, signal, stderr }));
  });
  return { kill: () => child.kill('SIGKILL'), exited };
}

/** True when the file is not the one `before` described, or was modified since. */
function changed(before: BigIntStats, now: BigIntStats): boolean {
  return (
    now.ino !== before.ino ||
    now.dev !== before.dev ||
    now.size !== before.size ||
    now.mtimeNs !== before.mtimeNs ||
    now.ctimeNs !== before.ctimeNs
  );
}

/** The CRC-32 of the whole file behind `input`, read to its end from offset 0. */
async function crcOf(
  input: fs.FileHandle,
  signal: AbortSignal | undefined,
  onProgress: ((bytes: number) => void) | undefined,
): Promise<{ crc: number; bytes: number }> {
  const buffers = [Buffer.allocUnsafe(READ_BYTES), Buffer.allocUnsafe(READ_BYTES)];
  let crc = 0;
  let bytes = 0;
  let turn = 0;
  let reading = input.read(buffers[0] as Buffer, 0, READ_BYTES, 0);
  for (;;) {
    const { bytesRead, buffer } = await reading;
    if (bytesRead === 0) return { crc, bytes };
    signal?.throwIfAborted();
    bytes += bytesRead;
    turn ^= 1;
    reading = input.read(buffers[turn] as Buffer, 0, READ_BYTES, bytes);
    crc = zlib.crc32(buffer.subarray(0, bytesRead), crc);
    onProgress?.(bytes);
  }
}
