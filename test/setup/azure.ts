/**
 * Helpers for test files that need Azure Blob storage: whether the Azurite suites run, where
 * Azurite is, SDK clients for it, and containers that clean up after themselves.
 *
 * The global setup (azurite.ts) starts Azurite, or reuses one named by `PROVCAT_TEST_AZURITE_URL`,
 * and exports its endpoint and connection string to the workers:
 * - `PROVCAT_SKIP_AZURE=1`: {@link describeAzurite} registers the suite as skipped, with the
 *   reason in its name, so the report shows it (never a silent pass).
 * - Otherwise {@link azureTarget} returns Azurite's endpoint, and throws when the setup did not
 *   run (a suite that needs the server fails loudly when it is missing).
 *
 * Suites that test versions use the versions server instead (servers/azure-versions/),
 * which they start in-process; {@link newContainer} works on either through the client given.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import {
  BlobServiceClient,
  type ContainerClient,
  type StoragePipelineOptions,
} from '@azure/storage-blob';
import { describe } from 'vitest';
import { DEV_ACCOUNT_KEY, DEV_ACCOUNT_NAME } from '../../servers/azure-dev-account.js';

/** Where the Azurite suites run. */
export interface AzureTestTarget {
  kind: 'azurite';
  /** The blob endpoint, `http://127.0.0.1:PORT/devstoreaccount1`. */
  url: string;
  /** The development account's connection string with `BlobEndpoint` set to {@link url}. */
  connectionString: string;
  accountName: string;
  accountKey: string;
}

/** Why the Azurite suites are skipped, or `undefined` when they run. */
export function azureSkipReason(): string | undefined {
  return process.env.PROVCAT_SKIP_AZURE === '1' ? 'PROVCAT_SKIP_AZURE=1' : undefined;
}

/**
 * `describe` for a suite that needs Azurite: skipped, with the reason in its name, when
 * `PROVCAT_SKIP_AZURE=1`; otherwise it runs (and fails loudly if Azurite is missing).
 */
export function describeAzurite(name: string, fn: () => void): void {
  const reason = azureSkipReason();
  if (reason) describe.skip(`${name} (skipped: ${reason})`, fn);
  else describe(name, fn);
}

/**
 * The Azurite the global setup prepared. Throws when Azure is enabled but no Azurite was
 * prepared (the test file ran without the global setup, or the setup failed).
 */
export function azureTarget(): AzureTestTarget {
  const url = process.env.PROVCAT_TEST_AZURITE_URL;
  const connectionString = process.env.PROVCAT_TEST_AZURITE_CONNECTION_STRING;
  if (!url || !connectionString) {
    throw new Error(
      'no Azurite for the tests: PROVCAT_TEST_AZURITE_URL is not set. Run through vitest (its ' +
        'global setup starts Azurite), set PROVCAT_TEST_AZURITE_URL to a running one, or ' +
        'PROVCAT_SKIP_AZURE=1',
    );
  }
  return {
    kind: 'azurite',
    url,
    connectionString,
    accountName: DEV_ACCOUNT_NAME,
    accountKey: DEV_ACCOUNT_KEY,
  };
}

/**
 * A `BlobServiceClient` for Azurite built from its connection string. Retries are off unless
 * `options` turn them on, so a test sees the first answer, not the SDK's fourth attempt.
 */
export function azuriteServiceClient(options: StoragePipelineOptions = {}): BlobServiceClient {
  return BlobServiceClient.fromConnectionString(azureTarget().connectionString, {
    retryOptions: { maxTries: 1 },
    ...options,
  });
}

/** A fresh, valid, unique container name (`provcat-<label>-<hex>`; `label` lower-case). */
export function uniqueContainerName(label = 't'): string {
  return `provcat-${label}-${randomBytes(5).toString('hex')}`;
}

/**
 * Create a container with a random name through the SDK and return its client: on Azurite
 * unless `service` names another server (the versions server's client, say). Pair with
 * {@link dropContainer}.
 */
export async function newContainer(
  label = 't',
  service: BlobServiceClient = azuriteServiceClient(),
): Promise<ContainerClient> {
  const container = service.getContainerClient(uniqueContainerName(label));
  await container.create();
  return container;
}

/** Delete a container {@link newContainer} made, with everything in it. */
export async function dropContainer(container: ContainerClient): Promise<void> {
  await container.delete();
}
