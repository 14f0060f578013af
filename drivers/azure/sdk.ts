/**
 * Lazy loading of the Azure SDKs: `@azure/storage-blob` on the first call that needs the SDK
 * (a write, a version, a read the lean path hands back), `@azure/identity` only when a token
 * credential must be made. Elsewhere in the driver only type imports of them appear, which
 * TypeScript erases, so a command that reads through the lean path never loads either.
 *
 * @module
 */
import { ProvcatError } from '../../src/errors.js';

/** The `@azure/storage-blob` module. */
export type BlobSdk = typeof import('@azure/storage-blob');

let blob: Promise<BlobSdk> | undefined;

function missing(name: string, cause: unknown): ProvcatError {
  return new ProvcatError(
    `the azure driver needs ${name}, which failed to load (npm install ${name}): ${String(cause)}`,
    { cause },
  );
}

/** True once this process asked for `@azure/storage-blob` (for tests of the lean path). */
export function blobSdkRequested(): boolean {
  return blob !== undefined;
}

/** `@azure/storage-blob`, imported once; a failed import is retried on the next call. */
export function loadBlobSdk(): Promise<BlobSdk> {
  blob ??= import('@azure/storage-blob').catch((cause: unknown) => {
    blob = undefined;
    throw missing('@azure/storage-blob', cause);
  });
  return blob;
}

/** A `DefaultAzureCredential` from `@azure/identity` (imported here, on first use). */
export async function defaultCredential(): Promise<import('@azure/identity').TokenCredential> {
  try {
    const { DefaultAzureCredential } = await import('@azure/identity');
    return new DefaultAzureCredential();
  } catch (cause) {
    throw missing('@azure/identity', cause);
  }
}
