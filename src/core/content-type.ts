/**
 * {@link contentTypeFor}: the one rule for the Content-Type of an object provcat writes, on every
 * driver — what the caller gave (`--content-type`, the `contentType` option), else the type the
 * name's extension stands for in the `mime` package's table (`a.csv` →
 * `text/csv`, `b.json` → `application/json`), else `application/octet-stream` (no extension, or
 * one the table does not know). The same rule holds for `put`, `push` and `upload`, for objects
 * sent in one request and in parts; a driver only hands the type to its SDK.
 *
 * @module
 */

import { lazy } from './lazy-module.js';

/** The type of an object whose name says nothing: `application/octet-stream`. */
export const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

/** The `mime` package, imported on first use. */
const mime = lazy(() => import('mime'));

/**
 * The Content-Type to send for an object named `name` (a key or a local path: only its last
 * segment's extension counts): `given` when it is set, else the type of the extension, else
 * {@link DEFAULT_CONTENT_TYPE}. See the module comment.
 */
export async function contentTypeFor(name: string, given?: string | undefined): Promise<string> {
  if (given !== undefined) return given;
  const base = name.slice(name.lastIndexOf('/') + 1);
  if (!base.includes('.')) return DEFAULT_CONTENT_TYPE;
  return (await mime()).default.getType(base) ?? DEFAULT_CONTENT_TYPE;
}
