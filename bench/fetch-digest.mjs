// What checking a fetch's bytes against the digest its store states costs (docs/performance.md,
// "Fetch digests"): cold fetches of one large object whose ETag is a plain MD5, timed with one
// or more builds of the CLI side by side.
//
//   npm run build --silent && node bench/fetch-digest.mjs [--runs N] [--mib M]
//       [--cli A.cjs --cli B.cjs ...] [--cases s3,local,local-kernel,s3-folder]
//
// Cases (each from an empty cache, the runs of every CLI alternating A B A B ...):
// - s3: one object of M MiB (default 1024) put in one PutObject (its ETag the MD5), fetched
//   from the S3 server at 127.0.0.1:7480 (the bytes pass through JavaScript on the lean path,
//   which hashes them as they stream to disk);
// - local: one object of M MiB in the embedded store written from a stream (its ETag the MD5):
//   the fetch copies the version file with the kernel and reads the copy back to hash it;
// - local-kernel: one object of M MiB put from a file (case 8b's layout: copied by the kernel,
//   no MD5): nothing to check, a control;
// - s3-folder: the folder of case 1 of run.mjs (1,000 × 4 KiB, single-part: MD5 ETags), which
//   `node bench/run.mjs --cases 1` seeds and keeps (not in the default set).
// Reports wall and CPU (user + sys) medians per CLI. Nothing is written anywhere else; the
// bucket and folders are removed at the end.
import { spawnSync } from 'node:child_process';
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';

const MiB = 1024 * 1024;
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const { values: opt } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    mib: { type: 'string', default: '1024' },
    cli: { type: 'string', multiple: true },
    cases: { type: 'string', default: 's3,local,local-kernel' },
  },
});
const RUNS = Number(opt.runs);
const BYTES = Number(opt.mib) * MiB;
const clis = (opt.cli ?? [path.join(repo, 'dist/cli/provcat.cjs')]).map((p) => path.resolve(p));
for (const c of clis) if (!existsSync(c)) throw new Error(`${c} is missing (npm run build)`);
const cases = new Set(opt.cases.split(','));
const log = (m) => process.stderr.write(`[fetch-digest] ${m}\n`);
const work = await mkdtemp(path.join(os.tmpdir(), 'provcat-fetch-digest-'));
const env = {
  ...process.env,
  NODE_NO_WARNINGS: '1',
  AWS_ENDPOINT_URL_S3: process.env.AWS_ENDPOINT_URL_S3 ?? 'http://127.0.0.1:7480',
  AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? 'AKIDTEST',
  AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? 'SECRETTEST',
  AWS_REGION: process.env.AWS_REGION ?? 'us-east-1',
  PROVCAT_S3_FORCE_PATH_STYLE: '1',
};

/** A file of `bytes` bytes: a random MiB repeated with a counter (no two MiB alike). */
async function makeBigFile(file, bytes) {
  const { randomBytes } = await import('node:crypto');
  const block = randomBytes(MiB);
  const out = createWriteStream(file);
  for (let i = 0; i < Math.ceil(bytes / MiB); i++) {
    const b = Buffer.from(block.subarray(0, Math.min(MiB, bytes - i * MiB)));
    b.writeUInt32LE(i, 0);
    if (!out.write(b)) await new Promise((r) => out.once('drain', r));
  }
  await new Promise((resolve, reject) => out.end((e) => (e ? reject(e) : resolve())));
}

/** Run `argv` under /usr/bin/time: wall seconds and CPU seconds (user + sys). */
function timed(argv, extraEnv) {
  const started = performance.now();
  const r = spawnSync('/usr/bin/time', ['-f', '@@%U %S', ...argv], {
    env: { ...env, ...extraEnv },
    encoding: 'utf8',
    maxBuffer: 64 * MiB,
  });
  const wall = (performance.now() - started) / 1000;
  if (r.status !== 0) throw new Error(`${argv.join(' ')} exited ${r.status}: ${r.stderr}`);
  const m = /@@([\d.]+) ([\d.]+)/.exec(r.stderr);
  return { wall, cpu: Number(m[1]) + Number(m[2]), stdout: r.stdout };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** Alternate the CLIs over `RUNS` rounds (after a warm-up) of a cold fetch of `uri`. */
async function runCase(name, uri, extraEnv, expected = { size: BYTES }) {
  log(`${name}: ${uri}, ${clis.length} CLIs, 1 warm-up + ${RUNS} runs`);
  const rows = clis.map(() => ({ wall: [], cpu: [] }));
  for (let round = 0; round <= RUNS; round++) {
    for (const [i, cli] of clis.entries()) {
      const cache = path.join(work, `cache-${round}-${i}`);
      const t = timed(['node', cli, 'fetch', uri, '--json'], {
        ...extraEnv,
        PROVCAT_CACHE_DIR: cache,
      });
      const got = JSON.parse(t.stdout.trim().split('\n').pop());
      if (
        expected.files !== undefined
          ? got.files !== expected.files
          : (await stat(got.path)).size !== expected.size
      ) {
        throw new Error(`${cli}: fetched ${JSON.stringify(got)}`);
      }
      await rm(cache, { recursive: true, force: true });
      if (round > 0) {
        rows[i].wall.push(t.wall);
        rows[i].cpu.push(t.cpu);
      }
      log(
        `  ${round === 0 ? 'warm-up' : `run ${round}`} ${path.relative(repo, cli)}: ${t.wall.toFixed(2)} s, cpu ${t.cpu.toFixed(2)} s`,
      );
    }
  }
  const what = expected.files !== undefined ? `${expected.files} files` : `${BYTES / MiB} MiB`;
  process.stdout.write(`\n${name} (${what}, ${RUNS} runs, load ${os.loadavg()[0].toFixed(1)})\n`);
  for (const [i, cli] of clis.entries()) {
    const r = rows[i];
    process.stdout.write(
      `  ${path.relative(repo, cli).padEnd(36)} wall ${median(r.wall).toFixed(2)} s (${Math.min(...r.wall).toFixed(2)}–${Math.max(...r.wall).toFixed(2)})  cpu ${median(r.cpu).toFixed(2)} s (${Math.min(...r.cpu).toFixed(2)}–${Math.max(...r.cpu).toFixed(2)})\n`,
    );
  }
}

const source = path.join(work, 'big.bin');
if ([...cases].some((c) => c !== 's3-folder')) {
  log(`writing a ${BYTES / MiB} MiB source file`);
  await makeBigFile(source, BYTES);
}
try {
  if (cases.has('s3-folder')) {
    await runCase(
      's3-folder: cold fetch of 1,000 × 4 KiB (MD5 ETags)',
      's3://provcat-bench-small-v1/f1000x4096/',
      {},
      { files: 1000 },
    );
  }
  if (cases.has('s3')) {
    const bucket = `provcat-fetch-digest-${process.pid}`;
    const client = new S3Client({
      endpoint: env.AWS_ENDPOINT_URL_S3,
      region: env.AWS_REGION,
      forcePathStyle: true,
      requestChecksumCalculation: 'WHEN_REQUIRED',
      credentials: {
        accessKeyId: env.AWS_ACCESS_KEY_ID,
        secretAccessKey: env.AWS_SECRET_ACCESS_KEY,
      },
    });
    await client.send(new CreateBucketCommand({ Bucket: bucket }));
    try {
      const put = await client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: 'big.bin',
          Body: createReadStream(source),
          ContentLength: BYTES,
        }),
      );
      log(`s3: put in one request, ETag ${put.ETag}`);
      await runCase(
        's3: cold fetch of one single-part object (MD5 ETag)',
        `s3://${bucket}/big.bin`,
        {},
      );
    } finally {
      await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'big.bin' }));
      await client.send(new DeleteBucketCommand({ Bucket: bucket }));
      client.destroy();
    }
  }
  if (cases.has('local') || cases.has('local-kernel')) {
    const { LocalStore } = await import(path.join(repo, 'dist/drivers/local/index.js'));
    const root = path.join(work, 'root');
    const store = new LocalStore({ root, cache: path.join(work, 'cache-seed') });
    if (cases.has('local')) {
      // From a stream: the store hashes it, so the version's ETag is its MD5.
      await store.put('local://bench/streamed.bin', createReadStream(source));
      const info = await store.stat('local://bench/streamed.bin');
      log(`local: written from a stream, ETag ${info.etag}`);
      await runCase(
        'local: cold fetch, MD5 ETag (kernel copy read back)',
        'local://bench/streamed.bin',
        {
          PROVCAT_LOCAL_ROOT: root,
        },
      );
    }
    if (cases.has('local-kernel')) {
      await store.put('local://bench/copied.bin', source);
      const info = await store.stat('local://bench/copied.bin');
      log(`local-kernel: put from a file, ETag ${info.etag}`);
      await runCase('local-kernel: cold fetch, no MD5 (control)', 'local://bench/copied.bin', {
        PROVCAT_LOCAL_ROOT: root,
      });
    }
  }
} finally {
  await rm(work, { recursive: true, force: true });
}
