/**
 * The Azure driver's configuration, one pure function of options and environment
 * ({@link resolveAzureConfig}): Azure's own conventions (`AZURE_STORAGE_CONNECTION_STRING`, else
 * `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_KEY` or `DefaultAzureCredential`), and provcat's
 * `PROVCAT_AZURE_ENDPOINT` (an emulator, a proxy), which wins over a connection string's.
 *
 * @module
 */
import type { TokenCredential } from '@azure/identity';
import type { BlobServiceClient } from '@azure/storage-blob';
import { envSwitch, envText } from '../../src/driver-kit/env-settings.js';
import type { StoreOptions } from '../../src/store/store.js';

/** The storage emulators' development account (public, documented by Microsoft). */
const DEV_ACCOUNT = 'devstoreaccount1';
const DEV_KEY =
  'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

/** Options of {@link AzureStore} (on top of the options every store takes). */
export interface AzureStoreOptions extends StoreOptions {
  /** A client to use instead of building one (tests, embedders); reads then all go through it. */
  client?: BlobServiceClient | undefined;
  /** Default: `AZURE_STORAGE_CONNECTION_STRING`. */
  connectionString?: string | undefined;
  /** Storage account name. Default: the connection string's, else `AZURE_STORAGE_ACCOUNT`. */
  account?: string | undefined;
  /** Account key. Default: the connection string's, else `AZURE_STORAGE_KEY`. */
  accountKey?: string | undefined;
  /** Blob service URL (`http://127.0.0.1:10000/devstoreaccount1`). Default: `PROVCAT_AZURE_ENDPOINT`, the connection string's, else `https://ACCOUNT.blob.core.windows.net`. */
  endpoint?: string | undefined;
  /** A token credential instead of a key (default without a key: `DefaultAzureCredential`). */
  credential?: TokenCredential | undefined;
  /** Reads (GET, listing) without the SDK when signing with a key. Default true; `PROVCAT_AZURE_LEAN=0` turns it off. */
  leanReads?: boolean | undefined;
  /** Where the settings above are read from. Default `process.env`. */
  env?: NodeJS.ProcessEnv | undefined;
}

/** How requests are authorized. */
export type AzureAuth =
  | { kind: 'key'; account: string; key: string }
  | { kind: 'sas'; sas: string }
  | { kind: 'token'; credential: TokenCredential | undefined };

/** The options after defaults and the environment (`endpoint` without a trailing `/`). */
export interface AzureConfig {
  endpoint: string;
  account: string | undefined;
  auth: AzureAuth;
  leanReads: boolean;
}

/** The `Name=value` pairs of a connection string (names case-insensitive, values kept as is). */
export function parseConnectionString(text: string): Map<string, string> {
  const pairs = text.split(';').map((part) => /^\s*([^=]+?)\s*=(.*)$/.exec(part) ?? []);
  return new Map(pairs.flatMap(([, k, v]) => (k ? [[k.toLowerCase(), (v ?? '').trim()]] : [])));
}

/**
 * Apply defaults and the environment to the options (see the module comment). Throws RangeError
 * for a configuration that names no account (nor an endpoint with a key or SAS), so a
 * misconfiguration fails at construction, not at the first request. No I/O.
 */
export function resolveAzureConfig(
  options: AzureStoreOptions = {},
  env: NodeJS.ProcessEnv = options.env ?? process.env,
): AzureConfig {
  const csText = envText(options.connectionString, env.AZURE_STORAGE_CONNECTION_STRING);
  const cs = parseConnectionString(csText ?? '');
  const dev = cs.get('usedevelopmentstorage')?.toLowerCase() === 'true';
  const account = envText(
    options.account,
    dev ? DEV_ACCOUNT : cs.get('accountname'),
    env.AZURE_STORAGE_ACCOUNT,
  );
  const envKey = csText === undefined ? env.AZURE_STORAGE_KEY : undefined;
  const key = envText(options.accountKey, dev ? DEV_KEY : cs.get('accountkey'), envKey);
  const sas = cs.get('sharedaccesssignature');
  const protocol = cs.get('defaultendpointsprotocol') ?? 'https';
  const host = `${account}.blob.${cs.get('endpointsuffix') ?? 'core.windows.net'}`;
  const given = envText(options.endpoint, env.PROVCAT_AZURE_ENDPOINT);
  const endpoint = envText(
    given,
    cs.get('blobendpoint'),
    dev ? `http://127.0.0.1:10000/${DEV_ACCOUNT}` : undefined,
    account && `${protocol}://${host}`,
  );
  if (endpoint === undefined) {
    throw new RangeError(
      'no Azure storage account: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT ' +
        '(with AZURE_STORAGE_KEY, or a login DefaultAzureCredential finds)',
    );
  }
  const auth: AzureAuth =
    options.credential === undefined && key !== undefined && account !== undefined
      ? { kind: 'key', account, key }
      : sas !== undefined
        ? { kind: 'sas', sas: sas.replace(/^\?/, '') }
        : { kind: 'token', credential: options.credential };
  if (!URL.canParse(endpoint) || !/^https?:$/.test(new URL(endpoint).protocol)) {
    const source = given === undefined ? 'the blob endpoint' : 'PROVCAT_AZURE_ENDPOINT';
    throw new RangeError(`${source} is not an http(s) URL: '${endpoint}'`);
  }
  const leanReads = options.leanReads ?? envSwitch(env.PROVCAT_AZURE_LEAN, true);
  return { endpoint: endpoint.replace(/\/+$/, ''), account, auth, leanReads };
}
