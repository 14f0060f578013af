/**
 * The `az` stage kind (src/lake/bucket-stage.ts): `{ "version": 1, "kind": "az", "account"?,
 * "container", "prefix", "endpoint"?, "tenant"? }`, at least one of account and endpoint, never a
 * credential (the environment gives it). A stage string `az://container/prefix/` takes account
 * and endpoint from the environment and records a non-default endpoint.
 *
 * @module
 */
import type { BlobServiceClient } from '@azure/storage-blob';
import { bucketStageKind } from '../../src/lake/bucket-stage.js';
import { checkEndpoint, fail } from '../../src/lake/descriptor-fields.js';
import type { StageDescriptor, StageKind } from '../../src/lake/stage-kinds.js';
import { resolveAzureConfig } from './config.js';

/** A stage in one Azure Blob container, below one prefix. */
export interface AzureStageDescriptor extends StageDescriptor {
  readonly version: 1;
  readonly kind: 'az';
  /** The storage account name. */
  readonly account?: string | undefined;
  readonly container: string;
  /** Key prefix as `/`-separated segments, without leading or trailing `/`; `''` is the whole container. */
  readonly prefix: string;
  /** The blob service URL, when not `https://ACCOUNT.blob.core.windows.net`. */
  readonly endpoint?: string | undefined;
}

const CONTAINER = /^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/;
const ACCOUNT = /^[a-z0-9]{3,24}$/;
const defaultEndpoint = (account: unknown) => `https://${account}.blob.core.windows.net`;
const endpointOf = (d: StageDescriptor) =>
  (d as AzureStageDescriptor).endpoint ?? defaultEndpoint(d.account);

/** The `az` kind (see the module comment). */
export const azureStageKind: StageKind = bucketStageKind({
  kind: 'az',
  bucketField: 'container',
  bucketName: { pattern: CONTAINER, what: 'an Azure container name' },
  fields: ['account', 'endpoint'],
  own({ account, endpoint }) {
    if (account !== undefined && (typeof account !== 'string' || !ACCOUNT.test(account))) {
      fail(`account must be a storage account name, not ${JSON.stringify(account)}`);
    }
    if (account === undefined && endpoint === undefined)
      fail('an az stage names an account or an endpoint');
    return {
      ...(account === undefined ? {} : { account }),
      ...(endpoint === undefined ? {} : { endpoint: checkEndpoint(endpoint).replace(/\/+$/, '') }),
    };
  },
  fromEnv(env) {
    const { account, endpoint } = resolveAzureConfig({}, env);
    return { account, ...(account && endpoint === defaultEndpoint(account) ? {} : { endpoint }) };
  },
  endpoint: endpointOf,
  async store(descriptor, options) {
    const { account } = descriptor as AzureStageDescriptor;
    const { AzureStore } = await import('./azure-store.js');
    const client = options.client as BlobServiceClient | undefined;
    const { offline, env } = options;
    return new AzureStore({ client, account, endpoint: endpointOf(descriptor), offline, env });
  },
});
