/**
 * {@link LineReader}: the lines of a file, read in fixed-size chunks through one file handle.
 * The sort runs, the keep-set file and JSON Lines inventories are read with it: memory is one
 * chunk plus the lines decoded from it, whatever the file's size, and a line that is not ended
 * by `\n` at the end of the file is reported as such ({@link LineReader.unterminated}), so a
 * truncated file is never read as a shorter complete one.
 *
 * @module
 */
import { type FileHandle, open } from 'node:fs/promises';
import { StringDecoder } from 'node:string_decoder';

/** Default chunk size. */
const CHUNK = 256 * 1024;

/** Reads the lines of one file (see the module comment). */
export class LineReader {
  private readonly buffer: Buffer;
  private readonly decoder = new StringDecoder('utf8');
  private lines: string[] = [];
  private index = 0;
  private tail = '';
  private done = false;
  /** True once the file ended with text after its last `\n` (that text is the last line). */
  unterminated = false;

  private constructor(
    private readonly handle: FileHandle,
    chunk: number,
  ) {
    this.buffer = Buffer.allocUnsafe(chunk);
  }

  /** Open `file` for reading line by line. */
  static async open(file: string, chunk = CHUNK): Promise<LineReader> {
    return new LineReader(await open(file, 'r'), chunk);
  }

  /** The next line without its `\n` (a `\r` before it is kept), or `undefined` at the end. */
  async next(): Promise<string | undefined> {
    while (this.index >= this.lines.length) {
      if (this.done) return undefined;
      await this.fill();
    }
    return this.lines[this.index++];
  }

  /** The next line if one is decoded already (no I/O), else `undefined`. */
  nextBuffered(): string | undefined {
    return this.index < this.lines.length ? this.lines[this.index++] : undefined;
  }

  private async fill(): Promise<void> {
    const { bytesRead } = await this.handle.read(this.buffer, 0, this.buffer.length, null);
    let text: string;
    if (bytesRead === 0) {
      this.done = true;
      text = this.tail + this.decoder.end();
      this.tail = '';
      this.lines = text === '' ? [] : [text];
      this.index = 0;
      if (text !== '') this.unterminated = true;
      return;
    }
    text = this.tail + this.decoder.write(this.buffer.subarray(0, bytesRead));
    const parts = text.split('\n');
    this.tail = parts.pop() as string;
    this.lines = parts;
    this.index = 0;
  }

  /** Close the file. */
  async close(): Promise<void> {
    await this.handle.close();
  }
}
