// The page tree of provcat.commit/2 at 1,000,000 or 10,000,000 files, without a store (issue
// 27's "synthetic listing" row): a generated, sorted listing streams into the tree builder, each
// page written to a temp directory; then the same listing with one file changed (pages written
// counted), a diff of the two trees by page hash, and one key looked up. Wall time and the
// process's peak RSS (sampled) for each step.
//
//   npm run build && node bench/commit-pages-synthetic.mjs [--files 1000000]
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const { TreeBuilder } = await import(path.join(repo, 'dist/src/commits/pages/build.js'));
const { CommitTree } = await import(path.join(repo, 'dist/src/commits/pages/tree.js'));
const { diffTrees } = await import(path.join(repo, 'dist/src/commits/pages/diff-trees.js'));
const { parsePage } = await import(path.join(repo, 'dist/src/commits/pages/page-format.js'));

const { values: opt } = parseArgs({ options: { files: { type: 'string', default: '1000000' } } });
const files = Number(opt.files);
const dir = mkdtempSync(path.join(tmpdir(), 'provcat-pages-'));
let peak = 0;
const sample = setInterval(() => {
  peak = Math.max(peak, process.memoryUsage().rss);
}, 20);

const keyOf = (i) =>
  `data/d${String(i % 1000).padStart(3, '0')}/f${String(i).padStart(8, '0')}.bin`;
/** The listing in key order: subfolder by subfolder (keys of one subfolder are contiguous). */
function* listing(changed) {
  const per = Math.ceil(files / 1000);
  for (let d = 0; d < 1000; d++) {
    for (let j = 0; j < per; j++) {
      const i = j * 1000 + d;
      if (i >= files) continue;
      yield { key: keyOf(i), size: 1, versionId: i === changed ? 'v2' : 'v1', etag: '"e"' };
    }
  }
}

async function build(changed, known) {
  let written = 0;
  const seen = new Set();
  const b = new TreeBuilder(async (hash, bytes) => {
    seen.add(hash);
    if (known?.has(hash)) return;
    writeFileSync(path.join(dir, hash), bytes);
    written++;
  });
  for (const f of listing(changed)) await b.add(f);
  return { root: await b.finish(), written, seen };
}

/** A page reader over the temp directory (verified parse, as the store's reader does). */
const reader = {
  load: async (hash, height) =>
    parsePage(readFileSync(path.join(dir, hash)), height, 'data/', hash),
};
const treeOf = (root) =>
  new CommitTree(
    { count: root.count, folder: 'data/', tree: { root: root.root, height: root.height } },
    undefined,
    reader,
  );

const rows = [];
const step = async (name, fn) => {
  peak = 0;
  const t = process.hrtime.bigint();
  const out = await fn();
  const s = Number(process.hrtime.bigint() - t) / 1e9;
  peak = Math.max(peak, process.memoryUsage().rss);
  rows.push([name, s, peak, out.note]);
  return out;
};
const a = await step('build the tree (commit)', async () => {
  const r = await build(-1);
  return { ...r, note: `${r.written} pages, height ${r.root.height}` };
});
const b = await step('build again after one change', async () => {
  const r = await build(Math.floor(files / 2), a.seen);
  return {
    ...r,
    note: `${r.written} pages written (${((100 * r.written) / a.written).toFixed(3)} %)`,
  };
});
await step('diff the two trees by page hash', async () => {
  let n = 0;
  for await (const _ of diffTrees(treeOf(a.root), treeOf(b.root), 'data/')) n++;
  return { note: `${n} change(s)` };
});
await step('look up one key', async () => {
  const f = await treeOf(b.root).fileAt(keyOf(12345));
  return { note: f ? 'found' : 'MISSING' };
});
clearInterval(sample);
console.log(`page tree, synthetic listing of ${files} files (no store; pages on local disk)`);
console.log('| step | wall | peak RSS | notes |');
console.log('|---|---|---|---|');
for (const [name, s, rss, note] of rows) {
  console.log(`| ${name} | ${s.toFixed(2)} s | ${Math.round(rss / 2 ** 20)} MiB | ${note} |`);
}
rmSync(dir, { recursive: true, force: true });
