/**
 * The parts of a local file for the upload engine (engine.ts).
 *
 * **A file is never held in memory.** Its size is known, so its parts are byte ranges. Each
 * part's body is a stream of its range ({@link RangeStream}, body-streams.ts), read from disk in
 * small chunks through one file handle opened at the start (a file renamed over the path
 * mid-upload does not change what is read), with a known ContentLength. A part that must be sent
 * again re-reads its range. Memory per part in flight is a few chunks, not the part. An SDK that
 * sends a part again itself (a retry after a reset) gets a body factory
 * ({@link PartBody.restream}): each call after the first reads the range from disk again.
 *
 * **Digests (managed objects).** On request the source computes the SHA-256 of the whole object
 * in read order, and the SHA-256 of each part (for resumable checkpoints). The whole-object
 * digest comes from one sequential read, running ahead of the uploads by at most a few parts (the
 * page cache then serves the ranges to the uploads), and a file can change between that read and
 * a range's. So the bytes hashed must be proven to be the bytes sent: each range body is hashed
 * as it streams to the socket, continuing the sequential hash's state at the part's start
 * (`Hash.copy()`), and once the store has acknowledged the part that digest must equal the
 * sequential hash's state at the part's end. Equal digests from the same state mean equal bytes,
 * so the whole-object digest describes exactly the bytes uploaded. This costs one SHA-256 pass on
 * the sending side instead of a per-part digest on both sides. A file whose size or mtime differs
 * after the last part from when it was opened, that ends early or grows, or whose sent bytes
 * differ from the hashed ones is {@link SourceChanged}, and the upload fails.
 *
 * @module
 */
import { createHash, type Hash } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { open } from 'node:fs/promises';
import { raceAbort } from '../core/concurrency.js';
import { SourceChanged, SourceError } from '../core/errors.js';
import { FILE_CHUNK, RangeStream } from './body-streams.js';
import {
  type DigestOptions,
  causeMessage as message,
  type Part,
  type PartBody,
  type PartSource,
  type SourceSummary,
} from './part-source.js';

/** Options of {@link FileParts}. */
export interface FilePartsOptions extends DigestOptions {
  /** Bytes per part (the last may be shorter). */
  partSize: number;
  /**
   * How many parts the sequential digest read may run ahead of the last part handed out
   * (default 2): enough that no upload waits for it, few enough that the page cache still
   * holds what it read when the uploads read it again.
   */
  lookahead?: number | undefined;
}

/** A change notification: `wait()` resolves at the next `notify()`. */
class Signal {
  private waiters: Array<() => void> = [];
  notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
  wait(signal: AbortSignal): Promise<void> {
    return raceAbort(
      new Promise<void>((resolve) => {
        this.waiters.push(resolve);
      }),
      signal,
    );
  }
}

/** The parts of a local file, as byte ranges streamed from disk; see the module comment. */
export class FileParts implements PartSource {
  /** The file's size when opened. */
  readonly size: number;
  /** The file's mtime (ms) when opened. */
  readonly mtimeMs: number;
  /** Number of parts (0 for an empty file). */
  readonly count: number;
  private handedOut = 0;
  private readonly lookahead: number;
  private readonly changed = new Signal();
  private closed = false;
  // Sequential digest read (digest or partDigests): how far it got and what it found.
  private readonly hashing: Promise<void> | undefined;
  private hashed = 0;
  private hashFailure: { error: unknown } | undefined;
  private wholeSha256: string | undefined;
  /** Hash state at the start of each part not yet acknowledged (digest mode). */
  private readonly starts = new Map<number, Hash>();
  /** Expected chained digest at the end of each part not yet acknowledged (digest mode). */
  private readonly ends = new Map<number, string>();
  private readonly partSha256 = new Map<number, string>();

  private constructor(
    private readonly handle: FileHandle,
    /** The path, for messages. */
    readonly path: string,
    stats: { size: number; mtimeMs: number },
    private readonly options: FilePartsOptions,
  ) {
    this.size = stats.size;
    this.mtimeMs = stats.mtimeMs;
    this.count = Math.ceil(this.size / options.partSize);
    this.lookahead = Math.max(1, options.lookahead ?? 2);
    if (options.digest || options.partDigests) {
      this.hashing = this.hashAll().catch((error: unknown) => {
        this.hashFailure = { error };
        this.changed.notify();
      });
    }
  }

  /**
   * Open `path` for reading (SourceError when it cannot be opened or is not a regular file). The
   * open does not block: a FIFO is refused instead of waiting for a writer.
   */
  static async open(path: string, options: FilePartsOptions): Promise<FileParts> {
    let handle: FileHandle;
    try {
      handle = await open(path, fsc.O_RDONLY | fsc.O_NONBLOCK);
    } catch (cause) {
      throw new SourceError(`cannot open ${path}: ${message(cause)}`, { cause });
    }
    return FileParts.fromHandle(handle, path, options);
  }

  /** Take over an open file handle (closed by {@link close}, or here on failure). */
  static async fromHandle(
    handle: FileHandle,
    path: string,
    options: FilePartsOptions,
  ): Promise<FileParts> {
    try {
      const stats = await handle.stat();
      if (!stats.isFile()) throw new Error('not a regular file');
      return new FileParts(handle, path, stats, options);
    } catch (cause) {
      await handle.close();
      throw new SourceError(`cannot upload ${path}: ${message(cause)}`, { cause });
    }
  }

  async next(): Promise<Part | undefined> {
    if (this.handedOut >= this.count) return undefined;
    const number = ++this.handedOut;
    this.changed.notify(); // the digest read may go further
    const start = (number - 1) * this.options.partSize;
    const size = Math.min(this.options.partSize, this.size - start);
    return {
      number,
      size,
      resendable: true,
      digest: (signal) => this.partDigest(number, signal),
      body: (signal, onRead) => this.rangeBody(number, start, size, signal, onRead),
      release: () => {
        this.starts.delete(number);
        this.ends.delete(number);
        this.partSha256.delete(number);
      },
    };
  }

  private async rangeBody(
    number: number,
    start: number,
    size: number,
    signal: AbortSignal,
    onRead: ((position: number) => void) | undefined,
  ): Promise<PartBody> {
    let startHash: Hash | undefined;
    if (this.options.digest) {
      await this.reach(number - 1, signal);
      startHash = this.starts.get(number) as Hash;
    }
    // Each stream of the range hashes what it reads from the part's start state: the digest
    // checked once the part is acknowledged is that of the stream the store took last.
    const open = () =>
      new RangeStream({
        handle: this.handle,
        path: this.path,
        start,
        size,
        hash: startHash?.copy(),
        onRead,
      });
    let current = open();
    let handedOut = false;
    return {
      body: current,
      restream: () => {
        if (!handedOut) {
          handedOut = true;
          return current;
        }
        if (!current.destroyed) current.destroy();
        current = open();
        return current;
      },
      sent: async (signal) => {
        const stream = current;
        if (stream.remaining !== 0) {
          throw new SourceChanged(
            `${this.path}: part ${number} was acknowledged after ${size - stream.remaining} of its ${size} bytes were read`,
          );
        }
        if (!stream.hash) return;
        await this.reach(number, signal);
        if (stream.hash.digest('hex') !== this.ends.get(number)) {
          throw new SourceChanged(
            `${this.path} changed while it was uploaded: the bytes sent in part ${number} are not the bytes hashed`,
          );
        }
      },
      dispose: () => {
        if (!current.destroyed) current.destroy();
      },
    };
  }

  private async partDigest(number: number, signal: AbortSignal): Promise<string | undefined> {
    if (!this.options.partDigests) return undefined;
    await this.reach(number, signal);
    return this.partSha256.get(number);
  }

  /** Wait until the sequential read has hashed parts 1..`number`. */
  private async reach(number: number, signal: AbortSignal): Promise<void> {
    for (;;) {
      if (this.hashFailure) throw this.hashFailure.error;
      if (this.hashed >= number) return;
      await this.changed.wait(signal);
    }
  }

  /** The sequential read: whole-object digest, part digests, and the chained states. */
  private async hashAll(): Promise<void> {
    const { partSize, digest, partDigests } = this.options;
    const buffer = Buffer.allocUnsafeSlow(Math.min(FILE_CHUNK, Math.max(1, this.size)));
    const whole = createHash('sha256');
    if (digest) this.starts.set(1, whole.copy());
    const stop = new AbortController();
    for (let number = 1; number <= this.count; number++) {
      while (number > this.handedOut + this.lookahead && !this.closed) {
        await this.changed.wait(stop.signal);
      }
      if (this.closed) return;
      const part = partDigests ? createHash('sha256') : undefined;
      const end = Math.min(this.size, number * partSize);
      for (let position = (number - 1) * partSize; position < end; ) {
        const { bytesRead } = await this.read(
          buffer,
          Math.min(buffer.length, end - position),
          position,
        );
        if (bytesRead === 0) {
          throw new SourceChanged(
            `${this.path} ended after ${position} bytes while it was uploaded; it had ${this.size} when the upload began`,
          );
        }
        const bytes = buffer.subarray(0, bytesRead);
        whole.update(bytes);
        part?.update(bytes);
        position += bytesRead;
      }
      if (digest) {
        this.ends.set(number, whole.copy().digest('hex'));
        if (number < this.count) this.starts.set(number + 1, whole.copy());
      }
      if (part) this.partSha256.set(number, part.digest('hex'));
      this.hashed = number;
      this.changed.notify();
    }
    const { bytesRead } = await this.read(buffer, 1, this.size);
    if (bytesRead !== 0) {
      throw new SourceChanged(
        `${this.path} grew while it was uploaded; it had ${this.size} bytes when the upload began`,
      );
    }
    this.wholeSha256 = whole.digest('hex');
  }

  private async read(buffer: Buffer, length: number, position: number) {
    try {
      return await this.handle.read(buffer, 0, length, position);
    } catch (cause) {
      throw new SourceError(`reading ${this.path} failed: ${message(cause)}`, { cause });
    }
  }

  async finish(): Promise<SourceSummary> {
    if (this.hashing) {
      await this.hashing;
      if (this.hashFailure) throw this.hashFailure.error;
    }
    let now: { size: number; mtimeMs: number };
    try {
      now = await this.handle.stat();
    } catch (cause) {
      throw new SourceError(`cannot stat ${this.path}: ${message(cause)}`, { cause });
    }
    if (now.size !== this.size || now.mtimeMs !== this.mtimeMs) {
      throw new SourceChanged(
        `${this.path} changed while it was uploaded (size ${this.size} -> ${now.size}, mtime ${this.mtimeMs} -> ${now.mtimeMs})`,
      );
    }
    return { size: this.size, sha256: this.wholeSha256 };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.changed.notify();
    await this.hashing;
    // Waits for reads still pending on the handle (a range body abandoned mid-read).
    await this.handle.close();
  }
}
