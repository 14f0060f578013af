/**
 * Parquet for GC: reading inventory and candidates files (`hyparquet`), writing the keep-set for
 * an engine (`hyparquet-writer`). Both libraries are imported on first use, so a plan from a
 * listing or a CSV never loads them.
 *
 * Reading goes one row group at a time and only the columns asked for, so memory is bounded by
 * one row group (S3 Inventory and DuckDB write row groups of ~100,000 rows or fewer), not by the
 * file. A file that is not Parquet, is truncated (its footer is the last bytes), or whose pages
 * do not decode — strings that are not UTF-8 included — is an {@link InventoryError}: never fewer
 * rows, never another key.
 *
 * @module
 */
import { writeSync } from 'node:fs';
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

type Opened = { info: ParquetInfo; groups: Array<[number, number]>; file: unknown; meta: unknown };

async function open(file: string): Promise<Opened> {
  const hp = await reader();
  try {
    const buffer = await hp.asyncBufferFromFile(file);
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
    if (cause instanceof InventoryError) throw cause;
    throw new InventoryError(`${file} is not a readable Parquet file: ${String(cause)}`, { cause });
  }
}

/** The column names, row count and key-value metadata of a Parquet file. */
export async function parquetInfo(file: string): Promise<ParquetInfo> {
  return (await open(file)).info;
}

/**
 * The rows of a Parquet file as objects of the columns named (each present one), one row group
 * at a time. `select` picks the columns from the file's names.
 */
export async function* readParquetRows(
  file: string,
  select: (columns: readonly string[]) => string[],
  signal?: AbortSignal | undefined,
): AsyncGenerator<Record<string, unknown>> {
  const hp = await reader();
  const opened = await open(file);
  const columns = select(opened.info.columns);
  for (const [rowStart, rowEnd] of opened.groups) {
    signal?.throwIfAborted();
    let rows: Array<Record<string, unknown>>;
    try {
      rows = (await hp.parquetReadObjects({
        file: opened.file as Parameters<typeof hp.parquetReadObjects>[0]['file'],
        // The footer read once, not again for every row group.
        metadata: opened.meta as Parameters<typeof hp.parquetReadObjects>[0]['metadata'],
        columns,
        rowStart,
        rowEnd,
        parsers: { stringFromBytes } as never,
      })) as Array<Record<string, unknown>>;
    } catch (cause) {
      throw new InventoryError(
        `${file}: rows ${rowStart}..${rowEnd} do not decode: ${String(cause)}`,
        {
          cause,
        },
      );
    }
    if (rows.length !== rowEnd - rowStart) {
      throw new InventoryError(
        `${file}: rows ${rowStart}..${rowEnd} decoded to ${rows.length} rows`,
      );
    }
    yield* rows;
  }
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
