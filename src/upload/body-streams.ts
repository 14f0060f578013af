/**
 * Part bodies as streams that report what the request has read (see part-source.ts): a byte
 * range of a file, re-read from disk for each stream ({@link RangeStream}), and bytes in memory
 * as views handed out one chunk at a time ({@link BytesStream}). Each hands out a chunk only when
 * the consumer asks for more, so the bytes reported follow the bytes the socket accepted.
 *
 * @module
 */
import type { Hash } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { SourceChanged, SourceError } from '../core/errors.js';
import { causeMessage as message } from './part-source.js';

/** Bytes per read of a file (range bodies and the sequential digest read). */
export const FILE_CHUNK = 1024 * 1024;

/** Options of {@link RangeStream}. */
export interface RangeStreamOptions {
  /** The file, open for reading (shared by the ranges of one upload). */
  handle: FileHandle;
  /** The file's path, for messages. */
  path: string;
  /** Offset of the range's first byte in the file. */
  start: number;
  /** Bytes in the range. */
  size: number;
  /** Hashes what the stream reads (the part's start state, continued). */
  hash: Hash | undefined;
  /** Called with the bytes of the range read so far, before each chunk is pushed. */
  onRead: ((position: number) => void) | undefined;
}

/**
 * One byte range of a file as a stream, read in chunks at explicit positions (so several ranges
 * of one handle can stream at once). Each chunk is hashed into `hash`, and the bytes of the range
 * read so far reported to `onRead`, just before it is pushed (a chunk is read from disk only when
 * the request wants more). A file that ends early is {@link SourceChanged}.
 */
export class RangeStream extends Readable {
  /** Bytes of the range not yet read. */
  remaining: number;
  private position: number;

  private readonly handle: FileHandle;
  private readonly path: string;
  private readonly start: number;
  /** Hashes what the stream reads (the part's start state, continued). */
  readonly hash: Hash | undefined;
  private readonly onRead: ((position: number) => void) | undefined;

  constructor(options: RangeStreamOptions) {
    super({ highWaterMark: FILE_CHUNK });
    this.handle = options.handle;
    this.path = options.path;
    this.start = options.start;
    this.hash = options.hash;
    this.onRead = options.onRead;
    this.position = options.start;
    this.remaining = options.size;
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

/**
 * Bytes in memory as a stream of views (no copies) of at most {@link FILE_CHUNK} bytes, handed
 * out when the consumer asks for more; the bytes handed out so far are reported to `onRead`.
 */
export class BytesStream extends Readable {
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
