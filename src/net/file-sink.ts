/**
 * Writing a downloaded body into a file descriptor, with the cache's durability.
 *
 * The same pattern as `Cache.installBlob` (src/cache/cache.ts), for bodies delivered by
 * src/net/http1-download.ts instead of a Readable:
 * - large writes: the download module hands over up to a whole read buffer (1 MiB) per chunk,
 *   and {@link FileSink.batchBytes} asks it to gather at least that much when it can, so a
 *   GiB is about a thousand writes (one thread-pool round trip each, or a direct system call
 *   with `direct`);
 * - an early `fdatasync` after every `syncEveryBytes` (64 MiB) written, at most one in flight:
 *   the disk writes while the download runs, the final `fsync` finds little left, and dirty
 *   page cache stays bounded because the next early sync waits for the previous one;
 * - an optional hash (SHA-256 for managed objects) fed with every chunk, in order, before it
 *   is written.
 *
 * Chunks are written before `data` resolves, so the download module may reuse their memory
 * right after. A failed early sync is reported by the next write or by {@link FileSink.finish},
 * never lost.
 *
 * @module
 */
import { fdatasync, fsync, write, writeSync } from 'node:fs';
import type { BodySink } from '../contract/primitives.js';
import type { Http1Response } from './http1-download.js';

/** Default bytes between early `fdatasync` calls (as `installBlob`). */
export const DEFAULT_SYNC_EVERY_BYTES = 64 * 1024 * 1024;
/** Default least chunk size asked of the download (as `installBlob`'s write batches). */
export const DEFAULT_WRITE_BATCH_BYTES = 1024 * 1024;

/** Options of {@link FileSink}. */
export interface FileSinkOptions {
  /** Start an `fdatasync` after every this many bytes (0: never). Default 64 MiB. */
  syncEveryBytes?: number | undefined;
  /** The least chunk size asked of the download. Default 1 MiB. */
  batchBytes?: number | undefined;
  /**
   * Write with direct `writeSync` calls on the event loop instead of the thread pool. Each
   * blocks the loop for the copy into the page cache (about 0.1–0.3 ms per MiB here).
   * Default false.
   */
  direct?: boolean | undefined;
  /** Called after each write with its byte count (progress). */
  onBytes?: ((n: number) => void) | undefined;
  /** Fed every chunk in order before it is written (e.g. `createHash('sha256')`). */
  hash?: { update(data: Uint8Array): unknown } | undefined;
}

/** Options of {@link FileSink.finish} and {@link pipeToFile}. */
export interface FinishOptions {
  /** `fsync` the file at the end (the cache's durability). Default true. */
  sync?: boolean | undefined;
}

/**
 * A {@link BodySink} that writes each chunk at the descriptor's current position. The caller
 * owns `fd`: it opens it before and closes it after {@link finish} or {@link settle}.
 */
export class FileSink implements BodySink {
  readonly batchBytes: number;
  /** Bytes written so far. */
  written = 0;
  private flushed = 0;
  private flushing: Promise<void> | undefined;
  private flushError: unknown;
  private readonly syncEvery: number;

  constructor(
    private readonly fd: number,
    private readonly options: FileSinkOptions = {},
  ) {
    this.batchBytes = options.batchBytes ?? DEFAULT_WRITE_BATCH_BYTES;
    this.syncEvery = options.syncEveryBytes ?? DEFAULT_SYNC_EVERY_BYTES;
  }

  /** Hash and write one chunk; resolves once it is written (and, at a sync point, queued). */
  data(chunk: Buffer): void | Promise<void> {
    this.options.hash?.update(chunk);
    if (this.options.direct) {
      let at = 0;
      while (at < chunk.length) at += writeSync(this.fd, chunk, at, chunk.length - at);
      return this.wrote(chunk.length);
    }
    return writeAll(this.fd, chunk).then(() => this.wrote(chunk.length));
  }

  /**
   * Wait for the early sync in flight, then (by default) `fsync`. Resolves with the bytes
   * written. Rejects with a failed early or final sync's error.
   */
  async finish(options: FinishOptions = {}): Promise<number> {
    await this.flushing;
    this.flushing = undefined;
    if (this.flushError !== undefined) throw this.flushError;
    if (options.sync ?? true) {
      await new Promise<void>((resolve, reject) =>
        fsync(this.fd, (error) => (error ? reject(error) : resolve())),
      );
    }
    return this.written;
  }

  /** After a failure: wait until no sync is in flight, so the caller may close `fd`. */
  async settle(): Promise<void> {
    await this.flushing;
  }

  private wrote(n: number): void | Promise<void> {
    this.written += n;
    this.options.onBytes?.(n);
    if (this.flushError !== undefined) throw this.flushError;
    if (this.syncEvery <= 0 || this.written - this.flushed < this.syncEvery) return;
    // At most one early sync in flight: the next waits for the previous (bounded dirty pages).
    const previous = this.flushing;
    const start = () => {
      if (this.flushError !== undefined) throw this.flushError;
      this.flushed = this.written;
      this.flushing = new Promise<void>((resolve) =>
        fdatasync(this.fd, (error) => {
          if (error) this.flushError = error;
          resolve();
        }),
      );
    };
    if (previous === undefined) return start();
    return previous.then(start);
  }
}

/** Write all of `chunk` at the current position through the thread pool. */
function writeAll(fd: number, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const step = (at: number) => {
      write(fd, chunk, at, chunk.length - at, null, (error, n) => {
        if (error) reject(error);
        else if (at + n < chunk.length) step(at + n);
        else resolve();
      });
    };
    step(0);
  });
}

/**
 * Write `response`'s body into `fd` with a {@link FileSink}, then (by default) `fsync`.
 * Resolves with the byte count, which equals `response.contentLength`. On failure, waits until
 * no write or sync is in flight, then rejects (the caller closes `fd` and removes the file).
 */
export async function pipeToFile(
  response: Http1Response,
  fd: number,
  options: FileSinkOptions & FinishOptions = {},
): Promise<number> {
  const sink = new FileSink(fd, options);
  try {
    await response.pipeTo(sink);
    return await sink.finish(options);
  } catch (error) {
    await sink.settle();
    throw error;
  }
}
