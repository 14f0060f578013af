/**
 * The Azure Blob driver (`provcat/drivers/azure`): `az://container/key` on Azure Blob storage and
 * its emulators. Importing this module does not load the Azure SDK; the first call that needs it
 * does. See docs/drivers/azure.md for configuration, versions, listing order and what was tested
 * against which server.
 *
 * @module
 */

export { AzureStore, PROBE_PREFIX } from './azure-store.js';
export { AzureBlocks, blockId } from './blocks.js';
export {
  type AzureAuth,
  type AzureConfig,
  type AzureStoreOptions,
  parseConnectionString,
  resolveAzureConfig,
} from './config.js';
export { type AzureErrorContext, azUriText, mapAzureError } from './errors.js';
export { encodeBlobName, parseBlobList } from './lean.js';
export { Utf8Order } from './order.js';
