/**
 * Units of GC past one machine (docs/gc.md#inventories-as-delivered): Parquet inventories read
 * strictly, manifests refused for what the shared suite (test/support/gc-scale-suite.ts) does not
 * reach on every store, and the shard syntax.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkManifest,
  InventoryError,
  isManifestName,
  parseShard,
  readInventoryFile,
} from '../../src/lake/gc/index.js';
import { azureInventory, s3Inventory } from '../support/gc-inventory-fixtures.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'gc-scale-units-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function all(rows: AsyncIterable<unknown>): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const r of rows) out.push(r);
  return out;
}

const rows = [{ key: 'data/a b+%25ü.bin', size: 3, time: new Date('2020-01-01T00:00:00Z') }];
const options = { bucket: 'lake', maxAgeMs: 3_600_000, now: Date.now() };

describe('Parquet inventories', () => {
  it('reads keys as they are, sizes and times; refuses a file that is not Parquet or cut short', async () => {
    const file = path.join(dir, 'inv.parquet');
    const bytes = new Uint8Array(
      parquetWriteBuffer({
        columnData: [
          { name: 'Key', type: 'STRING', data: ['data/a b+%25ü.bin'] },
          { name: 'Size', type: 'INT64', data: [3n] },
          { name: 'LastModifiedDate', type: 'TIMESTAMP', data: [new Date(5000)] },
        ],
      }),
    );
    await writeFile(file, bytes);
    expect(await all(readInventoryFile(file))).toEqual([
      {
        key: 'data/a b+%25ü.bin',
        size: 3,
        lastModified: 5000,
        version: undefined,
        bucket: undefined,
      },
    ]);
    await writeFile(path.join(dir, 'cut.parquet'), bytes.subarray(0, bytes.length - 9));
    await expect(all(readInventoryFile(path.join(dir, 'cut.parquet')))).rejects.toThrow(
      InventoryError,
    );
    await writeFile(path.join(dir, 'text.parquet'), 'key,size\n');
    await expect(all(readInventoryFile(path.join(dir, 'text.parquet')))).rejects.toThrow(
      InventoryError,
    );
  });

  it('reads every row of many row groups and pages in order; refuses a size past 2^53', async () => {
    // Read by column, a group at a time (docs/performance.md): row groups of 700 rows, pages of
    // 4 KiB, so a column chunk comes in parts; a time before 1970 and a null time as well.
    const n = 2500;
    const keys = Array.from({ length: n }, (_, i) => `k/${String(i).padStart(6, '0')}-ü`);
    const times = keys.map((_, i) => (i === 7 ? null : new Date(i === 3 ? -86_400_000 : i * 1000)));
    const file = path.join(dir, 'groups.parquet');
    const write = (sizes: bigint[]) =>
      writeFile(
        file,
        new Uint8Array(
          parquetWriteBuffer({
            columnData: [
              { name: 'bucket', type: 'STRING', data: keys.map(() => 'lake') },
              { name: 'key', type: 'STRING', data: keys },
              { name: 'size', type: 'INT64', data: sizes },
              { name: 'last_modified', type: 'TIMESTAMP', data: times },
            ],
            rowGroupSize: 700,
            pageSize: 4096,
          }),
        ),
      );
    await write(keys.map((_, i) => BigInt(i * 3)));
    const got = (await all(readInventoryFile(file))) as Array<Record<string, unknown>>;
    expect(got).toHaveLength(n);
    expect(got.map((r) => r.key)).toEqual(keys);
    expect(got.map((r) => r.size)).toEqual(keys.map((_, i) => i * 3));
    expect(got.map((r) => r.bucket)).toEqual(keys.map(() => 'lake'));
    expect(got.map((r) => r.lastModified)).toEqual(times.map((t) => t?.getTime()));
    // One size that is no safe integer: the file is refused at that row, not read as another size.
    await write(keys.map((_, i) => (i === 2222 ? 2n ** 60n : BigInt(i))));
    await expect(all(readInventoryFile(file))).rejects.toThrow(/row 2223: size/);
  });

  it('refuses a key column of bytes that are not UTF-8', async () => {
    const file = path.join(dir, 'bytes.parquet');
    await writeFile(
      file,
      new Uint8Array(
        parquetWriteBuffer({
          columnData: [
            { name: 'key', type: 'BYTE_ARRAY', data: [new Uint8Array([0x64, 0xff, 0xfe])] },
            { name: 'size', type: 'INT64', data: [1n] },
            { name: 'last_modified', type: 'TIMESTAMP', data: [new Date(0)] },
          ],
        }),
      ),
    );
    await expect(all(readInventoryFile(file))).rejects.toThrow(/not UTF-8/);
  });
});

describe('manifests', () => {
  it('are recognized by name', () => {
    expect(isManifestName('/x/2026-12-01T00-00Z/manifest.json')).toBe(true);
    expect(isManifestName('rule-1-manifest.json')).toBe(true);
    expect(isManifestName('cfg_2026_manifest.json')).toBe(true);
    expect(isManifestName('inventory.json')).toBe(false);
    expect(isManifestName('mymanifest.json')).toBe(false);
  });

  it('refuses ORC, a report that did not succeed, one from the future, a file listed twice', async () => {
    const s3 = await s3Inventory(path.join(dir, 'orc'), 'lake', rows, 'CSV');
    const m = JSON.parse(await readFile(s3.manifest, 'utf8'));
    await writeFile(s3.manifest, JSON.stringify({ ...m, fileFormat: 'ORC' }));
    await expect(checkManifest(s3.manifest, options)).rejects.toThrow(/ORC/);
    await writeFile(s3.manifest, JSON.stringify({ ...m, files: [...m.files, m.files[0]] }));
    await expect(checkManifest(s3.manifest, options)).rejects.toThrow(/twice/);
    const future = await s3Inventory(
      path.join(dir, 'future'),
      'lake',
      rows,
      'CSV',
      new Date(Date.now() + 86_400_000),
    );
    await expect(checkManifest(future.manifest, options)).rejects.toThrow(/future/);
    const az = await azureInventory(path.join(dir, 'az'), 'lake', rows, 'csv');
    const a = JSON.parse(await readFile(az.manifest, 'utf8'));
    await writeFile(az.manifest, JSON.stringify({ ...a, status: 'Failed' }));
    await expect(checkManifest(az.manifest, options)).rejects.toThrow(/Succeeded/);
    await writeFile(path.join(dir, 'other-manifest.json'), '{"hello":1}');
    await expect(checkManifest(path.join(dir, 'other-manifest.json'), options)).rejects.toThrow(
      /not an S3 Inventory/,
    );
  });
});

describe('shards', () => {
  it('are I/N with 1 <= I <= N', () => {
    expect(parseShard('1/4')).toEqual({ index: 1, count: 4 });
    expect(parseShard('4/4')).toEqual({ index: 4, count: 4 });
    for (const bad of ['0/4', '5/4', '1/0', '1', 'a/b', '1/4/2', ' 1/4']) {
      expect(() => parseShard(bad), bad).toThrow(RangeError);
    }
  });
});
