/**
 * GC past one machine, on every stage kind (test/drivers/NAME/gc.ts):
 * inventories as the clouds deliver them (S3 Inventory, Azure Blob Inventory and GCS inventory
 * report manifests, CSV(.gz) and Parquet, hostile keys) planned as the listing is, and every
 * refusal of a manifest (a data file missing, short, tampered; another bucket; too old); the
 * keep-set as Parquet; candidates from an engine, re-checked (narrow, never widen) and bound to
 * one keep-set; and apply in shards.
 *
 * @module
 */
import { mkdir, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } from 'hyparquet';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { expect, it } from 'vitest';
import { compareUtf8 } from '../../src/lake/gc/keys.js';
import {
  applyGc,
  GcPlanError,
  InventoryError,
  planGc,
  ReferencesChanged,
  readKeepSet,
  writeKeepSet,
} from '../../src/lake/index.js';
import {
  azureInventory,
  bucketOf,
  type Delivered,
  endpointOf,
  gcsInventory,
  inventoryRows,
  s3Inventory,
} from './gc-inventory-fixtures.js';
import { cli, failure, HOSTILE, planned, type SuiteContext, seed } from './gc-suite.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Orphans with the keys that need care: `+`, `%`, spaces, non-ASCII. */
const ORPHANS = [
  'data/dead%25name.bin',
  'data/x+y z.bin',
  'data/ü-orphan 片.bin',
  'data/kept.bin.old',
];

/** Register the suite's tests; `ctx` makes targets. */
export function gcScaleSuite(ctx: SuiteContext): void {
  const setUp = async () => {
    const t = await ctx.target();
    const stage = t.stage();
    const live = ['data/kept.bin', ...(ctx.hostile ?? HOSTILE)];
    await seed(t, [...live, ...ORPHANS]);
    await stage.addReferences(
      'ds',
      live.map((k) => stage.uriOf(k)),
    );
    return { t, stage, live, expected: [...ORPHANS].sort(compareUtf8) };
  };

  it('plans from S3 Inventory, Azure and GCS manifests (CSV(.gz), Parquet) as from the listing', async () => {
    const { t, stage, live, expected } = await setUp();
    const dir = await ctx.dir();
    const rows = await inventoryRows(stage);
    const bucket = bucketOf(t);
    const made: Array<[string, Delivered]> = [
      ['s3-csv', await s3Inventory(path.join(dir, 's3-csv'), bucket, rows, 'CSV')],
      ['s3-parquet', await s3Inventory(path.join(dir, 's3-pq'), bucket, rows, 'Parquet')],
      [
        'az-csv',
        await azureInventory(
          path.join(dir, 'az-csv'),
          bucket,
          rows,
          'csv',
          undefined,
          endpointOf(t),
        ),
      ],
      [
        'az-parquet',
        await azureInventory(
          path.join(dir, 'az-pq'),
          bucket,
          rows,
          'parquet',
          undefined,
          endpointOf(t),
        ),
      ],
      ['gcs-csv', await gcsInventory(path.join(dir, 'gcs-csv'), bucket, rows, 'csv')],
      ['gcs-parquet', await gcsInventory(path.join(dir, 'gcs-pq'), bucket, rows, 'parquet')],
    ];
    for (const [name, inv] of made) {
      const plan = await planGc(stage, {
        out: path.join(dir, `plan-${name}`),
        olderThanMs: 0,
        maxInventoryAgeMs: 3_600_000,
        inventory: inv.manifest,
      });
      expect(await planned(plan.dir), name).toEqual(expected);
      expect(plan.scanned, name).toBe(rows.length);
      expect(plan.manifest.source).toBe('inventory');
    }
    // The CLI takes a manifest as --inventory, and its plan applies.
    const r = await cli(t, [
      'gc',
      'plan',
      '--stage',
      t.stageString,
      '--older-than',
      '0s',
      '--max-inventory-age',
      '1h',
      '--out',
      path.join(dir, 'cli'),
      '--inventory',
      (made[0] as [string, Delivered])[1].manifest,
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).candidates).toBe(expected.length);
    const applied = await applyGc(stage, path.join(dir, 'cli'));
    expect(applied).toMatchObject({ deleted: expected.length, skipped: 0, missing: 0 });
    expect(await t.objects()).toEqual([...live].sort());
    await stage.close();
  });

  it('refuses a manifest whose data file is missing, short or tampered, of another bucket, or too old', async () => {
    const { t, stage } = await setUp();
    const dir = await ctx.dir();
    const rows = await inventoryRows(stage);
    const bucket = bucketOf(t);
    const before = await t.objects();
    let n = 0;
    const refused = async (manifest: string, why: RegExp, age = 3_600_000) => {
      const out = path.join(dir, `refused-${n++}`);
      const error = await failure(
        planGc(stage, { out, olderThanMs: 0, maxInventoryAgeMs: age, inventory: manifest }),
      );
      expect(error).toBeInstanceOf(InventoryError);
      expect(String(error)).toMatch(why);
      // Nothing planned: no directory left (it was made by the plan).
      await expect(readdir(out)).rejects.toThrow();
    };
    // S3: a data file missing, short, tampered (same size, other bytes).
    const missing = await s3Inventory(path.join(dir, 'missing'), bucket, rows, 'CSV');
    await rm(missing.data[1] as string);
    await refused(missing.manifest, /missing/);
    const short = await s3Inventory(path.join(dir, 'short'), bucket, rows, 'Parquet');
    const size = (await readFile(short.data[0] as string)).length;
    await truncate(short.data[0] as string, size - 7);
    await refused(short.manifest, /short/);
    const tampered = await s3Inventory(path.join(dir, 'tampered'), bucket, rows, 'CSV');
    const bytes = await readFile(tampered.data[0] as string);
    bytes[bytes.length - 5] = (bytes[bytes.length - 5] as number) ^ 0xff;
    await writeFile(tampered.data[0] as string, bytes);
    await refused(tampered.manifest, /MD5/);
    // Too old for the allowed age (by default the --older-than horizon).
    const old = await s3Inventory(
      path.join(dir, 'old'),
      bucket,
      rows,
      'CSV',
      new Date(Date.now() - 2 * 3_600_000),
    );
    await refused(old.manifest, /ago/);
    const azOld = await azureInventory(
      path.join(dir, 'az-old'),
      bucket,
      rows,
      'csv',
      new Date(0),
      endpointOf(t),
    );
    await refused(azOld.manifest, /ago/);
    // Azure: a data file one row short (its size in the manifest made to match).
    const azShort = await azureInventory(
      path.join(dir, 'az-short'),
      bucket,
      rows,
      'csv',
      undefined,
      endpointOf(t),
    );
    const azManifest = JSON.parse(await readFile(azShort.manifest, 'utf8'));
    azManifest.summary.objectCount += 1;
    await writeFile(azShort.manifest, JSON.stringify(azManifest));
    await refused(azShort.manifest, /rows/);
    // GCS: a shard missing from the folder, a shard count that disagrees.
    const gcsMissing = await gcsInventory(path.join(dir, 'gcs-missing'), bucket, rows, 'csv');
    await rm(gcsMissing.data[0] as string);
    await refused(gcsMissing.manifest, /missing/);
    const gcsShort = await gcsInventory(path.join(dir, 'gcs-short'), bucket, rows, 'parquet');
    const g = JSON.parse(await readFile(gcsShort.manifest, 'utf8'));
    g.report_shards_file_names.pop();
    await writeFile(gcsShort.manifest, JSON.stringify(g));
    await refused(gcsShort.manifest, /shard/);
    if (t.kind !== 'local') {
      // Another bucket's inventory, for each cloud.
      await refused(
        (await s3Inventory(path.join(dir, 'other-s3'), 'another-bucket', rows, 'CSV')).manifest,
        /not of the stage/,
      );
      await refused(
        (await gcsInventory(path.join(dir, 'other-gcs'), 'another-bucket', rows, 'csv')).manifest,
        /not of the stage/,
      );
      await refused(
        (
          await azureInventory(
            path.join(dir, 'other-az'),
            'another-bucket',
            rows,
            'csv',
            undefined,
            endpointOf(t),
          )
        ).manifest,
        /covers no blob/,
      );
      if (t.kind === 'az') {
        // Another storage account's inventory, of a container of the same name.
        const otherAccount = await azureInventory(
          path.join(dir, 'other-account'),
          bucket,
          rows,
          'csv',
          undefined,
          'https://someoneelse.blob.core.windows.net',
        );
        await refused(otherAccount.manifest, /account someoneelse/);
      }
    }
    // The CLI: exit 1, nothing written.
    const r = await cli(t, [
      'gc',
      'plan',
      '--stage',
      t.stageString,
      '--older-than',
      '0s',
      '--out',
      path.join(dir, 'cli-refused'),
      '--inventory',
      tampered.manifest,
    ]);
    expect(r.code, r.stderr).toBe(1);
    expect(await t.objects()).toEqual(before);
    await stage.close();
  });

  it('exports the keep-set as Parquet: the same entries, their kind, the fingerprint', async () => {
    const t = await ctx.target();
    const stage = t.stage();
    const keys = ['data/kept.bin', ...(ctx.hostile ?? HOSTILE)];
    await stage.addReferences('ds', [
      ...keys.map((k) => stage.uriOf(k)),
      `${stage.uriOf('datasets/r')}/`,
    ]);
    const dir = await ctx.dir();
    const common = ['gc', 'keep-set', '--stage', t.stageString, '--out'];
    const jsonl = await cli(t, [...common, path.join(dir, 'keep.jsonl')]);
    expect(jsonl.code, jsonl.stderr).toBe(0);
    const pq = await cli(t, [...common, path.join(dir, 'keep.parquet'), '--format', 'parquet']);
    expect(pq.code, pq.stderr).toBe(0);
    const exported = JSON.parse(pq.stdout);
    const file = await readKeepSet(path.join(dir, 'keep.jsonl'));
    expect(exported.fingerprint).toBe(file.fingerprint);
    const want: string[] = [];
    for await (const k of file.keys()) want.push(k);
    const buffer = await asyncBufferFromFile(path.join(dir, 'keep.parquet'));
    const rows = (await parquetReadObjects({ file: buffer })) as Array<{
      key: string;
      kind: string;
    }>;
    expect(rows.map((r) => r.key)).toEqual(want);
    expect(rows.map((r) => r.kind)).toEqual(
      want.map((k) => (k.endsWith('/') ? 'prefix' : 'exact')),
    );
    const meta = await parquetMetadataAsync(buffer);
    const kv = Object.fromEntries((meta.key_value_metadata ?? []).map((e) => [e.key, e.value]));
    expect(kv['provcat.fingerprint']).toBe(file.fingerprint);
    expect(kv['provcat.stage']).toBe(stage.identity);
    expect(kv['provcat.entries']).toBe(String(want.length));
    expect(kv['provcat.sha256']).toBe(file.sha256);
    expect(kv['provcat.key-prefix']).toBe(stage.keyPrefix);
    await stage.close();
  });

  it('plans from candidates: narrows, never widens; bound to one keep-set', async () => {
    const t = await ctx.target();
    const stage = t.stage();
    const tenant = t.stage({ tenant: 'acme' });
    const prefix = stage.keyPrefix === '' ? '' : `${stage.keyPrefix}/`;
    const orphans = ['data/o1.bin', 'data/o 2+%25.bin', 'data/ü3.bin'];
    await seed(t, [...orphans, 'data/referenced.bin', 'data/resized.bin', 'acme/ab/tenant.bin']);
    await tenant.addReferences('tenant', [tenant.uriOf('ab/other.bin')]);
    await stage.addReferences('ds', [stage.uriOf('data/referenced.bin')]);
    await sleep(3000);
    const listed = new Map((await inventoryRows(stage)).map((r) => [r.key, r]));
    const row = (key: string, over: Partial<{ size: number; time: Date }> = {}) => {
      const r = listed.get(prefix + key);
      return {
        key: prefix + key,
        size: over.size ?? r?.size ?? 5,
        time: over.time ?? r?.time ?? new Date(0),
      };
    };
    // The engine's output: true orphans, and what it got wrong.
    const wrong = [
      row('data/referenced.bin'),
      row('data/young.bin', { time: new Date(0) }), // it claims old; the store says young
      row('acme/ab/tenant.bin'), // a nested stage's
      row('.provcat/refs/log/x'),
      row('data/resized.bin', { size: 999 }),
      row('data/gone.bin'),
      { key: 'elsewhere/o.bin', size: 1, time: new Date(0) },
    ];
    const rows = [...orphans.map((k) => row(k)), ...wrong];
    const dir = await ctx.dir();
    const { fingerprint } = await writeKeepSet(stage, path.join(dir, 'k.jsonl'));
    const jsonl = (fp: string | undefined) =>
      rows
        .map((r) =>
          JSON.stringify({
            key: r.key,
            size: r.size,
            last_modified: r.time.toISOString(),
            ...(fp === undefined ? {} : { fingerprint: fp }),
          }),
        )
        .join('\n');
    await writeFile(path.join(dir, 'c.jsonl'), jsonl(fingerprint));
    await writeFile(
      path.join(dir, 'c.csv'),
      `key,size,last_modified,fingerprint\n${rows
        .map((r) => `"${r.key}",${r.size},${r.time.toISOString()},${fingerprint}`)
        .join('\n')}\n`,
    );
    const pq = (fp: string) =>
      new Uint8Array(
        parquetWriteBuffer({
          columnData: [
            { name: 'key', type: 'STRING', data: rows.map((r) => r.key) },
            { name: 'size', type: 'INT64', data: rows.map((r) => BigInt(r.size)) },
            { name: 'last_modified', type: 'TIMESTAMP', data: rows.map((r) => r.time) },
          ],
          kvMetadata: [{ key: 'provcat.fingerprint', value: fp }],
        }),
      );
    await writeFile(path.join(dir, 'c.parquet'), pq(fingerprint));
    // A folder as Spark writes one: parts, and a _SUCCESS marker.
    await mkdir(path.join(dir, 'spark'));
    await writeFile(path.join(dir, 'spark', '_SUCCESS'), '');
    const [first, second] = [rows.slice(0, 4), rows.slice(4)];
    for (const [i, part] of [first, second].entries()) {
      await writeFile(
        path.join(dir, 'spark', `part-0000${i}.jsonl`),
        part
          .map((r) =>
            JSON.stringify({
              key: r.key,
              size: r.size,
              last_modified: r.time.toISOString(),
              fingerprint,
            }),
          )
          .join('\n'),
      );
    }
    const local = t.kind === 'local';
    for (const name of ['c.jsonl', 'c.csv', 'c.parquet', 'spark']) {
      // Written just before: younger than the cutoff when the plan asks the store.
      await t.put('data/young.bin', 'young');
      const plan = await planGc(stage, {
        out: path.join(dir, `plan-${name}`),
        olderThanMs: 2000,
        candidates: path.join(dir, name),
      });
      expect(await planned(plan.dir), name).toEqual([...orphans].sort(compareUtf8));
      expect(plan.manifest.source).toBe('candidates');
      expect(plan.manifest.totals, name).toMatchObject({
        referenced: 1,
        young: 1,
        reserved: 2,
        // A local stage holds its whole root: `elsewhere/` is inside it, and absent.
        changed: local ? 3 : 2,
        outside: local ? 0 : 1,
        candidates: orphans.length,
      });
    }
    // Another keep-set's candidates, or ones that do not say, refuse the plan.
    await writeFile(path.join(dir, 'other.parquet'), pq('0'.repeat(64)));
    await writeFile(path.join(dir, 'other.jsonl'), jsonl('1'.repeat(64)));
    await writeFile(path.join(dir, 'unbound.jsonl'), jsonl(undefined));
    for (const name of ['other.parquet', 'other.jsonl', 'unbound.jsonl']) {
      const error = await failure(
        planGc(stage, {
          out: path.join(dir, `x-${name}`),
          olderThanMs: 0,
          candidates: path.join(dir, name),
        }),
      );
      expect(error, name).toBeInstanceOf(GcPlanError);
      expect((error as GcPlanError).kind).toBe('KeepSetMismatch');
    }
    const r = await cli(t, [
      'gc',
      'plan',
      '--stage',
      t.stageString,
      '--out',
      path.join(dir, 'cli-other'),
      '--candidates',
      path.join(dir, 'other.parquet'),
    ]);
    expect(r.code, r.stderr).toBe(7);
    // The plan applies: exactly the orphans go.
    const before = await t.objects();
    const applied = await applyGc(stage, path.join(dir, 'plan-c.parquet'));
    expect(applied).toMatchObject({ deleted: orphans.length, skipped: 0, missing: 0 });
    expect(await t.objects()).toEqual(before.filter((k) => !orphans.includes(k)));
    await stage.close();
    await tenant.close();
  });

  it('applies in shards: disjoint, each resumable alone, together the whole plan', async () => {
    const t = await ctx.target();
    const stage = t.stage();
    const orphans = Array.from({ length: 7 }, (_, i) => `data/orphan-${i}.bin`);
    await seed(t, [...orphans, 'data/kept.bin']);
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    const dir = await ctx.dir();
    const plan = await planGc(stage, { out: path.join(dir, 'plan'), olderThanMs: 0, pageSize: 2 });
    expect(plan.manifest.pages).toHaveLength(4);
    const one = await applyGc(stage, plan.dir, { shard: { index: 1, count: 2 } });
    // Pages 1 and 3: orphans 0, 1, 4, 5.
    expect(one).toMatchObject({ pages: 2, applied: 2, deleted: 4, missing: 0 });
    expect(await t.objects()).toEqual([
      'data/kept.bin',
      'data/orphan-2.bin',
      'data/orphan-3.bin',
      'data/orphan-6.bin',
    ]);
    // Resumed alone: nothing more to do.
    expect(await applyGc(stage, plan.dir, { shard: { index: 1, count: 2 } })).toMatchObject({
      applied: 0,
      deleted: 4,
    });
    // The references check before each page stays: a change stops shard 2 with nothing deleted.
    await stage.addReferences('late', [stage.uriOf('data/other.bin')]);
    const stopped = await failure(applyGc(stage, plan.dir, { shard: { index: 2, count: 2 } }));
    expect(stopped).toBeInstanceOf(ReferencesChanged);
    expect(await t.objects()).toHaveLength(4);
    // A new plan, its shard 2 by the CLI on "another machine", then shard 1.
    const again = await planGc(stage, {
      out: path.join(dir, 'again'),
      olderThanMs: 0,
      pageSize: 2,
    });
    const r = await cli(t, ['gc', 'apply', again.dir, '--stage', t.stageString, '--shard', '2/2']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ deleted: 1, missing: 0, aborted: 0, skipped: 0 });
    const rest = await applyGc(stage, again.dir, { shard: { index: 1, count: 2 } });
    expect(rest).toMatchObject({ deleted: 2 });
    expect(await t.objects()).toEqual(['data/kept.bin']);
    expect((await readdir(again.dir)).sort()).toEqual([
      'apply-1-of-2.json',
      'apply-2-of-2.json',
      'manifest.json',
      'pages',
    ]);
    const bad = await cli(t, [
      'gc',
      'apply',
      again.dir,
      '--stage',
      t.stageString,
      '--shard',
      '3/2',
    ]);
    expect(bad.code).toBe(2);
    await stage.close();
  });
}
