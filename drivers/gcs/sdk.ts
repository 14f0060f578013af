/**
 * `@google-cloud/storage`, loaded by the first call that needs it (src/lazy-module.ts): commands
 * without a GCS call, and reads on the lean path against a custom endpoint, do not pay for it.
 *
 * @module
 */
import { lazyModule } from '../../src/lazy-module.js';

const sdk = lazyModule('gcs', '@google-cloud/storage', () => import('@google-cloud/storage'));

/** True once this process asked for the SDK (for tests and debugging). */
export const gcsSdkRequested = (): boolean => sdk.requested();

/** The SDK, imported once on first use; a failed import is retried by the next call. */
export const loadGcsSdk = () => sdk.load();
