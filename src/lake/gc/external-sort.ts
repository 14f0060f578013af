/**
 * {@link ExternalSort}: sort any number of records by a string key in bounded memory.
 *
 * Records are JSON arrays whose first element is the key. They are gathered into a run of at
 * most `maxRunRecords` records or about `maxRunBytes` of text, whichever comes first; a full run
 * is sorted in memory and spilled to a file (one JSON text per line). At the end the runs are
 * merged `fanIn` at a time (a binary heap over one line reader per run) until one merge of at
 * most `fanIn` runs remains, which is streamed to the caller. Memory is therefore one run, or
 * `fanIn` read buffers during a merge — never proportional to the number of records — and the
 * disk holds the records once (twice during an intermediate merge).
 *
 * Keys are compared by their UTF-8 bytes ({@link compareUtf8}), the order of S3 listings and of
 * every GC file. Records with equal keys come out next to each other (in no particular order);
 * callers decide whether that is a duplicate to refuse or a repeat to drop.
 *
 * @module
 */
import { type FileHandle, open, rm } from 'node:fs/promises';
import path from 'node:path';
import { compareUtf8 } from '../../core/keys.js';
import { LineReader } from './line-reader.js';

/** A sortable record: a JSON array whose first element is the key. */
export type SortRecord = readonly [string, ...unknown[]];

/** Options of {@link ExternalSort}. */
export interface ExternalSortOptions {
  /** A directory for the run files (created by the caller; the sort removes its own files). */
  dir: string;
  /** Most records in one run (default 100,000). */
  maxRunRecords?: number | undefined;
  /** Most key text in one run, in UTF-16 code units, plus 32 per record (default 16 Mi). */
  maxRunBytes?: number | undefined;
  /** Most runs merged at once (default 16, at least 2). */
  fanIn?: number | undefined;
}

const WRITE_BATCH = 1024 * 1024;

/** Sorts records in bounded memory (see the module comment). */
export class ExternalSort<T extends SortRecord> {
  private readonly dir: string;
  private readonly maxRunRecords: number;
  private readonly maxRunBytes: number;
  private readonly fanIn: number;
  private run: T[] = [];
  private runBytes = 0;
  /**
   * Whether a key with a UTF-16 unit in U+D800..U+FFFF was added: only then can JavaScript's
   * own string order (UTF-16 units) differ from UTF-8 byte order, and the slower
   * {@link compareUtf8} is needed.
   */
  private wide = false;
  private readonly files: string[] = [];
  private made = 0;
  private finished = false;
  /** How many runs were spilled to disk (for tests and progress). */
  spilled = 0;
  /** How many records were added. */
  count = 0;

  constructor(options: ExternalSortOptions) {
    this.dir = options.dir;
    this.maxRunRecords = Math.max(1, options.maxRunRecords ?? 100_000);
    this.maxRunBytes = Math.max(1, options.maxRunBytes ?? 16 * 1024 * 1024);
    this.fanIn = Math.max(2, options.fanIn ?? 16);
  }

  /** Add one record; spills the run when it is full. */
  async add(record: T): Promise<void> {
    if (this.finished) throw new Error('ExternalSort: add after sorted()');
    const key = record[0];
    if (!this.wide && WIDE.test(key)) this.wide = true;
    this.run.push(record);
    // An estimate of the record's JSON: its key, and a little for the rest.
    this.runBytes += key.length + 32;
    this.count += 1;
    if (this.run.length >= this.maxRunRecords || this.runBytes >= this.maxRunBytes) {
      await this.spill();
    }
  }

  private nextFile(): string {
    this.made += 1;
    return path.join(this.dir, `run-${this.made}.jsonl`);
  }

  /** Sort the run in memory and write it to a new run file. */
  private async spill(): Promise<void> {
    if (this.run.length === 0) return;
    const run = this.run;
    this.run = [];
    this.runBytes = 0;
    run.sort(this.compare());
    const file = this.nextFile();
    await writeLines(
      file,
      (function* () {
        for (const r of run) yield JSON.stringify(r);
      })(),
    );
    this.files.push(file);
    this.spilled += 1;
  }

  /**
   * Every record, sorted by key (see the module comment). Call once, after the last
   * {@link add}. Run files are removed as they are merged and when the iteration ends.
   */
  async *sorted(): AsyncGenerator<T> {
    if (this.finished) throw new Error('ExternalSort: sorted() twice');
    this.finished = true;
    try {
      if (this.files.length === 0) {
        // Everything fit in one run: no file at all.
        const run = this.run;
        this.run = [];
        run.sort(this.compare());
        yield* run;
        return;
      }
      await this.spill();
      while (this.files.length > this.fanIn) {
        const group = this.files.splice(0, this.fanIn);
        const file = this.nextFile();
        await writeLines(file, linesOf(merge(group, this.keyOrder())));
        this.files.push(file);
        await Promise.all(group.map((f) => rm(f, { force: true })));
      }
      for await (const head of merge(this.files, this.keyOrder())) yield head.record as T;
    } finally {
      await this.dispose();
    }
  }

  /** How keys compare: UTF-8 byte order, by JavaScript's string order where that is the same. */
  private keyOrder(): (a: string, b: string) => number {
    return this.wide ? compareUtf8 : nativeOrder;
  }

  private compare(): (a: T, b: T) => number {
    const order = this.keyOrder();
    return (a, b) => order(a[0], b[0]);
  }

  /** Remove every run file (also done when {@link sorted} ends). */
  async dispose(): Promise<void> {
    const files = this.files.splice(0);
    await Promise.all(files.map((f) => rm(f, { force: true })));
  }
}

/** UTF-16 units that can order differently in UTF-8 (surrogates, U+E000..U+FFFF). */
const WIDE = /[\ud800-\uffff]/;

/** JavaScript's string order: UTF-8 byte order for strings without {@link WIDE} units. */
function nativeOrder(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

async function* linesOf(heads: AsyncIterable<Head>): AsyncGenerator<string> {
  for await (const head of heads) yield head.line;
}

interface Head {
  key: string;
  line: string;
  record: SortRecord;
  reader: LineReader;
}

function headOf(line: string, reader: LineReader): Head {
  const record = JSON.parse(line) as SortRecord;
  return { key: record[0], line, record, reader };
}

/**
 * Merge sorted run files into one sorted stream (a binary heap by key). Each yielded head is
 * valid until the next step.
 */
async function* merge(
  files: readonly string[],
  order: (a: string, b: string) => number,
): AsyncGenerator<Head> {
  const readers = await Promise.all(files.map((f) => LineReader.open(f)));
  const heap: Head[] = [];
  const less = (a: Head, b: Head) => order(a.key, b.key) < 0;
  const up = (i: number) => {
    let j = i;
    while (j > 0) {
      const parent = (j - 1) >> 1;
      if (!less(heap[j] as Head, heap[parent] as Head)) break;
      [heap[j], heap[parent]] = [heap[parent] as Head, heap[j] as Head];
      j = parent;
    }
  };
  const down = (i: number) => {
    let j = i;
    for (;;) {
      const l = 2 * j + 1;
      const r = l + 1;
      let m = j;
      if (l < heap.length && less(heap[l] as Head, heap[m] as Head)) m = l;
      if (r < heap.length && less(heap[r] as Head, heap[m] as Head)) m = r;
      if (m === j) return;
      [heap[j], heap[m]] = [heap[m] as Head, heap[j] as Head];
      j = m;
    }
  };
  try {
    for (const reader of readers) {
      const line = await reader.next();
      if (line !== undefined) {
        heap.push(headOf(line, reader));
        up(heap.length - 1);
      }
    }
    while (heap.length > 0) {
      const top = heap[0] as Head;
      yield top;
      const line = top.reader.nextBuffered() ?? (await top.reader.next());
      if (line === undefined) {
        const last = heap.pop() as Head;
        if (heap.length > 0) {
          heap[0] = last;
          down(0);
        }
      } else {
        heap[0] = headOf(line, top.reader);
        down(0);
      }
    }
  } finally {
    await Promise.all(readers.map((r) => r.close()));
  }
}

/** Write lines (each followed by `\n`) to a new file, in batches. */
export async function writeLines(
  file: string,
  lines: Iterable<string> | AsyncIterable<string>,
): Promise<void> {
  const handle = await open(file, 'wx', 0o600);
  try {
    let batch = '';
    if (Symbol.iterator in lines) {
      // A run in memory: no await per line.
      for (const line of lines) {
        batch += `${line}\n`;
        if (batch.length >= WRITE_BATCH) {
          await writeAll(handle, batch);
          batch = '';
        }
      }
    } else {
      for await (const line of lines) {
        batch += `${line}\n`;
        if (batch.length >= WRITE_BATCH) {
          await writeAll(handle, batch);
          batch = '';
        }
      }
    }
    if (batch !== '') await writeAll(handle, batch);
  } finally {
    await handle.close();
  }
}

/** Write all of `text` (UTF-8) at the handle's position. */
export async function writeAll(handle: FileHandle, text: string): Promise<void> {
  const bytes = Buffer.from(text, 'utf8');
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, null);
    done += bytesWritten;
  }
}
