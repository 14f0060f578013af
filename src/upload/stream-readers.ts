/**
 * Reading a stream or bytes part by part for `BufferedParts` (buffered-parts.ts): a Node
 * stream's chunks are copied into the part buffer ({@link StreamReader}), bytes in memory are
 * handed out as views ({@link BytesReader}).
 *
 * @module
 */
import type { Readable } from 'node:stream';
import { SourceError } from '../core/errors.js';
import { causeMessage as message } from './part-source.js';

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
