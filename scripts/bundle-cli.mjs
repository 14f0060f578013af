// Bundle the `provcat` command into dist/cli/ (run by `npm run build`, after tsc).
//
// Why: every CLI command is a fresh process, and on Node 20 loading ~100 separate ES and
// CommonJS modules (provcat's own, the SDK's signer and credential chain, proper-lockfile) cost
// more CPU than an unchanged refetch of 1,000 files does otherwise: resolution of every package's
// export map, a CommonJS export scan per package, one compile per file. One tree-shaken bundle
// (the SDK's ES builds are preferred, so only what is used is kept) loads in a fraction of that;
// docs/performance.md has the measurements. The library itself (`import 'provcat'`) stays the
// plain tsc output; only the executable is bundled.
//
// CommonJS, not ES modules: Node's ES module loader costs every process more than the same code
// as CommonJS (its resolution, module jobs and linking per chunk; measured on Node 20 with
// alternating runs, docs/performance.md): `provcat stat` 181 → 161 ms of CPU, an unchanged
// refetch of 1,000 files 263 → 238 ms. The code is the same ES module source; rolldown turns
// `import.meta.url` into the file's URL and dynamic import() into a deferred require(), and
// every chunk is strict mode, as ES modules are. The package is `"type": "module"`, so the
// files are named .cjs.
//
// Lazily loaded parts stay lazy: every dynamic import() (the S3 client, the commit and
// managed-object commands, the tour) becomes a chunk of its own under dist/cli/chunks/, loaded
// only by the commands that need it.
import { chmod, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'rolldown';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = path.join(repo, 'dist', 'cli');

await rm(out, { recursive: true, force: true });
await build({
  input: { provcat: path.join(repo, 'dist', 'src', 'cli', 'bin.js') },
  platform: 'node',
  resolve: {
    // ES builds first: they tree-shake; CommonJS-only packages are bundled as they are.
    mainFields: ['module', 'main'],
    // Two modules proper-lockfile brings that a locking command need not load (~7 ms of CPU
    // together, every fetch takes a lock): see the comment in each shim.
    alias: {
      'graceful-fs': path.join(repo, 'scripts', 'cli-shims', 'graceful-fs.cjs'),
      assert: path.join(repo, 'scripts', 'cli-shims', 'assert.cjs'),
    },
  },
  logLevel: 'warn',
  output: {
    dir: out,
    format: 'cjs',
    // ES module semantics for every chunk, bundled CommonJS packages included (they ran inside
    // an ES module before).
    strict: true,
    entryFileNames: '[name].cjs',
    // Chunks sit two levels below the package root, like dist/src/cli/*.js, so a module that
    // finds package.json relative to itself finds the same file in both builds.
    chunkFileNames: 'chunks/[name]-[hash].cjs',
  },
});
await chmod(path.join(out, 'provcat.cjs'), 0o755);
