/**
 * `npm run server:azurite -- --port PORT`: Azurite's blob service in the foreground with the
 * flags the tests use (servers/azurite.ts). Prints one line when it answers,
 * `azurite ready on http://127.0.0.1:PORT/devstoreaccount1`, then the connection string; stops
 * Azurite on SIGINT or SIGTERM and exits with it.
 *
 * @module
 */
import { parseArgs } from 'node:util';
import { startAzurite } from './azurite.js';

const { values } = parseArgs({
  options: { port: { type: 'string', default: '10000' } },
  strict: true,
});
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(`--port must be a port number, not ${values.port}\n`);
  process.exit(2);
}
let azurite: Awaited<ReturnType<typeof startAzurite>>;
try {
  azurite = await startAzurite({ port, output: 'inherit' });
} catch (error) {
  process.stderr.write(`${(error as Error).message}\n`);
  process.exit(1);
}
process.stdout.write(`azurite ready on ${azurite.url}\n`);
process.stdout.write(`connection string: ${azurite.connectionString}\n`);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    // A Ctrl-C in a terminal reaches Azurite too (same process group) and it closes by itself;
    // signalling it again while it closes makes it crash. Give it a moment, then stop it.
    const moment = new Promise((resolve) => setTimeout(resolve, 1500));
    Promise.race([azurite.exited, moment])
      .then(() => azurite.stop())
      .then(
        () => process.exit(0),
        (error: unknown) => {
          process.stderr.write(`stopping Azurite failed: ${String(error)}\n`);
          process.exit(1);
        },
      );
  });
}
const code = await azurite.exited;
process.stderr.write(`Azurite exited (${code})\n`);
process.exit(typeof code === 'number' ? code : 1);
