/**
 * {@link CsvParser}: RFC 4180 CSV, fed in chunks of text (any split), as S3 Inventory writes it:
 * fields separated by `,`, rows by `\n` or `\r\n`, a field in double quotes may hold `,`, line
 * breaks and `""` (one quote). Strict: a quote inside an unquoted field, text after a closing
 * quote, or a quote left open at the end is an {@link InventoryError} — a malformed inventory is
 * refused, never read as different rows. Blank lines are skipped.
 *
 * @module
 */
import { InventoryError } from './errors.js';

enum State {
  /** At the start of a field. */
  Start,
  /** Inside an unquoted field. */
  Unquoted,
  /** Inside a quoted field. */
  Quoted,
  /** Just after a quote inside a quoted field: a second quote, or the field's end. */
  Quote,
  /** Just after a `\r` that ended a row: a `\n` belongs to it. */
  AfterCr,
}

const COMMA = 0x2c;
const LF = 0x0a;
const CR = 0x0d;
const QUOTE = 0x22;

/** Parses CSV text fed in chunks (see the module comment). */
export class CsvParser {
  private state = State.Start;
  private field = '';
  private row: string[] = [];
  private out: string[][] = [];
  /** The 1-based line the parser is on, for messages. */
  line = 1;

  private emitField(): void {
    this.row.push(this.field);
    this.field = '';
  }

  private endRow(): void {
    this.emitField();
    const row = this.row;
    this.row = [];
    if (!(row.length === 1 && row[0] === '')) this.out.push(row);
  }

  private fail(why: string): never {
    throw new InventoryError(`CSV line ${this.line}: ${why}`);
  }

  /** Feed the next chunk of text; returns the rows it completed. */
  push(text: string): string[][] {
    let start = 0;
    const n = text.length;
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      if (this.state === State.AfterCr) {
        // A \n right after the \r belongs to the same line break.
        this.state = State.Start;
        if (c === LF) continue;
      }
      switch (this.state) {
        case State.Start:
          if (c === QUOTE) {
            this.state = State.Quoted;
            start = i + 1;
          } else if (c === COMMA) {
            this.emitField();
          } else if (c === LF) {
            this.endRow();
            this.line += 1;
          } else if (c === CR) {
            this.endRow();
            this.line += 1;
            this.state = State.AfterCr;
          } else {
            this.state = State.Unquoted;
            start = i;
          }
          break;
        case State.Unquoted:
          if (c === COMMA || c === LF || c === CR) {
            this.field += text.slice(start, i);
            if (c === COMMA) {
              this.emitField();
              this.state = State.Start;
            } else {
              this.endRow();
              this.line += 1;
              this.state = c === CR ? State.AfterCr : State.Start;
            }
          } else if (c === QUOTE) {
            this.fail('a quote inside an unquoted field');
          }
          break;
        case State.Quoted:
          if (c === QUOTE) {
            this.field += text.slice(start, i);
            this.state = State.Quote;
          } else if (c === LF) {
            this.line += 1;
          }
          break;
        case State.Quote:
          if (c === QUOTE) {
            this.field += '"';
            this.state = State.Quoted;
            start = i + 1;
          } else if (c === COMMA) {
            this.emitField();
            this.state = State.Start;
          } else if (c === LF || c === CR) {
            this.endRow();
            this.line += 1;
            this.state = c === CR ? State.AfterCr : State.Start;
          } else {
            this.fail('text after a closing quote');
          }
          break;
      }
    }
    if (this.state === State.Unquoted || this.state === State.Quoted) {
      this.field += text.slice(start);
    }
    const rows = this.out;
    this.out = [];
    return rows;
  }

  /** The end of the input: returns the last row, if it was not ended by a line break. */
  end(): string[][] {
    if (this.state === State.Quoted) this.fail('a quoted field is never closed');
    if (this.state !== State.Start || this.row.length > 0 || this.field !== '') {
      if (this.state !== State.AfterCr) this.endRow();
    }
    this.state = State.Start;
    const rows = this.out;
    this.out = [];
    return rows;
  }
}
