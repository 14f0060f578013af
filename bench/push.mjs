// The many-files cases of issue 28 on their own (`npm run bench` runs them as `--cases P`,
// bench/many-files.mjs); this script adds `--baseline CLI`, another build beside this one. Side by
// side in one run: each case runs its tools
// alternately (A B A B ...), one warm-up round then --runs counted rounds, whole processes timed
// by /usr/bin/time (wall, user + system CPU), medians reported with the load average.
//
//   npm run build && node bench/push.mjs [--runs 3] [--cases P1,P2,P3,P4] [--small 1000] [--many 20000]
//     [--baseline /path/to/other/dist/cli/provcat.cjs]   (adds that build's CLI to P2 and P3)
//
// P1  push 1,000 × 4 KiB to S3 (Ceph on 127.0.0.1:7480)  vs rclone copy --transfers 16 --checkers 16
// P2  push 20,000 × 1 KiB into the embedded store        vs cp -r + sync -f
// P3  cold fetch of those 20,000 from the embedded store vs cp -r + sync -f
// P4  second push of the unchanged 20,000-file folder    vs one listing (provcat walk) + find -printf
//
// P1 needs the S3 server and rclone; the other cases need nothing but a disk. Everything is made
// below a fresh temp directory and removed at the end.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { RCLONE_PUSH, rclonePush, seed, setAside } from './many-files.mjs';

const { values: opt } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    cases: { type: 'string', default: 'P1,P2,P3,P4' },
    small: { type: 'string', default: '1000' },
    many: { type: 'string', default: '20000' },
    endpoint: { type: 'string', default: 'http://127.0.0.1:7480' },
    baseline: { type: 'string' },
  },
});
const RUNS = Number(opt.runs);
const selected = new Set(opt.cases.split(','));
const repo = path.join(import.meta.dirname, '..');
const BIN = path.join(repo, 'dist', 'cli', 'provcat.cjs');
const work = mkdtempSync(path.join(os.tmpdir(), 'provcat-bench-push-'));
const log = (m) => process.stderr.write(`[bench push] ${m}\n`);

const env = { ...process.env };
for (const k of Object.keys(env)) if (/^(AWS_|RCLONE_|PROVCAT_)/.test(k)) delete env[k];
delete env.NODE_EXTRA_CA_CERTS; // parsed at every Node start (~45 ms): not the tools' cost
Object.assign(env, {
  NODE_NO_WARNINGS: '1',
  AWS_ACCESS_KEY_ID: 'AKIDTEST',
  AWS_SECRET_ACCESS_KEY: 'SECRETTEST',
  AWS_REGION: 'us-east-1',
  AWS_ENDPOINT_URL_S3: opt.endpoint,
  AWS_EC2_METADATA_DISABLED: 'true',
  PROVCAT_S3_FORCE_PATH_STYLE: '1',
  PROVCAT_LOCAL_ROOT: path.join(work, 'root'),
  PROVCAT_CACHE_DIR: path.join(work, 'cache'),
  RCLONE_CONFIG: path.join(work, 'rclone.conf'),
  RCLONE_CONFIG_CEPH_TYPE: 's3',
  RCLONE_CONFIG_CEPH_PROVIDER: 'Ceph',
  RCLONE_CONFIG_CEPH_ENDPOINT: opt.endpoint,
  RCLONE_CONFIG_CEPH_ACCESS_KEY_ID: 'AKIDTEST',
  RCLONE_CONFIG_CEPH_SECRET_ACCESS_KEY: 'SECRETTEST',
  RCLONE_CONFIG_CEPH_FORCE_PATH_STYLE: 'true',
  RCLONE_CONFIG_CEPH_ENV_AUTH: 'false',
});
writeFileSync(env.RCLONE_CONFIG, '');

/** Run one command under /usr/bin/time: wall and CPU seconds. */
function timed(argv) {
  const r = spawnSync('/usr/bin/time', ['-f', '%e %U %S', ...argv], {
    env,
    encoding: 'utf8',
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const last = r.stderr.trim().split('\n').pop() ?? '';
  if (r.status !== 0) throw new Error(`${argv.join(' ')} failed (${r.status}): ${r.stderr}`);
  const [wall, user, sys] = last.split(' ').map(Number);
  return { wall, cpu: user + sys };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const results = [];
const cleanups = [];

/** Run the tools of one case alternately: `prepare()` before each run, then the command. */
function runCase(id, title, tools) {
  log(`${id}: ${title}`);
  const rows = tools.map(() => ({ wall: [], cpu: [] }));
  const load = [];
  for (let round = 0; round <= RUNS; round++) {
    tools.forEach((tool, i) => {
      tool.prepare?.();
      const t = timed(tool.argv());
      if (round > 0) {
        rows[i].wall.push(t.wall);
        rows[i].cpu.push(t.cpu);
      }
    });
    load.push(os.loadavg()[0]);
  }
  const out = tools.map((tool, i) => ({
    tool: tool.name,
    wall: median(rows[i].wall),
    cpu: median(rows[i].cpu),
    runs: rows[i].wall,
  }));
  results.push({ id, title, rows: out, load: Number(median(load).toFixed(2)) });
  for (const r of out) log(`  ${r.tool}: ${r.wall.toFixed(2)} s wall, ${r.cpu.toFixed(2)} s CPU`);
}

let n = 0;
const fresh = (label) => path.join(work, `${label}-${n++}`);
const node = (...args) => [process.execPath, BIN, ...args];
/** The tool of another build's CLI (`--baseline`), or none. */
const baseline = (name, argv) =>
  opt.baseline === undefined
    ? []
    : [
        {
          name: `${name} (baseline)`,
          ...argv((...args) => [process.execPath, opt.baseline, ...args]),
        },
      ];

try {
  if (selected.has('P1')) {
    const small = path.join(work, 'small');
    seed(small, Number(opt.small), 4096);
    const bucket = `bench-push-${Date.now()}`;
    spawnSync(process.execPath, [BIN, 'mb', `s3://${bucket}`], { env, stdio: 'ignore' });
    // The in-memory OSD keeps what it holds: remove the bucket and its objects at the end.
    cleanups.push(() => spawnSync('rclone', ['purge', `ceph:${bucket}`], { env, stdio: 'ignore' }));
    runCase('P1', `push ${opt.small} × 4 KiB to S3 (Ceph)`, [
      { name: 'provcat push', argv: () => node('push', small, `s3://${bucket}/p${n++}/`) },
      { name: RCLONE_PUSH, argv: () => rclonePush(small, `ceph:${bucket}/r${n++}/`) },
    ]);
  }
  const many = path.join(work, 'many');
  if (selected.has('P2') || selected.has('P3') || selected.has('P4')) {
    seed(many, Number(opt.many), 1024);
  }
  if (selected.has('P2')) {
    let dest = '';
    runCase('P2', `push ${opt.many} × 1 KiB into the embedded store`, [
      { name: 'provcat push (local://)', argv: () => node('push', many, `local://bench/p${n++}/`) },
      ...baseline('provcat push (local://)', (cli) => ({
        argv: () => cli('push', many, `local://bench/p${n++}/`),
      })),
      {
        name: 'cp -r + sync -f',
        prepare: () => {
          dest = fresh('cp');
        },
        argv: () => ['sh', '-c', 'cp -r "$0" "$1" && sync -f "$1"', many, dest],
      },
    ]);
  }
  if (selected.has('P3') || selected.has('P4')) {
    spawnSync(process.execPath, [BIN, 'push', many, 'local://bench/fetched/'], { env });
  }
  if (selected.has('P3')) {
    let dest = '';
    runCase('P3', `cold fetch of ${opt.many} from the embedded store`, [
      {
        name: 'provcat fetch (local://, cold)',
        prepare: () => {
          setAside(env.PROVCAT_CACHE_DIR);
        },
        argv: () => node('fetch', 'local://bench/fetched/'),
      },
      ...baseline('provcat fetch (local://, cold)', (cli) => ({
        prepare: () => {
          setAside(env.PROVCAT_CACHE_DIR);
        },
        argv: () => cli('fetch', 'local://bench/fetched/'),
      })),
      {
        name: 'cp -r + sync -f',
        prepare: () => {
          dest = fresh('cp');
        },
        argv: () => ['sh', '-c', 'cp -r "$0" "$1" && sync -f "$1"', many, dest],
      },
    ]);
  }
  if (selected.has('P4')) {
    runCase('P4', `second push of the unchanged ${opt.many}-file folder (local://)`, [
      {
        name: 'provcat push (unchanged)',
        argv: () => node('push', many, 'local://bench/fetched/'),
      },
      {
        name: 'provcat walk + find -printf',
        argv: () => [
          'sh',
          '-c',
          `find "$0" -printf '%s %T@\\n' >/dev/null && "$1" "$2" walk local://bench/fetched/ >/dev/null`,
          many,
          process.execPath,
          BIN,
        ],
      },
    ]);
  }
  process.stdout.write(
    `${JSON.stringify({ date: new Date().toISOString(), runs: RUNS, cpus: os.cpus().length, results }, null, 2)}\n`,
  );
} finally {
  for (const clean of cleanups) clean();
  rmSync(work, { recursive: true, force: true });
}
