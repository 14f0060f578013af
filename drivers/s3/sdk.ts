/**
 * Lazy loading of the AWS SDK.
 *
 * `@aws-sdk/client-s3` and its HTTP handler are imported on the first S3 call, never at module
 * load: a CLI command that needs no network (`provcat cache info`, an offline fetch from the
 * cache) does not pay for loading the SDK (see docs/drivers/s3.md for the measured time). Only
 * type imports of the SDK appear elsewhere in this driver, and TypeScript erases them.
 *
 * @module
 */
import { lazyModule } from '../../src/core/lazy-module.js';

/** The `@aws-sdk/client-s3` module. */
export type S3Sdk = typeof import('@aws-sdk/client-s3');
/** The `@smithy/node-http-handler` module. */
export type HttpHandlerModule = typeof import('@smithy/node-http-handler');

const sdk = lazyModule('s3', '@aws-sdk/client-s3', () => import('@aws-sdk/client-s3'));

/**
 * True once this process asked for `@aws-sdk/client-s3` (a command that needed the SDK client;
 * the lean read path does not). For tests and debugging.
 */
export function s3SdkRequested(): boolean {
  return sdk.made;
}

/** `@aws-sdk/client-s3`, imported once on first use. A failed import is retried on the next call. */
export const loadS3Sdk: () => Promise<S3Sdk> = sdk;

/** `@smithy/node-http-handler`, imported once on first use. */
export const loadHttpHandler: () => Promise<HttpHandlerModule> = lazyModule(
  's3',
  '@smithy/node-http-handler',
  () => import('@smithy/node-http-handler'),
);
