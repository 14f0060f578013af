// Commits at dataset scale (issue 27): the CLI's `commit`, `commit` after one file changed,
// `diff` of the two commits and `stat` of one file at a commit in a fresh process (cold cache),
// each timed with /usr/bin/time (wall, peak RSS), on the embedded store (local://). Also the
// pages each commit wrote (objects under .provcat/pages/). Runs alone; nothing to start.
//
//   npm run build && node bench/commit-scale.mjs [--files 100000] [--dirs 100] [--keep] [--cli F]
//   npm run build && node bench/commit-scale.mjs --from [--files 100000] [--dirs 100]
//   node bench/commit-scale.mjs --from --work DIR [--cli F]   # again on DIR's store, one change
//
// The folder is `--dirs` subfolders of `--files / --dirs` one-byte files, written through the
// library (not timed). With `--from`, the files are written to a local folder instead, and the
// rows are `commit --from` of it (the first push of every file), `commit --from` again after one
// local file changed (the push finds the others unchanged by its index and the listing), and the
// SHA-256s the second commit recorded. `--work DIR` keeps the store, the folder and the committer's
// cache in DIR; a run that finds them there skips the fill and the first commit, and times only
// the rows after one change (so builds can be compared on one store, alternately).
// Columns: wall, CPU (user + system) and peak RSS, as /usr/bin/time reports them. Targets of the issue, for 1,000,000 files: commit <= 60 s and 256 MiB,
// commit after one change <= 5 s writing <= 1% of the pages, diff <= 0.5 s and 100 MiB, stat in
// a fresh process <= 0.25 s.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { fillScaleFolder, scaleBytes, scaleKeyOf } from './scale-folder.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const DEFAULT_CLI = path.join(repo, 'dist/cli/provcat.cjs');
const { LocalStore } = await import(path.join(repo, 'dist/drivers/local/index.js'));

const { values: opt } = parseArgs({
  options: {
    files: { type: 'string', default: '100000' },
    dirs: { type: 'string', default: '100' },
    keep: { type: 'boolean', default: false },
    from: { type: 'boolean', default: false },
    work: { type: 'string' },
    // Another build's CLI (e.g. main's, for a before/after row); the store is filled by this one.
    cli: { type: 'string', default: DEFAULT_CLI },
  },
});
const CLI = path.resolve(opt.cli);
const files = Number(opt.files);
const dirs = Number(opt.dirs);
const work = opt.work
  ? path.resolve(opt.work)
  : await mkdtemp(path.join(tmpdir(), 'provcat-commit-scale-'));
const root = path.join(work, 'store');
const reuse = opt.work !== undefined && existsSync(path.join(work, 'filled'));
const bucket = 'bench';
const env = { ...process.env, PROVCAT_LOCAL_ROOT: root };
const store = new LocalStore({ root, cache: path.join(work, 'lib-cache') });
await store.makeBucket(bucket, { versioning: true });

const keyOf = scaleKeyOf(dirs);
const started = Date.now();
const localDir = path.join(work, 'local');
if (reuse) {
  // Filled by an earlier run.
} else if (opt.from) {
  for (let d = 0; d < dirs; d++) {
    await mkdir(path.join(localDir, `d${String(d).padStart(3, '0')}`), { recursive: true });
  }
  for (let i = 0; i < files; i++) {
    await writeFile(path.join(localDir, keyOf(i).slice('data/'.length)), scaleBytes(i));
  }
} else {
  await fillScaleFolder(store, bucket, files, keyOf);
}
const fillSeconds = (Date.now() - started) / 1000;

let caches = 0;
/** One CLI run under /usr/bin/time, with a cache of its own unless `cache` is given. */
function run(args, cache) {
  const dir = cache ?? path.join(work, `cache-${++caches}`);
  const time = ['-f', '%e %M %U %S'];
  const r = spawnSync('/usr/bin/time', [...time, process.execPath, CLI, ...args, '--json'], {
    env: { ...env, PROVCAT_CACHE_DIR: dir },
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  if (r.status !== 0) throw new Error(`provcat ${args.join(' ')}: ${r.stderr}`);
  const last = r.stderr.trim().split('\n').pop() ?? '';
  const [wall, kib, user, sys] = last.split(' ').map(Number);
  return { wall, cpu: user + sys, rssMiB: Math.round(kib / 1024), out: r.stdout };
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
const from = opt.from ? ['--from', localDir] : [];
const c1 = reuse ? undefined : run(['commit', folder, '-m', 'one', ...from], commitCache);
if (!reuse) await writeFile(path.join(work, 'filled'), '');
const id1 = c1 ? idOf(c1.out) : (await store.pin(folder)).at.id;
const pages1 = (await listPages()).size;
// Another file and other bytes on every run of a reused store.
const changedKey = keyOf((Math.floor(files / 2) + Date.now()) % files);
const changedBytes = Buffer.from(`changed ${Date.now()}`);
if (opt.from) {
  await writeFile(path.join(localDir, changedKey.slice('data/'.length)), changedBytes);
} else {
  await store._put(bucket, changedKey, changedBytes);
}
const c2 = run(['commit', folder, '-m', 'two', ...from], commitCache);
const id2 = idOf(c2.out);
const pages2 = (await listPages()).size;
const diff = run(['diff', `${folder}?at=commit:${id1}`, `${folder}?at=commit:${id2}`]);
const stat = run(['stat', `local://${bucket}/${keyOf(12345 % files)}?at=commit:${id2}`]);
const changed = JSON.parse(diff.out).changed.length;
// The SHA-256s the second commit recorded: every file record of its pages that has one.
let hashed = 0;
if (opt.from) {
  const { openCommit } = await import(path.join(repo, 'dist/src/commits/read.js'));
  for await (const f of (await openCommit(store, bucket, id2)).files()) {
    if (typeof f.sha256 === 'string') hashed++;
  }
}

const verb = opt.from ? 'commit --from' : 'commit';
const rows = [
  ...(c1 ? [[verb, c1, `${pages1} pages written`]] : []),
  [
    `${verb} after one change`,
    c2,
    `${pages2 - pages1} pages written (${((100 * (pages2 - pages1)) / pages1).toFixed(2)} % of ${pages1})` +
      (opt.from ? `; ${hashed} of ${files} records with sha256` : ''),
  ],
  ['diff of the two commits (cold cache)', diff, `${changed} changed`],
  ['stat of one file at the commit, fresh process (cold cache)', stat, ''],
];
console.log(
  `commit at scale (${path.relative(repo, CLI)}): ${files} files in ${dirs} subfolders, ${opt.from ? 'local folder' : 'local store'} (filled in ${fillSeconds.toFixed(0)} s), load ${os.loadavg()[0].toFixed(1)}`,
);
console.log('| operation | wall | CPU | peak RSS | notes |');
console.log('|---|---|---|---|---|');
for (const [name, r, note] of rows)
  console.log(
    `| ${name} | ${r.wall.toFixed(2)} s | ${r.cpu.toFixed(2)} s | ${r.rssMiB} MiB | ${note} |`,
  );
if (!opt.keep && !opt.work) await rm(work, { recursive: true, force: true });
else console.log(`kept ${work}`);
