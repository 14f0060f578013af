/**
 * The `az` stage descriptor kind: managed objects in one Azure Blob container below one prefix.
 *
 * ```json
 * { "version": 1, "kind": "az", "account": "lake", "container": "managed", "prefix": "v1",
 *   "endpoint": "http://127.0.0.1:10000/devstoreaccount1", "tenant": "acme" }
 * ```
 *
 * `container` is the stage's bucket (Azure's word for it). `account` and `endpoint` name the
 * storage (at least one; the endpoint defaults to `https://ACCOUNT.blob.core.windows.net`); no
 * credential is ever in a descriptor: the key, SAS or login comes from the environment when the
 * backend is made (config.ts). The stage string `az://container/prefix/` takes account and
 * endpoint from that environment, and records a non-default endpoint, so the descriptor alone
 * decides where the stage is: `PROVCAT_AZURE_ENDPOINT` does not move a descriptor's stage.
 *
 * @module
 */
import type { BlobServiceClient } from '@azure/storage-blob';
import {
  checkEndpoint,
  checkFields,
  decodeStagePrefix,
  fail,
  joinPrefix,
  normalizePrefix,
} from '../../src/lake/descriptor-fields.js';
import { StageConfigError } from '../../src/lake/errors.js';
import type { StageDescriptor, StageKind } from '../../src/lake/kinds.js';
import { objectLocations } from '../../src/lake/locations.js';
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

const FIELDS = ['version', 'kind', 'account', 'container', 'prefix', 'endpoint', 'tenant'];
const CONTAINER = /^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/;
const ACCOUNT = /^[a-z0-9]{3,24}$/;

const asAz = (d: StageDescriptor) => d as AzureStageDescriptor;
const endpointOf = (d: AzureStageDescriptor) =>
  d.endpoint ?? `https://${d.account}.blob.core.windows.net`;

/** The `az` kind (see the module comment). */
export const azureStageKind: StageKind = {
  kind: 'az',

  parse(record, tenant) {
    checkFields(record, FIELDS);
    const { account, container, prefix, endpoint } = record;
    if (typeof container !== 'string' || !CONTAINER.test(container)) {
      fail(`container must be an Azure container name, not ${JSON.stringify(container)}`);
    }
    if (account !== undefined && (typeof account !== 'string' || !ACCOUNT.test(account))) {
      fail(`account must be a storage account name, not ${JSON.stringify(account)}`);
    }
    if (endpoint !== undefined) checkEndpoint(endpoint);
    if (account === undefined && endpoint === undefined)
      fail('an az stage names an account or an endpoint');
    if (typeof prefix !== 'string')
      fail('prefix must be a string (use "" for the whole container)');
    return Object.freeze({
      version: 1,
      kind: 'az',
      ...(account === undefined ? {} : { account: account as string }),
      container,
      prefix: normalizePrefix(prefix),
      ...(endpoint === undefined ? {} : { endpoint: (endpoint as string).replace(/\/+$/, '') }),
      ...(tenant === undefined ? {} : { tenant }),
    });
  },

  fromString(text, env) {
    const m = /^az:\/\/([^/?#]+)(?:\/([^?#]*))?$/.exec(text);
    if (!m) return undefined;
    let config: ReturnType<typeof resolveAzureConfig>;
    try {
      config = resolveAzureConfig({}, env);
    } catch (cause) {
      throw new StageConfigError(`the stage ${text}: ${(cause as Error).message}`, { cause });
    }
    const fallback = config.account && `https://${config.account}.blob.core.windows.net`;
    return azureStageKind.parse(
      {
        version: 1,
        kind: 'az',
        ...(config.account === undefined ? {} : { account: config.account }),
        container: m[1],
        prefix: decodeStagePrefix(m[2] ?? '', text),
        ...(config.endpoint === fallback ? {} : { endpoint: config.endpoint }),
      },
      undefined,
    );
  },

  locations(descriptor) {
    const d = asAz(descriptor);
    return objectLocations('az', d.container, joinPrefix(d.prefix, d.tenant));
  },

  identity(descriptor) {
    const d = asAz(descriptor);
    return `az|${endpointOf(d)}|${d.container}|${joinPrefix(d.prefix, d.tenant)}`;
  },

  async backend(descriptor, options) {
    const d = asAz(descriptor);
    const [{ AzureStore }, { storeBackend }] = await Promise.all([
      import('./azure-store.js'),
      import('../../src/lake/backend.js'),
    ]);
    const store = new AzureStore({
      client: options.client as BlobServiceClient | undefined,
      account: d.account,
      endpoint: endpointOf(d),
      offline: options.offline,
      env: options.env,
    });
    return storeBackend(store, d.container);
  },
};
