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
import { UriError } from '../core/errors.js';
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

/**
 * The store for a URI's scheme. `options` go to the driver: the shared {@link StoreOptions}
 * (cache, offline, concurrency, progress) plus driver options such as an injected SDK `client`.
 * Throws {@link UriError} for a scheme no driver serves.
 */
export async function storeFor(
  uri: Uri | string,
  options: StoreOptions & Record<string, unknown> = {},
): Promise<ObjectStore> {
  const parsed = toUri(uri);
  const factory = factories.get(parsed.scheme);
  if (!factory) {
    throw new UriError(
      `no driver for ${parsed.scheme}:// (known: ${registeredSchemes().join(', ')})`,
      { uri: parsed.toString() },
    );
  }
  return factory(options);
}
