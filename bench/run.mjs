// `npm run bench`: provcat side by side with rclone, the AWS CLI and the raw AWS SDK, on the same
// S3 server in the same run, reported as ratios.
//
//   npm run bench                          the full run (~15 min on 2 cores), writes
//                                          bench/results/latest.json and docs/performance.md
//   node bench/run.mjs --quick        small sizes, 2 runs, writes nothing (a smoke test)
//   node bench/run.mjs --cases 1,3    some cases only (writes nothing unless --write)
//   node bench/run.mjs --cases 8      the embedded store only (no S3 server, no peers)
//   node bench/run.mjs --cases L      the latency cases: 20 ms round trips through a delay
//                                          proxy in front of Ceph (bench/latency.mjs)
//   node bench/run.mjs --cases P      the many-files cases of issue 28 (many-files.mjs); P-local
//                                     leaves out P1 (the S3 push) and needs no server
//   node bench/run.mjs --cases 9      the optional case 9: undici against the hand-written
//                                          HTTP/1.1 client (bench/undici-vs-http1.mjs)
//
// Why it is built this way:
// - These machines are noisy (other work shares the cores; absolute times drift ±15% between
//   runs), so every case runs its tools alternately, A B C A B C ..., after one warm-up round,
//   and reports medians, min–max and the ratio provcat/peer from the same rounds. CPU time
//   (user + sys) is reported too: it drifts less than wall time under load.
// - Every tool runs as a whole process, the way a user runs it, under `/usr/bin/time -f %M` for
//   its peak RSS. Node peers get NODE_NO_WARNINGS=1 like provcat, so no one pays for printing
//   the SDK's Node-version warning.
// - The S3 server is Ceph radosgw on 127.0.0.1:7480: reused when one answers there, else started
//   with servers/start-ceph.sh (installed from Debian when missing) and stopped at the end.
//   radosgw must run with tcp_nodelay=1 on its beast frontend; without it every request on a
//   reused connection stalls ~40 ms and the benchmark times the stall (checked, and reported).
// - Peers come from Debian (rclone, awscli, time, curl), installed when missing. The Debian
//   `aws` is run as /usr/bin/aws, because a pyenv shim may shadow it on PATH. rclone is
//   configured through RCLONE_CONFIG_CEPH_* variables and the AWS CLI through a config file in
//   the run's temp directory: nothing is written to the user's home.
// - Request counts come from a counting HTTP proxy in this process: provcat runs once more
//   (untimed) with its endpoint pointed at the proxy, which forwards every request unchanged
//   (SigV4 signs the Host header, which is kept as sent).
// - Case 8 is the embedded store (`local://`) against `cp` + `sync`, all on the filesystem of
//   the run's temp directory; it needs no server, so `--cases 8` alone starts none.
// - Small objects live in buckets this script owns and re-seeds only when incomplete
//   (`provcat-bench-small-v1`); 1 GiB objects go into a bucket of their own run and are deleted
//   right after their case (the in-memory OSD holds everything in RAM).
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { azureCases, azureTargets } from './azure.mjs';
import { gcsCases, gcsTargets } from './gcs.mjs';
import { latencyCases, latencyTargets } from './latency.mjs';
import { manyFilesCases, manyFilesTargets, setAside } from './many-files.mjs';
import { rcloneCopy, refetchTools as sharedRefetchTools } from './refetch-tools.mjs';

const KiB = 1024;
const MiB = 1024 * KiB;
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const CLI = path.join(repo, 'dist/cli/provcat.cjs');
const PORT = 7480;
const ENDPOINT = `http://127.0.0.1:${PORT}`;
const AWS = '/usr/bin/aws';
const TIME = '/usr/bin/time';
const SMALL_BUCKET = 'provcat-bench-small-v1';

const DEFAULT_CASES = '1,2,3,4,5,6,7,8,L,P';
const { values: opt } = parseArgs({
  options: {
    cases: { type: 'string', default: DEFAULT_CASES },
    runs: { type: 'string' },
    'big-runs': { type: 'string' },
    'heavy-runs': { type: 'string' },
    'all-peers': { type: 'boolean', default: false },
    'big-mib': { type: 'string' },
    'local-mib': { type: 'string' },
    quick: { type: 'boolean', default: false },
    write: { type: 'boolean' },
    'no-write': { type: 'boolean' },
    clean: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h' },
  },
});
if (opt.help) {
  process.stdout.write(
    [
      'usage: node bench/run.mjs [--cases 1,2,...] [--runs N] [--big-runs N] [--big-mib M]',
      '                               [--local-mib M] [--heavy-runs N] [--all-peers] [--quick]',
      '                               [--write|--no-write] [--clean]',
      '  --cases   1-7 need the S3 server; 8 is the embedded store alone (local://, cp + sync)',
      '  --cases L       the latency cases (latency.mjs: 10 ms each way through a delay proxy, rclone); in the default set',
      '  --cases g       the GCS cases (gcs.mjs: the GCS test server, rclone, the raw GCS SDK); not in the default set',
      '  --cases az      the Azure cases (azure.mjs: Azurite, rclone, the raw Azure SDK); not in the default set',
      '  --cases P       the many-files cases P1-P4 (many-files.mjs: push to S3 and into the embedded store, cold fetch, unchanged push); in the default set',
      '  --cases P-local P2-P4 alone: the embedded store, no server',
      '  --runs N        counted runs of the light cases (default 5; each after one warm-up round)',
      '  --heavy-runs N  counted runs of the 10,000-file cases (default 3)',
      '  --big-runs N    counted runs of the 1 GiB cases (default 3)',
      '  --local-mib M   size of the file of case 8 (default 800)',
      '  --all-peers     also run `aws s3 cp` in case 2 (about a minute per run for 10,000 files)',
      '  --quick   small sizes and 2 runs (a smoke test of the harness); writes nothing',
      '  --write   write results/latest.json and docs/performance.md (default: full runs only)',
      '  --clean   delete the small-object bucket at the end (it is kept to skip re-seeding)',
      '  case 9 (not in the default list): undici against the hand-written HTTP/1.1 client',
      '',
    ].join('\n'),
  );
  process.exit(0);
}
const quick = opt.quick;
const selected = new Set(opt.cases.split(',').map((s) => s.trim()));
const RUNS = Number(opt.runs ?? (quick ? 2 : 5));
const BIG_RUNS = Number(opt['big-runs'] ?? (quick ? 1 : 3));
/** Counted runs of the 10,000-file cases (2 and 3b): each round takes minutes on 2 cores. */
const HEAVY_RUNS = Number(opt['heavy-runs'] ?? (quick ? 1 : 3));
const BIG_BYTES = Number(opt['big-mib'] ?? (quick ? 64 : 1024)) * MiB;
/** The file of case 8 (the embedded store's put and fetch). */
const LOCAL_BYTES = Number(opt['local-mib'] ?? (quick ? 64 : 800)) * MiB;
const FULL =
  !quick &&
  opt.cases === DEFAULT_CASES &&
  opt['big-mib'] === undefined &&
  opt['local-mib'] === undefined;
/** Cases 1–7 run against the S3 server; case 8 needs none. */
const NEED_SERVER = [...selected].some((c) => c !== '8' && c !== 'P-local');
const WRITE = opt['no-write'] ? false : (opt.write ?? FULL);
/** The two small-object folders: files × bytes. */
const SMALL_A = quick ? { files: 200, size: 4 * KiB } : { files: 1000, size: 4 * KiB };
const SMALL_B = quick ? { files: 1000, size: 1 * KiB } : { files: 10_000, size: 1 * KiB };

const log = (message) => process.stderr.write(`[bench] ${message}\n`);
const started = Date.now();
const work = await mkdtemp(path.join(os.tmpdir(), 'provcat-bench-'));
const cleanups = [];
let activeChild;

async function finish(code) {
  for (const fn of cleanups.reverse()) {
    try {
      await fn();
    } catch (error) {
      log(`cleanup failed: ${error.message}`);
    }
  }
  await rm(work, { recursive: true, force: true });
  process.exit(code);
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    log(`${sig}: stopping`);
    activeChild?.kill('SIGTERM');
    finish(130);
  });
}

// ---- tools and the server ----------------------------------------------------------------

function onPath(tool) {
  return spawnSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' }).status === 0;
}

function aptInstall(packages) {
  log(`installing from Debian: ${packages.join(' ')}`);
  const opts = {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  };
  const args = ['install', '-y', '--no-install-recommends', ...packages];
  if (spawnSync('apt-get', args, opts).status === 0) return;
  if (
    spawnSync('apt-get', ['update'], opts).status !== 0 ||
    spawnSync('apt-get', args, opts).status !== 0
  ) {
    throw new Error(`apt-get install ${packages.join(' ')} failed (run as root?)`);
  }
}

/** The file-system type of `dir` (`df --output=fstype`), or `unknown`. */
function filesystemOf(dir) {
  const r = spawnSync('df', ['--output=fstype', dir], { encoding: 'utf8' });
  return r.status === 0 ? (r.stdout.trim().split('\n').pop() ?? 'unknown') : 'unknown';
}

function versionOf(argv) {
  const r = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8' });
  return `${r.stdout ?? ''}${r.stderr ?? ''}`.trim().split('\n')[0] ?? '';
}

async function answering() {
  try {
    const r = await fetch(`${ENDPOINT}/`, { signal: AbortSignal.timeout(2000) });
    await r.body?.cancel();
    return r.status === 200 || r.status === 403;
  } catch {
    // Refused or timed out: nothing serves there (yet).
    return false;
  }
}

/** The radosgw frontend setting of the running server, read from its config file. */
function runningFrontend() {
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let argv;
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue; // the process ended while we looked
    }
    if (!argv[0]?.endsWith('radosgw')) continue;
    const conf = argv[argv.indexOf('-c') + 1];
    if (!conf || !existsSync(conf)) return { config: null, frontend: null };
    const line = readFileSync(conf, 'utf8')
      .split('\n')
      .find((l) => /^\s*rgw_frontends\s*=/.test(l));
    return { config: conf, frontend: line ? line.split('=').slice(1).join('=').trim() : null };
  }
  return { config: null, frontend: null };
}

async function ensureServer() {
  if (await answering()) {
    const { config, frontend } = runningFrontend();
    const nodelay = frontend === null ? null : /tcp_nodelay=1/.test(frontend);
    log(`reusing the S3 server on ${ENDPOINT} (frontend: ${frontend ?? 'unknown'})`);
    if (nodelay === false) {
      log('WARNING: radosgw runs without tcp_nodelay=1: reused connections stall ~40 ms');
    }
    return { reused: true, config, frontend, tcpNodelay: nodelay };
  }
  const script = path.join(repo, 'servers/start-ceph.sh');
  if (!/tcp_nodelay=1/.test(readFileSync(script, 'utf8'))) {
    throw new Error(
      `${script} does not set tcp_nodelay=1 on the beast frontend; refusing to time stalls`,
    );
  }
  if (!onPath('radosgw')) aptInstall(['radosgw', 'ceph-mon', 'ceph-osd']);
  const dir = path.join(os.tmpdir(), 'provcat-bench-ceph');
  const env = { ...process.env, CEPH_DIR: dir, CEPH_MEMSTORE_BYTES: String(6 * 1024 * MiB) };
  log(`starting Ceph in ${dir}`);
  const r = spawnSync(script, [], { env, stdio: ['ignore', 'inherit', 'inherit'] });
  cleanups.push(async () => {
    log('stopping Ceph');
    spawnSync(path.join(repo, 'servers/stop-ceph.sh'), [], { env, stdio: 'inherit' });
  });
  if (r.status !== 0) throw new Error('start-ceph.sh failed');
  const { frontend } = runningFrontend();
  return { reused: false, config: path.join(dir, 'ceph.conf'), frontend, tcpNodelay: true };
}

function ensurePeers() {
  const missing = [];
  if (!onPath('rclone')) missing.push('rclone');
  if (!existsSync(AWS)) missing.push('awscli');
  if (!existsSync(TIME)) missing.push('time');
  if (!onPath('curl')) missing.push('curl');
  if (missing.length > 0) aptInstall(missing);
}

// ---- environments ------------------------------------------------------------------------

const creds = {
  AWS_ACCESS_KEY_ID: 'AKIDTEST',
  AWS_SECRET_ACCESS_KEY: 'SECRETTEST',
  AWS_REGION: 'us-east-1',
};

/** The environment every tool runs with: the server, credentials, no config from home. */
async function makeEnv() {
  const base = { ...process.env };
  // An HTTPS CA bundle makes rclone refuse its own transport; nothing here speaks HTTPS.
  for (const k of Object.keys(base)) {
    if (/^(AWS_|RCLONE_|PROVCAT_)/.test(k)) delete base[k];
  }
  // Nor does any Node tool need extra CAs: Node parses that bundle at every process start,
  // before any JavaScript runs (~45 ms of CPU for a system bundle on these VMs), which would
  // time a machine setting instead of the tools. Every Node tool runs without it.
  delete base.NODE_EXTRA_CA_CERTS;
  const awsConfig = path.join(work, 'aws-config');
  await writeFile(awsConfig, '[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n');
  await writeFile(path.join(work, 'aws-credentials'), '');
  await writeFile(path.join(work, 'rclone.conf'), '');
  return {
    ...base,
    ...creds,
    NODE_NO_WARNINGS: '1',
    AWS_ENDPOINT_URL_S3: ENDPOINT,
    PROVCAT_S3_FORCE_PATH_STYLE: '1',
    // Ceph 16 ignores If-None-Match on versioned buckets; commits need the documented fallback.
    PROVCAT_S3_CREATE_FALLBACK: 'oldest-version-wins',
    AWS_CONFIG_FILE: awsConfig,
    AWS_SHARED_CREDENTIALS_FILE: path.join(work, 'aws-credentials'),
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_PAGER: '',
    RCLONE_CONFIG: path.join(work, 'rclone.conf'),
    RCLONE_CONFIG_CEPH_TYPE: 's3',
    RCLONE_CONFIG_CEPH_PROVIDER: 'Ceph',
    RCLONE_CONFIG_CEPH_ENDPOINT: ENDPOINT,
    RCLONE_CONFIG_CEPH_ACCESS_KEY_ID: creds.AWS_ACCESS_KEY_ID,
    RCLONE_CONFIG_CEPH_SECRET_ACCESS_KEY: creds.AWS_SECRET_ACCESS_KEY,
    RCLONE_CONFIG_CEPH_FORCE_PATH_STYLE: 'true',
    RCLONE_CONFIG_CEPH_ENV_AUTH: 'false',
  };
}

// ---- running and timing one process -------------------------------------------------------

let seq = 0;

/** Clock ticks per second of /proc/PID/stat's CPU times. */
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
/** The server's processes (radosgw, OSD, monitor), found once the server answers. */
let serverPids = [];

/** The Ceph processes running now. */
function findServerPids() {
  const pids = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const exe = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] ?? '';
      if (/(^|\/)(radosgw|ceph-osd|ceph-mon)$/.test(exe)) pids.push(pid);
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/** CPU seconds (user + sys) the server's processes have used so far. */
function serverCpuSeconds() {
  let ticks = 0;
  for (const pid of serverPids) {
    try {
      // Fields after the command name (which may hold spaces): utime and stime are 12th and 13th.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // A server process that ended: its time is lost, the run is reported without it.
    }
  }
  return ticks / CLOCK_TICKS;
}

/**
 * Run argv under /usr/bin/time; wall seconds, CPU seconds, peak RSS (MiB), output, and the CPU
 * the server used meanwhile (on 2 shared cores, client CPU + server CPU bound the wall time).
 */
function runTimed(argv, env) {
  return new Promise((resolve, reject) => {
    const timeFile = path.join(work, `time-${seq++}.txt`);
    const server0 = serverCpuSeconds();
    const t0 = process.hrtime.bigint();
    const child = spawn(TIME, ['-f', '%M %U %S', '-o', timeFile, ...argv], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    activeChild = child;
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout = (stdout + d).slice(-200_000);
    });
    child.stderr.on('data', (d) => {
      stderr = (stderr + d).slice(-20_000);
    });
    child.on('error', reject);
    child.on('close', (code) => {
      activeChild = undefined;
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      const serverCpu = serverCpuSeconds() - server0;
      let measured;
      try {
        measured = readFileSync(timeFile, 'utf8').trim().split('\n').pop().split(' ').map(Number);
      } catch (error) {
        reject(new Error(`${argv.join(' ')}: no timing (${error.message}); stderr: ${stderr}`));
        return;
      }
      if (code !== 0) {
        reject(new Error(`${argv.join(' ')} exited with ${code}:\n${stderr.slice(-3000)}`));
        return;
      }
      const [rssKiB, user, sys] = measured;
      resolve({ seconds, cpu: user + sys, serverCpu, rssMiB: rssKiB / 1024, stdout, stderr });
    });
  });
}

/** Run a command to completion (setup steps, untimed); throws with its stderr on failure. */
function runQuiet(argv, env) {
  const r = spawnSync(argv[0], argv.slice(1), { env, encoding: 'utf8', maxBuffer: 64 * MiB });
  if (r.status !== 0) {
    throw new Error(`${argv.join(' ')} exited with ${r.status}:\n${(r.stderr ?? '').slice(-3000)}`);
  }
  return r.stdout;
}

// ---- a counting proxy ---------------------------------------------------------------------

/** An HTTP proxy to the server that counts requests by method. */
async function startCountingProxy() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const counts = {};
  const server = http.createServer((req, res) => {
    counts[req.method] = (counts[req.method] ?? 0) + 1;
    const upstream = http.request(
      {
        host: '127.0.0.1',
        port: PORT,
        method: req.method,
        path: req.url,
        headers: req.headers,
        agent,
      },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    upstream.on('error', (error) => {
      res.destroy(error);
    });
    req.pipe(upstream);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${server.address().port}`,
    take() {
      const out = { ...counts };
      for (const k of Object.keys(counts)) delete counts[k];
      return out;
    },
    close() {
      agent.destroy();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

// ---- S3 setup through the SDK (untimed) ----------------------------------------------------

// The SDK's notice about future Node versions is not part of the benchmark's output.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const sdk = await import('@aws-sdk/client-s3');
const { NodeHttpHandler } = await import('@smithy/node-http-handler');
const admin = new sdk.S3Client({
  region: 'us-east-1',
  endpoint: ENDPOINT,
  forcePathStyle: true,
  credentials: {
    accessKeyId: creds.AWS_ACCESS_KEY_ID,
    secretAccessKey: creds.AWS_SECRET_ACCESS_KEY,
  },
  requestHandler: new NodeHttpHandler({
    httpAgent: new http.Agent({ keepAlive: true, maxSockets: 32 }),
  }),
});
cleanups.push(() => admin.destroy());

async function makeBucket(bucket, versioned) {
  try {
    await admin.send(new sdk.CreateBucketCommand({ Bucket: bucket }));
  } catch (error) {
    if (error.name !== 'BucketAlreadyOwnedByYou' && error.name !== 'BucketAlreadyExists')
      throw error;
  }
  if (versioned) {
    await admin.send(
      new sdk.PutBucketVersioningCommand({
        Bucket: bucket,
        VersioningConfiguration: { Status: 'Enabled' },
      }),
    );
  }
}

async function listKeys(bucket, prefix) {
  const out = new Map();
  let token;
  do {
    const r = await admin.send(
      new sdk.ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
    );
    for (const o of r.Contents ?? []) out.set(o.Key, o.Size);
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
  } while (token);
  return out;
}

/** The folder of a small-object spec, and its keys: 10 subfolders, files spread over them. */
function smallFolder(spec) {
  const prefix = `f${spec.files}x${spec.size}/`;
  const keys = Array.from(
    { length: spec.files },
    (_, i) => `${prefix}d${String(i % 10).padStart(2, '0')}/f${String(i).padStart(6, '0')}.bin`,
  );
  return { prefix, keys, ...spec };
}

async function seedSmall(folder) {
  const have = await listKeys(SMALL_BUCKET, folder.prefix);
  const todo = folder.keys.filter((k) => have.get(k) !== folder.size);
  if (have.size > folder.keys.length) {
    throw new Error(
      `s3://${SMALL_BUCKET}/${folder.prefix} holds unexpected keys; delete the bucket`,
    );
  }
  if (todo.length === 0) return 0;
  log(`seeding ${todo.length} × ${folder.size} B into s3://${SMALL_BUCKET}/${folder.prefix}`);
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < todo.length) {
        const key = todo[next++];
        await admin.send(
          new sdk.PutObjectCommand({
            Bucket: SMALL_BUCKET,
            Key: key,
            Body: randomBytes(folder.size),
          }),
        );
      }
    }),
  );
  return todo.length;
}

async function deleteAllVersions(bucket, prefix = '') {
  let keyMarker;
  let versionIdMarker;
  for (;;) {
    const r = await admin.send(
      new sdk.ListObjectVersionsCommand({
        Bucket: bucket,
        Prefix: prefix,
        KeyMarker: keyMarker,
        VersionIdMarker: versionIdMarker,
      }),
    );
    const objects = [...(r.Versions ?? []), ...(r.DeleteMarkers ?? [])].map((v) => ({
      Key: v.Key,
      VersionId: v.VersionId,
    }));
    if (objects.length > 0) {
      await admin.send(
        new sdk.DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: objects, Quiet: true } }),
      );
    }
    if (!r.IsTruncated) return;
    keyMarker = r.NextKeyMarker;
    versionIdMarker = r.NextVersionIdMarker;
  }
}

async function deleteBucket(bucket) {
  await deleteAllVersions(bucket);
  try {
    const uploads = await admin.send(new sdk.ListMultipartUploadsCommand({ Bucket: bucket }));
    for (const u of uploads.Uploads ?? []) {
      await admin.send(
        new sdk.AbortMultipartUploadCommand({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }),
      );
    }
  } finally {
    await admin.send(new sdk.DeleteBucketCommand({ Bucket: bucket }));
  }
}

async function deleteObject(bucket, key) {
  await admin.send(new sdk.DeleteObjectCommand({ Bucket: bucket, Key: key }));
}

/** A local file of `bytes` bytes: a random MiB repeated with a counter (no two MiB alike). */
async function makeBigFile(file, bytes) {
  const block = randomBytes(MiB);
  const out = createWriteStream(file);
  for (let i = 0; i < Math.ceil(bytes / MiB); i++) {
    const b = Buffer.from(block.subarray(0, Math.min(MiB, bytes - i * MiB)));
    b.writeUInt32LE(i, 0);
    if (!out.write(b)) await new Promise((r) => out.once('drain', r));
  }
  await new Promise((resolve, reject) => out.end((e) => (e ? reject(e) : resolve())));
}

// ---- checks ------------------------------------------------------------------------------

async function countFiles(dir) {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  let files = 0;
  let bytes = 0;
  for (const e of entries) {
    if (!e.isFile()) continue;
    files++;
    bytes += (await stat(path.join(e.parentPath, e.name))).size;
  }
  return { files, bytes };
}

async function expectFolder(dir, folder) {
  const got = await countFiles(dir);
  if (got.files !== folder.files || got.bytes !== folder.files * folder.size) {
    throw new Error(
      `${dir}: expected ${folder.files} files of ${folder.size} B, found ${got.files} files, ${got.bytes} B`,
    );
  }
}

async function expectSize(file, bytes) {
  const size = (await stat(file)).size;
  if (size !== bytes) throw new Error(`${file}: expected ${bytes} bytes, found ${size}`);
}

function lastJson(stdout) {
  const line = stdout.trim().split('\n').pop();
  return JSON.parse(line);
}

// ---- the rounds ----------------------------------------------------------------------------

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/**
 * A tool of a case: `argv(ctx)` is the command; `prepare()` makes a fresh context before each
 * run (untimed), `check(ctx, result)` verifies the run did the work, `cleanup(ctx)` after it.
 * `provcat: true` marks provcat's own rows (ratios are provcat ÷ peer).
 */
async function runCase(spec, env) {
  const { id, title, tools, runs } = spec;
  log(`case ${id}: ${title} (1 warm-up + ${runs} runs of ${tools.map((t) => t.name).join(', ')})`);
  const load = [os.loadavg()[0]];
  const t0 = Date.now();
  const results = tools.map(() => []);
  for (let round = 0; round < 1 + runs; round++) {
    for (const [i, tool] of tools.entries()) {
      const ctx = (await tool.prepare?.()) ?? {};
      let r;
      try {
        r = await runTimed(tool.argv(ctx), tool.env ?? env);
        await tool.check?.(ctx, r);
      } finally {
        await tool.cleanup?.(ctx);
      }
      if (round > 0) {
        results[i].push({
          seconds: r.seconds,
          cpu: r.cpu,
          serverCpu: r.serverCpu,
          rssMiB: r.rssMiB,
        });
      }
      log(
        `  ${round === 0 ? 'warm-up' : `run ${round}`}  ${tool.name.padEnd(28)} ${r.seconds.toFixed(2)} s  cpu ${r.cpu.toFixed(2)} s  server cpu ${r.serverCpu.toFixed(2)} s  rss ${r.rssMiB.toFixed(0)} MiB`,
      );
    }
  }
  load.push(os.loadavg()[0]);
  const rows = tools.map((tool, i) => {
    const xs = results[i];
    return {
      tool: tool.name,
      provcat: tool.provcat === true,
      command: tool.shown,
      runs: xs,
      median: median(xs.map((x) => x.seconds)),
      min: Math.min(...xs.map((x) => x.seconds)),
      max: Math.max(...xs.map((x) => x.seconds)),
      cpuMedian: median(xs.map((x) => x.cpu)),
      // The embedded store's cases use no server: what Ceph spent meanwhile is someone else's.
      serverCpuMedian: spec.noServer ? undefined : median(xs.map((x) => x.serverCpu)),
      peakRssMiB: Math.max(...xs.map((x) => x.rssMiB)),
      requests: tool.requests,
    };
  });
  for (const row of rows) {
    row.ratios = {};
    if (row.provcat) continue;
    for (const p of rows.filter((r) => r.provcat)) row.ratios[p.tool] = p.median / row.median;
  }
  return {
    id,
    title,
    note: spec.note,
    runs,
    seconds: (Date.now() - t0) / 1000,
    loadavg: load,
    rows,
  };
}

// ---- the cases -----------------------------------------------------------------------------

const provcat = (...args) => ['node', CLI, ...args];
const show = (argv) =>
  argv
    .map((a) => (a === CLI ? 'provcat' : a.startsWith(work) ? `$TMP${a.slice(work.length)}` : a))
    .join(' ')
    .replace(/^node provcat/, 'provcat');

function tool(name, fields) {
  return { name, ...fields, shown: fields.shown ?? show(fields.argv(fields.sample ?? {})) };
}

async function freshDir(label) {
  return mkdtemp(path.join(work, `${label}-`));
}

function folderTools(folder, { aws = true, signer = false } = {}) {
  const src = `s3://${SMALL_BUCKET}/${folder.prefix}`;
  const dirTool = (name, argvOf, extra = {}) =>
    tool(name, {
      sample: { dir: '$DEST' },
      prepare: async () => ({ dir: await freshDir('dest') }),
      argv: (ctx) => argvOf(ctx.dir),
      check: (ctx) => expectFolder(ctx.dir, folder),
      cleanup: (ctx) => rm(ctx.dir, { recursive: true, force: true }),
      ...extra,
    });
  const tools = [
    tool('provcat fetch', {
      provcat: true,
      sample: { cache: '$EMPTY_CACHE' },
      prepare: async () => ({ cache: await freshDir('cache') }),
      argv: (ctx) => ['env', `PROVCAT_CACHE_DIR=${ctx.cache}`, ...provcat('fetch', src, '--json')],
      shown: `PROVCAT_CACHE_DIR=$EMPTY_CACHE provcat fetch ${src} --json`,
      check: async (_ctx, r) => {
        const out = lastJson(r.stdout);
        if (out.downloaded !== folder.files)
          throw new Error(`provcat downloaded ${out.downloaded}`);
        await expectFolder(out.path, folder);
      },
      cleanup: (ctx) => rm(ctx.cache, { recursive: true, force: true }),
    }),
    dirTool('rclone copy --transfers 16', (dir) => [
      'rclone',
      'copy',
      '--transfers',
      '16',
      '--checkers',
      '16',
      `ceph:${SMALL_BUCKET}/${folder.prefix}`,
      dir,
    ]),
    dirTool('aws s3 cp --recursive', (dir) => [
      AWS,
      '--endpoint-url',
      ENDPOINT,
      's3',
      'cp',
      '--recursive',
      '--only-show-errors',
      src,
      dir,
    ]),
    dirTool('raw SDK loop (16 at a time)', (dir) => [
      'node',
      path.join(here, 'raw-sdk-fetch.mjs'),
      '--bucket',
      SMALL_BUCKET,
      '--prefix',
      folder.prefix,
      '--dest',
      dir,
    ]),
  ];
  if (signer) {
    // Not a target, a yardstick: rclone's copy made as durable as provcat's (which fsyncs every
    // file before it becomes visible) by one `syncfs` of the destination's filesystem after it.
    tools.push(
      dirTool(
        'rclone copy + sync -f (durable)',
        (dir) => [
          'sh',
          '-c',
          'rclone copy --transfers 16 --checkers 16 "$1" "$2" && sync -f "$2"',
          'sh',
          `ceph:${SMALL_BUCKET}/${folder.prefix}`,
          dir,
        ],
        {
          shown: `rclone copy --transfers 16 --checkers 16 ceph:${SMALL_BUCKET}/${folder.prefix} $DEST && sync -f $DEST`,
        },
      ),
    );
    tools.push(
      dirTool('SDK signer + node:http loop', (dir) => [
        'node',
        path.join(here, 'signer-fetch.mjs'),
        '--bucket',
        SMALL_BUCKET,
        '--prefix',
        folder.prefix,
        '--dest',
        dir,
      ]),
    );
    // Not a target, a yardstick: the least a Node client can spend on this fetch with the
    // cache's file work (raw sockets, SigV4 by hand; see node-floor-fetch.mjs).
    tools.push(
      dirTool(
        'Node floor: raw sockets + cache file work',
        (dir) => [
          'node',
          path.join(here, 'node-floor-fetch.mjs'),
          '--bucket',
          SMALL_BUCKET,
          '--prefix',
          folder.prefix,
          '--dest',
          path.join(dir, 'tree'),
          '--blobs',
          path.join(dir, 'blobs'),
        ],
        { check: (ctx) => expectFolder(path.join(ctx.dir, 'tree'), folder) },
      ),
    );
  }
  return aws ? tools : tools.filter((t) => !t.name.startsWith('aws'));
}

async function refetchTools(folder, env) {
  const src = `s3://${SMALL_BUCKET}/${folder.prefix}`;
  const remote = `ceph:${SMALL_BUCKET}/${folder.prefix}`;
  const awsDir = await freshDir('refetch-aws');
  const awsArgv = [
    AWS,
    '--endpoint-url',
    ENDPOINT,
    's3',
    'sync',
    '--only-show-errors',
    src,
    awsDir,
  ];
  // Populate every copy once (untimed); the counted runs are then no-ops.
  const tools = await sharedRefetchTools(
    { tool, freshDir, expectFolder, lastJson, runQuiet },
    {
      provcat: (cache) => ['env', `PROVCAT_CACHE_DIR=${cache}`, ...provcat('fetch', src, '--json')],
      rclone: rcloneCopy(remote),
      src,
      remote,
      folder,
      env,
      label: 's3',
    },
  );
  runQuiet(awsArgv, env);
  await expectFolder(awsDir, folder);
  tools.push(
    tool('aws s3 sync', { argv: () => awsArgv, shown: show(awsArgv).replace(awsDir, '$DEST') }),
  );
  return tools;
}

/** provcat's request counts for one command: run once through the counting proxy. */
async function countRequests(argv, env) {
  const proxy = await startCountingProxy();
  try {
    // Asynchronously: the proxy serves from this process's event loop.
    await runTimed(argv, { ...env, AWS_ENDPOINT_URL_S3: proxy.endpoint });
    const counts = proxy.take();
    return { total: Object.values(counts).reduce((a, b) => a + b, 0), byMethod: counts };
  } finally {
    await proxy.close();
  }
}

/**
 * Case 8, the embedded store: an 800 MiB `provcat put` to `local://` (8a) and a cold `provcat
 * fetch` of it (8b), each against a durable `cp` of the same file on the same file system
 * (`cp FILE DEST && sync DEST`: provcat fsyncs every file it makes visible). The store, the
 * cache and every copy live in the run's temp directory; each run starts from an empty store
 * (8a) or an empty cache (8b), and what it wrote is deleted right after it.
 */
async function localCases(env) {
  const file = path.join(work, 'local-big.bin');
  log(`writing a ${LOCAL_BYTES / MiB} MiB source file for the embedded store`);
  await makeBigFile(file, LOCAL_BYTES);
  runQuiet(['sync', file], env);
  const name = `${LOCAL_BYTES / MiB} MiB`;
  const local = (root, cacheDir, ...args) => [
    'env',
    `PROVCAT_LOCAL_ROOT=${root}`,
    `PROVCAT_CACHE_DIR=${cacheDir}`,
    ...provcat(...args),
  ];
  const durableCp = (from) =>
    tool('cp + sync FILE (durable)', {
      prepare: async () => ({ dest: path.join(await freshDir('cp'), 'copy.bin') }),
      argv: (ctx) => ['sh', '-c', 'cp "$1" "$2" && sync "$2"', 'sh', from, ctx.dest],
      shown: `cp ${show([from])} $DEST && sync $DEST`,
      check: (ctx) => expectSize(ctx.dest, LOCAL_BYTES),
      cleanup: (ctx) => rm(path.dirname(ctx.dest), { recursive: true, force: true }),
    });
  const put = tool('provcat put (local://)', {
    provcat: true,
    prepare: async () => ({ root: await freshDir('local-root'), cache: await freshDir('cache') }),
    argv: (ctx) => local(ctx.root, ctx.cache, 'put', file, 'local://bench/big.bin', '--json'),
    shown: `PROVCAT_LOCAL_ROOT=$EMPTY_ROOT provcat put ${show([file])} local://bench/big.bin --json`,
    check: (_ctx, r) => {
      const size = lastJson(r.stdout).size;
      if (size !== LOCAL_BYTES) throw new Error(`provcat put wrote ${size} bytes`);
    },
    cleanup: async (ctx) => {
      await rm(ctx.root, { recursive: true, force: true });
      await rm(ctx.cache, { recursive: true, force: true });
    },
  });
  const out = [];
  out.push(
    await runCase(
      {
        id: '8a',
        title: `put of one ${name} file to the embedded store`,
        tools: [put, durableCp(file)],
        runs: RUNS,
        noServer: true,
      },
      env,
    ),
  );

  // One store holding the file; its version file is what both tools of 8b copy.
  const root = await freshDir('local-store');
  runQuiet(local(root, await freshDir('cache'), 'put', file, 'local://bench/big.bin'), env);
  const found = (await readdir(root, { recursive: true, withFileTypes: true })).filter(
    (e) => e.isFile() && e.parentPath.endsWith(`${path.sep}o.big.bin`) && /^\d{17}-/.test(e.name),
  );
  if (found.length !== 1) throw new Error(`expected one version file in ${root}`);
  const versionFile = path.join(found[0].parentPath, found[0].name);
  const fetch = tool('provcat fetch (local://, cold)', {
    provcat: true,
    prepare: async () => ({ cache: await freshDir('cache') }),
    argv: (ctx) => local(root, ctx.cache, 'fetch', 'local://bench/big.bin', '--json'),
    shown: 'PROVCAT_CACHE_DIR=$EMPTY_CACHE provcat fetch local://bench/big.bin --json',
    check: (_ctx, r) => expectSize(lastJson(r.stdout).path, LOCAL_BYTES),
    cleanup: (ctx) => rm(ctx.cache, { recursive: true, force: true }),
  });
  out.push(
    await runCase(
      {
        id: '8b',
        title: `cold fetch of one ${name} object from the embedded store`,
        tools: [fetch, durableCp(versionFile)],
        runs: RUNS,
        noServer: true,
        note: "the copy's source is the store's version file, the bytes the fetch copies",
      },
      env,
    ),
  );
  await rm(root, { recursive: true, force: true });
  await rm(file, { force: true });
  return out;
}

// ---- main ----------------------------------------------------------------------------------

const cases = [];
const extra = {};
let server;
try {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  if (NEED_SERVER) {
    ensurePeers();
    server = await ensureServer();
    serverPids = findServerPids();
    if (serverPids.length === 0) log('WARNING: no Ceph process found; server CPU is not measured');
  } else {
    if (!existsSync(TIME)) aptInstall(['time']);
    server = { used: false, reused: false, config: null, frontend: null, tcpNodelay: null };
  }
  const env = await makeEnv();
  const machine = {
    nproc: os.availableParallelism(),
    cpu: os.cpus()[0]?.model ?? 'unknown',
    memoryGiB: Number((os.totalmem() / 1024 ** 3).toFixed(1)),
    node: process.version,
    ceph: NEED_SERVER ? versionOf(['radosgw', '--version']).replace(/\s*\(.*$/, '') : 'none',
    rclone: NEED_SERVER ? versionOf(['rclone', 'version']) : 'none',
    aws: NEED_SERVER ? versionOf([AWS, '--version']) : 'none',
    curl: NEED_SERVER ? versionOf(['curl', '--version']).split(' ').slice(0, 2).join(' ') : 'none',
    cp: versionOf(['cp', '--version']),
    filesystem: filesystemOf(work),
    loadavgAtStart: os.loadavg().map((x) => Number(x.toFixed(2))),
  };
  log(`machine: ${JSON.stringify(machine)}`);

  const A = smallFolder(SMALL_A);
  const B = smallFolder(SMALL_B);
  const needSmall = ['1', '2', '3', '6', '7', 'L'].some((c) => selected.has(c));
  if (needSmall) {
    await makeBucket(SMALL_BUCKET, true);
    await seedSmall(A);
    await seedSmall(B);
    if (opt.clean) cleanups.push(() => deleteBucket(SMALL_BUCKET));
  }
  const name = (f) => `${f.files.toLocaleString('en')} × ${f.size / KiB} KiB`;

  if (selected.has('1')) {
    const tools = folderTools(A, { signer: true });
    tools[0].requests = await countRequests(tools[0].argv({ cache: await freshDir('count') }), env);
    cases.push(
      await runCase({ id: '1', title: `cold folder fetch, ${name(A)}`, tools, runs: RUNS }, env),
    );
  }
  if (selected.has('2')) {
    const tools = folderTools(B, { aws: opt['all-peers'] });
    tools[0].requests = await countRequests(tools[0].argv({ cache: await freshDir('count') }), env);
    const note = opt['all-peers']
      ? undefined
      : '`aws s3 cp` left out (about a minute per run here; pass --all-peers)';
    cases.push(
      await runCase(
        { id: '2', title: `cold folder fetch, ${name(B)}`, tools, runs: HEAVY_RUNS, note },
        env,
      ),
    );
  }
  if (selected.has('3')) {
    for (const [sub, folder] of [
      ['3a', A],
      ['3b', B],
    ]) {
      const tools = await refetchTools(folder, env);
      tools[0].requests = await countRequests(tools[0].argv(), env);
      cases.push(
        await runCase(
          {
            id: sub,
            title: `unchanged refetch, ${name(folder)}`,
            tools,
            runs: folder === B ? HEAVY_RUNS : RUNS,
          },
          env,
        ),
      );
    }
  }
  if (selected.has('6')) {
    const uri = `s3://${SMALL_BUCKET}/${B.prefix}`;
    const cache = await freshDir('commit-cache');
    const commitArgv = [
      'env',
      `PROVCAT_CACHE_DIR=${cache}`,
      ...provcat('commit', uri, '-m', 'bench', '--allow-empty', '--json'),
    ];
    const listArgv = [
      'node',
      path.join(here, 'raw-sdk-list-versions.mjs'),
      '--bucket',
      SMALL_BUCKET,
      '--prefix',
      B.prefix,
    ];
    const tools = [
      tool(`provcat commit`, {
        provcat: true,
        argv: () => commitArgv,
        shown: `provcat commit ${uri} -m bench --allow-empty --json`,
        check: (_ctx, r) => {
          if (!r.stdout.includes('?at=commit:')) throw new Error(`no commit: ${r.stdout}`);
        },
      }),
      tool('raw SDK: one ListObjectVersions pass', {
        argv: () => listArgv,
        check: (_ctx, r) => {
          const out = lastJson(r.stdout);
          if (out.versions !== B.files) throw new Error(`listed ${out.versions} versions`);
        },
      }),
    ];
    tools[0].requests = await countRequests(commitArgv, env);
    cases.push(
      await runCase(
        {
          id: '6',
          title: `commit of a ${B.files.toLocaleString('en')}-file folder`,
          tools,
          runs: RUNS,
        },
        env,
      ),
    );
  }
  if (selected.has('7')) {
    const cache = await freshDir('pinned-cache');
    const withCache = (...args) => ['env', `PROVCAT_CACHE_DIR=${cache}`, ...provcat(...args)];
    const folderUri = `s3://${SMALL_BUCKET}/${A.prefix}`;
    const pinned = JSON.parse(
      runQuiet(withCache('commit', folderUri, '-m', 'bench', '--allow-empty', '--json'), env),
    );
    const at = String(pinned.uri ?? pinned).split('?')[1];
    const fileUri = `s3://${SMALL_BUCKET}/${A.keys[0]}?${at}`;
    const subUri = `s3://${SMALL_BUCKET}/${A.prefix}d00/?${at}`;
    const statArgv = withCache('stat', fileUri, '--json');
    const lsArgv = withCache('ls', subUri, '--json');
    const tools = [
      tool('provcat stat ?at=commit (cached)', {
        provcat: true,
        argv: () => statArgv,
        shown: `provcat stat s3://${SMALL_BUCKET}/${A.keys[0]}?at=commit:ID --json`,
      }),
      tool('provcat ls ?at=commit (cached)', {
        provcat: true,
        argv: () => lsArgv,
        shown: `provcat ls s3://${SMALL_BUCKET}/${A.prefix}d00/?at=commit:ID --json`,
        check: (_ctx, r) => {
          const n = lastJson(r.stdout).length;
          if (n !== A.files / 10) throw new Error(`ls listed ${n} entries`);
        },
      }),
      tool('aws s3api head-object', {
        argv: () => [
          AWS,
          '--endpoint-url',
          ENDPOINT,
          's3api',
          'head-object',
          '--bucket',
          SMALL_BUCKET,
          '--key',
          A.keys[0],
        ],
      }),
      tool('rclone lsf', { argv: () => ['rclone', 'lsf', `ceph:${SMALL_BUCKET}/${A.prefix}d00/`] }),
    ];
    tools[0].requests = await countRequests(statArgv, env);
    tools[1].requests = await countRequests(lsArgv, env);
    cases.push(
      await runCase(
        {
          id: '7',
          title: 'stat / ls at a cached commit',
          tools,
          runs: RUNS,
          note: 'requests must be 0',
        },
        env,
      ),
    );
  }

  if (selected.has('L')) {
    // Cases L1–L3: the same folder as case 1 through a delay proxy (latency.mjs).
    const rmDir = (dir) => rm(dir, { recursive: true, force: true });
    const h = { runCase, tool, freshDir, expectFolder, lastJson, runQuiet, rm: rmDir };
    const more = { env, creds, endpoint: ENDPOINT, bucket: SMALL_BUCKET, folder: A, CLI };
    cases.push(...(await latencyCases({ ...h, ...more, runs: RUNS, log, cleanups })));
  }

  if (selected.has('g')) {
    const withServerPids = async (pids, fn) => {
      const saved = serverPids;
      serverPids = pids;
      try {
        return await fn();
      } finally {
        serverPids = saved;
      }
    };
    const rmDir = (dir) => rm(dir, { recursive: true, force: true });
    const h = { runCase, tool, freshDir, expectFolder, lastJson, runQuiet, rm: rmDir };
    cases.push(...(await gcsCases({ ...h, env, runs: RUNS, log, cleanups, withServerPids })));
  }

  if (selected.has('az')) {
    // Azure on Azurite, which azure.mjs starts; Azurite's CPU is the server CPU meanwhile.
    const saved = serverPids;
    const setServerPids = (pids) => {
      serverPids = pids;
    };
    const h = { runCase, tool, freshDir, expectFolder, lastJson, runTimed, runQuiet, rm };
    try {
      const more = { ...h, log, cleanups, CLI, RUNS, folder: A, setServerPids };
      cases.push(...(await azureCases(more, env)));
    } finally {
      serverPids = saved;
    }
  }

  if (selected.has('9')) {
    // Its own rounds, processes and bucket (bench/undici-vs-http1.mjs); kept as its JSON.
    const argv = ['node', path.join(here, 'undici-vs-http1.mjs')];
    if (quick) argv.push('--quick');
    if (opt.runs !== undefined) argv.push('--runs', opt.runs);
    log('case 9: undici against the hand-written HTTP/1.1 client');
    const r = spawnSync(argv[0], argv.slice(1), {
      env,
      encoding: 'utf8',
      maxBuffer: 64 * MiB,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    if (r.status !== 0) throw new Error(`undici-vs-http1.mjs exited with ${r.status}`);
    const out = r.stdout;
    extra.undiciVsHttp1 = lastJson(out);
    process.stderr.write(`${out.slice(0, out.trimEnd().lastIndexOf('\n'))}\n`);
  }

  const needBig = selected.has('4') || selected.has('5');
  if (needBig) {
    const bigBucket = `provcat-bench-big-${randomBytes(4).toString('hex')}`;
    await makeBucket(bigBucket, false);
    cleanups.push(() => deleteBucket(bigBucket));
    const bigFile = path.join(work, 'big.bin');
    log(`writing a ${BIG_BYTES / MiB} MiB source file`);
    await makeBigFile(bigFile, BIG_BYTES);
    const bigName =
      BIG_BYTES >= 1024 * MiB ? `${BIG_BYTES / (1024 * MiB)} GiB` : `${BIG_BYTES / MiB} MiB`;

    if (selected.has('5')) {
      const put = (key) => ({ cleanup: () => deleteObject(bigBucket, key) });
      const stage = `s3://${bigBucket}/lake-put/`;
      const tools = [
        tool('provcat put', {
          provcat: true,
          argv: () => provcat('put', bigFile, `s3://${bigBucket}/put/provcat.bin`, '--json'),
          ...put('put/provcat.bin'),
        }),
        tool('provcat upload (managed, SHA-256)', {
          provcat: true,
          argv: () => provcat('upload', bigFile, '--stage', stage, '--json'),
          check: (ctx, r) => {
            ctx.uri = lastJson(r.stdout).uri;
          },
          cleanup: (ctx) =>
            ctx.uri
              ? deleteObject(bigBucket, ctx.uri.slice(`s3://${bigBucket}/`.length))
              : undefined,
        }),
        tool('rclone copyto', {
          argv: () => ['rclone', 'copyto', bigFile, `ceph:${bigBucket}/put/rclone.bin`],
          ...put('put/rclone.bin'),
        }),
        tool('aws s3 cp', {
          argv: () => [
            AWS,
            '--endpoint-url',
            ENDPOINT,
            's3',
            'cp',
            '--only-show-errors',
            bigFile,
            `s3://${bigBucket}/put/aws.bin`,
          ],
          ...put('put/aws.bin'),
        }),
        tool('lib-storage Upload (64 MiB × 4)', {
          argv: () => [
            'node',
            path.join(here, 'raw-sdk-put.mjs'),
            '--bucket',
            bigBucket,
            '--key',
            'put/sdk.bin',
            '--file',
            bigFile,
          ],
          ...put('put/sdk.bin'),
        }),
      ];
      cases.push(
        await runCase({ id: '5', title: `put of one ${bigName} file`, tools, runs: BIG_RUNS }, env),
      );
      const lake = path.join(here, 'lake-upload-rss.mjs');
      if (existsSync(lake)) {
        try {
          const r = await runTimed(['node', lake, '--size-mib', String(BIG_BYTES / MiB)], env);
          extra.lakeUploadRss = { ...lastJson(r.stdout), processPeakRssMiB: r.rssMiB };
          log(`lake-upload-rss: ${JSON.stringify(extra.lakeUploadRss)}`);
        } catch (error) {
          extra.lakeUploadRss = { error: error.message.slice(0, 500) };
          log(`lake-upload-rss failed: ${error.message}`);
        }
      }
    }
    if (selected.has('4')) {
      const stage = `s3://${bigBucket}/lake/`;
      const location = runQuiet(provcat('upload', bigFile, '--stage', stage, '--json'), env).trim();
      const locationFile = path.join(work, 'location.json');
      await writeFile(locationFile, location);
      const key = JSON.parse(location).uri.slice(`s3://${bigBucket}/`.length);
      cleanups.push(() => deleteObject(bigBucket, key));
      const { GetObjectCommand } = sdk;
      const { getSignedUrl } = await import('@aws-sdk/s3-request-presigner');
      const url = await getSignedUrl(admin, new GetObjectCommand({ Bucket: bigBucket, Key: key }), {
        expiresIn: 3600,
      });
      const fileTool = (name, argvOf, fields = {}) =>
        tool(name, {
          sample: { file: '$DEST' },
          prepare: async () => ({ file: path.join(await freshDir('big'), 'out.bin') }),
          argv: (ctx) => argvOf(ctx.file),
          check: (ctx) => expectSize(ctx.file, BIG_BYTES),
          cleanup: (ctx) => rm(path.dirname(ctx.file), { recursive: true, force: true }),
          ...fields,
        });
      const tools = [
        tool('provcat fetch', {
          provcat: true,
          prepare: async () => ({ cache: await freshDir('cache') }),
          argv: (ctx) => [
            'env',
            `PROVCAT_CACHE_DIR=${ctx.cache}`,
            ...provcat('fetch', `s3://${bigBucket}/${key}`, '--json'),
          ],
          shown: `PROVCAT_CACHE_DIR=$EMPTY_CACHE provcat fetch s3://${bigBucket}/KEY --json`,
          check: (_ctx, r) => expectSize(lastJson(r.stdout).path, BIG_BYTES),
          cleanup: (ctx) => rm(ctx.cache, { recursive: true, force: true }),
        }),
        fileTool(
          'provcat cat -o (SHA-256 verified)',
          (file) => provcat('cat', `@${locationFile}`, '--stage', stage, '-o', file),
          { provcat: true, shown: `provcat cat @location.json --stage ${stage} -o $DEST` },
        ),
        fileTool('curl (presigned URL)', (file) => ['curl', '-sS', '--fail', '-o', file, url], {
          shown: 'curl -sS --fail -o $DEST "$PRESIGNED_URL"',
        }),
        // The yardstick of the 1 GiB targets (issue 16): curl's file made durable (fsync) as
        // provcat's blob is.
        fileTool(
          'curl + sync FILE (durable)',
          (file) => ['sh', '-c', 'curl -sS --fail -o "$1" "$2" && sync "$1"', 'sh', file, url],
          { shown: 'curl -sS --fail -o $DEST "$PRESIGNED_URL" && sync $DEST' },
        ),
        fileTool(
          'rclone copyto',
          (file) => ['rclone', 'copyto', `ceph:${bigBucket}/${key}`, file],
          {
            shown: `rclone copyto ceph:${bigBucket}/KEY $DEST`,
          },
        ),
        fileTool(
          'aws s3 cp',
          (file) => [
            AWS,
            '--endpoint-url',
            ENDPOINT,
            's3',
            'cp',
            '--only-show-errors',
            `s3://${bigBucket}/${key}`,
            file,
          ],
          {
            shown: `aws s3 cp s3://${bigBucket}/KEY $DEST`,
          },
        ),
        fileTool(
          'raw SDK GetObject to file',
          (file) => [
            'node',
            path.join(here, 'raw-sdk-fetch.mjs'),
            '--bucket',
            bigBucket,
            '--key',
            key,
            '--dest',
            file,
          ],
          {
            shown: `node bench/raw-sdk-fetch.mjs --bucket ${bigBucket} --key KEY --dest $DEST`,
          },
        ),
      ];
      cases.push(
        await runCase(
          { id: '4', title: `fetch of one ${bigName} object`, tools, runs: BIG_RUNS },
          env,
        ),
      );
    }
  }

  if (selected.has('8')) cases.push(...(await localCases(env)));

  if (selected.has('P') || selected.has('P-local')) {
    // Issue 28's many-files cases (many-files.mjs); `P-local` leaves out P1, the S3 push. What a
    // run made is set aside, not deleted, until the end (many-files.mjs `setAside` says why).
    const rmDir = async (dir) => setAside(dir);
    const h = { runCase, tool, freshDir, lastJson, log, cleanups, env, CLI, rm: rmDir };
    const more = { runs: RUNS, heavyRuns: HEAVY_RUNS, makeBucket, deleteBucket };
    const sizes = { small: quick ? 200 : SMALL_A.files, many: quick ? 2000 : 20000 };
    cases.push(...(await manyFilesCases({ ...h, ...more, ...sizes, s3: selected.has('P') })));
  }

  const result = {
    benchmark: 'provcat-bench/1',
    date: new Date().toISOString(),
    quick,
    machine: { ...machine, loadavgAtEnd: os.loadavg().map((x) => Number(x.toFixed(2))) },
    server: { endpoint: ENDPOINT, ...server },
    options: {
      runs: RUNS,
      heavyRuns: HEAVY_RUNS,
      bigRuns: BIG_RUNS,
      bigBytes: BIG_BYTES,
      localBytes: LOCAL_BYTES,
      small: [SMALL_A, SMALL_B],
      allPeers: opt['all-peers'],
    },
    seconds: Math.round((Date.now() - started) / 1000),
    cases: cases.sort((a, b) => a.id.localeCompare(b.id)),
    ...extra,
  };
  result.targets = targets(result);
  const { renderMarkdown, table } = await import('./report.mjs');
  process.stdout.write(`${table(result)}\n`);
  if (WRITE) {
    await mkdir(path.join(here, 'results'), { recursive: true });
    await writeFile(path.join(here, 'results/latest.json'), `${JSON.stringify(result, null, 2)}\n`);
    const doc = path.join(repo, 'docs/performance.md');
    const before = existsSync(doc) ? await readFile(doc, 'utf8') : undefined;
    await writeFile(doc, renderMarkdown(result, before));
    log('wrote bench/results/latest.json and docs/performance.md');
  }
  log(`done in ${result.seconds} s`);
} catch (error) {
  log(`FAILED: ${error.stack ?? error}`);
  await finish(1);
}
await finish(0);

// ---- targets (issues 5 and 16) ----------------------------------------------------------------
// Issue 16 retired the 0.8× rclone stretch on small files (below what Node reaches here) and
// measures the 1 GiB fetch against curl made as durable as the cache (curl + sync FILE).

function targets(result) {
  const row = (id, tool) =>
    result.cases.find((c) => c.id === id)?.rows.find((r) => r.tool === tool);
  const ratio = (id, a, b) => {
    const x = row(id, a);
    const y = row(id, b);
    return x && y ? x.median / y.median : undefined;
  };
  const out = [];
  const add = (name, value, limit, unit = '×') => {
    if (value === undefined) return;
    out.push({
      name,
      value: Number(value.toFixed(unit === '×' ? 2 : 0)),
      limit,
      unit,
      met: value <= limit,
    });
  };
  add(
    'cold 1,000 × 4 KiB: provcat / rclone',
    ratio('1', 'provcat fetch', 'rclone copy --transfers 16'),
    1.0,
  );
  add(
    'cold 1,000 × 4 KiB: provcat / raw SDK loop',
    ratio('1', 'provcat fetch', 'raw SDK loop (16 at a time)'),
    0.6,
  );
  for (const id of ['3a', '3b']) {
    const title = result.cases.find((c) => c.id === id)?.title.replace('unchanged refetch, ', '');
    add(
      `unchanged refetch ${title}: provcat / rclone default`,
      ratio(id, 'provcat fetch (cached)', 'rclone copy (default)'),
      0.5,
    );
    add(
      `unchanged refetch ${title}: provcat / rclone --use-server-modtime`,
      ratio(id, 'provcat fetch (cached)', 'rclone copy --use-server-modtime'),
      1.5,
    );
  }
  add(
    'big fetch with hashing: provcat cat / durable curl',
    ratio('4', 'provcat cat -o (SHA-256 verified)', 'curl + sync FILE (durable)'),
    1.05,
  );
  add(
    'big fetch: provcat fetch / durable curl',
    ratio('4', 'provcat fetch', 'curl + sync FILE (durable)'),
    1.05,
  );
  add('big put: provcat put / aws s3 cp', ratio('5', 'provcat put', 'aws s3 cp'), 1.0);
  add(
    'big put: provcat upload / aws s3 cp',
    ratio('5', 'provcat upload (managed, SHA-256)', 'aws s3 cp'),
    1.0,
  );
  add('big put: provcat put peak RSS', row('5', 'provcat put')?.peakRssMiB, 300, 'MiB');
  add(
    'big put: provcat upload peak RSS',
    row('5', 'provcat upload (managed, SHA-256)')?.peakRssMiB,
    300,
    'MiB',
  );
  add(
    'commit of 10,000 files: provcat / one listing pass',
    ratio('6', 'provcat commit', 'raw SDK: one ListObjectVersions pass'),
    2.5,
  );
  add(
    'embedded store put: provcat put / cp + sync',
    ratio('8a', 'provcat put (local://)', 'cp + sync FILE (durable)'),
    1.5,
  );
  add(
    'embedded store cold fetch: provcat fetch / cp + sync',
    ratio('8b', 'provcat fetch (local://, cold)', 'cp + sync FILE (durable)'),
    1.5,
  );
  latencyTargets(add, ratio, row, result);
  gcsTargets(add, ratio);
  azureTargets(add, ratio);
  manyFilesTargets(add, ratio, row);
  for (const t of ['provcat stat ?at=commit (cached)', 'provcat ls ?at=commit (cached)']) {
    const r = row('7', t)?.requests?.total;
    if (r !== undefined)
      out.push({
        name: `${t}: store requests`,
        value: r,
        limit: 0,
        unit: 'requests',
        met: r === 0,
      });
  }
  return out;
}
