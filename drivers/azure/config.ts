/**
 * Configuration of the Azure driver: the options an {@link AzureStore} takes and how they combine
 * with the environment, in one pure function ({@link resolveAzureConfig}) tested without a server.
 *
 * Azure's own conventions first: `AZURE_STORAGE_CONNECTION_STRING` (as the Azure CLI and SDK
 * samples read it, `UseDevelopmentStorage=true` included), else `AZURE_STORAGE_ACCOUNT` with
 * `AZURE_STORAGE_KEY`, else that account with `DefaultAzureCredential` (environment, workload and
 * managed identity, Azure CLI login). Azure has no common variable for "the blob endpoint is
 * elsewhere" outside connection strings, so that one is provcat's: `PROVCAT_AZURE_ENDPOINT`
 * (an emulator, a proxy, a sovereign cloud), which wins over a connection string's `BlobEndpoint`.
 *
 * @module
 */
import type { TokenCredential } from '@azure/identity';
import type { BlobServiceClient } from '@azure/storage-blob';
import type { StoreOptions } from '../../src/store.js';

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

/** The options after defaults and environment are applied. */
export interface AzureConfig {
  /** The blob service URL, without a trailing `/`. */
  endpoint: string;
  /** The account name, when known (messages, user-delegation SAS). */
  account: string | undefined;
  auth: AzureAuth;
  leanReads: boolean;
}

const nonEmpty = (v: string | undefined) =>
  v === undefined || v.trim() === '' ? undefined : v.trim();

/** The `Name=value` pairs of a connection string (names case-insensitive, values kept as is). */
export function parseConnectionString(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of text.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) out.set(part.slice(0, eq).trim().toLowerCase(), part.slice(eq + 1).trim());
  }
  return out;
}

function checkedEndpoint(url: string, source: string): string {
  if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
    throw new RangeError(`${source} is not an http(s) URL: '${url}'`);
  }
  return url.replace(/\/+$/, '');
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
  const csText =
    nonEmpty(options.connectionString) ?? nonEmpty(env.AZURE_STORAGE_CONNECTION_STRING);
  const cs = parseConnectionString(csText ?? '');
  const dev = cs.get('usedevelopmentstorage')?.toLowerCase() === 'true';
  const account =
    nonEmpty(options.account) ??
    (dev ? DEV_ACCOUNT : cs.get('accountname')) ??
    nonEmpty(env.AZURE_STORAGE_ACCOUNT);
  const key =
    nonEmpty(options.accountKey) ??
    (dev ? DEV_KEY : cs.get('accountkey')) ??
    (csText === undefined ? nonEmpty(env.AZURE_STORAGE_KEY) : undefined);
  const sas = cs.get('sharedaccesssignature');
  const suffix = cs.get('endpointsuffix') ?? 'core.windows.net';
  const protocol = cs.get('defaultendpointsprotocol') ?? 'https';
  const given = nonEmpty(options.endpoint) ?? nonEmpty(env.PROVCAT_AZURE_ENDPOINT);
  const endpoint =
    given ??
    cs.get('blobendpoint') ??
    (dev ? `http://127.0.0.1:10000/${DEV_ACCOUNT}` : undefined) ??
    (account === undefined ? undefined : `${protocol}://${account}.blob.${suffix}`);
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
  const leanEnv = nonEmpty(env.PROVCAT_AZURE_LEAN);
  return {
    endpoint: checkedEndpoint(
      endpoint,
      given === undefined ? 'the blob endpoint' : 'PROVCAT_AZURE_ENDPOINT',
    ),
    account,
    auth,
    leanReads: options.leanReads ?? !(leanEnv === '0' || leanEnv?.toLowerCase() === 'false'),
  };
}
