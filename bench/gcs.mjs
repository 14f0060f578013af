// The GCS cases of the benchmark (`node bench/run.mjs --cases g`): provcat against rclone's
// GCS backend and a raw @google-cloud/storage loop, on the project's GCS test server.
//
// - The server is the project's own (servers/gcs/, no GCS emulator runs here), started
//   standalone as `npm run server:gcs -- --port 0 --log` in its own process group, so its CPU is
//   measured apart from the tools' and it is stopped at the end. Its `--log` lines count
//   provcat's requests in one extra untimed run.
// - Every tool reaches it the way a user would point it at an emulator: provcat and the raw SDK
//   loop through STORAGE_EMULATOR_HOST, rclone through RCLONE_CONFIG_GCS_* (anonymous, endpoint).
// - Case g1 is the cold folder fetch of 1,000 × 4 KiB (provcat with its lean read path, and with
//   PROVCAT_GCS_LEAN=0: the SDK for the listing, node:http for the GETs); g2 the unchanged
//   refetch of the same folder.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { rcloneCopy, refetchTools } from './refetch-tools.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const BUCKET = 'provcat-bench-gcs';
const FOLDER = { files: 1000, size: 4096, prefix: 'f1000x4096/' };

/** Start the test server standalone; resolves with its URL, pid and a request counter. */
async function startServer(log) {
  const child = spawn('npm', ['run', '--silent', 'server:gcs', '--', '--port', '0', '--log'], {
    cwd: repo,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let requests = 0;
  child.stderr.on('data', (d) => {
    requests += String(d)
      .split('\n')
      .filter((l) => /^\d{3} [A-Z]+ /.test(l)).length;
  });
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
  });
  const deadline = Date.now() + 60_000;
  while (!/ready on (http:\S+)/.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`the GCS test server did not start: ${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const url = /ready on (http:\S+)/.exec(out)[1];
  log(`GCS test server on ${url}`);
  // The node process under npm's shell: the one whose CPU is the server's.
  const { execFileSync } = await import('node:child_process');
  const pids = execFileSync('pgrep', ['-g', String(child.pid)], { encoding: 'utf8' })
    .trim()
    .split('\n');
  return {
    url,
    pids,
    /** Requests logged since the last call (the log is flushed every 200 ms). */
    async take() {
      await new Promise((r) => setTimeout(r, 500));
      const n = requests;
      requests = 0;
      return n;
    },
    async stop() {
      process.kill(-child.pid, 'SIGTERM');
      if (child.exitCode === null) await once(child, 'exit');
    },
  };
}

async function seed(url, log) {
  const { Storage } = await import('@google-cloud/storage');
  const storage = new Storage({ apiEndpoint: url, projectId: 'bench' });
  await storage.createBucket(BUCKET, { versioning: { enabled: true } });
  const bucket = storage.bucket(BUCKET);
  log(`seeding ${FOLDER.files} × ${FOLDER.size} B into gs://${BUCKET}/${FOLDER.prefix}`);
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < FOLDER.files) {
        const i = next++;
        const key = `${FOLDER.prefix}d${String(i % 10).padStart(2, '0')}/f${String(i).padStart(6, '0')}.bin`;
        await bucket.file(key).save(randomBytes(FOLDER.size), {
          resumable: false,
          preconditionOpts: { ifGenerationMatch: 0 },
        });
      }
    }),
  );
}

/**
 * Run the GCS cases with the harness of run.mjs (`h`: runCase, tool, freshDir, expectFolder,
 * lastJson, runQuiet, withServerPids, env, runs, log, cleanups); resolves with the cases.
 */
export async function gcsCases(h) {
  const server = await startServer(h.log);
  h.cleanups.push(() => server.stop());
  await seed(server.url, h.log);
  const env = {
    ...h.env,
    STORAGE_EMULATOR_HOST: server.url,
    RCLONE_CONFIG_GCS_TYPE: 'google cloud storage',
    RCLONE_CONFIG_GCS_ANONYMOUS: 'true',
    RCLONE_CONFIG_GCS_ENDPOINT: server.url,
  };
  const src = `gs://${BUCKET}/${FOLDER.prefix}`;
  const remote = `gcs:${BUCKET}/${FOLDER.prefix}`;
  const provcat = (cache, ...extra) => [
    'env',
    `PROVCAT_CACHE_DIR=${cache}`,
    ...extra,
    'node',
    path.join(repo, 'dist/cli/provcat.cjs'),
    'fetch',
    src,
    '--json',
  ];
  const rclone = rcloneCopy(remote);
  const dirTool = (name, argvOf, fields = {}) =>
    h.tool(name, {
      prepare: async () => ({ dir: await h.freshDir('gcs-dest') }),
      argv: (ctx) => argvOf(ctx.dir),
      check: (ctx) => h.expectFolder(ctx.dir, FOLDER),
      cleanup: (ctx) => h.rm(ctx.dir),
      ...fields,
    });
  const provcatCold = (name, ...extra) =>
    dirTool(name, (cache) => provcat(cache, ...extra), {
      provcat: true,
      shown: `PROVCAT_CACHE_DIR=$EMPTY_CACHE ${extra.join(' ')}${extra.length ? ' ' : ''}provcat fetch ${src} --json`,
      check: async (_ctx, r) => {
        const out = h.lastJson(r.stdout);
        if (out.downloaded !== FOLDER.files)
          throw new Error(`provcat downloaded ${out.downloaded}`);
        await h.expectFolder(out.path, FOLDER);
      },
    });
  const cold = [
    provcatCold('provcat fetch'),
    provcatCold('provcat fetch (PROVCAT_GCS_LEAN=0)', 'PROVCAT_GCS_LEAN=0'),
    dirTool('rclone copy --transfers 16', (dir) => rclone(dir), {
      shown: `rclone copy --transfers 16 --checkers 16 ${remote} $DEST`,
    }),
    // Not a target, a yardstick: rclone's copy made as durable as provcat's (which fsyncs every
    // file before it becomes visible) by one `syncfs` of the destination's filesystem after it.
    dirTool(
      'rclone copy + sync -f (durable)',
      (dir) => [
        'sh',
        '-c',
        'rclone copy --transfers 16 --checkers 16 "$1" "$2" && sync -f "$2"',
        'sh',
        remote,
        dir,
      ],
      { shown: `rclone copy --transfers 16 --checkers 16 ${remote} $DEST && sync -f $DEST` },
    ),
    dirTool(
      'raw SDK loop (16 at a time)',
      (dir) => [
        'node',
        path.join(here, 'raw-gcs-fetch.mjs'),
        '--bucket',
        BUCKET,
        '--prefix',
        FOLDER.prefix,
        '--dest',
        dir,
      ],
      {
        shown: `node bench/raw-gcs-fetch.mjs --bucket ${BUCKET} --prefix ${FOLDER.prefix} --dest $DEST`,
      },
    ),
  ];
  const cases = [];
  for (const t of cold.slice(0, 2)) {
    const cache = await h.freshDir('gcs-count');
    await server.take();
    h.runQuiet(provcat(cache, ...(t.name.includes('LEAN=0') ? ['PROVCAT_GCS_LEAN=0'] : [])), env);
    t.requests = { total: await server.take(), byMethod: {} };
  }
  await h.withServerPids(server.pids, async () => {
    cases.push(
      await h.runCase(
        {
          id: 'g1',
          title: 'GCS: cold folder fetch, 1,000 × 4 KiB',
          tools: cold,
          runs: h.runs,
          env,
        },
        env,
      ),
    );
    const warm = await refetchTools(h, {
      provcat,
      rclone,
      src,
      remote,
      folder: FOLDER,
      env,
      label: 'gcs',
    });
    await server.take();
    h.runQuiet(warm[0].argv(), env);
    const refetchRequests = await server.take();
    warm[0].requests = { total: refetchRequests, byMethod: {} };
    cases.push(
      await h.runCase(
        { id: 'g2', title: 'GCS: unchanged refetch, 1,000 × 4 KiB', tools: warm, runs: h.runs },
        env,
      ),
    );
  });
  return cases;
}

/** The GCS targets of issue 17, added with run.mjs's `add` and `ratio`. */
export function gcsTargets(add, ratio) {
  add(
    'GCS cold 1,000 × 4 KiB: provcat / rclone',
    ratio('g1', 'provcat fetch', 'rclone copy --transfers 16'),
    1.0,
  );
  add(
    'GCS cold 1,000 × 4 KiB: provcat / raw SDK loop',
    ratio('g1', 'provcat fetch', 'raw SDK loop (16 at a time)'),
    0.6,
  );
  add(
    'GCS unchanged refetch 1,000 × 4 KiB: provcat / rclone default',
    ratio('g2', 'provcat fetch (cached)', 'rclone copy (default)'),
    0.5,
  );
}
