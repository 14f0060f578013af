/**
 * Reading an upload's source in parts, into reused buffers.
 *
 * A multipart upload holds at most `partsInFlight` parts in memory. The buffers come from a
 * {@link PartBufferPool} shared by every upload of one store: a buffer is allocated only when
 * no free one exists and fewer than the pool's maximum are out, reused part after part (and by
 * concurrent uploads, which then share the same memory bound), and dropped once no upload is
 * running, so an idle store holds no part memory. Allocating a fresh 64 MiB buffer per part
 * would cost a page-fault storm per part and leave the garbage collector hundreds of MiB behind.
 *
 * A {@link PartReader} fills a buffer from a file (positioned reads straight into the buffer,
 * no intermediate chunks), a Node stream (chunks copied in), or bytes already in memory (no copy
 * at all: parts are views of the caller's bytes).
 *
 * @module
 */
import type { FileHandle } from 'node:fs/promises';
import { open } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { ProvcatError } from '../../src/errors.js';

/** A failure of the upload's source (the file or stream being uploaded), not of the store. */
export class SourceError extends ProvcatError {}

/** Reads an upload source part by part. */
export interface PartReader {
  /**
   * Read the next bytes into `target` until it is full or the source ends. Returns the bytes
   * read: a view of `target`, or of the source's own memory. Shorter than `target` only at the
   * end of the source; empty after it. Source failures are {@link SourceError}.
   */
  read(target: Buffer): Promise<Uint8Array>;
  /** Release the source (close the file; destroy the stream when the upload failed). */
  close(failed: boolean): Promise<void>;
}

/** Parts of a local file, read with positioned reads straight into the part buffer. */
export class FileReader implements PartReader {
  private position = 0;
  private constructor(
    private readonly handle: FileHandle,
    private readonly path: string,
  ) {}

  /** Open `path` for reading. */
  static async open(path: string): Promise<FileReader> {
    try {
      return new FileReader(await open(path, 'r'), path);
    } catch (cause) {
      throw new SourceError(`cannot open ${path}: ${(cause as Error).message}`, { cause });
    }
  }

  async read(target: Buffer): Promise<Uint8Array> {
    let filled = 0;
    try {
      while (filled < target.length) {
        const { bytesRead } = await this.handle.read(
          target,
          filled,
          target.length - filled,
          this.position,
        );
        if (bytesRead === 0) break;
        filled += bytesRead;
        this.position += bytesRead;
      }
    } catch (cause) {
      throw new SourceError(`reading ${this.path} failed: ${(cause as Error).message}`, { cause });
    }
    return target.subarray(0, filled);
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}

/** Parts of a Node stream: chunks are copied into the part buffer. */
export class StreamReader implements PartReader {
  private readonly iterator: AsyncIterator<unknown>;
  private leftover: Uint8Array | undefined;
  private ended = false;

  constructor(private readonly stream: Readable) {
    this.iterator = stream[Symbol.asyncIterator]();
  }

  async read(target: Buffer): Promise<Uint8Array> {
    let filled = 0;
    while (filled < target.length) {
      let chunk = this.leftover;
      this.leftover = undefined;
      if (chunk === undefined) {
        if (this.ended) break;
        let next: IteratorResult<unknown>;
        try {
          next = await this.iterator.next();
        } catch (cause) {
          throw new SourceError(`the source stream failed: ${(cause as Error).message}`, { cause });
        }
        if (next.done) {
          this.ended = true;
          break;
        }
        chunk = toBytes(next.value);
      }
      const n = Math.min(chunk.length, target.length - filled);
      target.set(n === chunk.length ? chunk : chunk.subarray(0, n), filled);
      filled += n;
      if (n < chunk.length) this.leftover = chunk.subarray(n);
    }
    return target.subarray(0, filled);
  }

  async close(failed: boolean): Promise<void> {
    if (failed && !this.stream.destroyed) this.stream.destroy();
  }
}

function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  throw new SourceError(
    `the source stream yielded ${typeof value}, not bytes (an object-mode stream cannot be uploaded)`,
  );
}

/** Parts of bytes in memory: views, no copies. */
export class BytesReader implements PartReader {
  private offset = 0;
  constructor(private readonly bytes: Uint8Array) {}

  async read(target: Buffer): Promise<Uint8Array> {
    const end = Math.min(this.bytes.length, this.offset + target.length);
    const view = this.bytes.subarray(this.offset, end);
    this.offset = end;
    return view;
  }

  async close(): Promise<void> {}
}

/**
 * Part buffers shared by the uploads of one store; see the module comment. At most `max`
 * buffers of `size` bytes exist at once.
 */
export class PartBufferPool {
  private readonly free: Buffer[] = [];
  private allocated = 0;
  private users = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(
    /** Bytes per buffer. */
    readonly size: number,
    /** Most buffers out at once. */
    readonly max: number,
  ) {}

  /** Buffers currently allocated (free or in use); for tests and debug logs. */
  get allocatedCount(): number {
    return this.allocated;
  }

  /** An upload starts using the pool. Pair with {@link leave}. */
  enter(): void {
    this.users++;
  }

  /** An upload stops using the pool; the last one out drops the free buffers. */
  leave(): void {
    this.users--;
    if (this.users === 0) {
      this.allocated -= this.free.length;
      this.free.length = 0;
    }
  }

  /** A buffer: a free one, a new one while fewer than `max` exist, else the next one released. */
  async acquire(signal?: AbortSignal): Promise<Buffer> {
    for (;;) {
      signal?.throwIfAborted();
      const buffer = this.free.pop();
      if (buffer) return buffer;
      if (this.allocated < this.max) {
        this.allocated++;
        return Buffer.allocUnsafe(this.size);
      }
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          const i = this.waiters.indexOf(wake);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(signal?.reason);
        };
        const wake = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        this.waiters.push(wake);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    }
  }

  /** Give a buffer back for reuse. */
  release(buffer: Buffer): void {
    if (this.users === 0) this.allocated--;
    else this.free.push(buffer);
    this.waiters.shift()?.();
  }

  /**
   * Forget a buffer that may still be written to (a read abandoned mid-way): it is never handed
   * out again, and a new one may be allocated in its place.
   */
  discard(): void {
    this.allocated--;
    this.waiters.shift()?.();
  }
}
