/**
 * Where the parts of an upload come from: a local file, or a stream (or bytes). The upload
 * engine (engine.ts) hands these parts to a driver's part protocol, whatever the store.
 *
 * **A file is never held in memory.** Its size is known, so its parts are byte ranges. Each
 * part's body is a stream of its range, read from disk in small chunks through one file
 * handle opened at the start (a file renamed over the path mid-upload does not change what is
 * read), with a known ContentLength. A part that must be sent again re-reads its range. Memory
 * per part in flight is a few chunks, not the part. An SDK that sends a part again itself (a
 * retry after a reset) gets a body factory ({@link PartBody.restream}): each call after the
 * first reads the range from disk again.
 *
 * **A stream is read in order into pooled part buffers**, because a stream cannot be read
 * twice: a part holds its buffer from the moment it is read until the store has answered it, so
 * memory is bounded by `partsInFlight` × `partSize` (the engine in engine.ts bounds the parts
 * in flight). Buffers come from a {@link PartBufferPool}: reused part after part and dropped once
 * no upload is running. Bytes already in memory are sent as views, without a buffer.
 *
 * **Every body reports what the request reads** (`onRead` of {@link Part.body}): a file range
 * as it is read from disk, a buffer as views of 1 MiB handed to the request one at a time
 * ({@link PartBody.restream}). A stream hands out its next chunk only when the request has taken
 * the previous ones (backpressure), so the count follows the bytes the socket accepted within a
 * chunk or two; the engine's stall watchdog (engine.ts) counts them as progress. A buffer is
 * still given to the SDK as bytes — so the SDK signs its SHA-256 (the store checks every byte)
 * and retries it itself — and only the request each attempt writes streams it.
 *
 * **Digests (managed objects).** On request a source computes the SHA-256 of the whole object
 * in read order, and the SHA-256 of each part (for resumable checkpoints). For a stream both
 * come from the one read into the part buffer, which is then sent unchanged. For a file the
 * whole-object digest comes from one sequential read, running ahead of the uploads by at most a
 * few parts (the page cache then serves the ranges to the uploads), and a file can change
 * between that read and a range's. So the bytes hashed must be proven to be the bytes sent: each
 * range body is hashed as it streams to the socket, continuing the sequential hash's state at the
 * part's start (`Hash.copy()`), and once the store has acknowledged the part that digest must
 * equal the sequential hash's state at the part's end. Equal digests from the same state mean
 * equal bytes, so the whole-object digest describes exactly the bytes uploaded. This costs one
 * SHA-256 pass on the sending side instead of a per-part digest on both sides. A file whose
 * size or mtime differs after the last part from when it was opened, that ends early or grows,
 * or whose sent bytes differ from the hashed ones is {@link SourceChanged}, and the upload fails.
 *
 * @module
 */
import { createHash, type Hash } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { open } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { raceAbort } from '../core/concurrency.js';
import { SourceChanged, SourceError } from '../core/errors.js';

/** One attempt at sending a part: its body, and what to check once the store acknowledged it. */
export interface PartBody {
  /** The bytes (a buffer, or a stream of exactly the part's size). */
  body: Uint8Array | Readable;
  /**
   * A stream for one request, reporting to `onRead` (see `PartUpload.restream` in driver.ts): for
   * bytes in memory a fresh stream of views (no copy) each call, for the request of each attempt
   * the SDK makes to write instead of the bytes; for a file range `body` first, then a fresh
   * stream of the range each call (for an SDK that sends the body again itself). {@link sent}
   * checks the last stream handed out.
   */
  restream?: (() => Readable) | undefined;
  /**
   * After the store acknowledged the part: throw if what was sent is not what the source's
   * digests describe ({@link SourceChanged}).
   */
  sent(signal: AbortSignal): Promise<void>;
  /** Release the attempt's resources (a stream is destroyed if it has not ended). */
  dispose(): void;
}

/** One part of an upload, handed out by a {@link PartSource} in part-number order. */
export interface Part {
  /** 1-based part number. */
  readonly number: number;
  /** Bytes in the part. */
  readonly size: number;
  /**
   * May the engine send this part again after a retryable failure? True for file ranges (each
   * attempt re-reads the range); false for buffers, which the SDK itself retries.
   */
  readonly resendable: boolean;
  /** The part's SHA-256 (hex) when the source computes part digests, else `undefined`. */
  digest(signal: AbortSignal): Promise<string | undefined>;
  /**
   * A body for one attempt. `onRead(position)` is called as a request reads the body, with how
   * many bytes of the part that request has read so far (it starts again from 0 for each
   * request: another attempt, or a retry of the SDK's).
   */
  body(signal: AbortSignal, onRead?: (position: number) => void): Promise<PartBody>;
  /** The part is done with (sent, skipped or abandoned): give its buffer back. */
  release(): void;
}

/** What the source read, once every part was handed out and acknowledged. */
export interface SourceSummary {
  /** Bytes in the object. */
  size: number;
  /** SHA-256 (hex) of the whole object, when the source computes digests. */
  sha256: string | undefined;
}

/** The parts of one upload. */
export interface PartSource {
  /** Total bytes, when known up front (a file, or a stream of declared size). */
  readonly size: number | undefined;
  /** The next part, or `undefined` after the last. Called one at a time. */
  next(signal: AbortSignal): Promise<Part | undefined>;
  /** After the last part was acknowledged: final checks (the file unchanged) and the digest. */
  finish(signal: AbortSignal): Promise<SourceSummary>;
  /** Release the file or stream (a stream is destroyed when the upload failed). */
  close(failed: boolean): Promise<void>;
}

/** What a source computes besides the parts. */
export interface DigestOptions {
  /** SHA-256 of the whole object, in read order. */
  digest?: boolean | undefined;
  /** SHA-256 of each part. */
  partDigests?: boolean | undefined;
}

function message(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}

// ---- files -------------------------------------------------------------------------------

/** Bytes per read of a file (range bodies and the sequential digest read). */
const FILE_CHUNK = 1024 * 1024;

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
      new RangeStream(this.handle, this.path, start, size, startHash?.copy(), onRead);
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

/**
 * One byte range of a file as a stream, read in chunks at explicit positions (so several ranges
 * of one handle can stream at once). Each chunk is hashed into `hash`, and the bytes of the range
 * read so far reported to `onRead`, just before it is pushed (a chunk is read from disk only when
 * the request wants more). A file that ends early is {@link SourceChanged}.
 */
class RangeStream extends Readable {
  /** Bytes of the range not yet read. */
  remaining: number;
  private position: number;

  constructor(
    private readonly handle: FileHandle,
    private readonly path: string,
    private readonly start: number,
    size: number,
    /** Hashes what the stream reads (the part's start state, continued). */
    readonly hash: Hash | undefined,
    private readonly onRead: ((position: number) => void) | undefined,
  ) {
    super({ highWaterMark: FILE_CHUNK });
    this.position = start;
    this.remaining = size;
  }

  override _read(): void {
    if (this.remaining === 0) {
      this.push(null);
      return;
    }
    const length = Math.min(FILE_CHUNK, this.remaining);
    const buffer = Buffer.allocUnsafeSlow(length);
    this.handle.read(buffer, 0, length, this.position).then(
      ({ bytesRead }) => {
        if (this.destroyed) return;
        if (bytesRead === 0) {
          this.destroy(
            new SourceChanged(
              `${this.path} ended at byte ${this.position} while it was uploaded (it was longer when the upload began)`,
            ),
          );
          return;
        }
        const bytes = bytesRead === length ? buffer : buffer.subarray(0, bytesRead);
        this.hash?.update(bytes);
        this.position += bytesRead;
        this.remaining -= bytesRead;
        this.onRead?.(this.position - this.start);
        this.push(bytes);
        if (this.remaining === 0) this.push(null);
      },
      (cause: unknown) => {
        this.destroy(new SourceError(`reading ${this.path} failed: ${message(cause)}`, { cause }));
      },
    );
  }
}

// ---- streams and bytes -------------------------------------------------------------------

/**
 * Part buffers reused across the parts of the uploads of one store (or stage). A buffer is
 * taken when a part is read and given back when the store has answered it; the engine bounds the
 * parts in flight of each upload, so one upload holds at most `partsInFlight` buffers. Free
 * buffers are kept only while some upload uses the pool: an idle pool holds no part memory.
 * (Allocating a fresh 64 MiB buffer per part would cost a page-fault storm per part and leave
 * the garbage collector hundreds of MiB behind.)
 */
export class PartBufferPool {
  private readonly free = new Map<number, Buffer[]>();
  private users = 0;
  /** Buffers allocated over the pool's life (for tests and debug logs). */
  allocated = 0;

  /** An upload starts using the pool. Pair with {@link leave}. */
  enter(): void {
    this.users++;
  }

  /** An upload stops using the pool; the last one out drops the free buffers. */
  leave(): void {
    this.users--;
    if (this.users === 0) this.free.clear();
  }

  /** A buffer of exactly `size` bytes: a free one, else a new one. */
  take(size: number): Buffer {
    const reused = this.free.get(size)?.pop();
    if (reused) return reused;
    this.allocated++;
    // Not from Node's shared slab (that is for small buffers); contents are overwritten before use.
    return Buffer.allocUnsafeSlow(size);
  }

  /** Give a buffer back. It must not be used afterwards. */
  give(buffer: Buffer): void {
    if (this.users === 0) return;
    const list = this.free.get(buffer.length);
    if (list) list.push(buffer);
    else this.free.set(buffer.length, [buffer]);
  }
}

/** Reads a stream or bytes part by part. */
export interface PartReader {
  /** Whether {@link read} needs a buffer to fill (bytes in memory do not). */
  readonly buffered: boolean;
  /**
   * Read the next bytes into `target` (or, without a buffer, up to `size` bytes) until full or
   * the source ends. Returns the bytes: a view of `target` or of the source's own memory.
   * Shorter than asked only at the end of the source; empty after it. Failures are
   * {@link SourceError}.
   */
  read(target: Buffer | undefined, size: number): Promise<Uint8Array>;
  /** Release the source (destroy the stream when the upload failed or stopped early). */
  close(failed: boolean): Promise<void>;
}

/** Parts of a Node stream: chunks are copied into the part buffer. */
export class StreamReader implements PartReader {
  readonly buffered = true;
  private readonly iterator: AsyncIterator<unknown>;
  private leftover: Uint8Array | undefined;
  private ended = false;

  constructor(private readonly stream: Readable) {
    this.iterator = stream[Symbol.asyncIterator]();
  }

  async read(target: Buffer | undefined): Promise<Uint8Array> {
    if (!target) throw new TypeError('StreamReader.read needs a buffer');
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
          throw new SourceError(`the source stream failed: ${message(cause)}`, { cause });
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
    // Not `iterator.return()`: that waits for a pending `next()`, which a stalled stream never
    // settles. Destroying the stream settles it (a web stream underneath is cancelled).
    if ((failed || !this.ended) && !this.stream.destroyed) this.stream.destroy();
  }
}

function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  throw new SourceError(
    `the source stream yielded ${typeof value === 'string' ? 'strings' : typeof value}, not bytes (Buffer/Uint8Array)`,
  );
}

/** Parts of bytes in memory: views, no copies. */
export class BytesReader implements PartReader {
  readonly buffered = false;
  private offset = 0;
  constructor(private readonly bytes: Uint8Array) {}

  async read(_target: Buffer | undefined, size: number): Promise<Uint8Array> {
    const end = Math.min(this.bytes.length, this.offset + size);
    const view = this.bytes.subarray(this.offset, end);
    this.offset = end;
    return view;
  }

  async close(): Promise<void> {}
}

/**
 * Bytes in memory as a stream of views (no copies) of at most {@link FILE_CHUNK} bytes, handed
 * out when the consumer asks for more; the bytes handed out so far are reported to `onRead`.
 */
class BytesStream extends Readable {
  private offset = 0;
  constructor(
    private readonly bytes: Uint8Array,
    private readonly onRead: ((position: number) => void) | undefined,
  ) {
    super({ highWaterMark: FILE_CHUNK });
  }

  override _read(): void {
    if (this.offset >= this.bytes.length) {
      this.push(null);
      return;
    }
    const end = Math.min(this.bytes.length, this.offset + FILE_CHUNK);
    const view = this.bytes.subarray(this.offset, end);
    this.offset = end;
    this.onRead?.(end);
    this.push(view);
    if (this.offset >= this.bytes.length) this.push(null);
  }
}

/** A part of a {@link BufferedParts}: its bytes are in memory. */
export interface BufferedPart extends Part {
  /** The part's bytes (a view of its buffer, or of the caller's bytes). */
  readonly bytes: Uint8Array;
}

/** A signal that never aborts (for calls that need one when the caller gave none). */
const NEVER = new AbortController().signal;

/** Options of {@link BufferedParts}. */
export interface BufferedPartsOptions extends DigestOptions {
  partSize: number;
  /** Where part buffers come from. */
  pool: PartBufferPool;
  /** The size the caller declared: the source must be exactly this long ({@link SourceError}). */
  expectedSize?: number | undefined;
}

/** The parts of a stream or of bytes, each read into a pooled buffer; see the module comment. */
export class BufferedParts implements PartSource {
  readonly size: number | undefined;
  private number = 0;
  private total = 0;
  private ended = false;
  private pending: BufferedPart | undefined;
  private readonly whole: Hash | undefined;

  constructor(
    private readonly reader: PartReader,
    private readonly options: BufferedPartsOptions,
  ) {
    this.size = options.expectedSize;
    this.whole = options.digest ? createHash('sha256') : undefined;
    options.pool.enter();
  }

  /**
   * Read the first part ahead (so a caller can choose between one plain put and a multipart
   * upload); {@link next} hands it out. `undefined` for an empty source.
   */
  async peek(signal: AbortSignal = NEVER): Promise<BufferedPart | undefined> {
    this.pending ??= await this.read(signal);
    return this.pending;
  }

  async next(signal: AbortSignal): Promise<Part | undefined> {
    const pending = this.pending;
    this.pending = undefined;
    return pending ?? this.read(signal);
  }

  private async read(signal: AbortSignal): Promise<BufferedPart | undefined> {
    if (this.ended) return undefined;
    const { partSize, pool, expectedSize } = this.options;
    const buffer = this.reader.buffered ? pool.take(partSize) : undefined;
    let data: Uint8Array;
    try {
      data = await raceAbort(this.reader.read(buffer, partSize), signal);
    } catch (error) {
      // The read may still be writing into the buffer: it is never handed out again.
      this.ended = true;
      throw error;
    }
    const release = () => {
      if (buffer) pool.give(buffer);
    };
    if (data.length < partSize) this.ended = true;
    if (data.length === 0) {
      release();
      return undefined;
    }
    this.total += data.length;
    if (expectedSize !== undefined && this.total > expectedSize) {
      release();
      throw new SourceError(`the source is longer than its declared size of ${expectedSize} bytes`);
    }
    this.whole?.update(data);
    const sha256 = this.options.partDigests
      ? createHash('sha256').update(data).digest('hex')
      : undefined;
    return {
      number: ++this.number,
      size: data.length,
      bytes: data,
      resendable: false,
      digest: async () => sha256,
      body: async (_signal, onRead) => ({
        body: data,
        restream: () => new BytesStream(data, onRead),
        sent: async () => {},
        dispose: () => {},
      }),
      release,
    };
  }

  async finish(): Promise<SourceSummary> {
    const { expectedSize } = this.options;
    if (expectedSize !== undefined && this.total !== expectedSize) {
      throw new SourceError(
        `the source ended after ${this.total} of its declared ${expectedSize} bytes`,
      );
    }
    return { size: this.total, sha256: this.whole?.digest('hex') };
  }

  async close(failed: boolean): Promise<void> {
    this.pending?.release();
    this.pending = undefined;
    this.options.pool.leave();
    await this.reader.close(failed);
  }
}
