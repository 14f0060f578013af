// Commits at dataset scale (issue 27): the CLI's `commit`, `commit` after one file changed,
// `diff` of the two commits and `stat` of one file at a commit in a fresh process (cold cache),
// each timed with /usr/bin/time (wall, peak RSS), on the embedded store (local://). Also the
// pages each commit wrote (objects under .provcat/pages/). Runs alone; nothing to start.
//
//   npm run build && node bench/commit-scale.mjs [--files 100000] [--dirs 100] [--keep] [--cli F]
//
// The folder is `--dirs` subfolders of `--files / --dirs` one-byte files, written through the
// library (not timed). Targets of the issue, for 1,000,000 files: commit <= 60 s and 256 MiB,
// commit after one change <= 5 s writing <= 1% of the pages, diff <= 0.5 s and 100 MiB, stat in
// a fresh process <= 0.25 s.
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const DEFAULT_CLI = path.join(repo, 'dist/cli/provcat.cjs');
const { LocalStore } = await import(path.join(repo, 'dist/drivers/local/index.js'));

const { values: opt } = parseArgs({
  options: {
    files: { type: 'string', default: '100000' },
    dirs: { type: 'string', default: '100' },
    keep: { type: 'boolean', default: false },
    // Another build's CLI (e.g. main's, for a before/after row); the store is filled by this one.
    cli: { type: 'string', default: DEFAULT_CLI },
  },
});
const CLI = path.resolve(opt.cli);
const files = Number(opt.files);
const dirs = Number(opt.dirs);
const work = await mkdtemp(path.join(tmpdir(), 'provcat-commit-scale-'));
const root = path.join(work, 'store');
const bucket = 'bench';
const env = { ...process.env, PROVCAT_LOCAL_ROOT: root };
const store = new LocalStore({ root, cache: path.join(work, 'lib-cache') });
await store.makeBucket(bucket, { versioning: true });

const keyOf = (i) =>
  `data/d${String(i % dirs).padStart(3, '0')}/f${String(i).padStart(7, '0')}.bin`;
const started = Date.now();
let next = 0;
await Promise.all(
  Array.from({ length: 16 }, async () => {
    while (next < files) {
      const i = next++;
      await store._put(bucket, keyOf(i), Buffer.from([i % 256]));
    }
  }),
);
const fillSeconds = (Date.now() - started) / 1000;

let caches = 0;
/** One CLI run under /usr/bin/time, with a cache of its own unless `cache` is given. */
function run(args, cache) {
  const dir = cache ?? path.join(work, `cache-${++caches}`);
  const r = spawnSync('/usr/bin/time', ['-f', '%e %M', process.execPath, CLI, ...args, '--json'], {
    env: { ...env, PROVCAT_CACHE_DIR: dir },
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  if (r.status !== 0) throw new Error(`provcat ${args.join(' ')}: ${r.stderr}`);
  const last = r.stderr.trim().split('\n').pop() ?? '';
  const [wall, kib] = last.split(' ').map(Number);
  return { wall, rssMiB: Math.round(kib / 1024), out: r.stdout };
}

async function listPages() {
  const out = new Set();
  for await (const page of store._pages(bucket, '.provcat/pages/')) {
    for (const o of page.objects) out.add(o.key);
  }
  return out;
}

const folder = `local://${bucket}/data/`;
const idOf = (out) => /commit:([0-9a-f]{64})/.exec(out)?.[1];
const commitCache = path.join(work, 'committer-cache');
const c1 = run(['commit', folder, '-m', 'one'], commitCache);
const id1 = idOf(c1.out);
const pages1 = (await listPages()).size;
await store._put(bucket, keyOf(Math.floor(files / 2)), Buffer.from('changed'));
const c2 = run(['commit', folder, '-m', 'two'], commitCache);
const id2 = idOf(c2.out);
const pages2 = (await listPages()).size;
const diff = run(['diff', `${folder}?at=commit:${id1}`, `${folder}?at=commit:${id2}`]);
const stat = run(['stat', `local://${bucket}/${keyOf(12345 % files)}?at=commit:${id2}`]);
const changed = JSON.parse(diff.out).changed.length;

const rows = [
  ['commit', c1, `${pages1} pages written`],
  [
    'commit after one change',
    c2,
    `${pages2 - pages1} pages written (${((100 * (pages2 - pages1)) / pages1).toFixed(2)} % of ${pages1})`,
  ],
  ['diff of the two commits (cold cache)', diff, `${changed} changed`],
  ['stat of one file at the commit, fresh process (cold cache)', stat, ''],
];
console.log(
  `commit at scale (${path.relative(repo, CLI)}): ${files} files in ${dirs} subfolders, local store (filled in ${fillSeconds.toFixed(0)} s), load ${os.loadavg()[0].toFixed(1)}`,
);
console.log('| operation | wall | peak RSS | notes |');
console.log('|---|---|---|---|');
for (const [name, r, note] of rows)
  console.log(`| ${name} | ${r.wall.toFixed(2)} s | ${r.rssMiB} MiB | ${note} |`);
if (!opt.keep) await rm(work, { recursive: true, force: true });
else console.log(`kept ${work}`);
