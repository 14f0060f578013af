/**
 * The GCS test server as a foreground process, for tools other than vitest (the provcat CLI,
 * rclone, a shell): `npm run server:gcs -- --port PORT`.
 *
 * It prints one line when it listens — `gcs test server ready on http://127.0.0.1:PORT` — and
 * stops on SIGINT or SIGTERM (exit code 0). It starts empty; make buckets through the API (the
 * SDK's `createBucket`, `provcat mb gs://B [--versioning]`). Point clients at it with
 * `STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT` or the SDK's `apiEndpoint`.
 *
 * Options: `--port N` (default 0: a free port, printed), `--host H` (default 127.0.0.1),
 * `--signing-public-key FILE` (PEM; repeatable) for signed-URL checks, `--rewrite-bytes-per-call N`,
 * `--log` (one line per request on stderr).
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { startGcsServer } from './server.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
    'signing-public-key': { type: 'string', multiple: true },
    'rewrite-bytes-per-call': { type: 'string' },
    log: { type: 'boolean', default: false },
  },
  strict: true,
});

const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(`gcs test server: invalid --port ${values.port}\n`);
  process.exit(2);
}
const perCall = values['rewrite-bytes-per-call'];
const server = await startGcsServer({
  port,
  host: values.host,
  signingPublicKey: (values['signing-public-key'] ?? []).map((file) => readFileSync(file, 'utf8')),
  ...(perCall === undefined ? {} : { rewriteBytesPerCall: Number(perCall) }),
}).catch((error: unknown) => {
  process.stderr.write(
    `gcs test server: cannot listen on ${values.host}:${port}: ${String(error)}\n`,
  );
  process.exit(1);
});
process.stdout.write(`gcs test server ready on ${server.url}\n`);

if (values.log) {
  let seen = 0;
  setInterval(() => {
    for (; seen < server.log.length; seen++) {
      const r = server.log[seen];
      if (r !== undefined) process.stderr.write(`${r.status} ${r.method} ${r.path}\n`);
    }
    if (server.log.length > 10_000) {
      server.clearLog();
      seen = 0;
    }
  }, 200).unref();
} else {
  // Nobody reads the log of a standalone server unless --log: keep it from growing.
  setInterval(() => server.clearLog(), 10_000).unref();
}

let stopping = false;
const stop = (signal: string) => {
  if (stopping) return;
  stopping = true;
  server.close().then(
    () => process.exit(0),
    (error: unknown) => {
      process.stderr.write(`gcs test server: close after ${signal} failed: ${String(error)}\n`);
      process.exit(1);
    },
  );
};
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));
