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
import { ProvcatError } from '../../src/errors.js';

/** The `@aws-sdk/client-s3` module. */
export type S3Sdk = typeof import('@aws-sdk/client-s3');
/** The `@smithy/node-http-handler` module. */
export type HttpHandlerModule = typeof import('@smithy/node-http-handler');

let sdk: Promise<S3Sdk> | undefined;
let handler: Promise<HttpHandlerModule> | undefined;

function missing(name: string, cause: unknown): ProvcatError {
  return new ProvcatError(
    `the s3 driver needs ${name}, which failed to load (npm install ${name}): ${String(cause)}`,
    { cause },
  );
}

/**
 * True once this process asked for `@aws-sdk/client-s3` (a command that needed the SDK client;
 * the lean read path does not). For tests and debugging.
 */
export function s3SdkRequested(): boolean {
  return sdk !== undefined;
}

/** `@aws-sdk/client-s3`, imported once on first use. A failed import is retried on the next call. */
export function loadS3Sdk(): Promise<S3Sdk> {
  sdk ??= import('@aws-sdk/client-s3').catch((cause: unknown) => {
    sdk = undefined;
    throw missing('@aws-sdk/client-s3', cause);
  });
  return sdk;
}

/** `@smithy/node-http-handler`, imported once on first use. */
export function loadHttpHandler(): Promise<HttpHandlerModule> {
  handler ??= import('@smithy/node-http-handler').catch((cause: unknown) => {
    handler = undefined;
    throw missing('@smithy/node-http-handler', cause);
  });
  return handler;
}
