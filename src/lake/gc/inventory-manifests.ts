/**
 * Inventories as the clouds deliver them: a manifest naming many data files, read as one
 * inventory after every check passes (docs/gc.md#inventories-as-delivered).
 *
 * - **S3 Inventory** (`manifest.json`): `sourceBucket`, `creationTimestamp` (ms), `fileFormat`
 *   `CSV` (headerless, gzipped, keys URL-encoded; columns from `fileSchema`) or `Parquet` (keys
 *   as they are), `files[]` of `{key, size, MD5checksum}`: every data file's size and MD5 are
 *   checked before any row is read.
 * - **Azure Blob Inventory** (`<rule>-manifest.json`): `endpoint` (the stage's account, when the
 *   stage names one), `status` `Succeeded`, `inventoryStartTime`,
 *   `ruleDefinition` (`objectType` `blob`, `format` `csv` or `parquet`, `filters.prefixMatch`),
 *   `files[]` of `{blob, size}`, `summary.objectCount`: sizes checked first, the row count after
 *   the last file. Its `Name` column starts with the container.
 * - **GCS inventory report** (`<config>_<time>_manifest.json`): `report_config` (the source
 *   bucket in `object_metadata_report_options.storage_filters.bucket`, `csv_options` or
 *   `parquet_options`), `snapshot_time`, `shard_count`, `report_shards_file_names`,
 *   `records_processed`: the shard list is checked against the count first, the row count after
 *   the last shard.
 *
 * Fail closed, before any plan exists: a data file missing, shorter or longer than listed, or
 * whose MD5 differs; a manifest for another bucket (or container); an inventory older than the
 * allowed age (default: the plan's horizon) or from the future; a report that did not succeed; a
 * format this reader does not know — each an {@link InventoryError}.
 *
 * Data files are found locally (a synced copy of the destination): by their key below
 * `root` when given, else below the manifest's folder or one of its ancestors, by the whole key
 * or its last segments (`data/x.csv.gz`, `x.csv.gz`). A wrong file found that way fails its
 * size or checksum.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { createReadStream, lstatSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { InventoryError } from './errors.js';
import {
  type Column,
  type InventoryFileOptions,
  type InventoryFormat,
  type InventoryRow,
  type KeyEncoding,
  readInventoryFile,
} from './inventory.js';

/** What a manifest is checked against. */
export interface ManifestOptions {
  /** The stage's bucket (Azure: container); `undefined` for a local stage (nothing to compare). */
  bucket: string | undefined;
  /** An Azure stage's storage account, when known: an Azure manifest's `endpoint` must name it. */
  account?: string | undefined;
  /** The oldest inventory accepted: its snapshot must be at most this old (ms). */
  maxAgeMs: number;
  /** Now (ms), as the plan sees it. */
  now: number;
  /** Where the destination's files are, when not beside the manifest. */
  root?: string | undefined;
  /** Overrides the key encoding the manifest implies. */
  keyEncoding?: KeyEncoding | undefined;
  signal?: AbortSignal | undefined;
}

/** A data file of a manifest, found and checked. */
interface DataFile {
  path: string;
  format: InventoryFormat;
  read: Omit<InventoryFileOptions, 'format' | 'signal' | 'onRow'>;
}

/** A manifest, checked: its data files and the row count they must hold (when it says). */
export interface CheckedManifest {
  kind: 's3' | 'azure' | 'gcs';
  /** When the inventory was taken (ms). */
  taken: number;
  files: DataFile[];
  rows: number | undefined;
}

/** Inventory skew allowed into the future: 15 minutes. */
const FUTURE_MS = 15 * 60 * 1000;

/** True when `file`'s name says it is an inventory manifest (`manifest.json`, `*-manifest.json`, `*_manifest.json`). */
export function isManifestName(file: string): boolean {
  return /(^|[-_/\\])manifest\.json$/i.test(file);
}

function refuse(file: string, why: string, cause?: unknown): InventoryError {
  return new InventoryError(`inventory manifest ${file}: ${why}`, { cause });
}

function field(value: unknown, name: string, file: string): unknown {
  if (typeof value !== 'object' || value === null || !(name in value)) {
    throw refuse(file, `no ${name}`);
  }
  return (value as Record<string, unknown>)[name];
}

function str(value: unknown, name: string, file: string): string {
  const v = field(value, name, file);
  if (typeof v !== 'string' || v === '') throw refuse(file, `${name} is not a string`);
  return v;
}

function count(v: unknown, name: string, file: string): number {
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
    throw refuse(file, `${name} ${JSON.stringify(v)} is not a count`);
  }
  return n;
}

function isFile(p: string): boolean {
  try {
    return lstatSync(p, { throwIfNoEntry: false })?.isFile() === true;
  } catch (error) {
    // A file where a folder of the path should be: not there (the next place is tried).
    if ((error as NodeJS.ErrnoException).code === 'ENOTDIR') return false;
    throw error;
  }
}

/** Where the data file `key` of `manifest` is (see the module comment); refuses when absent. */
function locate(manifest: string, key: string, root: string | undefined): string {
  const segments = key.split('/').filter((s) => s !== '' && s !== '.' && s !== '..');
  if (segments.length === 0) throw refuse(manifest, `data file ${JSON.stringify(key)} has no name`);
  if (root !== undefined) {
    const p = path.join(root, ...segments);
    if (isFile(p)) return p;
    throw refuse(manifest, `data file ${key} is missing (looked for ${p})`);
  }
  const folders: string[] = [];
  for (let dir = path.dirname(path.resolve(manifest)); ; dir = path.dirname(dir)) {
    folders.push(dir);
    if (path.dirname(dir) === dir) break;
  }
  for (let i = 0; i < segments.length; i++) {
    for (const dir of folders) {
      const p = path.join(dir, ...segments.slice(i));
      if (isFile(p)) return p;
    }
  }
  throw refuse(manifest, `data file ${key} is missing (not below ${folders[0]} or its parents)`);
}

async function md5Of(file: string, signal: AbortSignal | undefined): Promise<string> {
  const hash = createHash('md5');
  for await (const chunk of createReadStream(file, { signal })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function checkSize(manifest: string, file: string, want: number): void {
  const have = lstatSync(file).size;
  if (have !== want) {
    throw refuse(
      manifest,
      `data file ${file} is ${have} bytes, the manifest says ${want} (${have < want ? 'short' : 'long'}): refused`,
    );
  }
}

function checkTime(manifest: string, taken: number, options: ManifestOptions): number {
  if (!Number.isFinite(taken)) throw refuse(manifest, 'its time is not a time');
  if (taken > options.now + FUTURE_MS) {
    throw refuse(manifest, `it was taken at ${new Date(taken).toISOString()}, in the future`);
  }
  if (options.now - taken > options.maxAgeMs) {
    throw refuse(
      manifest,
      `it was taken at ${new Date(taken).toISOString()}, more than ${Math.round(options.maxAgeMs / 1000)} s ago (the allowed inventory age, by default the --older-than horizon): take a newer inventory or give --max-inventory-age`,
    );
  }
  return taken;
}

function checkBucket(manifest: string, theirs: string, options: ManifestOptions): void {
  if (options.bucket !== undefined && theirs !== options.bucket) {
    throw refuse(manifest, `it is an inventory of ${theirs}, not of the stage's ${options.bucket}`);
  }
}

async function s3Manifest(
  file: string,
  m: unknown,
  options: ManifestOptions,
): Promise<CheckedManifest> {
  checkBucket(file, str(m, 'sourceBucket', file), options);
  const taken = checkTime(
    file,
    count(field(m, 'creationTimestamp', file), 'creationTimestamp', file),
    options,
  );
  const fileFormat = str(m, 'fileFormat', file);
  const format = fileFormat.toLowerCase();
  if (format !== 'csv' && format !== 'parquet') {
    throw refuse(file, `fileFormat ${fileFormat}: this reader knows CSV and Parquet`);
  }
  const schema = str(m, 'fileSchema', file);
  const header = format === 'csv' ? schema.split(',').map((s) => s.trim()) : undefined;
  const list = field(m, 'files', file);
  if (!Array.isArray(list) || list.length === 0)
    throw refuse(file, 'files is not a non-empty list');
  const files: DataFile[] = [];
  const seen = new Set<string>();
  for (const entry of list) {
    const key = str(entry, 'key', file);
    if (seen.has(key)) throw refuse(file, `data file ${key} is listed twice`);
    seen.add(key);
    const size = count(field(entry, 'size', file), 'size', file);
    const md5 = str(entry, 'MD5checksum', file).toLowerCase();
    const p = locate(file, key, options.root);
    checkSize(file, p, size);
    const have = await md5Of(p, options.signal);
    if (have !== md5) {
      throw refuse(file, `data file ${p} has MD5 ${have}, the manifest says ${md5}: refused`);
    }
    files.push({
      path: p,
      format,
      read: { header, keyEncoding: options.keyEncoding ?? (format === 'csv' ? 'url' : 'raw') },
    });
  }
  return { kind: 's3', taken, files, rows: undefined };
}

const AZURE_ALIASES: Record<string, Column> = {
  name: 'key',
  contentlength: 'size',
  iscurrentversion: 'isLatest',
  deleted: 'isDeleteMarker',
};

/**
 * The storage account an Azure endpoint names: `https://ACCOUNT.blob.core.windows.net` (any
 * cloud's suffix), or the first path segment of an emulator's `http://host:port/ACCOUNT`.
 */
export function accountOfEndpoint(endpoint: string): string | undefined {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch (cause) {
    throw new InventoryError(`${JSON.stringify(endpoint)} is not an endpoint URL`, { cause });
  }
  const host = /^([a-z0-9]+)\.blob\./.exec(url.hostname);
  if (host) return host[1];
  const segment = url.pathname.split('/').find((p) => p !== '');
  return segment === undefined ? undefined : decodeURIComponent(segment);
}

function azureManifest(file: string, m: unknown, options: ManifestOptions): CheckedManifest {
  if (options.account !== undefined) {
    const theirs = accountOfEndpoint(str(m, 'endpoint', file));
    if (theirs !== options.account) {
      throw refuse(
        file,
        `it is an inventory of account ${theirs}, not of the stage's ${options.account}`,
      );
    }
  }
  const status = str(m, 'status', file);
  if (status !== 'Succeeded')
    throw refuse(file, `status ${status}: only a Succeeded inventory is complete`);
  const taken = checkTime(file, Date.parse(str(m, 'inventoryStartTime', file)), options);
  const rule = field(m, 'ruleDefinition', file);
  const objectType = str(rule, 'objectType', file);
  if (objectType.toLowerCase() !== 'blob') throw refuse(file, `objectType ${objectType}, not blob`);
  const format = str(rule, 'format', file).toLowerCase();
  if (format !== 'csv' && format !== 'parquet')
    throw refuse(file, `format ${format}: csv or parquet`);
  const filters = (rule as { filters?: { prefixMatch?: unknown } }).filters;
  const prefixes = filters?.prefixMatch;
  if (options.bucket !== undefined && Array.isArray(prefixes) && prefixes.length > 0) {
    const mine = `${options.bucket}/`;
    const covers = prefixes.some(
      (p) => typeof p === 'string' && (mine.startsWith(p) || p.startsWith(mine)),
    );
    if (!covers) {
      throw refuse(
        file,
        `its prefixMatch ${JSON.stringify(prefixes)} covers no blob of the stage's container ${options.bucket}`,
      );
    }
  }
  const list = field(m, 'files', file);
  if (!Array.isArray(list) || list.length === 0)
    throw refuse(file, 'files is not a non-empty list');
  const files: DataFile[] = [];
  const seen = new Set<string>();
  for (const entry of list) {
    const blob = str(entry, 'blob', file);
    if (seen.has(blob)) throw refuse(file, `data file ${blob} is listed twice`);
    seen.add(blob);
    const p = locate(file, blob, options.root);
    checkSize(file, p, count(field(entry, 'size', file), 'size', file));
    files.push({
      path: p,
      format,
      read: {
        aliases: AZURE_ALIASES,
        containerInKey: true,
        keyEncoding: options.keyEncoding ?? 'raw',
      },
    });
  }
  const rows = count(field(field(m, 'summary', file), 'objectCount', file), 'objectCount', file);
  return { kind: 'azure', taken, files, rows };
}

const GCS_ALIASES: Record<string, Column> = { name: 'key', updated: 'lastModified' };

function gcsManifest(file: string, m: unknown, options: ManifestOptions): CheckedManifest {
  const config = field(m, 'report_config', file);
  const report = field(config, 'object_metadata_report_options', file);
  const bucket = str(field(report, 'storage_filters', file), 'bucket', file);
  checkBucket(file, bucket, options);
  const taken = checkTime(file, Date.parse(str(m, 'snapshot_time', file)), options);
  const c = config as Record<string, unknown>;
  let format: InventoryFormat;
  let header: string[] | undefined;
  if (c.parquet_options !== undefined) {
    format = 'parquet';
  } else if (c.csv_options !== undefined) {
    format = 'csv';
    const csv = c.csv_options as Record<string, unknown>;
    if (
      (csv.delimiter ?? ',') !== ',' ||
      !['\n', '\r\n', undefined].includes(csv.record_separator as string)
    ) {
      throw refuse(
        file,
        'csv_options: this reader knows "," between fields and a line break between records',
      );
    }
    if (csv.header_required === false) {
      const fields = field(report, 'metadata_fields', file);
      if (!Array.isArray(fields) || !fields.every((f) => typeof f === 'string')) {
        throw refuse(file, 'metadata_fields is not a list of names');
      }
      header = fields as string[];
    }
  } else {
    throw refuse(file, 'report_config has neither csv_options nor parquet_options');
  }
  const names = field(m, 'report_shards_file_names', file);
  if (!Array.isArray(names)) throw refuse(file, 'report_shards_file_names is not a list');
  const shards = count(field(m, 'shard_count', file), 'shard_count', file);
  if (names.length !== shards || shards === 0) {
    throw refuse(file, `it lists ${names.length} shards, its shard_count is ${shards}`);
  }
  if (new Set(names).size !== names.length) throw refuse(file, 'a shard is listed twice');
  const files = names.map((name) => {
    if (typeof name !== 'string' || name === '') throw refuse(file, 'a shard name is not a string');
    return {
      path: locate(file, name, options.root),
      format,
      read: { header, aliases: GCS_ALIASES, keyEncoding: options.keyEncoding ?? 'raw' },
    } satisfies DataFile;
  });
  const rows = count(field(m, 'records_processed', file), 'records_processed', file);
  return { kind: 'gcs', taken, files, rows };
}

/** Read and check a manifest (see the module comment); nothing is read from its rows yet. */
export async function checkManifest(
  file: string,
  options: ManifestOptions,
): Promise<CheckedManifest> {
  let m: unknown;
  try {
    m = JSON.parse(await readFile(file, 'utf8'));
  } catch (cause) {
    throw refuse(file, 'cannot be read as JSON', cause);
  }
  if (typeof m !== 'object' || m === null || Array.isArray(m))
    throw refuse(file, 'not a JSON object');
  if ('sourceBucket' in m && 'fileSchema' in m) return s3Manifest(file, m, options);
  if ('ruleDefinition' in m && 'files' in m) return azureManifest(file, m, options);
  if ('report_config' in m && 'report_shards_file_names' in m) return gcsManifest(file, m, options);
  throw refuse(file, 'not an S3 Inventory, Azure Blob Inventory or GCS inventory report manifest');
}

/**
 * The rows of every data file of a checked manifest, in manifest order; the row count the
 * manifest gives is checked after the last file (a short file fails the plan there).
 */
export async function* readManifestRows(
  file: string,
  checked: CheckedManifest,
  signal?: AbortSignal | undefined,
): AsyncGenerator<InventoryRow> {
  let rows = 0;
  for (const data of checked.files) {
    yield* readInventoryFile(data.path, {
      ...data.read,
      format: data.format,
      signal,
      onRow: () => {
        rows += 1;
      },
    });
  }
  if (checked.rows !== undefined && rows !== checked.rows) {
    throw refuse(
      file,
      `its data files hold ${rows} rows, the manifest says ${checked.rows}: refused`,
    );
  }
}
