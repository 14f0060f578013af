/**
 * vitest global setup: brings up the Azurite blob service the Azure suites need, once per run.
 *
 * - `PROVCAT_SKIP_AZURE=1`: nothing starts; Azure suites skip with a visible reason
 *   (test/setup/azure.ts).
 * - `PROVCAT_TEST_AZURITE_URL` set (a blob endpoint such as
 *   `http://127.0.0.1:10000/devstoreaccount1`): that Azurite, a developer's own, is reused and left
 *   running; it must answer and accept the development account.
 *   `PROVCAT_TEST_AZURITE_CONNECTION_STRING` is derived from it unless set too.
 * - Otherwise Azurite 3.35 (the devDependency) starts on a free port with in-memory persistence
 *   (servers/azurite.ts) and is stopped at teardown. The workers get
 *   `PROVCAT_TEST_AZURITE_URL` and `PROVCAT_TEST_AZURITE_CONNECTION_STRING` through `process.env`
 *   (the forked workers inherit it).
 *
 * If Azurite cannot start or refuses the development account, setup throws with the reason and
 * the tail of its output: the run fails; it never skips silently.
 *
 * The versions server (servers/azure-versions/) needs no setup: tests start it in-process.
 *
 * @module
 */
import { devConnectionString } from '../../servers/azure-dev-account.js';
import { azuriteAnswers, startAzurite } from '../../servers/azurite.js';

function say(message: string): void {
  process.stderr.write(`[provcat test setup] ${message}\n`);
}

/** A signed request with the development account must work (a reused server may differ). */
async function checkAccount(url: string, connectionString: string): Promise<void> {
  const { BlobServiceClient } = await import('@azure/storage-blob');
  const service = BlobServiceClient.fromConnectionString(connectionString, {
    retryOptions: { maxTries: 1 },
  });
  try {
    const pages = service.listContainers().byPage({ maxPageSize: 1 });
    await pages.next();
  } catch (cause) {
    throw new Error(
      `the Azure test server at ${url} refuses the development account devstoreaccount1 ` +
        `(${String(cause)}); start Azurite without AZURITE_ACCOUNTS, or unset ` +
        'PROVCAT_TEST_AZURITE_URL to let the test setup start its own, or set PROVCAT_SKIP_AZURE=1',
      { cause },
    );
  }
}

/** vitest globalSetup: see the module comment. Returns the teardown. */
export default async function setup(): Promise<() => Promise<void>> {
  const none = async () => {};
  if (process.env.PROVCAT_SKIP_AZURE === '1') {
    say('PROVCAT_SKIP_AZURE=1: no Azurite; Azure suites are skipped');
    return none;
  }
  const given = process.env.PROVCAT_TEST_AZURITE_URL;
  if (given) {
    if (!(await azuriteAnswers(given, 5000))) {
      throw new Error(
        `PROVCAT_TEST_AZURITE_URL=${given} does not answer; start Azurite there ` +
          '(npm run server:azurite -- --port PORT), unset the variable to let the test setup ' +
          'start its own, or set PROVCAT_SKIP_AZURE=1',
      );
    }
    process.env.PROVCAT_TEST_AZURITE_CONNECTION_STRING ??= devConnectionString(given);
    await checkAccount(given, process.env.PROVCAT_TEST_AZURITE_CONNECTION_STRING);
    say(`reusing the Azurite at ${given} (it stays running)`);
    return none;
  }
  const started = Date.now();
  let azurite: Awaited<ReturnType<typeof startAzurite>>;
  try {
    azurite = await startAzurite();
  } catch (cause) {
    throw new Error(
      `Azurite (the Azure test server) did not start: ${(cause as Error).message}\n` +
        'Set PROVCAT_SKIP_AZURE=1 to skip the Azure suites, or PROVCAT_TEST_AZURITE_URL to use a ' +
        'running Azurite.',
      { cause },
    );
  }
  try {
    await checkAccount(azurite.url, azurite.connectionString);
  } catch (error) {
    await azurite.stop();
    throw error;
  }
  say(`Azurite ready on ${azurite.url} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  process.env.PROVCAT_TEST_AZURITE_URL = azurite.url;
  process.env.PROVCAT_TEST_AZURITE_CONNECTION_STRING = azurite.connectionString;
  return async () => {
    await azurite.stop();
  };
}
