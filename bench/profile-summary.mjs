// Where a process's main-thread time went, from a V8 CPU profile (`node --cpu-prof`): self time
// by package (or Node internals) and by function, largest first.
//
//   node --cpu-prof --cpu-prof-dir=/tmp/prof dist/cli/provcat.cjs fetch s3://bucket/folder/ --json
//   node bench/profile-summary.mjs /tmp/prof [file.cpuprofile] [top N]
//
// The profile samples wall-clock time of the main thread: on a loaded machine, time the thread
// spent preempted is charged to whatever it was running (often a system call such as a socket
// write). Compare it with the CPU column of the benchmark, which /usr/bin/time measures.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const [dir, name, top = '40'] = process.argv.slice(2);
if (!dir) throw new Error('usage: profile-summary.mjs DIR [FILE] [TOP]');
const file =
  name ||
  readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort()
    .pop();
if (!file) throw new Error(`no .cpuprofile in ${dir}`);
const profile = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
const selfTime = new Map();
profile.samples.forEach((id, i) => {
  selfTime.set(id, (selfTime.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
});
const byPackage = new Map();
const byFunction = new Map();
let total = 0;
for (const [id, micros] of selfTime) {
  total += micros;
  const { functionName, url, lineNumber } = nodes.get(id).callFrame;
  const where = url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*?\/(dist|test)\//, '$1/');
  const pkg =
    url === ''
      ? functionName
      : where
          .split('/')
          .slice(0, where.startsWith('@') ? 2 : 1)
          .join('/');
  byPackage.set(pkg, (byPackage.get(pkg) ?? 0) + micros);
  const fn = `${functionName || '(anonymous)'} ${where}:${lineNumber}`;
  byFunction.set(fn, (byFunction.get(fn) ?? 0) + micros);
}
const print = (map) => {
  for (const [k, v] of [...map].sort((a, b) => b[1] - a[1]).slice(0, Number(top))) {
    console.log(`${(v / 1000).toFixed(0).padStart(7)} ms  ${k}`);
  }
};
console.log(`${file}: ${(total / 1000).toFixed(0)} ms sampled\n\nby package:`);
print(byPackage);
console.log('\nby function:');
print(byFunction);
