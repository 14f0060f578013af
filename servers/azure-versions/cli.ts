/**
 * `npm run server:azure-versions -- --port PORT [--exists-status 409|412]`: the versions server
 * in the foreground, for other tools (a CLI, rclone, a debugger). Prints one line when ready,
 * `azure versions server ready on http://127.0.0.1:PORT/devstoreaccount1`, then the connection
 * string; stops on SIGINT or SIGTERM.
 *
 * @module
 */
import { parseArgs } from 'node:util';
import { startAzureVersionsServer } from './server.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    'exists-status': { type: 'string', default: '409' },
  },
  strict: true,
});
const port = Number(values.port);
const existsStatus = Number(values['exists-status']);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(`--port must be a port number, not ${values.port}\n`);
  process.exit(2);
}
if (existsStatus !== 409 && existsStatus !== 412) {
  process.stderr.write(`--exists-status must be 409 or 412, not ${values['exists-status']}\n`);
  process.exit(2);
}
const server = await startAzureVersionsServer({ port, existsStatus });
process.stdout.write(`azure versions server ready on ${server.url}\n`);
process.stdout.write(`connection string: ${server.connectionString}\n`);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    server.close().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`closing the server failed: ${String(error)}\n`);
        process.exit(1);
      },
    );
  });
}
