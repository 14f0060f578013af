/**
 * GC past one machine, end to end with DuckDB (`@duckdb/node-api`) as the engine, on the local
 * stage and on S3 (Ceph): provcat exports the keep-set as Parquet; DuckDB reads it and an S3
 * Inventory's Parquet data files, anti-joins them with the SQL of docs/gc.md, and writes the
 * candidates (bound to the keep-set's fingerprint); provcat plans from them — re-checking each —
 * and applies the plan in two shards. The engine's naive output wrongly holds a young key, the
 * reserved folders and a nested stage's keys, and one referenced key added on purpose: none of
 * them is planned. The bundled CLI is used (`npm run build` first).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareUtf8 } from '../../src/lake/gc/keys.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';
import { bucketOf, inventoryRows, s3Inventory } from '../support/gc-inventory-fixtures.js';
import { cli, type GcTarget, HOSTILE, planned, seed } from '../support/gc-suite.js';
import { localTarget, s3Target } from '../support/gc-targets.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const sql = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** The anti-join of docs/gc.md ("With DuckDB"), parameterized by its files. */
function antiJoin(keep: string, inventory: string, bucket: string): string {
  return `
    CREATE TABLE meta AS
      SELECT decode(key) AS k, decode(value) AS v FROM parquet_kv_metadata(${sql(keep)});
    CREATE TABLE keep AS
      SELECT (SELECT v FROM meta WHERE k = 'provcat.key-prefix') AS prefix, key, kind
      FROM read_parquet(${sql(keep)});
    CREATE TABLE inv AS
      SELECT key, size, last_modified_date AS last_modified
      FROM read_parquet(${sql(inventory)})
      WHERE bucket = ${sql(bucket)} AND coalesce(is_latest, true);
    CREATE TABLE candidates AS
      SELECT i.key, i.size, i.last_modified FROM inv i
      WHERE NOT EXISTS (
        SELECT 1 FROM keep k
        WHERE (k.kind = 'exact' AND i.key = CASE WHEN k.prefix = '' THEN k.key ELSE k.prefix || '/' || k.key END)
           OR (k.kind = 'prefix' AND starts_with(i.key, CASE WHEN k.prefix = '' THEN k.key ELSE k.prefix || '/' || k.key END))
      );`;
}

async function endToEnd(t: GcTarget, dir: string): Promise<void> {
  const stage = t.stage();
  const tenant = t.stage({ tenant: 'acme' });
  const prefix = stage.keyPrefix === '' ? '' : `${stage.keyPrefix}/`;
  const live = ['data/kept.bin', ...HOSTILE];
  const underPrefix = ['datasets/r/ep1.bin', 'datasets/r/sub/ep2.bin'];
  const orphans = [
    'data/dead%25name.bin',
    'data/x+y z.bin',
    'data/ü-orphan 片.bin',
    'datasets/rX/not-under.bin',
    'ab/ab01.bin',
  ];
  await seed(t, [...live, ...underPrefix, ...orphans, 'acme/ab/tenant-orphan.bin']);
  await stage.addReferences('ds', [
    ...live.map((k) => stage.uriOf(k)),
    `${stage.uriOf('datasets/r')}/`,
  ]);
  await tenant.addReferences('tenant', [tenant.uriOf('ab/tenant-live.bin')]);
  await sleep(3500);
  await t.put('data/young.bin', 'young');

  // 1. The inventory (S3 Inventory, Parquet) and the keep-set (Parquet).
  const bucket = bucketOf(t);
  const inv = await s3Inventory(
    path.join(dir, 'inv'),
    bucket,
    await inventoryRows(stage),
    'Parquet',
  );
  const keepFile = path.join(dir, 'keep.parquet');
  const k = await cli(t, [
    'gc',
    'keep-set',
    '--stage',
    t.stageString,
    '--out',
    keepFile,
    '--format',
    'parquet',
  ]);
  expect(k.code, k.stderr).toBe(0);
  const fingerprint = JSON.parse(k.stdout).fingerprint as string;

  // 2. DuckDB: anti-join, plus a referenced key the engine wrongly adds; write the candidates.
  const candidates = path.join(dir, 'candidates.parquet');
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  try {
    await c.run(
      antiJoin(keepFile, path.join(path.dirname(inv.data[0] as string), '*.parquet'), bucket),
    );
    await c.run(
      `INSERT INTO candidates SELECT key, size, last_modified FROM inv WHERE key = ${sql(`${prefix}data/kept.bin`)}`,
    );
    await c.run(
      `COPY candidates TO ${sql(candidates)} (FORMAT parquet, KV_METADATA {'provcat.fingerprint': ${sql(fingerprint)}})`,
    );
    const rows = (await c.runAndReadAll('SELECT key FROM candidates ORDER BY key')).getRowObjects();
    const keys = rows.map((r) => String(r.key));
    // The naive output holds what must not be deleted: it is provcat's job to drop it.
    expect(keys).toContain(`${prefix}data/kept.bin`);
    expect(keys).toContain(`${prefix}data/young.bin`);
    expect(keys).toContain(`${prefix}acme/ab/tenant-orphan.bin`);
    expect(keys.some((key) => key.includes('.provcat/'))).toBe(true);
  } finally {
    c.closeSync();
    db.closeSync();
  }

  // 3. provcat plans from the candidates (the young key rewritten just now: the store decides).
  await t.put('data/young.bin', 'young');
  const planDir = path.join(dir, 'plan');
  const p = await cli(t, [
    'gc',
    'plan',
    '--stage',
    t.stageString,
    '--older-than',
    '3s',
    '--page-size',
    '2',
    '--out',
    planDir,
    '--candidates',
    candidates,
  ]);
  expect(p.code, p.stderr).toBe(0);
  expect(await planned(planDir)).toEqual([...orphans].sort(compareUtf8));
  const manifest = JSON.parse(await readFile(path.join(planDir, 'manifest.json'), 'utf8'));
  expect(manifest.totals).toMatchObject({ referenced: 1, young: 1, candidates: orphans.length });
  expect(manifest.totals.reserved).toBeGreaterThanOrEqual(2);

  // 4. Applied in two shards, as on two machines.
  const before = await t.objects();
  let deleted = 0;
  for (const shard of ['2/2', '1/2']) {
    const a = await cli(t, ['gc', 'apply', planDir, '--stage', t.stageString, '--shard', shard]);
    expect(a.code, a.stderr).toBe(0);
    deleted += JSON.parse(a.stdout).deleted as number;
  }
  expect(deleted).toBe(orphans.length);
  expect(await t.objects()).toEqual(before.filter((key) => !orphans.includes(key)));
  await stage.close();
  await tenant.close();
}

let base: string;
beforeAll(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'gc-duckdb-'));
});
afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('GC with DuckDB as the engine, on the local stage', () => {
  it('keep-set Parquet ⋉ inventory Parquet → candidates → plan → two shards', async () => {
    await endToEnd(await localTarget(base), await mkdtemp(path.join(base, 'work-')));
  }, 60_000);
});

describeS3('GC with DuckDB as the engine, on S3', () => {
  let bucket: string;
  beforeAll(async () => {
    bucket = await createTestBucket('gc-duckdb');
  });
  afterAll(async () => {
    await dropTestBucket(bucket, 'gc-');
  });
  it('keep-set Parquet ⋉ inventory Parquet → candidates → plan → two shards', async () => {
    await endToEnd(s3Target(bucket), await mkdtemp(path.join(base, 'work-')));
  }, 90_000);
});
