// A delay proxy in a process of its own, for the latency cases (latency.mjs): the fault proxy
// (dist/src/testing/fault-proxy.js) holding every byte `--ms` milliseconds each way in
// front of `--target`. It prints its URL on stdout and runs until killed. Its own process, so
// that the benchmark's synchronous runs (spawnSync) never stop it forwarding. On SIGUSR2 it
// prints one JSON line of its counters (`requests`, `connections`): parallel-listing.mjs counts
// the requests of a listing with it.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({ options: { target: { type: 'string' }, ms: { type: 'string' } } });
const { startFaultProxy } = await import(path.join(repo, 'dist/src/testing/fault-proxy.js'));
const proxy = await startFaultProxy({
  target: values.target,
  faults: [{ kind: 'latency', ms: Number(values.ms ?? 10) }],
});
process.stdout.write(`${proxy.url}\n`);
process.on('SIGUSR2', () => {
  const { requests, connections } = proxy.stats();
  process.stdout.write(`${JSON.stringify({ requests, connections })}\n`);
});
process.on('SIGTERM', () => proxy.close().then(() => process.exit(0)));
