/**
 * Files of one record per line, written and read in order: where a push keeps what does not fit
 * in memory at millions of files (its plan, src/folders/push-plan.ts; its index,
 * src/folders/push-index.ts; the digests it hands a commit, src/folders/pushed-digests.ts).
 *
 * A line ends in `\n` and holds no other newline; its fields are separated by tabs, and a string
 * that could break that (or read as something else) is written as JSON ({@link field}).
 * Writes are buffered to {@link CHUNK} bytes, and reads come a chunk at a time, so a million lines
 * cost a few hundred system calls and awaits, not a million: a writer's `add` returns a promise
 * only when it flushes, and a reader hands out the lines of one chunk per await (or, for a file
 * read alongside another pass, synchronously: {@link LineCursor}).
 *
 * @module
 */
import { closeSync, createReadStream, openSync, readSync } from 'node:fs';
import { type FileHandle, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { fsyncDir, tempPathFor } from '../core/fs-atomic.js';

/** Bytes buffered by a writer (1 MiB). */
export const CHUNK = 1024 * 1024;

/**
 * Bytes read at a time by a reader (64 KiB): a batch of a few hundred lines, whose records die
 * young, where a 1 MiB batch's outlived the young generation and doubled a push's peak RSS.
 */
export const READ_CHUNK = 64 * 1024;

/** Lines appended to a new file, buffered; see the module comment. */
export class LineWriter {
  private parts: string[] = [];
  private buffered = 0;

  private constructor(
    private readonly handle: FileHandle,
    /** Where the file is being written. */
    readonly file: string,
  ) {}

  /** A writer of the new file `file` (`EEXIST` when it exists). */
  static async create(file: string): Promise<LineWriter> {
    return new LineWriter(await open(file, 'wx', 0o600), file);
  }

  /** Append `line` (without its `\n`); a promise when the buffer was written out, else nothing. */
  add(line: string): Promise<void> | undefined {
    this.parts.push(line, '\n');
    this.buffered += line.length + 1;
    return this.buffered >= CHUNK ? this.flush() : undefined;
  }

  private async flush(): Promise<void> {
    if (this.parts.length === 0) return;
    const text = this.parts.join('');
    this.parts = [];
    this.buffered = 0;
    await this.handle.write(text);
  }

  /** Write out what is buffered and close the file (`sync`: and make it durable first). */
  async close(sync = false): Promise<void> {
    try {
      await this.flush();
      if (sync) await this.handle.sync();
    } finally {
      await this.handle.close();
    }
  }
}

/**
 * A file replaced whole, as src/core/fs-atomic.ts `writeFileAtomic` does, but written line by
 * line: a temp beside `target`, made durable and renamed over it by `commit`, or removed by
 * `discard`. A reader of `target` sees the old file or the new one, never a torn one.
 */
export class AtomicLineFile {
  private constructor(
    private readonly writer: LineWriter,
    private readonly target: string,
  ) {}

  /** Begin replacing `target` (its folder must exist). */
  static async begin(target: string): Promise<AtomicLineFile> {
    return new AtomicLineFile(await LineWriter.create(tempPathFor(target)), target);
  }

  /** See {@link LineWriter.add}. */
  add(line: string): Promise<void> | undefined {
    return this.writer.add(line);
  }

  /** Make the new file durable and put it in place of the old one. */
  async commit(): Promise<void> {
    try {
      await this.writer.close(true);
      await rename(this.writer.file, this.target);
    } catch (error) {
      await rm(this.writer.file, { force: true });
      throw error;
    }
    await fsyncDir(path.dirname(this.target));
  }

  /** Leave the old file as it is. */
  async discard(): Promise<void> {
    await this.writer.close().catch(() => undefined);
    await rm(this.writer.file, { force: true });
  }
}

/** The lines of `file`, in order, a chunk's lines per batch (a last line without `\n` too). */
export async function* lineBatches(file: string): AsyncGenerator<string[]> {
  let rest = '';
  for await (const chunk of createReadStream(file, {
    encoding: 'utf8',
    highWaterMark: READ_CHUNK,
  })) {
    const lines = (rest + (chunk as string)).split('\n');
    rest = lines.pop() as string;
    if (lines.length > 0) yield lines;
  }
  if (rest !== '') yield [rest];
}

/**
 * The lines of a file read synchronously, one at a time, a chunk read at a time: for a file
 * read in step with another pass (a push reads its index beside its walk), where an await per
 * line would cost more than the read. Blocks for one chunk's read at a time.
 */
export class LineCursor {
  private fd: number | undefined;
  private readonly decoder = new StringDecoder('utf8');
  private readonly buffer = Buffer.allocUnsafe(READ_CHUNK);
  private lines: string[] = [];
  private at = 0;
  private rest = '';

  /** A cursor at the first line of `file` (an error when it cannot be opened). */
  constructor(file: string) {
    this.fd = openSync(file, 'r');
  }

  /** The next line (without its `\n`), or `undefined` after the last one (the file is then closed). */
  next(): string | undefined {
    while (this.at >= this.lines.length) {
      if (this.fd === undefined) return undefined;
      const n = readSync(this.fd, this.buffer, 0, READ_CHUNK, null);
      let text: string;
      if (n === 0) {
        this.close();
        text = this.rest + this.decoder.end();
        this.rest = '';
        this.lines = text === '' ? [] : [text];
      } else {
        text = this.rest + this.decoder.write(this.buffer.subarray(0, n));
        this.lines = text.split('\n');
        this.rest = this.lines.pop() as string;
      }
      this.at = 0;
    }
    return this.lines[this.at++];
  }

  /** Close the file (further `next` calls answer `undefined`). */
  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

/**
 * A string as one field of a line: as it is, unless it is empty, holds a tab or a newline, or
 * starts with `"` or `=` — then as JSON (see {@link unfield}).
 */
export function field(s: string): string {
  const c = s.charCodeAt(0);
  const plain = s !== '' && c !== 0x22 && c !== 0x3d && s.indexOf('\t') < 0 && s.indexOf('\n') < 0;
  return plain ? s : JSON.stringify(s);
}

/** The string a field holds: `undefined` for an empty field (see {@link field}). */
export function unfield(f: string): string | undefined {
  if (f === '') return undefined;
  return f.charCodeAt(0) === 0x22 ? (JSON.parse(f) as string) : f;
}

/** {@link field}, or an empty field for `undefined`. */
export function optField(s: string | undefined): string {
  return s === undefined ? '' : field(s);
}

/**
 * A copy of `s` that keeps nothing else alive: a field sliced from a line of a read chunk holds
 * the whole 64 KiB chunk while it is kept (a push keeps the path of every upload it reports).
 * For well-formed strings, as file names read from disk are.
 */
export function owned(s: string): string {
  return Buffer.from(s, 'utf8').toString('utf8');
}
