/**
 * Node built-ins loaded on first use. Every CLI command is a fresh process, and compiling
 * `node:tls` and `node:https` (with their internal modules) costs a process that only ever
 * speaks plain HTTP, such as one against a local S3 server, about 10 ms of CPU for nothing.
 *
 * @module
 */
import { createRequire } from 'node:module';

const load = createRequire(import.meta.url);
let tlsModule: typeof import('node:tls') | undefined;
let httpsModule: typeof import('node:https') | undefined;

/** `node:tls`, loaded by the first call. */
export function nodeTls(): typeof import('node:tls') {
  tlsModule ??= load('node:tls') as typeof import('node:tls');
  return tlsModule;
}

/** `node:https`, loaded by the first call. */
export function nodeHttps(): typeof import('node:https') {
  httpsModule ??= load('node:https') as typeof import('node:https');
  return httpsModule;
}
