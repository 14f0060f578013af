/**
 * The fault suite (src/testing/faults.ts) on Azure through the Azure driver, twice: on
 * Azurite (no versions: fetches, puts, staged blocks, managed uploads) and on the project's
 * versions server (servers/azure-versions/, in this process: commits and branches too).
 * Each has the network faults with the fault proxy between the driver and the server, the part
 * resends, and the SIGKILL loop over the CLI with an `az://` managed-object stage. Azurite's
 * half is skipped only with `PROVCAT_SKIP_AZURE=1` (test/setup/azure.ts). Short in `npm test`;
 * `npm run soak` runs it long (docs/reliability.md).
 */
import { BlobServiceClient, type ContainerClient } from '@azure/storage-blob';
import { afterAll, beforeAll, describe } from 'vitest';
import { AzureStore } from '../../../drivers/azure/index.js';
import { startAzureVersionsServer } from '../../../servers/azure-versions/index.js';
import { faultConfig, faultSuite } from '../../../src/testing/faults.js';
import type { ConformanceTarget } from '../../../src/testing/target.js';
import {
  azureSkipReason,
  azureTarget,
  describeAzurite,
  uniqueContainerName,
} from '../../setup/azure.js';

const MiB = 1024 * 1024;

/**
 * Two servers share the driver's budget of the short configuration (about 45 s in `npm test`):
 * each gets about half its trials. A soak, or trial counts set in the environment, run whole.
 */
const base = faultConfig();
const env = process.env;
const sized =
  base.mode === 'short' &&
  !env.PROVCAT_FAULT_TRIALS &&
  !env.PROVCAT_FAULT_NETWORK_TRIALS &&
  !env.PROVCAT_FAULT_KILL_TRIALS;
const config = sized ? { ...base, networkTrials: 10, killTrials: 8, seed: base.seed } : base;

/** A Blob service to run the suite on: its blob endpoint and connection string. */
interface Service {
  /** `http://host:port/devstoreaccount1`. */
  url: string;
  connectionString: string;
}

function containerOf(service: Service, name: string): ContainerClient {
  return BlobServiceClient.fromConnectionString(service.connectionString).getContainerClient(name);
}

/** Remove every blob (and on a versioned account every version) under `prefix`. */
async function purge(container: ContainerClient, prefix: string, versions: boolean) {
  for await (const b of container.listBlobsFlat({ prefix })) {
    await container.getBlobClient(b.name).deleteIfExists();
  }
  if (!versions) return;
  for await (const b of container.listBlobsFlat({ prefix, includeVersions: true })) {
    if (b.versionId) {
      await container.getBlobClient(b.name).withVersion(b.versionId).deleteIfExists();
    }
  }
}

/** The suite's target on `service`, in container `container`. */
function target(
  name: string,
  service: Service,
  container: string,
  versions: boolean,
): ConformanceTarget {
  const { origin, pathname: account } = new URL(service.url);
  return {
    name,
    store: ({ endpoint, ...o } = {}) =>
      new AzureStore({
        connectionString: service.connectionString,
        endpoint: endpoint === undefined ? undefined : `${endpoint}${account}`,
        env: {},
        multipartThreshold: MiB,
        partSize: MiB,
        ...o,
      }),
    bucket: container,
    flags: { versions, createMode: 'atomic', ranges: true, hostileKeys: false },
    env: { AZURE_STORAGE_CONNECTION_STRING: service.connectionString, PROVCAT_AZURE_ENDPOINT: '' },
    network: {
      endpoint: origin,
      env: (proxy) => ({ PROVCAT_AZURE_ENDPOINT: `${proxy}${account}` }),
      multipartBytes: MiB,
    },
    stageUri: (prefix) => `az://${container}/${prefix}`,
    purge: (prefix) => purge(containerOf(service, container), prefix, versions),
  };
}

/** Create the container before the suite, delete it after. */
function withContainer(service: () => Service, name: string): void {
  beforeAll(async () => {
    await containerOf(service(), name).create();
  });
  afterAll(async () => {
    await containerOf(service(), name).deleteIfExists();
  });
}

const azurite: Service = azureSkipReason()
  ? { url: 'http://127.0.0.1:1/devstoreaccount1', connectionString: '' }
  : azureTarget();
describeAzurite('fault suite on Azurite', () => {
  const container = uniqueContainerName('faults');
  withContainer(() => azurite, container);
  faultSuite(target('azure (Azurite)', azurite, container, false), { config });
});

const versionsServer = await startAzureVersionsServer();
afterAll(async () => {
  await versionsServer.close();
});
describe('fault suite on the Azure versions server', () => {
  const container = uniqueContainerName('faults');
  withContainer(() => versionsServer, container);
  faultSuite(target('azure (versions server)', versionsServer, container, true), { config });
});
