/**
 * The Azure SDKs, loaded on first use (src/lazy-module.ts): `@azure/storage-blob` by the first
 * call that needs it, `@azure/identity` only when a token credential must be made. A command that
 * reads through the lean path loads neither.
 *
 * @module
 */
import { lazyModule } from '../../src/lazy-module.js';

/** The `@azure/storage-blob` module. */
export type BlobSdk = typeof import('@azure/storage-blob');

/** `@azure/storage-blob`; `blobSdk.requested()` tells whether this process asked for it. */
export const blobSdk = lazyModule(
  'azure',
  '@azure/storage-blob',
  () => import('@azure/storage-blob'),
);

const identity = lazyModule('azure', '@azure/identity', () => import('@azure/identity'));

/** A `DefaultAzureCredential` from `@azure/identity` (imported on first use). */
export async function defaultCredential(): Promise<import('@azure/identity').TokenCredential> {
  return new (await identity.load()).DefaultAzureCredential();
}
