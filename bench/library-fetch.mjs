// Where a cold folder fetch's CPU goes once the process has started: the library (dist/, run
// `npm run build` first) fetches one folder into a fresh cache several times in one process and
// prints the CPU of each fetch. The first fetch after a one-file warm-up (which loads the signer,
// the credential chain and the route) is what the `provcat fetch` process spends after its start
// and module loading; the later ones are V8's steady state. docs/performance.md compares them
// with the Node floor (node-floor-fetch.mjs) to separate per-file work from process start.
//
//   node bench/library-fetch.mjs --uri s3://BUCKET/PREFIX/ [--runs 3] [--warm KEY_URI]
//
// Store settings come from the environment as for the CLI (AWS_* and PROVCAT_S3_*). Run it with
// `--interrupt-budget=2000000` to match the CLI's V8 settings (src/cli/bin.ts). Prints one JSON
// line per fetch: { run, cpuMs, userMs, wallMs, files, downloaded }.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    uri: { type: 'string' },
    runs: { type: 'string', default: '3' },
    warm: { type: 'string' },
  },
});
if (!values.uri?.endsWith('/')) {
  throw new Error('usage: library-fetch.mjs --uri s3://BUCKET/PREFIX/ [--runs N] [--warm URI]');
}
const root = path.resolve(import.meta.dirname, '..');
const { storeFor } = await import(path.join(root, 'dist/src/index.js'));

const caches = [];
const fresh = () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-libfetch-'));
  caches.push(dir);
  return dir;
};
try {
  // One small fetch first: it loads everything a fetch needs, so what follows is per-file work.
  const warm = values.warm ?? (await firstFile(values.uri));
  await (await storeFor(warm, { cache: fresh() })).fetch(warm);
  for (let run = 0; run < Number(values.runs); run++) {
    const store = await storeFor(values.uri, { cache: fresh() });
    const cpu0 = process.cpuUsage();
    const wall0 = performance.now();
    const r = await store.fetch(values.uri);
    const cpu = process.cpuUsage(cpu0);
    console.log(
      JSON.stringify({
        run,
        cpuMs: Math.round((cpu.user + cpu.system) / 1000),
        userMs: Math.round(cpu.user / 1000),
        wallMs: Math.round(performance.now() - wall0),
        files: r.files,
        downloaded: r.downloaded,
      }),
    );
  }
} finally {
  for (const dir of caches) rmSync(dir, { recursive: true, force: true });
}

/** The URI of the first file below `folder`. */
async function firstFile(folder) {
  const store = await storeFor(folder, { cache: fresh() });
  const [entry] = await store.walk(folder);
  if (!entry) throw new Error(`nothing below ${folder}`);
  return entry.uri.toString();
}
