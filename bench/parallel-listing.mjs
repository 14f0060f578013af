// Issue 27: the version listing of a commit, one sequential ListObjectVersions listing against
// the parallel listing in key ranges (src/folders/parallel-listing.ts), on Ceph through the
// delay proxy (delay-proxy.mjs: `--ms` each way, so 10 is a 20 ms round trip).
//
//   npm run build   # or npx tsc -p tsconfig.json: the bench runs dist/
//   AWS_ENDPOINT_URL=http://127.0.0.1:7480 AWS_ACCESS_KEY_ID=AKIDTEST \
//   AWS_SECRET_ACCESS_KEY=SECRETTEST AWS_REGION=us-east-1 \
//   nice -n 5 node bench/parallel-listing.mjs --files 20000 --folders 20 --ms 10 --runs 3
//
// Three folders of `--files` objects each in one versioned bucket (`--bucket`, made and seeded
// once; a later run reuses what is there): `nested/` in `--folders` subfolders, `flat/` with
// uniform names (8 hex digits), `seq/` with clustered ones (`img_000123.jpg`). Seeding Ceph is
// slow (a few hundred puts a second here), which is why the folders are tens of thousands of
// objects, not a million; the listing's cost is per page, so it scales linearly beyond.
// Each run lists one folder: `sequential` is the driver's one listing (`_history`), `parallel`
// is `historyListing` (8 ranges at once), and `snapshot` rows are a commit's whole two-listing
// snapshot (`snapshotFolder`) both ways. Wall time is the median of `--runs`; requests are what
// the proxy forwarded during the run (the delimiter listing included). Prints a Markdown table.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  CreateBucketCommand,
  ListObjectsV2Command,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const { values } = parseArgs({
  options: {
    bucket: { type: 'string', default: 'provcat-bench-parlist' },
    files: { type: 'string', default: '20000' },
    folders: { type: 'string', default: '20' },
    ms: { type: 'string', default: '10' },
    runs: { type: 'string', default: '3' },
    only: { type: 'string' },
    synthetic: { type: 'string' },
  },
});
const files = Number(values.files);
const folders = Number(values.folders);
const runs = Number(values.runs);
const bucket = values.bucket;
const endpoint = process.env.AWS_ENDPOINT_URL ?? 'http://127.0.0.1:7480';

const { S3Store } = await import(path.join(repo, 'dist/drivers/s3/index.js'));
const { historyListing, parallelListing } = await import(
  path.join(repo, 'dist/src/folders/parallel-listing.js')
);
const { subfolderCuts } = await import(path.join(repo, 'dist/src/folders/range-splits.js'));
const { compareUtf8 } = await import(path.join(repo, 'dist/src/core/keys.js'));
const { snapshotFolder } = await import(path.join(repo, 'dist/src/commits/snapshot.js'));

const pad = (n, w) => String(n).padStart(w, '0');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const layouts = {
  nested: (i) => `nested/d${pad(i % folders, 4)}/f${pad(i, 7)}`,
  flat: (i) => `flat/${((i * 2654435761) % 2 ** 32).toString(16).padStart(8, '0')}`,
  seq: (i) => `seq/img_${pad(i, 7)}.jpg`,
};

const client = new S3Client({ endpoint, forcePathStyle: true, region: 'us-east-1' });

async function count(prefix) {
  let n = 0;
  let token;
  do {
    const r = await client.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
    );
    n += r.KeyCount ?? 0;
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
  } while (token);
  return n;
}

async function seed() {
  try {
    await client.send(new CreateBucketCommand({ Bucket: bucket }));
  } catch (e) {
    if (e.name !== 'BucketAlreadyOwnedByYou' && e.name !== 'BucketAlreadyExists') throw e;
  }
  await client.send(
    new PutBucketVersioningCommand({
      Bucket: bucket,
      VersioningConfiguration: { Status: 'Enabled' },
    }),
  );
  for (const [name, keyOf] of Object.entries(layouts)) {
    const have = await count(`${name}/`);
    if (have >= files) continue;
    const t0 = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < files) {
          const key = keyOf(next++);
          await client.send(
            new PutObjectCommand({ Bucket: bucket, Key: key, Body: new Uint8Array(0) }),
          );
        }
      }),
    );
    const s = (performance.now() - t0) / 1000;
    console.error(`seeded ${name}/: ${files} objects in ${s.toFixed(0)} s`);
  }
}

/** Start delay-proxy.mjs; `stats()` asks it for its counters. */
async function startProxy() {
  const child = spawn(
    process.execPath,
    [path.join(here, 'delay-proxy.mjs'), '--target', endpoint, '--ms', values.ms],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  const lines = [];
  let waiting;
  child.stdout.on('data', (d) => {
    out += d;
    let i = out.indexOf('\n');
    while (i >= 0) {
      lines.push(out.slice(0, i));
      out = out.slice(i + 1);
      i = out.indexOf('\n');
    }
    waiting?.();
  });
  const line = async () => {
    while (lines.length === 0) await new Promise((r) => (waiting = r));
    return lines.shift();
  };
  const url = await line();
  return {
    url,
    async stats() {
      child.kill('SIGUSR2');
      return JSON.parse(await line());
    },
    async stop() {
      child.kill('SIGTERM');
      await once(child, 'exit');
    },
  };
}

if (values.synthetic) {
  await synthetic(Number(values.synthetic));
  process.exit(0);
}

/**
 * `--synthetic N`: the same listings over a server that scales (N keys in memory, 1,000 a page,
 * each page `2 × --ms` late, any number at once): what the cuts and the merge give when the store
 * is not the bottleneck, as S3 is not. No Ceph, no proxy.
 */
async function synthetic(n) {
  const rtt = 2 * Number(values.ms);
  const perFolder = Math.ceil(n / folders);
  const sets = {
    [`nested (${folders} subfolders)`]: (i) =>
      `nested/d${pad(Math.floor(i / perFolder), 4)}/f${pad(i, 7)}`,
    flat: (i) => `flat/${((i * 2654435761) % 2 ** 32).toString(16).padStart(8, '0')}`,
    seq: (i) => `seq/img_${pad(i, 7)}.jpg`,
  };
  console.log(`\nsynthetic: ${n} keys a folder, ${rtt} ms a page, median of ${runs}\n`);
  console.log('| folder | listing | entries | ranges | requests | wall |');
  console.log('|---|---|---:|---:|---:|---:|');
  for (const [name, keyOf] of Object.entries(sets)) {
    const keys = Array.from({ length: n }, (_, i) => keyOf(i)).sort(compareUtf8);
    const prefix = keys[0].slice(0, keys[0].indexOf('/') + 1);
    let requests = 0;
    const page = () => {
      requests++;
      return new Promise((r) => setTimeout(r, rtt));
    };
    const source = {
      keyOf: (k) => k,
      async *list(after) {
        let lo = 0;
        let hi = keys.length;
        while (after !== undefined && lo < hi) {
          const m = (lo + hi) >> 1;
          if (compareUtf8(keys[m], after) <= 0) lo = m + 1;
          else hi = m;
        }
        for (let i = lo; ; i += 1000) {
          await page();
          yield* keys.slice(i, i + 1000);
          if (i + 1000 >= keys.length) return;
        }
      },
    };
    const plan = async (after) => {
      await page();
      const prefixes = [];
      for (const k of keys) {
        const slash = k.indexOf('/', prefix.length);
        if (slash < 0) continue;
        const p = k.slice(0, slash + 1);
        if (prefixes[prefixes.length - 1] !== p) prefixes.push(p);
        if (prefixes.length === 1000) break;
      }
      return subfolderCuts(prefixes, '/', after, 32);
    };
    for (const label of ['sequential', 'parallel']) {
      const times = [];
      let last;
      for (let r = 0; r < runs; r++) {
        requests = 0;
        const stats = { ranges: 1, cuts: 0 };
        const t0 = performance.now();
        let count = 0;
        const it =
          label === 'sequential'
            ? source.list(undefined)
            : parallelListing(source, { prefix, plan, stats });
        for await (const _ of it) count++;
        times.push(performance.now() - t0);
        last = { count, ranges: stats.ranges, requests };
      }
      console.log(
        `| ${name} | ${label} | ${last.count} | ${last.ranges} | ${last.requests} | ${(median(times) / 1000).toFixed(2)} s |`,
      );
    }
  }
}

await seed();
const proxy = await startProxy();
process.on('SIGTERM', () => proxy.stop().then(() => process.exit(1)));
process.on('SIGINT', () => proxy.stop().then(() => process.exit(1)));
const cache = await mkdtemp(path.join(tmpdir(), 'provcat-parlist-bench-'));
const store = new S3Store({ cache, endpoint: proxy.url, forcePathStyle: true });
const rows = [];
try {
  for (const name of Object.keys(layouts)) {
    if (values.only && values.only !== name) continue;
    const prefix = `${name}/`;
    const cases = {
      sequential: async () => {
        let n = 0;
        for await (const _ of store._history(bucket, prefix)) n++;
        return { entries: n, ranges: 1 };
      },
      parallel: async () => {
        const stats = { ranges: 0, cuts: 0 };
        let n = 0;
        for await (const _ of historyListing(store, bucket, prefix, { stats })) n++;
        return { entries: n, ranges: stats.ranges };
      },
      'snapshot, sequential': async () => ({
        entries: (await snapshotFolder(store, bucket, prefix, { concurrency: 1 })).length,
        ranges: 1,
      }),
      'snapshot, parallel': async () => ({
        entries: (await snapshotFolder(store, bucket, prefix)).length,
        ranges: undefined,
      }),
    };
    for (const [label, run] of Object.entries(cases)) {
      await run(); // warm: connections, routes
      const times = [];
      let requests = 0;
      let last;
      for (let r = 0; r < runs; r++) {
        const before = (await proxy.stats()).requests;
        const t0 = performance.now();
        last = await run();
        times.push(performance.now() - t0);
        requests = (await proxy.stats()).requests - before;
      }
      rows.push({ name, label, ms: median(times), requests, ...last });
      console.error(`${name} ${label}: ${median(times).toFixed(0)} ms, ${requests} requests`);
    }
  }
} finally {
  await store.close();
  await proxy.stop();
  client.destroy();
  await rm(cache, { recursive: true, force: true });
}

console.log(
  `\n${files} objects a folder, ${2 * Number(values.ms)} ms round trips, median of ${runs}\n`,
);
console.log('| folder | listing | entries | ranges | requests | wall |');
console.log('|---|---|---:|---:|---:|---:|');
for (const r of rows) {
  const folder = r.name === 'nested' ? `nested (${folders} subfolders)` : r.name;
  console.log(
    `| ${folder} | ${r.label} | ${r.entries} | ${r.ranges ?? ''} | ${r.requests} | ${(r.ms / 1000).toFixed(2)} s |`,
  );
}
