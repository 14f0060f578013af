// `gc apply --shard I/N`: apply throughput with 1 shard and with N shards at once (separate
// processes, as on separate machines), on a local stage, or with `--s3 BUCKET` on an S3 stage
// (a new prefix of an existing bucket; the endpoint and keys from the AWS environment, e.g. the
// dev Ceph: AWS_ENDPOINT_URL=http://127.0.0.1:7480 AWS_ACCESS_KEY_ID=AKIDTEST
// AWS_SECRET_ACCESS_KEY=SECRETTEST AWS_REGION=us-east-1). Runs alone.
//
//   npm run build && node bench/gc-shards.mjs [--objects 20000] [--shards 4] [--page-size 500]
//                                             [--s3 BUCKET] [--concurrency N]
//
// Each round writes the objects (1 KiB each, not timed; on S3 with the raw SDK, 64 at once),
// plans them (`--older-than 0s`, not timed), then times the apply: one process for the whole
// plan, then N processes for shards 1/N … N/N started together. Reported: wall seconds and
// objects deleted per second. `--concurrency` is passed to each `gc apply` (its deletes in flight).
import { spawn, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
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
    objects: { type: 'string', default: '20000' },
    shards: { type: 'string', default: '4' },
    'page-size': { type: 'string', default: '500' },
    s3: { type: 'string' },
    concurrency: { type: 'string' },
  },
});
const objects = Number(opt.objects);
const shards = Number(opt.shards);
const dir = await mkdtemp(path.join(tmpdir(), 'gc-shards-bench-'));
const root = path.join(dir, 'stage');
const env = { ...process.env, NODE_NO_WARNINGS: '1' };
const bucket = opt.s3;
const s3 = bucket ? await s3Seeder(bucket) : null;

/** Raw-SDK puts of the round's objects straight to the bucket (not through provcat). */
async function s3Seeder(name) {
  const { S3Client, PutObjectCommand } = await import('@aws-sdk/client-s3');
  const client = new S3Client({
    forcePathStyle: true,
    region: process.env.AWS_REGION ?? 'us-east-1',
  });
  return {
    client,
    async seed(prefix) {
      const body = Buffer.alloc(1024);
      let next = 0;
      const one = async () => {
        for (let i = next++; i < objects; i = next++) {
          const hex = i.toString(16).padStart(6, '0');
          const Key = `${prefix}/${hex.slice(0, 2)}/${hex}.bin`;
          await client.send(new PutObjectCommand({ Bucket: name, Key, Body: body }));
        }
      };
      await Promise.all(Array.from({ length: 64 }, one));
    },
  };
}

async function round(name) {
  let stageString;
  if (s3) {
    const prefix = `gc-shards-${process.pid}-${name}`;
    stageString = `s3://${bucket}/${prefix}/`;
    const stage = stageFromDescriptor(
      {
        version: 1,
        kind: 's3',
        bucket,
        prefix,
        region: process.env.AWS_REGION ?? 'us-east-1',
        endpoint: process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL,
        forcePathStyle: true,
      },
      { client: s3.client },
    );
    await stage.addReferences('bench', [stage.uriOf('kept/one.bin')]);
    await s3.seed(prefix);
  } else {
    const top = path.join(root, name);
    stageString = `file://${top}/`;
    const stage = stageFromDescriptor({ version: 1, kind: 'local', root: top });
    await stage.addReferences('bench', [stage.uriOf('kept/one.bin')]);
    for (let i = 0; i < objects; i++) {
      const hex = i.toString(16).padStart(6, '0');
      const f = path.join(top, hex.slice(0, 2), `${hex}.bin`);
      await mkdir(path.dirname(f), { recursive: true });
      await writeFile(f, Buffer.alloc(1024));
    }
  }
  await new Promise((r) => setTimeout(r, 50));
  const plan = path.join(dir, `plan-${name}`);
  const p = spawnSync(
    process.execPath,
    [
      CLI,
      'gc',
      'plan',
      '--stage',
      stageString,
      '--older-than',
      '0s',
      '--page-size',
      opt['page-size'],
      '--out',
      plan,
      '--json',
    ],
    { encoding: 'utf8', env },
  );
  if (p.status !== 0) throw new Error(p.stderr);
  return { plan, stageString };
}

function apply({ plan, stageString }, shard) {
  const args = [CLI, 'gc', 'apply', plan, '--stage', stageString, '--json'];
  if (shard) args.push('--shard', shard);
  if (opt.concurrency) args.push('--concurrency', opt.concurrency);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(err))));
  });
}

const results = [];
{
  const plan = await round('one');
  const t0 = Date.now();
  const r = await apply(plan);
  const s = (Date.now() - t0) / 1000;
  results.push({ shards: 1, seconds: s, deleted: r.deleted, perSecond: Math.round(r.deleted / s) });
}
{
  const plan = await round('many');
  const t0 = Date.now();
  const rs = await Promise.all(
    Array.from({ length: shards }, (_, i) => apply(plan, `${i + 1}/${shards}`)),
  );
  const s = (Date.now() - t0) / 1000;
  const deleted = rs.reduce((n, r) => n + r.deleted, 0);
  results.push({ shards, seconds: s, deleted, perSecond: Math.round(deleted / s) });
}
console.log(
  JSON.stringify(
    {
      stage: bucket ? `s3://${bucket}/` : 'local',
      objects,
      pageSize: Number(opt['page-size']),
      results,
      node: process.version,
      loadAverage: os.loadavg().map((l) => +l.toFixed(1)),
    },
    null,
    2,
  ),
);
await rm(dir, { recursive: true, force: true });
