/**
 * The GCS driver (`provcat/drivers/gcs`): `gs://bucket/key` on Google Cloud Storage and servers
 * that speak its JSON API. Importing it does not load `@google-cloud/storage`. See
 * docs/drivers/gcs.md.
 *
 * @module
 */
export { CHUNK_QUANTUM, type GcsConfig, type GcsStoreOptions, resolveGcsConfig } from './config.js';
export { gcsUriText, mapGcsError } from './errors.js';
export { GcsStore, gcsSdkRequested } from './gcs-store.js';
export { GcsResumable } from './resumable.js';
