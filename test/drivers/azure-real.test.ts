/**
 * The Azure driver against a real storage account, when one is named:
 * `PROVCAT_TEST_AZURE_CONTAINER` (a container on an account with blob versioning), with
 * `AZURE_STORAGE_CONNECTION_STRING`, or `AZURE_STORAGE_ACCOUNT` with a key or a login
 * (`DefaultAzureCredential`). The whole conformance suite runs, versions, uploads in parts and the
 * managed stage included, under random prefixes (and `.provcat/` for commits) that it leaves
 * behind: use a container of its own. Without the variable the suite is reported as skipped, with
 * the reason in its name. Not run while the driver was written: no account was available.
 */
import { describe, it } from 'vitest';
import { AzureStore } from '../../drivers/azure/index.js';
import { azureStageKind } from '../../drivers/azure/stage-kind.js';
import { type Stage, stageFromDescriptor } from '../../src/lake/index.js';
import type { StageDescriptor } from '../../src/lake/stage-kinds.js';
import { conformance } from '../../src/testing/index.js';

const live = process.env.PROVCAT_TEST_AZURE_CONTAINER;
if (!live) {
  describe.skip('azure driver on a real account (skipped: PROVCAT_TEST_AZURE_CONTAINER is not set; set it with AZURE_STORAGE_CONNECTION_STRING or a login, on an account with blob versioning)', () => {
    it('runs the conformance suite', () => {});
  });
} else {
  describe('azure driver on a real account', () => {
    conformance({
      name: `azure on ${live}`,
      store: (o) => new AzureStore({ ...o }),
      bucket: live,
      flags: { versions: true, createMode: 'atomic', ranges: true, hostileKeys: true, parts: true },
      stage: ({ prefix }) =>
        stageFromDescriptor(
          azureStageKind.fromString?.(`az://${live}/${prefix}/`, process.env) as StageDescriptor,
          { partSize: 1024 * 1024 },
        ) as Stage,
    });
  });
}
