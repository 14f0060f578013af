// Run one of the project's TypeScript test-server entry points in the foreground:
//
//   node scripts/run-test-server.mjs servers/azure-versions/cli.ts --port 10000
//
// (what `npm run server:azure-versions` and `npm run server:azurite` do). Why this way: Node 20
// cannot run TypeScript itself, and the test servers are not part of the package that `npm run
// build` compiles. rolldown, already a devDependency for the CLI bundle, turns the entry and the
// modules it imports into one ES module under dist/test-servers/ in a few milliseconds, on a fresh
// clone after `npm ci`; the bundle is then imported in this same process, so signals (Ctrl-C)
// reach the server directly. Packages the entry imports stay external and resolve from the
// repository's node_modules as usual.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'rolldown';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const entry = process.argv[2];
if (!entry?.endsWith('.ts')) {
  process.stderr.write('usage: node scripts/run-test-server.mjs <entry.ts> [args...]\n');
  process.exit(2);
}
const name = path
  .relative(path.join(repo, 'servers'), path.resolve(repo, entry))
  .replace(/\.ts$/, '')
  .replaceAll(path.sep, '-');
const out = path.join(repo, 'dist', 'test-servers');
await build({
  input: path.resolve(repo, entry),
  platform: 'node',
  // Only the project's own sources are bundled; every package stays an import.
  external: (id) => !id.startsWith('.') && !path.isAbsolute(id),
  logLevel: 'warn',
  output: { dir: out, format: 'esm', entryFileNames: `${name}.mjs` },
});
// The entry parses its own arguments from process.argv.slice(2).
process.argv.splice(2, 1);
await import(pathToFileURL(path.join(out, `${name}.mjs`)).href);
