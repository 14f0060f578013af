/**
 * The parts of a stream (or of bytes) for the upload engine (engine.ts).
 *
 * **A stream is read in order into pooled part buffers**, because a stream cannot be read
 * twice: a part holds its buffer from the moment it is read until the store has answered it, so
 * memory is bounded by `partsInFlight` × `partSize` (the engine in engine.ts bounds the parts
 * in flight). Buffers come from a {@link PartBufferPool} (buffer-pool.ts): reused part after part
 * and dropped once no upload is running. Bytes already in memory are sent as views, without a
 * buffer. A body is the part's bytes, with a stream of views for the request of each attempt
 * ({@link BytesStream}).
 *
 * **Digests (managed objects).** On request the source computes the SHA-256 of the whole object
 * in read order, and the SHA-256 of each part (for resumable checkpoints), both from the one read
 * into the part buffer, which is then sent unchanged.
 *
 * @module
 */
import { createHash, type Hash } from 'node:crypto';
import { raceAbort } from '../core/concurrency.js';
import { SourceError } from '../core/errors.js';
import { BytesStream } from './body-streams.js';
import type { PartBufferPool } from './buffer-pool.js';
import type { DigestOptions, Part, PartSource, SourceSummary } from './part-source.js';
import type { PartReader } from './stream-readers.js';

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
