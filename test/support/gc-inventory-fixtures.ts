/**
 * Inventories as the clouds deliver them, made by the tests from a stage's own listing: S3
 * Inventory (headerless CSV.gz with `fileSchema`, URL-encoded keys; or Parquet), Azure Blob
 * Inventory (CSV with a header, `Name` = `container/blob`; or Parquet) and GCS inventory reports
 * (CSV shards with a header; or Parquet), each with its manifest as the cloud writes it.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { parquetWriteBuffer } from 'hyparquet-writer';
import type { Stage } from '../../src/lake/index.js';
import type { GcTarget } from './gc-suite.js';

/** One object as an inventory reports it: its full key in the bucket. */
export interface InvRow {
  key: string;
  size: number;
  time: Date;
}

/** The bucket (Azure: container) an inventory of `t` names; `root` for a local stage. */
export function bucketOf(t: GcTarget): string {
  return (t.descriptor.bucket ?? t.descriptor.container ?? 'root') as string;
}

/** The endpoint an Azure inventory of `t` names: its account's (any account for other kinds). */
export function endpointOf(t: GcTarget): string {
  const { endpoint, account } = t.descriptor as { endpoint?: string; account?: string };
  return endpoint ?? `https://${account ?? 'account'}.blob.core.windows.net`;
}

/** The stage's objects as an inventory of the whole bucket reports them. */
export async function inventoryRows(stage: Stage): Promise<InvRow[]> {
  const prefix = stage.keyPrefix === '' ? '' : `${stage.keyPrefix}/`;
  const rows: InvRow[] = [];
  for await (const o of stage.list()) {
    rows.push({ key: prefix + o.key, size: o.size, time: o.lastModified as Date });
  }
  return rows;
}

const md5 = (b: Uint8Array) => createHash('md5').update(b).digest('hex');
const formEncode = (k: string) => encodeURIComponent(k).replace(/%20/g, '+');
const quote = (s: string) => `"${s.replace(/"/g, '""')}"`;

function halves<T>(rows: T[]): [T[], T[]] {
  const mid = Math.ceil(rows.length / 2);
  return [rows.slice(0, mid), rows.slice(mid)];
}

function parquet(columns: Array<{ name: string; type: string; data: unknown[] }>): Uint8Array {
  return new Uint8Array(parquetWriteBuffer({ columnData: columns as never }));
}

/** Files written: the manifest's path, and each data file's. */
export interface Delivered {
  manifest: string;
  data: string[];
}

/**
 * An S3 Inventory below `dir` as `aws s3 sync` of the destination prefix leaves it:
 * `dir/<bucket>/<config>/data/<n>.csv.gz` and `dir/<bucket>/<config>/<time>/manifest.json`.
 */
export async function s3Inventory(
  dir: string,
  bucket: string,
  rows: InvRow[],
  format: 'CSV' | 'Parquet',
  taken = new Date(),
): Promise<Delivered> {
  const base = path.join(dir, bucket, 'config-1');
  await mkdir(path.join(base, 'data'), { recursive: true });
  const stamp = taken.toISOString().slice(0, 16).replace(/:/g, '-');
  await mkdir(path.join(base, `${stamp}Z`), { recursive: true });
  const files = [];
  const data: string[] = [];
  for (const [i, part] of halves(rows).entries()) {
    let bytes: Uint8Array;
    let name: string;
    if (format === 'CSV') {
      name = `part-${i}.csv.gz`;
      const text = part
        .map((r) =>
          [bucket, formEncode(r.key), 'true', 'false', String(r.size), r.time.toISOString()]
            .map(quote)
            .join(','),
        )
        .join('\n');
      bytes = gzipSync(`${text}\n`);
    } else {
      name = `part-${i}.parquet`;
      bytes = parquet([
        { name: 'bucket', type: 'STRING', data: part.map(() => bucket) },
        { name: 'key', type: 'STRING', data: part.map((r) => r.key) },
        { name: 'is_latest', type: 'BOOLEAN', data: part.map(() => true) },
        { name: 'size', type: 'INT64', data: part.map((r) => BigInt(r.size)) },
        { name: 'last_modified_date', type: 'TIMESTAMP', data: part.map((r) => r.time) },
      ]);
    }
    const key = `inventory/${bucket}/config-1/data/${name}`;
    const file = path.join(base, 'data', name);
    await writeFile(file, bytes);
    data.push(file);
    files.push({ key, size: bytes.length, MD5checksum: md5(bytes) });
  }
  const manifest = {
    sourceBucket: bucket,
    destinationBucket: 'arn:aws:s3:::inventory-destination',
    version: '2016-11-30',
    creationTimestamp: String(taken.getTime()),
    fileFormat: format,
    fileSchema:
      format === 'CSV'
        ? 'Bucket, Key, IsLatest, IsDeleteMarker, Size, LastModifiedDate'
        : 'message s3.inventory { required binary bucket (STRING); required binary key (STRING); optional boolean is_latest; optional int64 size; optional int64 last_modified_date (TIMESTAMP(MILLIS,true)); }',
    files,
  };
  const file = path.join(base, `${stamp}Z`, 'manifest.json');
  await writeFile(file, JSON.stringify(manifest, null, 2));
  return { manifest: file, data };
}

/** An Azure Blob Inventory run below `dir`: `<date>/<time>/rule-1/rule-1_n.csv` and its manifest. */
export async function azureInventory(
  dir: string,
  container: string,
  rows: InvRow[],
  format: 'csv' | 'parquet',
  taken = new Date(),
  endpoint = 'https://account.blob.core.windows.net',
): Promise<Delivered> {
  const run = path.join(dir, '2026', '12', '01', '13-25-36', 'rule-1');
  await mkdir(run, { recursive: true });
  const files = [];
  const data: string[] = [];
  for (const [i, part] of halves(rows).entries()) {
    const name = `rule-1_${i + 1}.${format}`;
    const bytes =
      format === 'csv'
        ? Buffer.from(
            `${[
              'Name,Creation-Time,Last-Modified,Content-Length,BlobType',
              ...part.map((r) =>
                [
                  `${container}/${r.key}`,
                  r.time.toISOString(),
                  r.time.toISOString().replace('Z', '0000Z'),
                  String(r.size),
                  'BlockBlob',
                ]
                  .map(quote)
                  .join(','),
              ),
            ].join('\n')}\n`,
          )
        : parquet([
            { name: 'Name', type: 'STRING', data: part.map((r) => `${container}/${r.key}`) },
            { name: 'Last-Modified', type: 'TIMESTAMP', data: part.map((r) => r.time) },
            { name: 'Content-Length', type: 'INT64', data: part.map((r) => BigInt(r.size)) },
          ]);
    const file = path.join(run, name);
    await writeFile(file, bytes);
    data.push(file);
    files.push({ blob: `2026/12/01/13-25-36/rule-1/${name}`, size: bytes.length });
  }
  const manifest = {
    destinationContainer: 'inventory',
    endpoint,
    files,
    inventoryCompletionTime: new Date(taken.getTime() + 1000).toISOString(),
    inventoryStartTime: taken.toISOString(),
    ruleDefinition: {
      filters: { blobTypes: ['blockBlob'], prefixMatch: [`${container}/`] },
      format,
      objectType: 'Blob',
      schedule: 'Daily',
      schemaFields: ['Name', 'Creation-Time', 'Last-Modified', 'Content-Length', 'BlobType'],
    },
    ruleName: 'rule-1',
    status: 'Succeeded',
    summary: { objectCount: rows.length, totalObjectSize: rows.reduce((n, r) => n + r.size, 0) },
    version: '1.0',
  };
  const file = path.join(run, 'rule-1-manifest.json');
  await writeFile(file, JSON.stringify(manifest, null, 2));
  return { manifest: file, data };
}

/** A GCS inventory report below `dir`: shards `<config>_<time>_<n>.csv` and its manifest. */
export async function gcsInventory(
  dir: string,
  bucket: string,
  rows: InvRow[],
  format: 'csv' | 'parquet',
  taken = new Date(),
): Promise<Delivered> {
  await mkdir(dir, { recursive: true });
  const stem = `cfg-1_${taken.toISOString().replace(/[:.]/g, '_')}`;
  const names: string[] = [];
  const data: string[] = [];
  for (const [i, part] of halves(rows).entries()) {
    const name = `${stem}_${i}.${format}`;
    const bytes =
      format === 'csv'
        ? Buffer.from(
            `${[
              'bucket,name,size,updated,storageClass',
              ...part.map((r) =>
                [bucket, r.key, String(r.size), r.time.toISOString(), 'STANDARD']
                  .map(quote)
                  .join(','),
              ),
            ].join('\n')}\n`,
          )
        : parquet([
            { name: 'bucket', type: 'STRING', data: part.map(() => bucket) },
            { name: 'name', type: 'STRING', data: part.map((r) => r.key) },
            { name: 'size', type: 'INT64', data: part.map((r) => BigInt(r.size)) },
            { name: 'updated', type: 'TIMESTAMP', data: part.map((r) => r.time) },
          ]);
    const file = path.join(dir, name);
    await writeFile(file, bytes);
    data.push(file);
    names.push(name);
  }
  const manifest = {
    report_config: {
      name: 'projects/p/locations/us/reportConfigs/cfg-1',
      ...(format === 'csv'
        ? { csv_options: { record_separator: '\n', delimiter: ',', header_required: true } }
        : { parquet_options: {} }),
      object_metadata_report_options: {
        metadata_fields: ['bucket', 'name', 'size', 'updated', 'storageClass'],
        storage_filters: { bucket },
        storage_destination_options: { bucket: 'inventory-destination' },
      },
    },
    records_processed: rows.length,
    snapshot_time: taken.toISOString(),
    shard_count: names.length,
    report_shards_file_names: names,
  };
  const file = path.join(dir, `${stem}_manifest.json`);
  await writeFile(file, JSON.stringify(manifest, null, 2));
  return { manifest: file, data };
}
