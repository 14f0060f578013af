// The snapshot a commit takes (src/commits/snapshot.ts `snapshotStream`: two listings, the
// folder-key rule, the second listing streamed into the page tree) at 1,000,000 or 10,000,000
// files, on a synthetic store whose `_history` generates a sorted listing and holds nothing
// (issue 27's "commit memory at 1M files"). The pages go to a temp directory, as the synthetic
// page bench writes them; wall time and the process's peak RSS (the kernel's maxRSS).
//
//   npm run build && node bench/commit-snapshot-synthetic.mjs [--files 1000000] [--no-pages]
//       [--dist /work/main/dist]     # another build's snapshot and tree builder (before/after)
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const { values: opt } = parseArgs({
  options: {
    files: { type: 'string', default: '1000000' },
    dist: { type: 'string', default: path.join(repo, 'dist') },
    'no-pages': { type: 'boolean', default: false },
  },
});
const dist = path.resolve(opt.dist);
const { snapshotStream } = await import(path.join(dist, 'src/commits/snapshot.js'));
const { TreeBuilder } = await import(path.join(dist, 'src/commits/pages/build.js'));
const files = Number(opt.files);
const dir = mkdtempSync(path.join(tmpdir(), 'provcat-snapshot-'));
const base = process.memoryUsage().rss;
let peak = 0;
const sample = setInterval(() => {
  peak = Math.max(peak, process.memoryUsage().rss);
}, 20);

const keyOf = (i) =>
  `data/d${String(i % 1000).padStart(3, '0')}/f${String(i).padStart(8, '0')}.bin`;
let listings = 0;
/** A store that lists `files` current versions in key order and keeps none of them. */
const store = {
  scheme: 'local',
  driver: 'synthetic',
  // No `startAfter`: one sequential listing (a generated one has no round trips to overlap).
  capabilities: {},
  async *_history() {
    listings++;
    const per = Math.ceil(files / 1000);
    for (let d = 0; d < 1000; d++) {
      for (let j = 0; j < per; j++) {
        const i = j * 1000 + d;
        if (i >= files) continue;
        yield { key: keyOf(i), versionId: 'v1', size: 1, current: true, etag: '"e"' };
      }
    }
  },
};

const started = Date.now();
let pages = 0;
const tree = await snapshotStream(store, 'bench', 'data/', async (listed) => {
  if (opt['no-pages']) {
    let count = 0;
    for await (const _ of listed) count++;
    return { count };
  }
  const b = new TreeBuilder(async (hash, bytes) => {
    writeFileSync(path.join(dir, hash), bytes);
    pages++;
  });
  for await (const f of listed) await b.add(f);
  return b.finish();
});
const seconds = (Date.now() - started) / 1000;
clearInterval(sample);
// The kernel's peak (KiB) also sees what the sampler misses while synchronous work runs.
peak = Math.max(peak, process.memoryUsage().rss, process.resourceUsage().maxRSS * 1024);
rmSync(dir, { recursive: true, force: true });
const mib = (n) => Math.round(n / 2 ** 20);
console.log(
  `snapshotStream of ${files} files (${path.relative(repo, dist) || dist}): ${seconds.toFixed(1)} s, ` +
    `peak RSS ${mib(peak)} MiB (${mib(base)} MiB at start), ${listings} listings, ` +
    `${tree.count} files, ${opt['no-pages'] ? 'no pages' : `${pages} pages`}`,
);
