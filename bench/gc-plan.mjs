// `gc plan` over a large inventory file: peak RSS and wall time of the CLI process (target here:
// 1,000,000 entries within 256 MiB and 60 s). Runs alone; nothing to start: a local stage holds
// the reference sets, and the inventory is an S3-Inventory-style CSV (URL-encoded keys) in a
// temp directory.
//
//   npm run build && node bench/gc-plan.mjs [--entries 1000000] [--referenced 100000]
//                                                [--format csv|jsonl|parquet|candidates] [--keep]
//                                                [--node-flags=--max-old-space-size=96]
//
// `--node-flags`: V8/Node flags for the timed CLI process (space-separated), e.g. a heap bound.
// `parquet`: the inventory as S3 Inventory's Parquet (row groups of 100,000 rows, raw keys).
// `candidates`: an engine's anti-join output as Parquet (the unreferenced rows only, bound to the
// keep-set's fingerprint), planned with `--candidates` and `--older-than 0s`: every candidate is
// HEADed, so the stage really holds each object (1 byte; written by the bench, not timed).
//
// What it measures: the whole `provcat gc plan --inventory FILE` process under /usr/bin/time
// (wall, user + system CPU, peak RSS) — reading the reference sets (deltas of 10,000 entries),
// the external sort of the inventory (runs of 100,000 rows spilled to disk, merged 16 at once),
// the merge with the keep-set, and writing the plan's pages (1,000 candidates each, fsynced).
// The referenced keys are a random tenth of the inventory, so ~90% of it becomes candidates.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, utimes, writeFile } from 'node:fs/promises';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const CLI = path.join(repo, 'dist/cli/provcat.cjs');
const { stageFromDescriptor } = await import(path.join(repo, 'dist/src/lake/index.js'));

const { values: opt } = parseArgs({
  options: {
    entries: { type: 'string', default: '1000000' },
    referenced: { type: 'string', default: '100000' },
    format: { type: 'string', default: 'csv' },
    keep: { type: 'boolean', default: false },
    'node-flags': { type: 'string', default: '' },
  },
});
const entries = Number(opt.entries);
const referenced = Number(opt.referenced);

const dir = await mkdtemp(path.join(tmpdir(), 'gc-plan-bench-'));
const root = path.join(dir, 'stage');
const stage = stageFromDescriptor({ version: 1, kind: 'local', root });

/** A managed-object key as uploads make them, `ab/ab…` (32 hex). */
function objectKey(i) {
  const hex = randomBytes(16).toString('hex');
  // Every 100th key is hostile, as keys written by other tools may be.
  return i % 100 === 0 ? `data/${hex} %25+ü.bin` : `${hex.slice(0, 2)}/${hex}`;
}

const t0 = Date.now();
const keys = Array.from({ length: entries }, (_, i) => objectKey(i));
const live = keys.slice(0, referenced);
await stage.addReferences(
  'bench',
  live.map((k) => stage.uriOf(k)),
);
const refsSeconds = (Date.now() - t0) / 1000;

// The inventory, in random order, as S3 Inventory reports a bucket.
for (let i = keys.length - 1; i > 0; i--) {
  const j = Math.floor(Math.random() * (i + 1));
  [keys[i], keys[j]] = [keys[j], keys[i]];
}
const old = '2020-01-02T03:04:05.000Z';
const parquetLike = opt.format === 'parquet' || opt.format === 'candidates';
const file = path.join(dir, `inventory.${parquetLike ? 'parquet' : opt.format}`);
let fingerprint;
if (opt.format === 'candidates') {
  const { writeKeepSet } = await import(path.join(repo, 'dist/src/lake/index.js'));
  fingerprint = (await writeKeepSet(stage, path.join(dir, 'keep.jsonl'))).fingerprint;
  const liveSet = new Set(live);
  const rest = keys.filter((k) => !liveSet.has(k));
  keys.length = 0;
  keys.push(...rest);
  for (const k of keys) {
    const f = path.join(root, ...k.split('/'));
    await mkdir(path.dirname(f), { recursive: true });
    await writeFile(f, 'x');
    // As old as the engine's rows say (the plan compares them with the store's HEAD).
    await utimes(f, new Date(old), new Date(old));
  }
}
if (parquetLike) {
  const { ParquetWriter, schemaFromColumnData } = await import('hyparquet-writer');
  const { fileWriter } = await import('hyparquet-writer/src/node.js');
  const writer = fileWriter(file);
  let pw;
  for (let at = 0; at < keys.length; at += 100_000) {
    const part = keys.slice(at, at + 100_000);
    const columnData = [
      ...(opt.format === 'parquet'
        ? [{ name: 'bucket', type: 'STRING', data: part.map(() => 'stage') }]
        : []),
      { name: 'key', type: 'STRING', data: part },
      {
        name: 'size',
        type: 'INT64',
        data: part.map((k) =>
          BigInt(opt.format === 'candidates' ? 1 : 1 + (k.charCodeAt(3) % 97) * 1024),
        ),
      },
      { name: 'last_modified', type: 'TIMESTAMP', data: part.map(() => new Date(old)) },
    ];
    pw ??= new ParquetWriter({
      writer,
      schema: schemaFromColumnData({ columnData }),
      kvMetadata: fingerprint ? [{ key: 'provcat.fingerprint', value: fingerprint }] : [],
    });
    await pw.write({ columnData, rowGroupSize: part.length });
  }
  await pw.finish();
}
const out = parquetLike ? undefined : createWriteStream(file);
const write = (line) => (out.write(line) ? undefined : new Promise((r) => out.once('drain', r)));
if (opt.format === 'csv') await write('Bucket,Key,Size,LastModifiedDate\n');
for (const k of parquetLike ? [] : keys) {
  const size = 1 + (k.charCodeAt(3) % 97) * 1024;
  const line =
    opt.format === 'csv'
      ? `"stage","${encodeURIComponent(k).replace(/%20/g, '+')}","${size}","${old}"\n`
      : `${JSON.stringify({ key: k, size, last_modified: old })}\n`;
  const p = write(line);
  if (p) await p;
}
if (out) await new Promise((r) => out.end(r));
const inventoryBytes = (await stat(file)).size;
keys.length = 0;

const plan = path.join(dir, 'plan');
const r = spawnSync(
  '/usr/bin/time',
  [
    '-f',
    '%e %U %S %M',
    process.execPath,
    ...opt['node-flags'].split(' ').filter((f) => f !== ''),
    CLI,
    'gc',
    'plan',
    '--stage',
    `file://${root}/`,
    opt.format === 'candidates' ? '--candidates' : '--inventory',
    file,
    '--older-than',
    opt.format === 'candidates' ? '0s' : '7d',
    '--out',
    plan,
    '--tmp-dir',
    dir,
    '--json',
  ],
  { encoding: 'utf8', env: { ...process.env, NODE_NO_WARNINGS: '1' } },
);
if (r.status !== 0) {
  console.error(r.stdout, r.stderr);
  process.exit(1);
}
const [seconds, user, sys, kib] = r.stderr.trim().split('\n').at(-1).split(' ').map(Number);
const result = JSON.parse(r.stdout);
console.log(
  JSON.stringify(
    {
      entries,
      referenced,
      format: opt.format,
      nodeFlags: opt['node-flags'],
      inventoryMiB: +(inventoryBytes / 2 ** 20).toFixed(1),
      refsWriteSeconds: refsSeconds,
      planSeconds: seconds,
      planCpuSeconds: +(user + sys).toFixed(2),
      peakRssMiB: +(kib / 1024).toFixed(1),
      candidates: result.candidates,
      keep: result.keep,
      scanned: result.scanned,
      node: process.version,
      // The machine is shared: a load above its 2 cores stretches the wall time.
      loadAverage: os.loadavg().map((l) => +l.toFixed(1)),
    },
    null,
    2,
  ),
);
if (!opt.keep) await rm(dir, { recursive: true, force: true });
else console.log(`kept ${dir}`);
