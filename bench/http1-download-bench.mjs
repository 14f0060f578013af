// One big object from S3 to a file: curl against node:http + the cache's installBlob loop against
// the zero-allocation download of src/net/http1-download.ts (with and without the cache's
// durability). Needs `npm run build` first (it imports dist/).
//
//   node bench/http1-download-bench.mjs --bucket lead-big-tmp --key big.bin [--runs 3]
//   node bench/http1-download-bench.mjs --create 1073741824 [--runs 3]   # own bucket, removed after
//   node bench/http1-download-bench.mjs --url PRESIGNED_URL
//
// Every run is a fresh process under /usr/bin/time, run with --trace-gc; the modes alternate
// within each round (A B C D, A B C D, ...) after one warm-up round. Node runs first load
// @aws-sdk/client-s3 and build an S3Client, as provcat does before any download: that is the
// heap in which Node's per-read Buffers pile up into Mark-Compact collections.
//
// Modes:
//   curl            curl -sS --fail -o FILE URL (no fsync)
//   http            node:http GET; for await + 1 MiB writev batches + fdatasync every 64 MiB +
//                   final fsync (a copy of Cache.installBlob's large-body path)
//   module          openDownload + pipeToFile: fdatasync every 64 MiB + final fsync
//   module-direct   the same with direct writeSync calls instead of thread-pool writes
//   module-nosync   openDownload + pipeToFile without any sync
//
// Prints a table of medians and one JSON line with every run: the whole process (wall, user,
// sys, peak RSS from /usr/bin/time; Node's start and loading the SDK included, ~0.5 s of CPU),
// the download alone (wall and process.cpuUsage around it, from open to the final fsync), and
// the Mark-Compact and Scavenge counts of --trace-gc. "download / curl" compares the download
// alone with curl's whole process (curl starts in milliseconds). The environment gives endpoint and credentials (AWS_ENDPOINT_URL_S3, ...);
// defaults: the local Ceph (http://127.0.0.1:7480, AKIDTEST/SECRETTEST, us-east-1, path style).
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, constants as fsc, openSync, rmSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const MODES = ['curl', 'http', 'module', 'module-direct', 'module-nosync'];

const { values } = parseArgs({
  options: {
    child: { type: 'string' },
    url: { type: 'string' },
    out: { type: 'string' },
    bucket: { type: 'string' },
    key: { type: 'string' },
    create: { type: 'string' },
    runs: { type: 'string', default: '3' },
    modes: { type: 'string', default: MODES.join(',') },
    dir: { type: 'string', default: tmpdir() },
  },
});

function env(name, fallback) {
  return process.env[name] ?? fallback;
}

async function s3Client() {
  const { S3Client } = await import('@aws-sdk/client-s3');
  return new S3Client({
    region: env('AWS_REGION', 'us-east-1'),
    endpoint: env('AWS_ENDPOINT_URL_S3', 'http://127.0.0.1:7480'),
    forcePathStyle: true,
    credentials: {
      accessKeyId: env('AWS_ACCESS_KEY_ID', 'AKIDTEST'),
      secretAccessKey: env('AWS_SECRET_ACCESS_KEY', 'SECRETTEST'),
    },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

// ---------------------------------------------------------------------------- child modes --

/** node:http GET written the way Cache.installBlob writes a large body. */
async function httpInstallBlob(url, out) {
  const res = await new Promise((resolve, reject) => {
    const get = url.startsWith('https:') ? https.get : http.get;
    get(url, resolve).on('error', reject);
  });
  if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}`);
  const expected = Number(res.headers['content-length']);
  const handle = await open(out, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC, 0o644);
  let written = 0;
  let flushed = 0;
  let flushing;
  let batch = [];
  let batched = 0;
  const write = async () => {
    await handle.writev(batch);
    written += batched;
    batch = [];
    batched = 0;
    if (written - flushed >= 64 * 1024 * 1024) {
      await flushing;
      flushed = written;
      flushing = handle.datasync();
    }
  };
  for await (const chunk of res) {
    batch.push(chunk);
    batched += chunk.length;
    if (batched >= 1024 * 1024) await write();
  }
  if (batched > 0) await write();
  await flushing;
  await handle.sync();
  await handle.close();
  if (written !== expected) throw new Error(`short body: ${written} of ${expected}`);
  return written;
}

async function moduleDownload(url, out, options) {
  const { openDownload, isFallback } = await import(
    path.join(root, 'dist/src/net/http1-download.js')
  );
  const { pipeToFile } = await import(path.join(root, 'dist/src/net/file-sink.js'));
  const response = await openDownload({ url });
  if (isFallback(response)) throw new Error(`fallback ${response.fallback}: ${response.detail}`);
  const fd = openSync(out, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC, 0o644);
  try {
    return await pipeToFile(response, fd, options);
  } finally {
    closeSync(fd);
  }
}

async function child(mode, url, out) {
  // provcat's heap before a download: the SDK loaded, a client built and used once (a fetch
  // sends its HEAD through the SDK first).
  const client = await s3Client();
  const { ListBucketsCommand } = await import('@aws-sdk/client-s3');
  await client.send(new ListBucketsCommand({}));
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  let bytes;
  if (mode === 'http') bytes = await httpInstallBlob(url, out);
  else if (mode === 'module') bytes = await moduleDownload(url, out, {});
  else if (mode === 'module-direct') bytes = await moduleDownload(url, out, { direct: true });
  else if (mode === 'module-nosync') {
    bytes = await moduleDownload(url, out, { syncEveryBytes: 0, sync: false });
  } else throw new Error(`unknown mode ${mode}`);
  const cpu = process.cpuUsage(c0);
  const seconds = (performance.now() - t0) / 1000;
  client.destroy();
  process.stdout.write(
    `RESULT ${JSON.stringify({ bytes, seconds, user: cpu.user / 1e6, sys: cpu.system / 1e6 })}\n`,
  );
}

// --------------------------------------------------------------------------------- parent --

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function runOne(mode, url, out) {
  const argv =
    mode === 'curl'
      ? ['curl', '-sS', '--fail', '-o', out, url]
      : [
          process.execPath,
          '--trace-gc',
          fileURLToPath(import.meta.url),
          '--child',
          mode,
          '--url',
          url,
          '--out',
          out,
        ];
  const timeFile = path.join(values.dir, `h1bench-time-${process.pid}`);
  const r = spawnSync('/usr/bin/time', ['-o', timeFile, '-f', '%e %U %S %M', ...argv], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  });
  if (r.status !== 0) throw new Error(`${mode} failed (${r.status}): ${r.stderr}`);
  const [wall, user, sys, rssKiB] = spawnSync('cat', [timeFile], { encoding: 'utf8' })
    .stdout.trim()
    .split('\n')
    .pop()
    .split(' ')
    .map(Number);
  rmSync(timeFile, { force: true });
  const size = statSync(out).size;
  rmSync(out, { force: true });
  const run = { mode, wall, user, sys, rssMiB: rssKiB / 1024, bytes: size };
  if (mode !== 'curl') {
    const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
    const inner = JSON.parse(line.slice(7));
    run.inner = { seconds: inner.seconds, user: inner.user, sys: inner.sys };
    run.markCompact = (r.stdout.match(/Mark-Compact/g) ?? []).length;
    run.scavenge = (r.stdout.match(/Scavenge/g) ?? []).length;
  }
  return run;
}

async function ownObject(size) {
  const { CreateBucketCommand } = await import('@aws-sdk/client-s3');
  const { Upload } = await import('@aws-sdk/lib-storage');
  const { Readable } = await import('node:stream');
  const client = await s3Client();
  const bucket = `provcat-h1bench-${randomBytes(4).toString('hex')}`;
  await client.send(new CreateBucketCommand({ Bucket: bucket }));
  const block = randomBytes(1024 * 1024);
  let left = size;
  const body = Readable.from(
    (function* () {
      while (left > 0) {
        const n = Math.min(left, block.length);
        left -= n;
        yield block.subarray(0, n);
      }
    })(),
  );
  await new Upload({
    client,
    params: { Bucket: bucket, Key: 'big.bin', Body: body },
    partSize: 64 * 1024 * 1024,
    queueSize: 2,
  }).done();
  return { client, bucket, key: 'big.bin' };
}

async function removeObject({ client, bucket, key }) {
  const { DeleteObjectCommand, DeleteBucketCommand } = await import('@aws-sdk/client-s3');
  await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
  await client.send(new DeleteBucketCommand({ Bucket: bucket }));
  client.destroy();
}

async function presign(bucket, key) {
  const { GetObjectCommand } = await import('@aws-sdk/client-s3');
  const { getSignedUrl } = await import('@aws-sdk/s3-request-presigner');
  const client = await s3Client();
  const url = await getSignedUrl(client, new GetObjectCommand({ Bucket: bucket, Key: key }), {
    expiresIn: 3600,
  });
  client.destroy();
  return url;
}

async function parent() {
  let own;
  let url = values.url;
  if (!url) {
    if (values.create) own = await ownObject(Number(values.create));
    else if (!values.bucket || !values.key) {
      throw new Error('give --url, --bucket and --key, or --create BYTES');
    }
    url = await presign(own?.bucket ?? values.bucket, own?.key ?? values.key);
  }
  const modes = values.modes.split(',');
  const rounds = Number(values.runs);
  const runs = [];
  try {
    for (let round = 0; round <= rounds; round++) {
      for (const mode of modes) {
        const out = path.join(values.dir, `h1bench-${process.pid}-${mode}.bin`);
        const run = runOne(mode, url, out);
        if (round > 0) runs.push(run);
        process.stderr.write(
          `${round === 0 ? 'warm-up' : `round ${round}`} ${mode}: ${run.wall} s, user ${run.user}, sys ${run.sys}` +
            (run.markCompact === undefined ? '\n' : `, Mark-Compact ${run.markCompact}\n`),
        );
      }
    }
  } finally {
    if (own) await removeObject(own);
  }
  const curlWall = median(runs.filter((r) => r.mode === 'curl').map((r) => r.wall));
  const load = spawnSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).stdout.trim();
  console.log(`\n${rounds} rounds after a warm-up; load average now ${load}\n`);
  console.log(
    '| mode | process wall (median, min–max) | user | sys | download wall | download user + sys | Mark-Compact | Scavenge | peak RSS | process / curl | download / curl |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const mode of modes) {
    const rs = runs.filter((r) => r.mode === mode);
    const walls = rs.map((r) => r.wall);
    const inner = rs[0]?.inner
      ? `${median(rs.map((r) => r.inner.user)).toFixed(2)} + ${median(rs.map((r) => r.inner.sys)).toFixed(2)} s`
      : '';
    const download = rs[0]?.inner ? median(rs.map((r) => r.inner.seconds)) : median(walls);
    const gc = (k) => (rs[0]?.[k] === undefined ? '' : String(median(rs.map((r) => r[k]))));
    console.log(
      `| ${mode} | ${median(walls).toFixed(2)} s (${Math.min(...walls).toFixed(2)}–${Math.max(...walls).toFixed(2)}) | ` +
        `${median(rs.map((r) => r.user)).toFixed(2)} s | ${median(rs.map((r) => r.sys)).toFixed(2)} s | ` +
        `${download.toFixed(2)} s | ${inner} | ` +
        `${gc('markCompact')} | ${gc('scavenge')} | ${median(rs.map((r) => r.rssMiB)).toFixed(0)} MiB | ` +
        `${(median(walls) / curlWall).toFixed(2)}× | ${(download / curlWall).toFixed(2)}× |`,
    );
  }
  console.log(`\n${JSON.stringify({ benchmark: 'http1-download', load, runs })}`);
}

if (values.child) await child(values.child, values.url, values.out);
else await parent();
