/**
 * Configuration of the GCS driver, read in this one place, the GCS way: Application Default
 * Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's login, the metadata server), the
 * project from `GOOGLE_CLOUD_PROJECT` or `GCLOUD_PROJECT`, a custom endpoint (an emulator, the
 * test server) from `apiEndpoint` or `STORAGE_EMULATOR_HOST` — which, as in the SDK, gets no
 * credentials unless `useAuthWithCustomEndpoint`. Only `PROVCAT_GCS_LEAN=0` is provcat's own. A
 * pure function of the options and an environment object.
 *
 * @module
 */
import type { Storage } from '@google-cloud/storage';
import { envSwitch, envText } from '../../src/driver-kit/env-settings.js';
import type { StoreOptions } from '../../src/store/store.js';

/** Resumable chunks other than the last are multiples of this (256 KiB). */
export const CHUNK_QUANTUM = 256 * 1024;
/** Google's endpoint, when none is configured. */
export const GOOGLE_ENDPOINT = 'https://storage.googleapis.com';
/** The project named to a custom endpoint without credentials when none is set (emulators ignore it). */
export const EMULATOR_PROJECT = 'provcat';

/** Options of {@link GcsStore} (on top of the options every store takes). */
export interface GcsStoreOptions extends StoreOptions {
  /** A `Storage` client to use (its endpoint and credentials; metadata reads through it). */
  client?: Storage | undefined;
  /** Custom endpoint URL. Default: `STORAGE_EMULATOR_HOST`, else Google's. */
  apiEndpoint?: string | undefined;
  /** Project (bucket creation). Default: `GOOGLE_CLOUD_PROJECT`, `GCLOUD_PROJECT`, ADC's. */
  projectId?: string | undefined;
  /** A service-account key file. Default: `GOOGLE_APPLICATION_CREDENTIALS` (else ADC's chain). */
  keyFilename?: string | undefined;
  /** Send credentials to a custom endpoint too (a private endpoint of real GCS). */
  useAuthWithCustomEndpoint?: boolean | undefined;
  /** Metadata reads and listings on the driver's own GETs. Default on, unless `PROVCAT_GCS_LEAN=0`. */
  lean?: boolean | undefined;
  /**
   * The longest one SDK request may take, its answer's body included, before it is abandoned and
   * retried (default 60 s, the bound the SDK means to apply and drops). Without it, an answer cut
   * short by a clean close never settles: node-fetch 2, under the SDK, waits for the rest.
   * Default `PROVCAT_GCS_REQUEST_TIMEOUT_MS`, else 60 s.
   */
  requestTimeoutMs?: number | undefined;
  /** Where the settings above are read from. Default `process.env`. */
  env?: NodeJS.ProcessEnv | undefined;
}

/** The options after defaults and the environment. */
export interface GcsConfig {
  /** The endpoint, without a trailing `/`. */
  endpoint: string;
  /** The endpoint is not Google's. */
  custom: boolean;
  /** Requests carry an `Authorization` header. */
  auth: boolean;
  projectId: string | undefined;
  keyFilename: string | undefined;
  lean: boolean;
  requestTimeoutMs: number;
}

/** {@link GcsStoreOptions.requestTimeoutMs} when none is given. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;

/**
 * Apply defaults and the environment. RangeError for an endpoint that is no URL (a bare host
 * gets `https://`, as in the SDK), a part size off the 256 KiB grid, or a request timeout that is
 * not a positive integer.
 */
export function resolveGcsConfig(
  options: GcsStoreOptions = {},
  env = options.env ?? process.env,
): GcsConfig {
  const given = envText(options.apiEndpoint, env.STORAGE_EMULATOR_HOST);
  const endpoint =
    given === undefined
      ? GOOGLE_ENDPOINT
      : (/^https?:\/\//i.test(given) ? given : `https://${given}`).replace(/\/+$/, '');
  if (!URL.canParse(endpoint)) throw new RangeError(`the GCS endpoint is not a URL: '${given}'`);
  if (options.partSize !== undefined && options.partSize % CHUNK_QUANTUM !== 0) {
    throw new RangeError(`GCS part sizes are multiples of 256 KiB, not ${options.partSize}`);
  }
  const timeoutText = envText(env.PROVCAT_GCS_REQUEST_TIMEOUT_MS);
  const requestTimeoutMs =
    options.requestTimeoutMs ??
    (timeoutText === undefined ? DEFAULT_REQUEST_TIMEOUT_MS : Number(timeoutText));
  if (!Number.isSafeInteger(requestTimeoutMs) || requestTimeoutMs < 1) {
    const name =
      options.requestTimeoutMs === undefined
        ? 'PROVCAT_GCS_REQUEST_TIMEOUT_MS'
        : 'requestTimeoutMs';
    throw new RangeError(
      `${name} is a positive integer of milliseconds, not ${timeoutText ?? requestTimeoutMs}`,
    );
  }
  const custom = endpoint !== GOOGLE_ENDPOINT;
  const auth = !custom || options.useAuthWithCustomEndpoint === true;
  const projectId = envText(options.projectId, env.GOOGLE_CLOUD_PROJECT, env.GCLOUD_PROJECT);
  return {
    endpoint,
    custom,
    auth,
    projectId: projectId ?? (auth ? undefined : EMULATOR_PROJECT),
    keyFilename: envText(options.keyFilename, env.GOOGLE_APPLICATION_CREDENTIALS),
    lean: options.lean ?? envSwitch(env.PROVCAT_GCS_LEAN, true),
    requestTimeoutMs,
  };
}
