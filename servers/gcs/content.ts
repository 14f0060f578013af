/**
 * The bytes of one stored object generation, kept as the chunks they arrived in, with their
 * MD5 and CRC32C computed once, as the data came in. A composite's content has a CRC32C and
 * no MD5, as on GCS ("Composite objects do not have an MD5 hash metadata field",
 * cloud.google.com/storage/docs/composite-objects).
 *
 * Why chunks and not one Buffer: a resumable upload of hundreds of MiB arrives in many
 * requests; concatenating would copy the whole object once more per chunk or at the end, and
 * the server shares the machine with the suites it serves. Reads walk the chunks and hand out
 * subarrays (no copies).
 *
 * @module
 */
import { createHash, type Hash } from 'node:crypto';
import { crc32c, crc32cBase64 } from '../../src/core/crc32c.js';

/** Immutable object bytes with their digests. */
export class Content {
  /** The chunks, in order; never mutated after construction. */
  readonly chunks: readonly Buffer[];
  /** Total size in bytes. */
  readonly size: number;
  /** MD5 of the bytes, base64 (the JSON API's `md5Hash`); `undefined` for a composite. */
  readonly md5: string | undefined;
  /** CRC32C of the bytes, base64 of the big-endian value (the JSON API's `crc32c`). */
  readonly crc32c: string;

  constructor(chunks: readonly Buffer[], size: number, md5: string | undefined, crc: string) {
    this.chunks = chunks;
    this.size = size;
    this.md5 = md5;
    this.crc32c = crc;
  }

  /** Content of one buffer, with its MD5. */
  static of(data: Buffer): Content & { readonly md5: string } {
    const builder = new ContentBuilder();
    builder.append(data);
    return builder.build() as Content & { readonly md5: string };
  }

  /**
   * Concatenation of several contents (compose): the CRC32C recomputed over the bytes, no MD5
   * (GCS gives a composite none).
   */
  static concat(parts: readonly Content[]): Content {
    const builder = new ContentBuilder(false);
    for (const part of parts) for (const chunk of part.chunks) builder.append(chunk);
    return builder.build();
  }

  /** The MD5 in hex (the XML API's ETag), or `undefined` for a composite. */
  md5Hex(): string | undefined {
    return this.md5 === undefined ? undefined : Buffer.from(this.md5, 'base64').toString('hex');
  }

  /** The bytes in [start, end) as subarrays of the stored chunks, in order. */
  *range(start: number, end: number): Generator<Buffer> {
    let offset = 0;
    for (const chunk of this.chunks) {
      const chunkEnd = offset + chunk.length;
      if (chunkEnd > start && offset < end) {
        yield chunk.subarray(Math.max(0, start - offset), Math.min(chunk.length, end - offset));
      }
      offset = chunkEnd;
      if (offset >= end) return;
    }
  }

  /** The bytes in [start, end) as one Buffer (a copy; for small reads and comparisons). */
  slice(start: number, end: number): Buffer {
    return Buffer.concat([...this.range(start, end)]);
  }
}

/** Accumulates chunks and their digests; {@link build} freezes them into a {@link Content}. */
export class ContentBuilder {
  private readonly chunks: Buffer[] = [];
  private readonly md5: Hash | undefined;
  private crc = 0;
  private bytes = 0;

  /** `md5: false` computes no MD5 (a composite's content). */
  constructor(md5 = true) {
    this.md5 = md5 ? createHash('md5') : undefined;
  }

  /** Bytes appended so far. */
  get size(): number {
    return this.bytes;
  }

  /** Appends bytes (kept by reference: the caller must not reuse the buffer). */
  append(data: Buffer): void {
    if (data.length === 0) return;
    this.chunks.push(data);
    this.md5?.update(data);
    this.crc = crc32c(data, this.crc);
    this.bytes += data.length;
  }

  /** The content appended so far; the builder must not be used afterwards. */
  build(): Content {
    return new Content(
      this.chunks.slice(),
      this.bytes,
      this.md5?.digest('base64'),
      crc32cBase64(this.crc),
    );
  }
}
