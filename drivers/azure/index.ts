/**
 * The Azure Blob driver (`provcat/drivers/azure`): `az://container/key` on Azure Blob storage and
 * its emulators; importing it loads no SDK. See docs/drivers/azure.md.
 *
 * @module
 */

export { AzureStore, blobSdk } from './azure-store.js';
export { encodeBlobName } from './blob-answer.js';
export { ALL_BLOCKS, AzureBlocks, blockId } from './blocks.js';
export type { AzureAuth, AzureConfig, AzureStoreOptions } from './config.js';
export { parseConnectionString, resolveAzureConfig } from './config.js';
export { type AzureErrorContext, azUriText, mapAzureError } from './errors.js';
export { parseBlobList } from './lean.js';
