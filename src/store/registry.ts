/**
 * One entry point that picks the store for a URI's scheme: {@link storeFor}; and the one place
 * the core knows the built-in drivers.
 *
 * Drivers register a factory per scheme and a managed-stage descriptor kind
 * (src/lake/stage-kinds.ts). The built-in drivers (`local`, `s3`, `gs`, `az`) are registered here
 * lazily: their store modules (and cloud SDKs) load only when a URI of that scheme is first used, so commands
 * that need no network never load an SDK; of each, only its small, SDK-free stage-kind module is
 * imported up front (a descriptor is validated with no I/O). Third-party drivers call
 * {@link registerDriver} and `registerStageKind`.
 *
 * @module
 */
import { azureStageKind } from '../../drivers/azure/stage-kind.js';
import { gcsStageKind } from '../../drivers/gcs/stage-kind.js';
import { localStageKind } from '../../drivers/local/stage-kind.js';
import { s3StageKind } from '../../drivers/s3/stage-kind.js';
import { InvalidArgument, UriError } from '../core/errors.js';
import { toUri, type Uri } from '../core/uri.js';
import { registerStageKind } from '../lake/stage-kinds.js';
import type { ObjectStore } from './object-store.js';
import type { StoreOptions } from './store.js';

/** Makes a store for one scheme from the shared options (and driver options, e.g. an SDK client). */
export type DriverFactory = (
  options: StoreOptions & Record<string, unknown>,
) => Promise<ObjectStore>;

const factories = new Map<string, DriverFactory>();

/** Register (or replace) the driver for `scheme`. */
export function registerDriver(scheme: string, factory: DriverFactory): void {
  factories.set(scheme, factory);
}

/** The schemes with a registered driver. */
export function registeredSchemes(): string[] {
  return [...factories.keys()].sort();
}

registerDriver('local', async (options) => {
  const { LocalStore } = await import('../../drivers/local/index.js');
  return new LocalStore(options);
});
registerDriver('s3', async (options) => {
  const { S3Store } = await import('../../drivers/s3/index.js');
  return new S3Store(options);
});
registerDriver('gs', async (options) => {
  const { GcsStore } = await import('../../drivers/gcs/index.js');
  return new GcsStore(options);
});
registerDriver('az', async (options) => {
  const { AzureStore } = await import('../../drivers/azure/index.js');
  return new AzureStore(options);
});
registerStageKind(localStageKind);
registerStageKind(s3StageKind);
registerStageKind(gcsStageKind);
registerStageKind(azureStageKind);

/** Options of {@link storeFor}: the shared ones, a named endpoint, and driver options. */
export type StoreForOptions = StoreOptions & {
  /**
   * A named endpoint of the config file (src/store/profiles.ts). Default: `PROVCAT_PROFILE`
   * (read from `env` when given, else `process.env`). Its scheme must be the URI's.
   */
  profile?: string | undefined;
  /** Where the driver and the profile read their environment variables. Default `process.env`. */
  env?: NodeJS.ProcessEnv | undefined;
} & Record<string, unknown>;

/**
 * The store for a URI's scheme. `options` go to the driver: the shared {@link StoreOptions}
 * (cache, offline, concurrency, progress) plus driver options such as an injected SDK `client`.
 * With a `profile` (or `PROVCAT_PROFILE`), that named endpoint's settings come first, then the
 * environment variables that set the same things, then `options` (src/store/profiles.ts).
 * Throws {@link UriError} for a scheme no driver serves, `InvalidArgument` for a profile that is
 * missing, of another scheme, or in a bad config file.
 */
export async function storeFor(
  uri: Uri | string,
  options: StoreForOptions = {},
): Promise<ObjectStore> {
  const parsed = toUri(uri);
  const factory = factories.get(parsed.scheme);
  if (!factory) {
    throw new UriError(
      `no driver for ${parsed.scheme}:// (known: ${registeredSchemes().join(', ')})`,
      { uri: parsed.toString() },
    );
  }
  const env = options.env ?? process.env;
  const { profile: asked, ...rest } = options;
  const name = asked ?? (env.PROVCAT_PROFILE || undefined);
  if (name === undefined) return factory(rest);
  const { loadProfile, profileOptions } = await import('./profiles.js');
  const profile = await loadProfile(name, env);
  if (profile.scheme !== parsed.scheme) {
    throw new InvalidArgument(
      `profile ${name} (${profile.where}) is for ${profile.scheme}:// URIs, not ${parsed}`,
    );
  }
  // An option left undefined does not hide the profile's setting.
  const explicit = Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined));
  return factory({ ...profileOptions(profile, env, explicit), ...explicit });
}
