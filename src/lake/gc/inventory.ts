/**
 * What a GC plan merges with the keep-set: the stage's objects, from its listing
 * ({@link listingInventory}) or from an inventory file ({@link readInventoryFile}) — CSV or JSON
 * Lines of key, size and last-modified time, the shape S3 Inventory reports (optionally gzipped,
 * `.gz`).
 *
 * **Where keys are decoded, once.** An inventory names objects by their full key in the bucket
 * (or below the local stage's root). S3 Inventory URL-encodes keys in CSV (form encoding: `+` is
 * a space, `%XX` a UTF-8 byte), so CSV keys are decoded exactly once by default
 * (`keyEncoding: 'url'`); JSON strings are keys already (`'raw'`, the JSON Lines default). Either
 * default can be overridden for a file written another way. A key decoded wrongly cannot cost a
 * live object: apply re-reads every candidate from the store (absent: nothing is deleted) and
 * re-checks it against the live keep-set.
 *
 * **Columns.** A CSV file starts with a header row naming its columns; JSON Lines objects carry
 * the same names. Names are matched without case, `_`, `-` or spaces: `key`, `size`,
 * `last_modified` (or S3's `LastModifiedDate`) are required; `bucket`, `is_latest` and
 * `is_delete_marker` are used when present (rows of older versions and delete markers are not
 * objects). S3 Inventory's data files carry no header — their columns are the manifest's
 * `fileSchema`: put that line first (docs/gc.md shows how). A row whose time is empty has no
 * time: it is never a candidate. Anything malformed is an {@link InventoryError}.
 *
 * @module
 */
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import type { ReadOptions } from '../stage-contract.js';
import { CsvParser } from './csv.js';
import { InventoryError } from './errors.js';
import { readParquetGroups } from './parquet.js';

/** One object of an inventory, by its full key (bucket- or root-relative). */
export interface InventoryRow {
  /** The full key, decoded. */
  key: string;
  size: number;
  /** Last modification (ms since the epoch), when known. */
  lastModified: number | undefined;
  /** What `deleteIf` is conditional on, when the source knows it (listings do; files do not). */
  version: string | undefined;
  /** The bucket the row names, when the inventory says. */
  bucket?: string | undefined;
  /** A candidates file's keep-set fingerprint, when the row carries one (candidates.ts). */
  fingerprint?: string | undefined;
}

/** How an inventory file's keys are written. */
export type KeyEncoding = 'url' | 'raw';
/** An inventory file's format. */
export type InventoryFormat = 'csv' | 'jsonl' | 'parquet';

/** A column of an inventory file, as {@link InventoryFileOptions.aliases} names it. */
export type Column =
  | 'key'
  | 'size'
  | 'lastModified'
  | 'bucket'
  | 'isLatest'
  | 'isDeleteMarker'
  | 'fingerprint';

/** Options of {@link readInventoryFile}. */
export interface InventoryFileOptions {
  /** Default: from the name (`.csv`, `.jsonl`/`.ndjson`/`.json`, each optionally `.gz`; `.parquet`). */
  format?: InventoryFormat | undefined;
  /** A CSV without a header row: its column names (S3 Inventory: the manifest's `fileSchema`). */
  header?: readonly string[] | undefined;
  /** More column names (as matched: lower case, no `_`, `-`, spaces), e.g. GCS's `name`. */
  aliases?: Readonly<Record<string, Column>> | undefined;
  /** The key column starts with the container (Azure Blob Inventory's `Name`): split it off. */
  containerInKey?: boolean | undefined;
  /** Called for every data row read, whatever becomes of it (manifests check their counts). */
  onRow?: (() => void) | undefined;
  /** Default: `url` for CSV (as S3 Inventory writes), `raw` for JSON Lines. */
  keyEncoding?: KeyEncoding | undefined;
  signal?: AbortSignal | undefined;
}

/** What a stage gives {@link listingInventory}. */
export interface ListingSource {
  readonly keyPrefix: string;
  list(options?: ReadOptions): AsyncIterable<{
    key: string;
    size: number;
    version: string;
    lastModified?: Date | undefined;
  }>;
}

/** The stage's objects from its own listing (every page), by full key. */
export async function* listingInventory(
  stage: ListingSource,
  options: ReadOptions = {},
): AsyncGenerator<InventoryRow> {
  const prefix = stage.keyPrefix === '' ? '' : `${stage.keyPrefix}/`;
  for await (const o of stage.list(options)) {
    yield {
      key: prefix + o.key,
      size: o.size,
      lastModified: o.lastModified?.getTime(),
      version: o.version,
    };
  }
}

/** Column names as matched: lower case, without `_`, `-` and spaces. */
export function columnName(name: string): string {
  return name.toLowerCase().replace(/[\s_-]/g, '');
}

const COLUMNS: Record<string, Column> = {
  key: 'key',
  size: 'size',
  lastmodified: 'lastModified',
  lastmodifieddate: 'lastModified',
  bucket: 'bucket',
  islatest: 'isLatest',
  isdeletemarker: 'isDeleteMarker',
};

/** An HTTP date, as some Azure tools write `Last-Modified`. */
const RFC1123 = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/** Decode one URL-encoded key (form encoding), exactly once. */
export function decodeUrlKey(text: string, where: string): string {
  if (!text.includes('%') && !text.includes('+')) return text;
  if (/%(?![0-9A-Fa-f]{2})/.test(text))
    throw new InventoryError(`${where}: bad %-escape in key ${JSON.stringify(text)}`);
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '));
  } catch (cause) {
    throw new InventoryError(`${where}: key ${JSON.stringify(text)} does not decode to UTF-8`, {
      cause,
    });
  }
}

function parseSize(value: unknown, where: string): number {
  const n =
    typeof value === 'string' && /^\d+$/.test(value)
      ? Number(value)
      : typeof value === 'bigint'
        ? Number(value)
        : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
    throw new InventoryError(
      // A BigInt (Parquet's INT64) has no JSON: named as its digits.
      `${where}: size ${typeof value === 'bigint' ? value : JSON.stringify(value)} is not a non-negative integer`,
    );
  }
  return n;
}

function parseTime(value: unknown, where: string): number | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  if (value instanceof Date && !Number.isNaN(value.getTime())) return value.getTime();
  if (typeof value === 'string' && (ISO.test(value) || RFC1123.test(value))) {
    const ms = Date.parse(value);
    if (!Number.isNaN(ms)) return ms;
  }
  throw new InventoryError(
    `${where}: last-modified ${JSON.stringify(value)} is not an ISO 8601 time`,
  );
}

function parseBool(value: unknown, where: string, name: string): boolean | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (value === true || value === 'true' || value === 'TRUE' || value === 'True') return true;
  if (value === false || value === 'false' || value === 'FALSE' || value === 'False') return false;
  throw new InventoryError(`${where}: ${name} ${JSON.stringify(value)} is not true or false`);
}

/** One row by column, as an inventory row (or `undefined` for an older version or a marker). */
function rowOf(
  get: (c: Column) => unknown,
  encoding: KeyEncoding,
  where: string,
  containerInKey = false,
): InventoryRow | undefined {
  if (parseBool(get('isLatest'), where, 'is_latest') === false) return undefined;
  if (parseBool(get('isDeleteMarker'), where, 'is_delete_marker') === true) return undefined;
  const raw = get('key');
  if (typeof raw !== 'string' || raw === '') throw new InventoryError(`${where}: no key`);
  let key = encoding === 'url' ? decodeUrlKey(raw, where) : raw;
  let bucket = get('bucket');
  const fingerprint = get('fingerprint');
  if (containerInKey) {
    const slash = key.indexOf('/');
    if (slash <= 0)
      throw new InventoryError(`${where}: name ${JSON.stringify(key)} has no container`);
    bucket = key.slice(0, slash);
    key = key.slice(slash + 1);
    if (key === '') throw new InventoryError(`${where}: no blob name after the container`);
  }
  return {
    key,
    size: parseSize(get('size'), where),
    lastModified: parseTime(get('lastModified'), where),
    version: undefined,
    bucket: typeof bucket === 'string' && bucket !== '' ? bucket : undefined,
    ...(fingerprint === undefined ? {} : { fingerprint: String(fingerprint) }),
  };
}

function formatOf(file: string, given: InventoryFormat | undefined): InventoryFormat {
  if (given) return given;
  const name = file.toLowerCase().replace(/\.gz$/, '');
  if (name.endsWith('.csv')) return 'csv';
  if (name.endsWith('.jsonl') || name.endsWith('.ndjson') || name.endsWith('.json')) return 'jsonl';
  if (name.endsWith('.parquet')) return 'parquet';
  throw new InventoryError(
    `cannot tell the format of ${file} from its name: name it .csv, .jsonl or .parquet, or give the format`,
  );
}

/** The file's text, in chunks (gunzipped when it ends in `.gz`), strictly UTF-8. */
async function* textOf(file: string, signal: AbortSignal | undefined): AsyncGenerator<string> {
  let stream: Readable = createReadStream(file, { signal });
  if (file.toLowerCase().endsWith('.gz')) stream = stream.pipe(createGunzip());
  const decoder = new TextDecoder('utf-8', { fatal: true });
  try {
    for await (const chunk of stream) {
      yield decoder.decode(chunk as Uint8Array, { stream: true });
    }
    const rest = decoder.decode();
    if (rest !== '') yield rest;
  } catch (cause) {
    if (cause instanceof TypeError) {
      throw new InventoryError(`${file} is not UTF-8 text`, { cause });
    }
    throw new InventoryError(`cannot read the inventory ${file}`, { cause });
  } finally {
    stream.destroy();
  }
}

function columnsOf(
  names: readonly string[],
  file: string,
  aliases: Readonly<Record<string, Column>> = {},
): Map<Column, number> {
  const columns = new Map<Column, number>();
  for (const [i, name] of names.entries()) {
    const column = aliases[columnName(name)] ?? COLUMNS[columnName(name)];
    if (column === undefined) continue;
    if (columns.has(column)) throw new InventoryError(`${file}: column ${name} appears twice`);
    columns.set(column, i);
  }
  for (const required of ['key', 'size', 'lastModified'] as const) {
    if (!columns.has(required)) {
      throw new InventoryError(
        `${file}: no ${required === 'lastModified' ? 'last_modified' : required} column; a CSV inventory starts with a header row naming key, size and last_modified (S3 Inventory: its manifest's fileSchema)`,
      );
    }
  }
  return columns;
}

/**
 * The rows of an inventory file (see the module comment), in file order. Throws
 * {@link InventoryError} for anything malformed.
 */
export async function* readInventoryFile(
  file: string,
  options: InventoryFileOptions = {},
): AsyncGenerator<InventoryRow> {
  const format = formatOf(file, options.format);
  const encoding = options.keyEncoding ?? (format === 'csv' ? 'url' : 'raw');
  const aliases = options.aliases ?? {};
  const container = options.containerInKey === true;
  if (format === 'parquet') {
    // Column -> its place among the columns read (the order `select` returned them in).
    const at = new Map<Column, number>();
    const groups = readParquetGroups(
      file,
      (all) => {
        const columns = columnsOf(all, file, aliases);
        for (const column of columns.keys()) at.set(column, at.size);
        return [...columns.values()].map((i) => all[i] as string);
      },
      options.signal,
    );
    for await (const group of groups) {
      const data: Array<ArrayLike<unknown> | undefined> = [];
      let index = 0;
      // One getter per group, not a closure per row.
      const get = (c: Column) => {
        const n = at.get(c);
        return n === undefined ? undefined : (data[n] as ArrayLike<unknown>)[index];
      };
      for (const column of group.columns) data.push(column);
      for (; index < group.rows; index++) {
        options.onRow?.();
        const out = rowOf(get, encoding, `${file} row ${group.rowStart + index + 1}`, container);
        if (out) yield out;
      }
      // Not held while the next group decodes (the loop's variable still names this one).
      data.length = 0;
      group.columns.length = 0;
    }
    return;
  }
  if (format === 'csv') {
    const parser = new CsvParser();
    let columns: Map<Column, number> | undefined =
      options.header === undefined ? undefined : columnsOf(options.header, file, aliases);
    let rowNumber = 0;
    const handle = function* (rows: string[][]): Generator<InventoryRow> {
      for (const row of rows) {
        rowNumber += 1;
        if (columns === undefined) {
          columns = columnsOf(row, file, aliases);
          continue;
        }
        options.onRow?.();
        const where = `${file} row ${rowNumber}`;
        const cols = columns;
        const out = rowOf(
          (c) => {
            const i = cols.get(c);
            return i === undefined ? undefined : row[i];
          },
          encoding,
          where,
          container,
        );
        if (out) yield out;
      }
    };
    for await (const text of textOf(file, options.signal)) yield* handle(parser.push(text));
    yield* handle(parser.end());
    if (columns === undefined) throw new InventoryError(`${file} is empty (not even a header row)`);
    return;
  }
  let tail = '';
  let lineNumber = 0;
  const handle = function* (line: string): Generator<InventoryRow> {
    lineNumber += 1;
    if (line.trim() === '') return;
    const where = `${file} line ${lineNumber}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (cause) {
      throw new InventoryError(`${where} is not JSON`, { cause });
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new InventoryError(`${where} is not a JSON object`);
    }
    options.onRow?.();
    const byColumn = new Map<Column, unknown>();
    const names = new Map<Column, string>();
    for (const [name, v] of Object.entries(value)) {
      const column = aliases[columnName(name)] ?? COLUMNS[columnName(name)];
      if (column === undefined) continue;
      const other = names.get(column);
      if (other !== undefined) {
        // As a CSV header naming a column twice: which one is meant cannot be told.
        throw new InventoryError(
          `${where}: ${JSON.stringify(other)} and ${JSON.stringify(name)} both name the ${column === 'lastModified' ? 'last_modified' : column} column`,
        );
      }
      names.set(column, name);
      byColumn.set(column, v);
    }
    const out = rowOf((c) => byColumn.get(c), encoding, where, container);
    if (out) yield out;
  };
  for await (const text of textOf(file, options.signal)) {
    const parts = (tail + text).split('\n');
    tail = parts.pop() as string;
    for (const line of parts) yield* handle(line.endsWith('\r') ? line.slice(0, -1) : line);
  }
  if (tail !== '') yield* handle(tail);
}
