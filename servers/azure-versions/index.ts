/**
 * The Azure versions test server: a wire-level Blob service with blob versioning, in memory, for
 * testing Azure clients through `@azure/storage-blob` over HTTP. See server.ts.
 *
 * @module
 */
export {
  type ArmedFault,
  type AzureVersionsServer,
  type AzureVersionsServerOptions,
  type Fault,
  type FaultMatch,
  type LogEntry,
  type OperationName,
  type ServerSettings,
  startAzureVersionsServer,
} from './server.js';
