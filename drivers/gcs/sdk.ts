/**
 * `@google-cloud/storage`, loaded by the first call that needs it, never at module load: commands
 * without a GCS call, and reads on the lean path against a custom endpoint, do not pay for it.
 * Elsewhere the driver has only type imports of the SDK, which TypeScript erases.
 *
 * @module
 */
import { ProvcatError } from '../../src/errors.js';

let sdk: Promise<typeof import('@google-cloud/storage')> | undefined;

/** True once this process asked for the SDK (for tests and debugging). */
export function gcsSdkRequested(): boolean {
  return sdk !== undefined;
}

/** The SDK, imported once on first use; a failed import is retried by the next call. */
export function loadGcsSdk(): Promise<typeof import('@google-cloud/storage')> {
  sdk ??= import('@google-cloud/storage').catch((cause: unknown) => {
    sdk = undefined;
    throw new ProvcatError(
      `the gcs driver needs @google-cloud/storage, which failed to load: ${String(cause)}`,
      { cause },
    );
  });
  return sdk;
}
