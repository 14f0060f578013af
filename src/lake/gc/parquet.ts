/**
 * Parquet for GC: reading inventory and candidates files (`hyparquet`), writing the keep-set for
 * an engine (`hyparquet-writer`). Both libraries are imported on first use, so a plan from a
 * listing or a CSV never loads them.
 *
 * Reading goes one row group at a time and only the columns asked for, so memory is bounded by
 * one row group (S3 Inventory and DuckDB write row groups of ~100,000 rows or fewer), not by the
 * file; a group is held as arrays by column (times as numbers), not as an object per row. A file that is not Parquet, is truncated (its footer is the last bytes), or whose pages
 * do not decode — strings that are not UTF-8 included — is an {@link InventoryError}: never fewer
 * rows, never another key.
 *
 * @module
 */
import { writeSync } from 'node:fs';
import { open as fsOpen } from 'node:fs/promises';
import { lazy } from '../../core/lazy-module.js';
import type { OutputFile } from '../../core/output-file.js';
import { InventoryError } from './errors.js';

const reader = lazy(() => import('hyparquet'));

const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Strings decoded strictly: hyparquet's own decoder replaces bytes that are not UTF-8 with
 * U+FFFD, which would turn a key into another key.
 */
function stringFromBytes(bytes: Uint8Array | undefined): string | undefined {
  if (bytes === undefined) return undefined;
  try {
    return STRICT_UTF8.decode(bytes);
  } catch (cause) {
    throw new InventoryError('a string that is not UTF-8', { cause });
  }
}
const writer = lazy(() => import('hyparquet-writer'));

/** A Parquet file opened for reading: its column names, row count and key-value metadata. */
export interface ParquetInfo {
  columns: string[];
  rows: number;
  /** The file's key-value metadata (`key_value_metadata`). */
  metadata: Map<string, string>;
}

type Opened = {
  info: ParquetInfo;
  groups: Array<[number, number]>;
  file: FileBuffer;
  meta: unknown;
};

/**
 * The file as hyparquet's `AsyncBuffer`: each range read with one `read` into a buffer of its
 * size (hyparquet's own reads a stream's 64 KiB chunks and copies them together, twice the
 * memory per column chunk until the collector runs). A range the file no longer holds fails.
 */
interface FileBuffer {
  byteLength: number;
  slice(start: number, end?: number): Promise<ArrayBuffer>;
  close(): Promise<void>;
}

async function fileBuffer(file: string): Promise<FileBuffer> {
  const handle = await fsOpen(file, 'r');
  try {
    const { size } = await handle.stat();
    return {
      byteLength: size,
      async slice(start, end = size) {
        const bytes = new Uint8Array(Math.max(0, end - start));
        let done = 0;
        while (done < bytes.length) {
          const { bytesRead } = await handle.read(bytes, done, bytes.length - done, start + done);
          if (bytesRead === 0) {
            throw new RangeError(`bytes ${start}..${end} are past the end of the file`);
          }
          done += bytesRead;
        }
        return bytes.buffer;
      },
      close: () => handle.close(),
    };
  } catch (error) {
    await handle.close();
    throw error;
  }
}

async function open(file: string): Promise<Opened> {
  const hp = await reader();
  let buffer: FileBuffer | undefined;
  try {
    buffer = await fileBuffer(file);
    const meta = await hp.parquetMetadataAsync(buffer);
    const columns = meta.schema.slice(1).map((s) => s.name);
    const metadata = new Map<string, string>();
    for (const kv of meta.key_value_metadata ?? []) metadata.set(kv.key, kv.value ?? '');
    const groups: Array<[number, number]> = [];
    let start = 0;
    for (const g of meta.row_groups) {
      const n = Number(g.num_rows);
      groups.push([start, start + n]);
      start += n;
    }
    if (start !== Number(meta.num_rows)) {
      throw new InventoryError(
        `${file}: its row groups hold ${start} rows, its footer says ${meta.num_rows}`,
      );
    }
    return { info: { columns, rows: start, metadata }, groups, file: buffer, meta };
  } catch (cause) {
    await buffer?.close();
    if (cause instanceof InventoryError) throw cause;
    throw new InventoryError(`${file} is not a readable Parquet file: ${String(cause)}`, { cause });
  }
}

/** The column names, row count and key-value metadata of a Parquet file. */
export async function parquetInfo(file: string): Promise<ParquetInfo> {
  const opened = await open(file);
  await opened.file.close();
  return opened.info;
}

/**
 * Times as milliseconds (a number), not a `Date` per row: a million `Date`s (and the `BigInt`s
 * hyparquet makes on the way) are most of what a row group costs the heap, and they outlive
 * the young generation, so the old one grows with garbage (docs/performance.md). A time before
 * 1970 stays a `Date` (the inventory reader takes a number only when it is not negative).
 */
function msOrDate(ms: number): number | Date {
  return ms >= 0 ? ms : new Date(ms);
}

const PARSERS = {
  stringFromBytes,
  timestampFromMilliseconds: (millis: bigint) => msOrDate(Number(millis)),
  timestampFromMicroseconds: (micros: bigint) => msOrDate(Number(micros / 1000n)),
  timestampFromNanoseconds: (nanos: bigint) => msOrDate(Number(nanos / 1000000n)),
};

/** One row group of a Parquet file, by column: `columns[i]` holds `rows` values of column `i`. */
export interface ParquetGroup {
  /** The row number (from 0, in the file) of the group's first row. */
  rowStart: number;
  rows: number;
  /** One array per column asked for, in the order `select` gave them. */
  columns: Array<ArrayLike<unknown>>;
}

/**
 * The row groups of a Parquet file, one at a time, each as arrays by column of the columns named
 * (each present one); `select` picks the columns from the file's names. Times are milliseconds
 * (a `Date` before 1970), 64-bit integers numbers when all of a page's are safe integers,
 * strings strictly UTF-8. The caller may empty `columns` once it is done with a group (so it is
 * not held while the next one decodes). Columns, not an object per row: the objects
 * would be made for a whole row group at once and live until its last row is read.
 */
export async function* readParquetGroups(
  file: string,
  select: (columns: readonly string[]) => string[],
  signal?: AbortSignal | undefined,
): AsyncGenerator<ParquetGroup> {
  const hp = await reader();
  const opened = await open(file);
  try {
    yield* groupsOf(hp, file, opened, select(opened.info.columns), signal);
  } finally {
    await opened.file.close();
  }
}

async function* groupsOf(
  hp: Awaited<ReturnType<typeof reader>>,
  file: string,
  opened: Opened,
  columns: string[],
  signal: AbortSignal | undefined,
): AsyncGenerator<ParquetGroup> {
  for (const [rowStart, rowEnd] of opened.groups) {
    signal?.throwIfAborted();
    const parts = new Map<string, Chunk[]>(columns.map((c) => [c, []]));
    try {
      await hp.parquetRead({
        file: opened.file as Parameters<typeof hp.parquetRead>[0]['file'],
        // The footer read once, not again for every row group.
        metadata: opened.meta as Parameters<typeof hp.parquetRead>[0]['metadata'],
        columns,
        rowStart,
        rowEnd,
        parsers: PARSERS as never,
        // Only collected here (a throw in this callback would be an unhandled rejection);
        // checked below, after every column decoded.
        onChunk: (chunk) => {
          const data = compactIntegers(chunk.columnData as ArrayLike<unknown>);
          parts.get(chunk.columnName)?.push({ at: chunk.rowStart, data });
        },
      });
    } catch (cause) {
      throw new InventoryError(
        `${file}: rows ${rowStart}..${rowEnd} do not decode: ${String(cause)}`,
        { cause },
      );
    }
    const group: ParquetGroup = { rowStart, rows: rowEnd - rowStart, columns: [] };
    for (const name of columns) {
      const chunks = (parts.get(name) as Chunk[]).sort((a, b) => a.at - b.at);
      let at = rowStart;
      for (const chunk of chunks) {
        if (chunk.at !== at) break;
        at += chunk.data.length;
      }
      if (at !== rowEnd) {
        throw new InventoryError(
          `${file}: rows ${rowStart}..${rowEnd} of column ${name} decoded to ${chunks.map((c) => `${c.at}..${c.at + c.data.length}`).join(', ') || 'no rows'}`,
        );
      }
      group.columns.push(chunks.length === 1 ? (chunks[0] as Chunk).data : joined(chunks));
    }
    yield group;
  }
}

/**
 * 64-bit integers as numbers in a `Float64Array` when every one is a safe integer (sizes: a
 * `BigInt` per row would live, and be copied by the garbage collector, until its group is read);
 * otherwise as they are, so the reader still sees — and refuses — the one that is not.
 */
function compactIntegers(data: ArrayLike<unknown>): ArrayLike<unknown> {
  if (data.length === 0 || typeof data[0] !== 'bigint') return data;
  const out = new Float64Array(data.length);
  for (let i = 0; i < data.length; i++) {
    const v = data[i];
    if (typeof v !== 'bigint') return data;
    const n = Number(v);
    if (!Number.isSafeInteger(n)) return data;
    out[i] = n;
  }
  return out;
}

/** Decoded values of one column from row `at` on (a column chunk may come in parts). */
interface Chunk {
  at: number;
  data: ArrayLike<unknown>;
}

/** The parts of one column chunk as one array. */
function joined(chunks: Chunk[]): unknown[] {
  const out: unknown[] = [];
  for (const { data } of chunks) for (let i = 0; i < data.length; i++) out.push(data[i]);
  return out;
}

/** One column of a Parquet file to write. */
export interface ParquetColumn {
  name: string;
  type: 'STRING' | 'INT64' | 'BOOLEAN' | 'TIMESTAMP';
  data: unknown[];
}

/**
 * Write Parquet to an open output file (src/core/output-file.ts: a temp beside the target), one
 * row group per call of `batches`; the caller commits or aborts the output file.
 */
export async function writeParquet(
  out: OutputFile,
  batches: AsyncIterable<ParquetColumn[]>,
  metadata: Record<string, string>,
): Promise<void> {
  const hw = await writer();
  const bytes = new hw.ByteWriter();
  const flush = () => {
    let done = 0;
    const view = new Uint8Array(bytes.buffer, 0, bytes.index);
    while (done < view.length) done += writeSync(out.fd, view, done, view.length - done);
    bytes.index = 0;
  };
  const grow = bytes.ensure.bind(bytes);
  bytes.ensure = (size: number) => {
    if (bytes.index > 1_000_000) flush();
    grow(size);
  };
  let pw: InstanceType<typeof hw.ParquetWriter> | undefined;
  for await (const batch of batches) {
    const columnData = batch.map((c) => ({
      name: c.name,
      type: c.type,
      data: c.data as never,
      nullable: false,
    }));
    pw ??= new hw.ParquetWriter({
      writer: bytes,
      schema: hw.schemaFromColumnData({ columnData }),
      kvMetadata: Object.entries(metadata).map(([key, value]) => ({ key, value })),
      createdBy: 'provcat',
    });
    await pw.write({ columnData, rowGroupSize: Math.max(1, batch[0]?.data.length ?? 1) });
  }
  if (pw === undefined) throw new RangeError('writeParquet needs at least one batch');
  await pw.finish();
  flush();
}
