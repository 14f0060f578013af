/**
 * vitest global setup: brings up the S3 server the suites need, once per run.
 *
 * - `PROVCAT_SKIP_S3=1`: nothing starts; S3 suites skip with a visible reason (test/setup/s3.ts).
 * - `PROVCAT_TEST_S3_BUCKET` set: the suites run against that real bucket with the normal AWS
 *   environment (credentials chain, `AWS_REGION`, optionally `AWS_ENDPOINT_URL_S3`); no local
 *   server starts.
 * - Otherwise Ceph radosgw on 127.0.0.1:7480: reused when something already answers there (a
 *   developer's server, left running), else installed if missing (`apt-get`, as root) and
 *   started with servers/start-ceph.sh, and stopped again at teardown. The workers get
 *   `AWS_ENDPOINT_URL_S3`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
 *   `PROVCAT_S3_FORCE_PATH_STYLE=1` and `PROVCAT_TEST_S3=ceph` through `process.env` (the
 *   forked workers inherit it).
 *
 * If Ceph cannot be installed or started, setup throws with the reason and the tail of the
 * logs: the run fails; it never skips silently.
 *
 * @module
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** radosgw's port (7480; another lets a second Ceph run beside a developer's, with PROVCAT_TEST_CEPH_MON_PORT). */
const PORT = Number(process.env.PROVCAT_TEST_CEPH_PORT ?? 7480);
const MON_PORT = Number(process.env.PROVCAT_TEST_CEPH_MON_PORT ?? 3300);
const ENDPOINT = `http://127.0.0.1:${PORT}`;
const here = path.dirname(fileURLToPath(import.meta.url));
const servers = path.resolve(here, '../../servers');
/** Where a Ceph started by the test setup keeps its state and logs. */
const CEPH_DIR = process.env.PROVCAT_TEST_CEPH_DIR ?? '/tmp/provcat-test-ceph';
/** The in-memory OSD's cap: modest, other things run on the machine. */
const MEMSTORE_BYTES = String(3 * 1024 ** 3);

/** The environment the S3 suites run with against the local Ceph. */
const CEPH_ENV = {
  AWS_ENDPOINT_URL_S3: ENDPOINT,
  AWS_ACCESS_KEY_ID: 'AKIDTEST',
  AWS_SECRET_ACCESS_KEY: 'SECRETTEST',
  AWS_REGION: 'us-east-1',
  PROVCAT_S3_FORCE_PATH_STYLE: '1',
  PROVCAT_TEST_S3: 'ceph',
} as const;

function say(message: string): void {
  process.stderr.write(`[provcat test setup] ${message}\n`);
}

/** True when an S3 server answers `GET /` on the endpoint. */
async function answering(timeoutMs = 2000): Promise<boolean> {
  try {
    const response = await fetch(`${ENDPOINT}/`, { signal: AbortSignal.timeout(timeoutMs) });
    await response.body?.cancel();
    return response.status === 200 || response.status === 403;
  } catch (error) {
    // Connection refused or timed out: nothing is serving (yet). Anything else is a bug here.
    if (error instanceof Error && (error.name === 'TypeError' || error.name === 'TimeoutError')) {
      return false;
    }
    throw error;
  }
}

function onPath(tool: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' }).status === 0;
}

/** Run a command, keeping the tail of its output for error messages. */
function run(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString('utf8')).slice(-8000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

function logTails(): string {
  const dir = path.join(CEPH_DIR, 'log');
  if (!existsSync(dir)) return `(no logs in ${dir})`;
  return readdirSync(dir)
    .map((name) => {
      const text = readFileSync(path.join(dir, name), 'utf8');
      return `--- ${path.join(dir, name)} (last lines)\n${tail(text, 15)}`;
    })
    .join('\n');
}

/** Install the Ceph packages when `radosgw` is missing (needs root, as on CI). */
async function ensureInstalled(): Promise<void> {
  if (onPath('radosgw') && onPath('ceph-mon') && onPath('ceph-osd')) return;
  if (process.getuid?.() !== 0) {
    throw new Error(
      'Ceph (radosgw) is not installed and installing it needs root: run `apt-get update && ' +
        'apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd`, or set ' +
        'PROVCAT_SKIP_S3=1 to skip the S3 suites, or PROVCAT_TEST_S3_BUCKET to use a real bucket',
    );
  }
  say('radosgw not found: installing radosgw ceph-mon ceph-osd with apt-get (about a minute)');
  const started = Date.now();
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const script =
    'apt-get update && apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd';
  const { code, output } = await run('sh', ['-c', script], env, 600_000);
  if (code !== 0 || !onPath('radosgw')) {
    throw new Error(`installing Ceph failed (exit ${code}):\n${tail(output, 30)}`);
  }
  say(`Ceph installed in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

/** Start Ceph with the project's own script; throws with the logs when it does not come up. */
async function startCeph(): Promise<void> {
  const started = Date.now();
  say(`starting Ceph radosgw on ${ENDPOINT} (state in ${CEPH_DIR})`);
  const env = {
    ...process.env,
    CEPH_DIR,
    CEPH_MEMSTORE_BYTES: MEMSTORE_BYTES,
    CEPH_RGW_PORT: String(PORT),
    CEPH_MON_PORT: String(MON_PORT),
  };
  const { code, output } = await run('bash', [path.join(servers, 'start-ceph.sh')], env, 240_000);
  if (code !== 0 || !(await answering(5000))) {
    await stopCeph();
    throw new Error(
      `Ceph did not start (start-ceph.sh exit ${code}):\n${tail(output, 20)}\n${logTails()}`,
    );
  }
  say(`Ceph ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

async function stopCeph(): Promise<void> {
  const { code, output } = await run(
    'bash',
    [path.join(servers, 'stop-ceph.sh')],
    { ...process.env, CEPH_DIR },
    60_000,
  );
  if (code !== 0) say(`stop-ceph.sh exit ${code}: ${tail(output, 5)}`);
}

/** A signed request with the test credentials must work (a reused server may lack the user). */
async function checkCredentials(): Promise<void> {
  const { S3Client, ListBucketsCommand } = await import('@aws-sdk/client-s3');
  const client = new S3Client({
    endpoint: ENDPOINT,
    region: CEPH_ENV.AWS_REGION,
    forcePathStyle: true,
    credentials: {
      accessKeyId: CEPH_ENV.AWS_ACCESS_KEY_ID,
      secretAccessKey: CEPH_ENV.AWS_SECRET_ACCESS_KEY,
    },
  });
  try {
    await client.send(new ListBucketsCommand({}), { abortSignal: AbortSignal.timeout(30_000) });
  } catch (cause) {
    throw new Error(
      `the S3 server on ${ENDPOINT} refuses the test user AKIDTEST (${String(cause)}); if it is ` +
        'a server you started yourself, create the user with `radosgw-admin user create ' +
        '--uid=test --display-name=test --access-key=AKIDTEST --secret=SECRETTEST`',
      { cause },
    );
  } finally {
    client.destroy();
  }
}

/** vitest globalSetup: see the module comment. Returns the teardown. */
export default async function setup(): Promise<() => Promise<void>> {
  const none = async () => {};
  if (process.env.PROVCAT_SKIP_S3 === '1') {
    say('PROVCAT_SKIP_S3=1: no S3 server; S3 suites are skipped');
    return none;
  }
  if (process.env.PROVCAT_TEST_S3_BUCKET) {
    process.env.PROVCAT_TEST_S3 = 'aws';
    say(
      `S3 suites run against the real bucket ${process.env.PROVCAT_TEST_S3_BUCKET} (AWS environment)`,
    );
    return none;
  }
  let started = false;
  if (await answering()) {
    say(`reusing the S3 server already answering on ${ENDPOINT} (it stays running)`);
  } else {
    await ensureInstalled();
    await startCeph();
    started = true;
  }
  Object.assign(process.env, CEPH_ENV);
  try {
    await checkCredentials();
  } catch (error) {
    if (started) await stopCeph();
    throw error;
  }
  return async () => {
    if (!started) return;
    say('stopping the Ceph the test setup started');
    await stopCeph();
  };
}
