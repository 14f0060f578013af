/**
 * Upload sources as one shape: something that fills a caller's buffer.
 *
 * The S3 pipeline reads each part straight into a pooled part buffer, so the source interface is
 * "fill this buffer as far as you can" rather than "give me your chunks": a file is read with
 * positioned reads into the buffer (no intermediate copies), a Node or web stream's chunks are
 * copied in and any remainder is kept for the next fill. A fill returns fewer bytes than asked
 * only at EOF.
 *
 * @module
 */
import { type FileHandle, open } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { ReadableStream } from 'node:stream/web';
import { NotFound, StoreError } from '../errors.js';
import { StageConfigError } from './errors.js';
import type { UploadSource } from './stage.js';

/** A source of upload bytes. */
export interface ChunkSource {
  /**
   * Fill `buffer[0, length)`; returns the byte count, which is less than `length` only at EOF
   * (and 0 once the source is exhausted).
   */
  fill(buffer: Buffer, length: number): Promise<number>;
  /** The size when it is known up front (a file: its size when opened). For progress only. */
  readonly size?: number | undefined;
  /** Release the file handle or stream (a stream not read to its end is destroyed/cancelled). */
  close(): Promise<void>;
}

class FileSource implements ChunkSource {
  private position = 0;
  constructor(
    private readonly handle: FileHandle,
    readonly size: number,
  ) {}

  async fill(buffer: Buffer, length: number): Promise<number> {
    let filled = 0;
    while (filled < length) {
      const { bytesRead } = await this.handle.read(buffer, filled, length - filled, this.position);
      if (bytesRead === 0) break;
      filled += bytesRead;
      this.position += bytesRead;
    }
    return filled;
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}

class StreamSource implements ChunkSource {
  private rest: Uint8Array | undefined;
  private done = false;
  private readonly iterator: AsyncIterator<unknown>;
  constructor(private readonly stream: Readable) {
    this.iterator = stream[Symbol.asyncIterator]();
  }

  async fill(buffer: Buffer, length: number): Promise<number> {
    let filled = 0;
    while (filled < length) {
      if (this.rest === undefined) {
        if (this.done) break;
        const next = await this.iterator.next();
        if (next.done) {
          this.done = true;
          break;
        }
        this.rest = toBytes(next.value);
      }
      const take = Math.min(this.rest.length, length - filled);
      buffer.set(take === this.rest.length ? this.rest : this.rest.subarray(0, take), filled);
      filled += take;
      this.rest = take === this.rest.length ? undefined : this.rest.subarray(take);
    }
    return filled;
  }

  async close(): Promise<void> {
    this.rest = undefined;
    if (!this.done) {
      this.done = true;
      // Not `iterator.return()`: that waits for a pending `next()`, which a stalled stream never
      // settles. Destroying the stream settles it (a web stream underneath is cancelled).
      this.stream.destroy();
    }
  }
}

function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  throw new StageConfigError(
    `upload streams must yield bytes (Buffer/Uint8Array), not ${typeof value === 'string' ? 'strings' : typeof value}`,
  );
}

function isWebStream(source: unknown): source is ReadableStream<Uint8Array> {
  return (
    typeof source === 'object' &&
    source !== null &&
    typeof (source as { getReader?: unknown }).getReader === 'function'
  );
}

/**
 * Open a source for reading. A path is opened read-only (NotFound when absent, StoreError for any
 * other failure to open it).
 */
export async function openSource(source: UploadSource): Promise<ChunkSource> {
  if (typeof source === 'string') {
    const handle = await openFile(source);
    try {
      return new FileSource(handle, (await handle.stat()).size);
    } catch (cause) {
      await handle.close();
      throw fsError(cause, `cannot stat ${source}`, source);
    }
  }
  if (source instanceof Readable) return new StreamSource(source);
  if (isWebStream(source)) return new StreamSource(Readable.fromWeb(source));
  throw new StageConfigError(
    'an upload source is a file path, a Node Readable or a web ReadableStream',
  );
}

/** Open a local file for reading, mapping `fs` errors to typed ones. */
export async function openFile(file: string): Promise<FileHandle> {
  try {
    return await open(file, 'r');
  } catch (cause) {
    throw fsError(cause, `cannot open ${file}`, file);
  }
}

/** Map an `fs` error: ENOENT/ENOTDIR → NotFound, anything else → StoreError; `cause` attached. */
export function fsError(cause: unknown, message: string, file: string): Error {
  const code = (cause as { code?: string }).code;
  if (code === 'ENOENT' || code === 'ENOTDIR')
    return new NotFound(`${message}: no such file`, { uri: file, cause });
  return new StoreError(`${message}: ${code ?? String(cause)}`, { uri: file, cause });
}
