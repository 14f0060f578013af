/**
 * A put from a large local file, copied by the kernel: the local store's fast write path.
 *
 * Streaming a file through JavaScript costs a read and a write system call per chunk, a
 * JavaScript turn per chunk and an MD5 over every byte: seconds of CPU per GiB, several times
 * `cp`. Here the bytes never enter the process: `cp` copies them (a reflink where the file
 * system can clone, else `copy_file_range` inside the kernel) into the store's temp file.
 *
 * Why these choices:
 * - **`cp` in a child, not `fs.copyFile`.** libuv's copy loop (Node 20, libuv 1.46) copies the
 *   size it saw at the start and, when the source shrinks meanwhile (a program rewriting the
 *   file), calls `copy_file_range` for ever at 100% CPU: the promise never settles, the thread
 *   pool thread is lost and the process cannot even exit (its exit joins that thread). A user's
 *   file may change during a put; `cp` stops at end of file, and a child can be killed (an
 *   abort). Starting it costs milliseconds, hence {@link KERNEL_COPY_BYTES}: smaller files
 *   stream as before.
 * - **No content hash for these versions.** Any hash means reading every byte into this process
 *   as well. MD5 runs at a few hundred MB/s on one core here, slower than the copy, and even
 *   zlib's CRC-32 plus the reads cost about as much CPU again as the whole copy, which on a
 *   busy machine is wall time (docs/performance.md has both measured). Nothing needs one: the
 *   version ID changes with every write, and a large object on S3 (a multipart upload) has no
 *   MD5 ETag either, so a reader that checks content already cannot count on one for large
 *   objects. The ETag of such a version is its version ID (`"<ticks>-<rand>"`, see
 *   `./layout.ts`), which no check takes for an MD5.
 * - **Never a mix of two versions of the source.** The source's size, modification and change
 *   times and inode are compared before and after the copy (the change time moves with every
 *   write, and a process cannot set it back), and the copy must have exactly that size. A
 *   source that changed is a `StoreError` and nothing is stored. Every durability rule of the
 *   store stays: the temp is fsynced before the caller renames it.
 *
 * Only on Linux (other platforms keep the streaming path), with a `cp` at `/usr/bin/cp` or
 * `/bin/cp`.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { type BigIntStats, existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { debuglog } from 'node:util';
import { abortError, StoreError } from '../../src/core/errors.js';

const debug = debuglog('provcat:local');

/** Files from this size up are copied by the kernel; smaller ones stream. */
export const KERNEL_COPY_BYTES = 8 * 1024 * 1024;

/** How often the copy's progress is reported (the size of the temp file so far). */
const PROGRESS_MS = 250;

/** Most bytes of `cp`'s error output kept for the error message. */
const STDERR_BYTES = 4096;

/** What {@link copyFromFile} wrote. */
export interface CopiedFile {
  size: number;
}

/** Options of {@link copyFromFile}. */
export interface CopyOptions {
  /** `local://bucket/key`, for messages. */
  uri: string;
  signal?: AbortSignal | undefined;
  /**
   * Called with the bytes copied so far, a few times a second, and with the whole size once
   * `cp` is done (before the copy is checked and fsynced).
   */
  onProgress?: ((bytes: number) => void) | undefined;
}

let cpPath: string | null | undefined;

/** The `cp` to run, or `null` when the kernel copy does not apply on this system. */
function kernelCopier(): string | null {
  if (cpPath === undefined) {
    cpPath = null;
    if (process.platform === 'linux') {
      cpPath = ['/usr/bin/cp', '/bin/cp'].find((p) => existsSync(p)) ?? null;
    }
  }
  return cpPath;
}

/**
 * Copy the regular file `source` into a new file `temp` (created here, exclusively) with the
 * kernel (see the module comment), and fsync `temp`. Returns
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
    // Looked at before it is opened: opening a named pipe would wait for its writer.
    if (!isLarge(await fs.stat(source))) return undefined;
    input = await fs.open(source, 'r');
  } catch (error) {
    debug('kernel copy: cannot open %s (%s); streaming instead', source, String(error));
    return undefined;
  }
  try {
    const before = await input.stat({ bigint: true });
    if (!isLarge(before)) return undefined;
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
    const copied = await copyChecked(cp, input, before, source, output, temp, options);
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

/** Run `cp` into `temp`; check that the source did not change meanwhile. */
async function copyChecked(
  cp: string,
  input: fs.FileHandle,
  before: BigIntStats,
  source: string,
  output: fs.FileHandle,
  temp: string,
  options: CopyOptions,
): Promise<CopiedFile | undefined> {
  const { uri, signal, onProgress } = options;
  const child = runCopy(cp, source, temp);
  signal?.addEventListener('abort', child.kill, { once: true });
  let copying = true;
  const progress =
    onProgress === undefined
      ? undefined
      : setInterval(() => {
          output.stat().then(
            ({ size }) => copying && onProgress(size),
            (error: unknown) => debug('kernel copy: cannot stat %s: %s', temp, String(error)),
          );
        }, PROGRESS_MS);
  const exit = await child.exited;
  copying = false;
  clearInterval(progress);
  signal?.removeEventListener('abort', child.kill);
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
  const size = Number(before.size);
  onProgress?.(size);
  const after = await input.stat({ bigint: true });
  const named = await fs.stat(source, { bigint: true });
  const copied = (await output.stat()).size;
  if (changed(before, after) || changed(before, named) || copied !== size) {
    throw new StoreError(
      `${source} changed while it was copied to ${uri} (${size} bytes before, ${after.size} after); nothing was stored`,
      { uri },
    );
  }
  return { size };
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

/** True for a regular file the kernel copy is for (see {@link KERNEL_COPY_BYTES}). */
function isLarge(st: { isFile(): boolean; size: number | bigint }): boolean {
  return st.isFile() && st.size >= KERNEL_COPY_BYTES;
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
