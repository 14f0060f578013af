/**
 * The local store's one map of file-system errors, and its debug output.
 *
 * @module
 */
import { debuglog } from 'node:util';
import { isAbort, NotFound, ProvcatError, StoreError } from '../../src/core/errors.js';

/** Debug output of the local store (`NODE_DEBUG=provcat:local`). */
export const debug = debuglog('provcat:local');

/** Where the store's parts send a debug line: `NODE_DEBUG=provcat:local` and the store's logger. */
export type Trace = (message: string) => void;

/**
 * The one place fs errors become provcat errors: `ENOENT` is `NotFound`, anything else a
 * `StoreError` with the fs error as `cause`. Provcat errors and aborts pass through unchanged.
 */
export function fsError(error: unknown, message: string, uri?: string): Error {
  if (error instanceof ProvcatError || isAbort(error)) return error as Error;
  const code = errorCode(error);
  if (code === 'ENOENT') return new NotFound(`${message}: not found`, { uri, cause: error });
  return new StoreError(`${message}: ${code ?? String(error)}`, { uri, cause: error });
}

/** The `code` of a Node.js system error (`ENOENT`, ...), or `undefined`. */
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}
