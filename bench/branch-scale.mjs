// Branches at scale (issue 27): the CLI's `branch` of a commit and of a live folder (a top-level
// folder, snapshotted), each timed with /usr/bin/time (wall, CPU, peak RSS), on the embedded
// store (local://), and the size of the branch record each wrote. Runs alone; nothing to start.
//
//   npm run build && node bench/branch-scale.mjs [--files 50000] [--dirs 100] [--cli F ...]
//
// The folder `data/` is `--dirs` subfolders of `--files / --dirs` one-byte files, written through
// the library (not timed) and committed once (timed too). Each `--cli` (default: this build's)
// then makes one branch of the commit and one of the live folder, in the order given, so two
// builds are compared on one store (`--cli /tmp/base/cli/provcat.cjs --cli dist/cli/provcat.cjs`).
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { fillScaleFolder, scaleKeyOf } from './scale-folder.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const DEFAULT_CLI = path.join(repo, 'dist/cli/provcat.cjs');
const { LocalStore } = await import(path.join(repo, 'dist/drivers/local/index.js'));

const { values: opt } = parseArgs({
  options: {
    files: { type: 'string', default: '50000' },
    dirs: { type: 'string', default: '100' },
    keep: { type: 'boolean', default: false },
    cli: { type: 'string', multiple: true },
  },
});
const clis = (opt.cli ?? [DEFAULT_CLI]).map((c) => path.resolve(c));
const files = Number(opt.files);
const dirs = Number(opt.dirs);
const work = await mkdtemp(path.join(tmpdir(), 'provcat-branch-scale-'));
const root = path.join(work, 'store');
const bucket = 'bench';
const env = { ...process.env, PROVCAT_LOCAL_ROOT: root };
const store = new LocalStore({ root, cache: path.join(work, 'lib-cache') });
await store.makeBucket(bucket, { versioning: true });

const keyOf = scaleKeyOf(dirs);
const started = Date.now();
await fillScaleFolder(store, bucket, files, keyOf);
const fillSeconds = (Date.now() - started) / 1000;

let caches = 0;
/** One CLI run under /usr/bin/time, with a cache of its own. */
function run(cli, args) {
  const dir = path.join(work, `cache-${++caches}`);
  const time = ['-f', '%e %M %U %S'];
  const r = spawnSync('/usr/bin/time', [...time, process.execPath, cli, ...args, '--json'], {
    env: { ...env, PROVCAT_CACHE_DIR: dir },
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  if (r.status !== 0) throw new Error(`provcat ${args.join(' ')}: ${r.stderr}`);
  const last = r.stderr.trim().split('\n').pop() ?? '';
  const [wall, kib, user, sys] = last.split(' ').map(Number);
  return { wall, cpu: user + sys, rssMiB: Math.round(kib / 1024), out: r.stdout };
}

async function recordBytes(name) {
  const r = await store._get(bucket, `.provcat/branches/${name}.json`);
  let n = 0;
  for await (const chunk of r.body) n += chunk.length;
  return n;
}

const c = run(clis[0], ['commit', `local://${bucket}/data/`, '-m', 'source']);
const id = /commit:([0-9a-f]{64})/.exec(c.out)?.[1];
const rows = [['commit (the source)', path.relative(repo, clis[0]), c, '']];
for (const [i, cli] of clis.entries()) {
  for (const [kind, source] of [
    ['commit', id],
    ['live folder', 'data'],
  ]) {
    const name = `b${i}${kind === 'commit' ? 'c' : 'f'}`;
    const r = run(cli, ['branch', `local://${bucket}/${name}/`, source]);
    const note = `record ${(await recordBytes(name)).toLocaleString('en')} bytes`;
    rows.push([`branch of a ${kind}`, path.relative(repo, cli), r, note]);
  }
}
console.log(
  `branch at scale: ${files} files in ${dirs} subfolders, local store (filled in ${fillSeconds.toFixed(0)} s), load ${os.loadavg()[0].toFixed(1)}`,
);
console.log('| operation | build | wall | CPU | peak RSS | notes |');
console.log('|---|---|---|---|---|---|');
for (const [name, build, r, note] of rows) {
  console.log(
    `| ${name} | ${build} | ${r.wall.toFixed(2)} s | ${r.cpu.toFixed(2)} s | ${r.rssMiB} MiB | ${note} |`,
  );
}
if (!opt.keep) await rm(work, { recursive: true, force: true });
else console.log(`kept ${work}`);
