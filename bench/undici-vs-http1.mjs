// undici against the hand-written HTTP/1.1 client (src/net/http1-download.ts), side by side in
// one run, on the two reads the S3 driver's lean path exists for: a cold fetch of many small
// objects and the fetch of one big object. Needs `npm run build` first (it imports dist/).
//
//   node bench/undici-vs-http1.mjs                      # 1 warm-up + 7 rounds, both cases
//   node bench/undici-vs-http1.mjs --runs 9 --cases big
//   node bench/undici-vs-http1.mjs --quick              # 200 × 4 KiB, 64 MiB, 2 rounds
//
// Like with like, so only the HTTP client differs:
// - every request is signed the lean path's way (drivers/s3/lean-signer.ts: `sdkSignerFactory`, the
//   SDK's SigV4 pieces, with S3's settings), with the same headers, on the path-style route;
// - the same concurrency (16 in flight) over keep-alive connections that are reused
//   (`Http1Pool`, or an undici `Pool` of 16 connections);
// - each body is written the way the cache writes it (src/cache/cache.ts): a small body, held
//   whole in memory, into a temp file with direct system calls, fsync through the thread pool,
//   rename; a big one in ~1 MiB writes through the thread pool, an fdatasync every 64 MiB (at
//   most one in flight), fsync, rename. The hand-written client feeds the cache's own
//   `FileSink` (its chunks are reused buffers, valid only during the call); undici's chunks
//   are gathered into 1 MiB `writev` batches, as `installBlob` does for a Readable body;
// - the hand-written client is driven as the lean path drives it: `fetchWhole` for small
//   bodies (the cache asks for those whole), `openDownload` + `pipeTo` for big ones. undici is
//   driven three ways: `dispatch()` with a handler (its lowest level, no stream at all),
//   `request()` (a Readable body) and `stream()` (a Writable per response);
// - every run is a fresh process under /usr/bin/time (wall, user + sys, peak RSS), with the
//   CLI's V8 setting (`--interrupt-budget=2000000`, src/cli/bin.ts), since the lean path runs
//   inside `provcat`. The keys to fetch are given to the process (the listing is not part of
//   what is compared). The clients alternate run by run, in reversed order every other round,
//   after one warm-up round, so the shared machine's noise hits all of them.
//
// The bucket is this run's own (provcat-undici-<random>), seeded here and deleted at the end.
// A round counts whole or not at all: when the server restarts during one (the dev Ceph keeps
// objects in memory, and the machine is shared), the data is seeded again and the round run
// again, at most 3 times. "server CPU" is what the Ceph serving the endpoint's port used
// meanwhile (its radosgw, OSD and monitor, from /proc), other clients' requests included.
// The 1 GiB case also runs `curl` + `sync FILE` on a presigned URL, the project's yardstick.
// Prints a Markdown table per case (medians, min–max, ratios to the hand-written client) and a
// last line of JSON with every run; --json FILE writes that JSON to a file as well.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  fdatasync,
  constants as fsc,
  fsync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  writev,
  writevSync,
} from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const KiB = 1024;
const MiB = 1024 * KiB;
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const dist = (p) => path.join(root, 'dist', p);
const ENDPOINT = process.env.AWS_ENDPOINT_URL_S3 ?? 'http://127.0.0.1:7480';
const REGION = process.env.AWS_REGION ?? 'us-east-1';
const CLIENTS = ['http1', 'undici-dispatch', 'undici-request', 'undici-stream'];
/** As the cache: bodies up to this size are read whole, written with direct system calls. */
const SMALL_BLOB_BYTES = 64 * KiB;
const WRITE_BATCH_BYTES = 1 * MiB;
const WRITEBACK_BYTES = 64 * MiB;
/** The CLI's V8 setting (src/cli/bin.ts). */
const NODE_FLAGS = ['--interrupt-budget=2000000'];

const { values: opt } = parseArgs({
  options: {
    child: { type: 'string' },
    case: { type: 'string' },
    bucket: { type: 'string' },
    keys: { type: 'string' },
    key: { type: 'string' },
    dest: { type: 'string' },
    concurrency: { type: 'string', default: '16' },
    runs: { type: 'string' },
    cases: { type: 'string', default: 'small,big' },
    clients: { type: 'string', default: CLIENTS.join(',') },
    files: { type: 'string' },
    size: { type: 'string' },
    'big-mib': { type: 'string' },
    curl: { type: 'boolean', default: true },
    'no-curl': { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    json: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});

// ---------------------------------------------------------------------------- the child --

/** Sign GETs of `bucket`'s keys as the lean path does (LeanPath.sign, drivers/s3/lean-path.ts). */
async function leanSigner(bucket) {
  const { sdkSignerFactory } = await import(dist('drivers/s3/lean-signer.js'));
  const { pathStyleRoute } = await import(dist('drivers/s3/route.js'));
  const { encodeKeyPath } = await import(dist('drivers/s3/keys.js'));
  const { EMPTY_SHA256 } = await import(dist('src/core/digest.js'));
  const route = pathStyleRoute(ENDPOINT, REGION, bucket);
  if (!route) throw new Error(`no path-style route for ${bucket} at ${ENDPOINT}`);
  const signer = await sdkSignerFactory()(route);
  const { url } = route;
  const base = url.pathname.endsWith('/') ? url.pathname : `${url.pathname}/`;
  const port = url.port === '' ? undefined : Number(url.port);
  return {
    url,
    async sign(key) {
      const target = `${base}${encodeKeyPath(key)}`;
      const signed = await signer.sign(
        {
          method: 'GET',
          protocol: url.protocol,
          hostname: url.hostname,
          port,
          path: target,
          query: {},
          headers: { host: url.host, 'x-amz-content-sha256': EMPTY_SHA256 },
        },
        {
          signingDate: new Date(),
          signingRegion: route.signingRegion,
          signingService: route.signingName,
        },
      );
      return { target, headers: signed.headers };
    },
  };
}

/** Cache.writeSmallBlob: temp file, direct writev, fsync in the thread pool, rename. */
async function writeSmallFile(file, chunks, expected, release) {
  const temp = `${file}.tmp`;
  const fd = openSync(temp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o444);
  let written;
  try {
    written = expected > 0 ? writevSync(fd, chunks) : 0;
  } finally {
    release?.();
  }
  if (written !== expected) throw new Error(`wrote ${written} of ${expected} bytes`);
  await new Promise((resolve, reject) => fsync(fd, (e) => (e ? reject(e) : resolve())));
  closeSync(fd);
  renameSync(temp, file);
}

/**
 * Cache.installBlob's loop for a body of separate Buffers: ~1 MiB `writev` batches through the
 * thread pool, an fdatasync every 64 MiB (at most one in flight), fsync at the end.
 */
class BatchWriter {
  constructor(fd) {
    this.fd = fd;
    this.batch = [];
    this.batched = 0;
    this.written = 0;
    this.flushed = 0;
    this.flushing = undefined;
  }
  /** Add a chunk the writer may keep; a promise when a write started (wait before more). */
  push(chunk) {
    this.batch.push(chunk);
    this.batched += chunk.length;
    if (this.batched >= WRITE_BATCH_BYTES) return this.write();
    return undefined;
  }
  async write() {
    const batch = this.batch;
    const n = this.batched;
    this.batch = [];
    this.batched = 0;
    await writevAll(this.fd, batch, n);
    this.written += n;
    if (this.written - this.flushed >= WRITEBACK_BYTES) {
      await this.flushing;
      this.flushed = this.written;
      this.flushing = new Promise((resolve, reject) =>
        fdatasync(this.fd, (e) => (e ? reject(e) : resolve())),
      );
    }
  }
  async finish() {
    if (this.batched > 0) await this.write();
    await this.flushing;
    await new Promise((resolve, reject) => fsync(this.fd, (e) => (e ? reject(e) : resolve())));
    return this.written;
  }
}

function writevAll(fd, chunks, n) {
  return new Promise((resolve, reject) => {
    writev(fd, chunks, (error, written) => {
      if (error) reject(error);
      else if (written !== n) reject(new Error(`short writev: ${written} of ${n}`));
      else resolve();
    });
  });
}

/** `count` workers taking the next index until none is left. */
async function inFlight(count, n, work) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(count, n) }, async () => {
      while (next < n) await work(next++);
    }),
  );
}

/** The small-object fetch: every key GET, body held whole, written as the cache writes it. */
async function smallFetch(client, signer, keys, dest, concurrency, size) {
  const get = await smallGetter(client, signer, concurrency);
  let bytes = 0;
  await inFlight(concurrency, keys.length, async (i) => {
    const n = await get(keys[i], path.join(dest, `${i}.bin`));
    if (n !== size) throw new Error(`${keys[i]}: ${n} bytes, ${size} expected`);
    bytes += n;
  });
  return { files: keys.length, bytes, close: get.close };
}

/** One small GET to a file, per client. */
async function smallGetter(client, signer, concurrency) {
  const origin = signer.url.origin;
  if (client === 'http1') {
    const { fetchWhole, Http1Pool, isFallback } = await import(dist('src/net/http1-download.js'));
    const pool = new Http1Pool({ maxIdlePerOrigin: concurrency });
    const get = async (key, file) => {
      const { target, headers } = await signer.sign(key);
      const r = await fetchWhole(
        { url: signer.url, target, headers },
        { pool, maxBytes: SMALL_BLOB_BYTES },
      );
      if (isFallback(r)) throw new Error(`${key}: fallback ${r.fallback} (${r.detail})`);
      await writeSmallFile(file, [r.body], r.contentLength, r.release);
      return r.contentLength;
    };
    get.close = () => pool.close();
    return get;
  }
  const { Pool } = await import('undici');
  const pool = new Pool(origin, { connections: concurrency });
  let get;
  if (client === 'undici-dispatch') {
    get = async (key, file) => {
      const { target, headers } = await signer.sign(key);
      const chunks = await new Promise((resolve, reject) => {
        const chunks = [];
        let status = 0;
        pool.dispatch(
          { path: target, method: 'GET', headers },
          {
            onConnect() {},
            onError: reject,
            onHeaders(statusCode) {
              status = statusCode;
              return true;
            },
            onData(chunk) {
              chunks.push(chunk);
              return true;
            },
            onComplete() {
              if (status !== 200) reject(new Error(`${key}: HTTP ${status}`));
              else resolve(chunks);
            },
          },
        );
      });
      const n = chunks.reduce((s, c) => s + c.length, 0);
      await writeSmallFile(file, chunks, n);
      return n;
    };
  } else if (client === 'undici-request') {
    get = async (key, file) => {
      const { target, headers } = await signer.sign(key);
      const { statusCode, body } = await pool.request({ path: target, method: 'GET', headers });
      if (statusCode !== 200) {
        await body.dump();
        throw new Error(`${key}: HTTP ${statusCode}`);
      }
      const chunks = await new Promise((resolve, reject) => {
        const chunks = [];
        body.on('data', (c) => chunks.push(c));
        body.once('end', () => resolve(chunks));
        body.once('error', reject);
      });
      const n = chunks.reduce((s, c) => s + c.length, 0);
      await writeSmallFile(file, chunks, n);
      return n;
    };
  } else if (client === 'undici-stream') {
    get = async (key, file) => {
      const { target, headers } = await signer.sign(key);
      let n = 0;
      await pool.stream({ path: target, method: 'GET', headers }, ({ statusCode }) => {
        if (statusCode !== 200) throw new Error(`${key}: HTTP ${statusCode}`);
        const chunks = [];
        return new Writable({
          write(chunk, _encoding, callback) {
            chunks.push(chunk);
            n += chunk.length;
            callback();
          },
          final(callback) {
            writeSmallFile(file, chunks, n).then(() => callback(), callback);
          },
        });
      });
      return n;
    };
  } else {
    throw new Error(`unknown client ${client}`);
  }
  get.close = () => pool.close();
  return get;
}

/** The big-object fetch: one GET, written as the cache writes a big body. */
async function bigFetch(client, signer, key, dest) {
  const file = path.join(dest, 'big.bin');
  const temp = `${file}.tmp`;
  const { target, headers } = await signer.sign(key);
  const origin = signer.url.origin;
  const fd = openSync(temp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o444);
  let bytes;
  let close = () => {};
  if (client === 'http1') {
    const { openDownload, Http1Pool, isFallback } = await import(dist('src/net/http1-download.js'));
    const { FileSink } = await import(dist('src/net/file-sink.js'));
    const pool = new Http1Pool({ maxIdlePerOrigin: 16 });
    close = () => pool.close();
    const r = await openDownload({ url: signer.url, target, headers }, { pool });
    if (isFallback(r)) throw new Error(`fallback ${r.fallback} (${r.detail})`);
    // Cache.installFromSink.
    const sink = new FileSink(fd, {
      syncEveryBytes: WRITEBACK_BYTES,
      batchBytes: WRITE_BATCH_BYTES,
      direct: false,
    });
    await r.pipeTo(sink);
    bytes = await sink.finish();
  } else {
    const { Pool } = await import('undici');
    const pool = new Pool(origin, { connections: 16 });
    close = () => pool.close();
    const writer = new BatchWriter(fd);
    if (client === 'undici-dispatch') {
      await new Promise((resolve, reject) => {
        let resume;
        let status = 0;
        let failed = false;
        const fail = (error) => {
          failed = true;
          reject(error);
        };
        pool.dispatch(
          { path: target, method: 'GET', headers },
          {
            onConnect() {},
            onError: fail,
            onHeaders(statusCode, _headers, resumeFn) {
              status = statusCode;
              resume = resumeFn;
              return true;
            },
            onData(chunk) {
              const writing = writer.push(chunk);
              if (writing === undefined) return true;
              // Paused until the batch is written (undici's backpressure).
              writing.then(() => resume(), fail);
              return false;
            },
            onComplete() {
              if (failed) return;
              if (status !== 200) reject(new Error(`HTTP ${status}`));
              else resolve();
            },
          },
        );
      });
    } else if (client === 'undici-request') {
      const { statusCode, body } = await pool.request({ path: target, method: 'GET', headers });
      if (statusCode !== 200) throw new Error(`HTTP ${statusCode}`);
      // Cache.installBlob's loop over a Readable.
      for await (const chunk of body) {
        const writing = writer.push(chunk);
        if (writing) await writing;
      }
    } else if (client === 'undici-stream') {
      await pool.stream({ path: target, method: 'GET', headers }, ({ statusCode }) => {
        if (statusCode !== 200) throw new Error(`HTTP ${statusCode}`);
        return new Writable({
          write(chunk, _encoding, callback) {
            const writing = writer.push(chunk);
            if (writing) writing.then(() => callback(), callback);
            else callback();
          },
        });
      });
    } else {
      throw new Error(`unknown client ${client}`);
    }
    bytes = await writer.finish();
  }
  closeSync(fd);
  renameSync(temp, file);
  return { files: 1, bytes, close };
}

async function child() {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const signer = await leanSigner(opt.bucket);
  const concurrency = Number(opt.concurrency);
  const c1 = process.cpuUsage();
  const t1 = performance.now();
  let result;
  if (opt.case === 'small') {
    const keys = JSON.parse(readFileSync(opt.keys, 'utf8'));
    result = await smallFetch(opt.child, signer, keys, opt.dest, concurrency, Number(opt.size));
  } else {
    result = await bigFetch(opt.child, signer, opt.key, opt.dest);
  }
  const fetchCpu = process.cpuUsage(c1);
  const fetchSeconds = (performance.now() - t1) / 1000;
  await result.close();
  const all = process.cpuUsage(c0);
  process.stdout.write(
    `RESULT ${JSON.stringify({
      files: result.files,
      bytes: result.bytes,
      // From the first request to the last rename (module loading and the signer before it).
      fetch: { seconds: fetchSeconds, user: fetchCpu.user / 1e6, sys: fetchCpu.system / 1e6 },
      script: { seconds: (performance.now() - t0) / 1000, cpu: (all.user + all.system) / 1e6 },
    })}\n`,
  );
}

// --------------------------------------------------------------------------- the parent --

const log = (message) => process.stderr.write(`[undici-vs-http1] ${message}\n`);
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/**
 * The processes (radosgw, OSD, monitor) of the Ceph whose radosgw serves the endpoint's port,
 * for the server's CPU per run: found by their config file (`-c`), whose `rgw_frontends`
 * names the port. Other Ceph instances on the machine are left out.
 */
function serverPids() {
  const port = new URL(ENDPOINT).port || '80';
  const byConf = new Map();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (!/(^|\/)(radosgw|ceph-osd|ceph-mon)$/.test(argv[0] ?? '')) continue;
      const conf = argv[argv.indexOf('-c') + 1] ?? '';
      byConf.set(conf, [...(byConf.get(conf) ?? []), pid]);
    } catch {
      // The process ended while we looked.
    }
  }
  for (const [conf, pids] of byConf) {
    try {
      if (new RegExp(`rgw_frontends\\s*=.*:${port}\\b`).test(readFileSync(conf, 'utf8'))) {
        return pids;
      }
    } catch {
      // No readable config: not the one.
    }
  }
  return [];
}

function cpuSecondsOf(pids) {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = s.slice(s.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // A server process that ended: its time is lost.
    }
  }
  return ticks / 100;
}

/** Run argv under /usr/bin/time: wall, user, sys, peak RSS, stdout. */
function runTimed(argv, env, work, pids) {
  return new Promise((resolve, reject) => {
    const timeFile = path.join(work, `time-${randomBytes(4).toString('hex')}`);
    const server0 = cpuSecondsOf(pids);
    const load = os.loadavg()[0];
    const t0 = process.hrtime.bigint();
    const p = spawn('/usr/bin/time', ['-f', '%M %U %S', '-o', timeFile, ...argv], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => {
      stdout += d;
    });
    p.stderr.on('data', (d) => {
      stderr = (stderr + d).slice(-20_000);
    });
    p.on('error', reject);
    p.on('close', (code) => {
      const wall = Number(process.hrtime.bigint() - t0) / 1e9;
      const serverCpu = cpuSecondsOf(pids) - server0;
      if (code !== 0) {
        reject(new Error(`${argv.join(' ')} exited with ${code}:\n${stderr.slice(-3000)}`));
        return;
      }
      const [rssKiB, user, sys] = readFileSync(timeFile, 'utf8')
        .trim()
        .split('\n')
        .pop()
        .split(' ')
        .map(Number);
      rm(timeFile, { force: true }).catch(() => {});
      resolve({ wall, user, sys, cpu: user + sys, rssMiB: rssKiB / 1024, serverCpu, load, stdout });
    });
  });
}

/** The SHA-256 of `length` bytes of `file` at `offset`. */
function sha256Of(file, offset, length) {
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.alloc(length);
    let at = 0;
    while (at < length) {
      const n = readSync(fd, buf, at, length - at, offset + at);
      if (n === 0) break;
      at += n;
    }
    return createHash('sha256').update(buf.subarray(0, at)).digest('hex');
  } finally {
    closeSync(fd);
  }
}

async function parent() {
  if (opt.help) {
    process.stdout.write(
      'usage: node bench/undici-vs-http1.mjs [--runs N] [--cases small,big]\n' +
        `       [--clients ${CLIENTS.join(',')}] [--files N] [--size BYTES]\n` +
        '       [--big-mib M] [--no-curl] [--quick] [--json FILE]\n',
    );
    return;
  }
  const quick = opt.quick;
  const runs = Number(opt.runs ?? (quick ? 2 : 7));
  const cases = opt.cases.split(',');
  const clients = opt.clients.split(',');
  for (const c of clients) if (!CLIENTS.includes(c)) throw new Error(`unknown client ${c}`);
  if (!clients.includes('http1')) throw new Error('the clients must include http1 (the base)');
  const files = Number(opt.files ?? (quick ? 200 : 1000));
  const size = Number(opt.size ?? 4 * KiB);
  const bigBytes = Number(opt['big-mib'] ?? (quick ? 64 : 1024)) * MiB;
  const withCurl = opt.curl && !opt['no-curl'];
  if (!readdirSync(path.join(root, 'dist/src/net')).includes('http1-download.js')) {
    throw new Error('run `npm run build` first');
  }

  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (/^(AWS_|PROVCAT_)/.test(k)) delete env[k];
  delete env.NODE_EXTRA_CA_CERTS; // parsed at every Node start; nothing here speaks https
  Object.assign(env, {
    AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? 'AKIDTEST',
    AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? 'SECRETTEST',
    AWS_REGION: REGION,
    AWS_ENDPOINT_URL_S3: ENDPOINT,
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_CONFIG_FILE: '/dev/null',
    AWS_SHARED_CREDENTIALS_FILE: '/dev/null',
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    NODE_NO_WARNINGS: '1',
  });

  const sdk = await import('@aws-sdk/client-s3');
  const admin = new sdk.S3Client({
    region: REGION,
    endpoint: ENDPOINT,
    forcePathStyle: true,
    credentials: { accessKeyId: env.AWS_ACCESS_KEY_ID, secretAccessKey: env.AWS_SECRET_ACCESS_KEY },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // A request the server never answers is retried rather than waited on forever.
    requestHandler: { requestTimeout: 60_000 },
  });
  const bucket = `provcat-undici-${randomBytes(4).toString('hex')}`;
  const work = await mkdtemp(path.join(os.tmpdir(), 'provcat-undici-'));
  let pids = serverPids();
  const started = Date.now();
  const loadStart = readFileSync('/proc/loadavg', 'utf8').trim();
  const stored = new Set();
  const result = {
    benchmark: 'undici-vs-http1/1',
    date: new Date().toISOString(),
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      memGiB: Number((os.totalmem() / 1024 ** 3).toFixed(1)),
      node: process.version,
      undici: JSON.parse(readFileSync(path.join(root, 'node_modules/undici/package.json'), 'utf8'))
        .version,
      loadavgStart: loadStart,
    },
    options: { runs, files, size, bigBytes, concurrency: Number(opt.concurrency), clients },
    cases: [],
  };
  const stopping = async () => {
    log(`deleting s3://${bucket}`);
    const keys = [...stored];
    try {
      for (let i = 0; i < keys.length; i += 1000) {
        const Objects = keys.slice(i, i + 1000).map((Key) => ({ Key }));
        await admin.send(
          new sdk.DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects, Quiet: true } }),
        );
      }
      await admin.send(new sdk.DeleteBucketCommand({ Bucket: bucket }));
    } catch (error) {
      log(`could not delete s3://${bucket}: ${error.name ?? error}`);
    }
    admin.destroy();
    await rm(work, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    stopping().finally(() => process.exit(130));
  });
  /** Make the bucket (again, after a server restart emptied it). */
  const makeBucket = async () => {
    try {
      await admin.send(new sdk.CreateBucketCommand({ Bucket: bucket }));
    } catch (error) {
      if (error.name !== 'BucketAlreadyOwnedByYou') throw error;
    }
  };
  /**
   * The case's data, its tools and its check. `seed()` uploads the data (again after a
   * restart of the server: the dev Ceph keeps objects in memory only).
   */
  const setUp = async (name) => {
    const tools = [];
    let check;
    let seed;
    if (name === 'small') {
      const keys = Array.from(
        { length: files },
        (_, i) => `small/d${String(i % 10).padStart(2, '0')}/f${String(i).padStart(6, '0')}.bin`,
      );
      const bodies = keys.map(() => randomBytes(size));
      const digests = bodies.map((b) => createHash('sha256').update(b).digest('hex'));
      seed = async () => {
        log(`seeding ${files} × ${size} B into s3://${bucket}/small/`);
        await inFlight(32, keys.length, async (i) => {
          await admin.send(
            new sdk.PutObjectCommand({ Bucket: bucket, Key: keys[i], Body: bodies[i] }),
          );
          stored.add(keys[i]);
        });
      };
      const keysFile = path.join(work, 'keys.json');
      await writeFile(keysFile, JSON.stringify(keys));
      for (const client of clients) {
        tools.push({
          name: client,
          argv: (dest) => [
            process.execPath,
            ...NODE_FLAGS,
            fileURLToPath(import.meta.url),
            ...['--child', client, '--case', 'small', '--bucket', bucket],
            ...['--keys', keysFile, '--size', String(size), '--dest', dest],
          ],
        });
      }
      check = async (dest) => {
        const names = await readdir(dest);
        if (names.length !== files) throw new Error(`${names.length} files, ${files} expected`);
        for (let i = 0; i < files; i += Math.ceil(files / 25)) {
          const got = createHash('sha256')
            .update(await readFile(path.join(dest, `${i}.bin`)))
            .digest('hex');
          if (got !== digests[i]) throw new Error(`${i}.bin differs from ${keys[i]}`);
        }
      };
    } else {
      const key = 'big.bin';
      const block = randomBytes(MiB);
      const mib = (i) => {
        const b = Buffer.from(block.subarray(0, Math.min(MiB, bigBytes - i * MiB)));
        b.writeUInt32LE(i, 0);
        return b;
      };
      const samples = [0, Math.floor(bigBytes / MiB / 2), Math.ceil(bigBytes / MiB) - 1];
      const hashes = new Map(
        samples.map((i) => [i, createHash('sha256').update(mib(i)).digest('hex')]),
      );
      seed = async () => {
        log(`uploading ${bigBytes / MiB} MiB to s3://${bucket}/${key}`);
        const { Upload } = await import('@aws-sdk/lib-storage');
        await new Upload({
          client: admin,
          params: {
            Bucket: bucket,
            Key: key,
            Body: Readable.from(
              (function* () {
                for (let i = 0; i < Math.ceil(bigBytes / MiB); i++) yield mib(i);
              })(),
            ),
          },
          partSize: 64 * MiB,
          queueSize: 2,
        }).done();
        stored.add(key);
      };
      for (const client of clients) {
        tools.push({
          name: client,
          argv: (dest) => [
            process.execPath,
            ...NODE_FLAGS,
            fileURLToPath(import.meta.url),
            ...['--child', client, '--case', 'big', '--bucket', bucket, '--key', key],
            ...['--dest', dest],
          ],
        });
      }
      if (withCurl) {
        const { getSignedUrl } = await import('@aws-sdk/s3-request-presigner');
        const url = await getSignedUrl(
          admin,
          new sdk.GetObjectCommand({ Bucket: bucket, Key: key }),
          { expiresIn: 6 * 3600 },
        );
        tools.push({
          name: 'curl + sync FILE',
          yardstick: true,
          argv: (dest) => [
            'sh',
            '-c',
            'curl -sS --fail -o "$1" "$2" && sync "$1"',
            'sh',
            path.join(dest, 'big.bin'),
            url,
          ],
        });
      }
      check = async (dest) => {
        const file = path.join(dest, 'big.bin');
        const got = (await stat(file)).size;
        if (got !== bigBytes) throw new Error(`big.bin: ${got} bytes, ${bigBytes} expected`);
        for (const i of samples) {
          if (sha256Of(file, i * MiB, Math.min(MiB, bigBytes - i * MiB)) !== hashes.get(i)) {
            throw new Error(`big.bin: MiB ${i} differs`);
          }
        }
      };
    }
    return { tools, check, seed };
  };
  let restarts = 0;
  /**
   * After a failed run: true (once the server answers again and the case's data is back) when
   * the server restarted meanwhile — its processes changed, or the bucket is gone. The machine
   * is shared; something else may restart the dev server.
   */
  const recovered = async (seed) => {
    const now = serverPids();
    let gone = now.join() !== pids.join();
    if (!gone) {
      try {
        await admin.send(new sdk.HeadBucketCommand({ Bucket: bucket }));
      } catch {
        gone = true; // no answer or no bucket: either way the data must come back
      }
    }
    if (!gone || restarts >= 3) return false;
    restarts++;
    log('the S3 server restarted during the round; waiting for it, then seeding again');
    for (let i = 0; ; i++) {
      if (i === 120) throw new Error('the S3 server did not come back within 10 minutes');
      try {
        await admin.send(new sdk.ListBucketsCommand({}));
        break;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 5000));
      }
    }
    pids = serverPids();
    await makeBucket();
    await seed();
    return true;
  };
  try {
    await makeBucket();
    for (const name of cases) {
      if (name !== 'small' && name !== 'big') throw new Error(`unknown case ${name}`);
      const { tools, check, seed } = await setUp(name);
      await seed();
      const title =
        name === 'small'
          ? `cold fetch of ${files.toLocaleString('en')} × ${size / KiB} KiB, ${opt.concurrency} in flight`
          : `fetch of one ${bigBytes >= 1024 * MiB ? `${bigBytes / 1024 / MiB} GiB` : `${bigBytes / MiB} MiB`} object`;
      log(
        `case ${name}: ${title} (1 warm-up + ${runs} rounds of ${tools.map((t) => t.name).join(', ')})`,
      );
      const runsOf = tools.map(() => []);
      const loads = [];
      for (let round = 0; round <= runs; round++) {
        // Reversed every other round: no client always runs right after the same other one.
        const order = tools.map((_, i) => i);
        if (round % 2 === 1) order.reverse();
        const done = [];
        try {
          for (const i of order) {
            const tool = tools[i];
            const dest = await mkdtemp(path.join(work, 'dest-'));
            let r;
            try {
              r = await runTimed(tool.argv(dest), env, work, pids);
              await check(dest);
            } finally {
              await rm(dest, { recursive: true, force: true });
            }
            const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
            const inner = line ? JSON.parse(line.slice(7)) : undefined;
            done.push([
              i,
              {
                round,
                wall: r.wall,
                user: r.user,
                sys: r.sys,
                cpu: r.cpu,
                rssMiB: r.rssMiB,
                serverCpu: r.serverCpu,
                load: r.load,
                fetch: inner?.fetch,
              },
            ]);
            log(
              `  ${round === 0 ? 'warm-up' : `round ${round}`}  ${tool.name.padEnd(18)} wall ${r.wall.toFixed(2)} s  cpu ${r.cpu.toFixed(2)} s (user ${r.user.toFixed(2)}, sys ${r.sys.toFixed(2)})  rss ${r.rssMiB.toFixed(0)} MiB  server ${r.serverCpu.toFixed(2)} s  load ${r.load.toFixed(1)}`,
            );
          }
        } catch (error) {
          // A round counts whole or not at all, so every client keeps its place in it.
          if (!(await recovered(seed))) throw error;
          log(`  round ${round} is run again (${String(error.message).split('\n')[0]})`);
          round--;
          continue;
        }
        for (const [i, run] of done) {
          loads.push(run.load);
          if (round > 0) runsOf[i].push(run);
        }
      }
      const base = runsOf[tools.findIndex((t) => t.name === 'http1')];
      const rows = tools.map((tool, i) => {
        const xs = runsOf[i];
        const stat3 = (f) => {
          const v = xs.map(f);
          return { median: median(v), min: Math.min(...v), max: Math.max(...v) };
        };
        // The ratio to http1 in the same round (noise that hits a round hits both).
        const paired = (f) => {
          const v = xs.map((x) => f(x) / f(base.find((b) => b.round === x.round)));
          return { median: median(v), min: Math.min(...v), max: Math.max(...v) };
        };
        const row = {
          tool: tool.name,
          yardstick: tool.yardstick === true,
          wall: stat3((x) => x.wall),
          cpu: stat3((x) => x.cpu),
          user: stat3((x) => x.user),
          sys: stat3((x) => x.sys),
          rssMiB: stat3((x) => x.rssMiB),
          serverCpu: stat3((x) => x.serverCpu),
          fetchWall: xs[0]?.fetch ? stat3((x) => x.fetch.seconds) : undefined,
          fetchCpu: xs[0]?.fetch ? stat3((x) => x.fetch.user + x.fetch.sys) : undefined,
          pairedWall: paired((x) => x.wall),
          pairedCpu: paired((x) => x.cpu),
          runs: xs,
        };
        return row;
      });
      const b = rows.find((r) => r.tool === 'http1');
      for (const row of rows) {
        row.ratioWall = row.wall.median / b.wall.median;
        row.ratioCpu = row.cpu.median / b.cpu.median;
        row.ratioRss = row.rssMiB.median / b.rssMiB.median;
      }
      result.cases.push({
        id: name,
        title,
        runs,
        loadavg: { min: Math.min(...loads), median: median(loads), max: Math.max(...loads) },
        rows,
      });
    }
    // Reported before the cleanup, which talks to the server again.
    result.seconds = Math.round((Date.now() - started) / 1000);
    result.machine.loadavgEnd = readFileSync('/proc/loadavg', 'utf8').trim();
    result.decision = decide(result);
    process.stdout.write(`${renderTables(result)}\n`);
    const json = JSON.stringify(result);
    if (opt.json) await writeFile(opt.json, `${json}\n`);
    process.stdout.write(`${json}\n`);
  } finally {
    await stopping();
  }
}

/**
 * The issue's rule: undici replaces the hand-written client if its best way of being driven is
 * within 5% of it on CPU and on wall time, in both cases (ratios of medians).
 */
function decide(result) {
  const undiciNames = result.options.clients.filter((c) => c.startsWith('undici'));
  const perCase = result.cases.map((c) => {
    const rows = c.rows.filter((r) => undiciNames.includes(r.tool));
    const best = rows.reduce((a, r) =>
      Math.max(r.ratioCpu, r.ratioWall) < Math.max(a.ratioCpu, a.ratioWall) ? r : a,
    );
    return {
      case: c.id,
      best: best.tool,
      ratioCpu: Number(best.ratioCpu.toFixed(3)),
      ratioWall: Number(best.ratioWall.toFixed(3)),
      within5: best.ratioCpu <= 1.05 && best.ratioWall <= 1.05,
    };
  });
  const both = result.cases.length === 2;
  return {
    perCase,
    replace: both && perCase.every((c) => c.within5),
    complete: both,
  };
}

const f2 = (x) => (x >= 10 ? x.toFixed(1) : x.toFixed(2));

function renderTables(result) {
  const out = [];
  for (const c of result.cases) {
    out.push(`### ${c.title}`, '');
    out.push(
      '| client | wall (median, min–max) | CPU user + sys (median, min–max) | peak RSS | fetch alone: wall / CPU | server CPU | wall ÷ http1 | CPU ÷ http1 | same-round ratios wall / CPU (median, min–max) |',
      '|---|---|---|---|---|---|---|---|---|',
    );
    for (const r of c.rows) {
      const fetch = r.fetchWall ? `${f2(r.fetchWall.median)} / ${f2(r.fetchCpu.median)} s` : '';
      const paired =
        r.tool === 'http1'
          ? ''
          : `${r.pairedWall.median.toFixed(2)} (${r.pairedWall.min.toFixed(2)}–${r.pairedWall.max.toFixed(2)}) / ${r.pairedCpu.median.toFixed(2)} (${r.pairedCpu.min.toFixed(2)}–${r.pairedCpu.max.toFixed(2)})`;
      out.push(
        `| ${r.tool} | ${f2(r.wall.median)} s (${f2(r.wall.min)}–${f2(r.wall.max)}) | ` +
          `${f2(r.cpu.median)} s (${f2(r.cpu.min)}–${f2(r.cpu.max)}) | ${r.rssMiB.median.toFixed(0)} MiB (${r.rssMiB.min.toFixed(0)}–${r.rssMiB.max.toFixed(0)}) | ` +
          `${fetch} | ${f2(r.serverCpu.median)} s | ${r.ratioWall.toFixed(2)}× | ${r.ratioCpu.toFixed(2)}× | ${paired} |`,
      );
    }
    out.push(
      '',
      `${c.runs} rounds after a warm-up; load average (1 min) at the runs' starts ${c.loadavg.min.toFixed(1)}–${c.loadavg.max.toFixed(1)}, median ${c.loadavg.median.toFixed(1)}.`,
      '',
    );
  }
  const d = result.decision;
  out.push(
    `Decision (undici's best way within 5% on CPU and wall in both cases): ${d.complete ? (d.replace ? 'replace' : 'keep the hand-written client') : 'incomplete (both cases are needed)'}`,
  );
  for (const c of d.perCase) {
    out.push(
      `- ${c.case}: best undici = ${c.best}, CPU ${c.ratioCpu}×, wall ${c.ratioWall}× → ${c.within5 ? 'within 5%' : 'not within 5%'}`,
    );
  }
  out.push(
    `load average: ${result.machine.loadavgStart} at the start, ${result.machine.loadavgEnd} at the end`,
  );
  return out.join('\n');
}

if (opt.child) await child();
else await parent();
