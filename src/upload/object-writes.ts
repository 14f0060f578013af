/**
 * `ObjectStore.put` and `ObjectStore.delete`: one object written from a local file, a stream or
 * bytes, or deleted, after the refusals every write shares ({@link writableLocation}). Each takes
 * the narrow store context (src/contract/store-context.ts), never the facade.
 *
 * @module
 */
import { stat as fsStat } from 'node:fs/promises';
import type { Entry } from '../contract/entry.js';
import type { PutSource } from '../contract/primitives.js';
import {
  type CallOptions,
  type Location,
  type ProgressCallback,
  progressFor,
  type StoreContext,
} from '../contract/store-context.js';
import { contentTypeFor } from '../core/content-type.js';
import { SourceError, UriError } from '../core/errors.js';
import { META_PREFIX } from '../core/keys.js';
import { toUri, type Uri } from '../core/uri.js';
import { fileEntry } from '../folders/entries.js';

/** Options of `ObjectStore.put`. */
export interface PutCallOptions {
  /** The Content-Type to store (default: by the key's extension, src/core/content-type.ts). */
  contentType?: string | undefined;
  signal?: AbortSignal | undefined;
  onProgress?: ProgressCallback | undefined;
}

/** `ObjectStore.put`: write one object and return the file written (see its doc). */
export async function putUri(
  ctx: StoreContext,
  uri: Uri | string,
  source: PutSource,
  options: PutCallOptions = {},
): Promise<Entry> {
  const u = toUri(uri);
  const { bucket, key } = writableLocation(ctx, u, 'put');
  let size: number | undefined;
  if (typeof source === 'string') size = await sourceFileSize(source);
  else if (source instanceof Uint8Array) size = source.byteLength;
  const progress = progressFor(ctx, 'put', u, options.onProgress, size);
  const putOptions = {
    size,
    contentType: await contentTypeFor(key, options.contentType),
    signal: options.signal,
    onProgress: progress,
  };
  const info = await ctx._put(bucket, key, source, putOptions);
  return fileEntry(u, info);
}

/** `ObjectStore.delete`: delete one object (see its doc). */
export async function deleteUri(
  ctx: StoreContext,
  uri: Uri | string,
  options: CallOptions = {},
): Promise<void> {
  const u = toUri(uri);
  const { bucket, key } = writableLocation(ctx, u, 'delete');
  await ctx._delete(bucket, key, { signal: options.signal });
}

/**
 * The bucket and key of a URI that put/delete may write: `UriError` for a pinned URI, a folder or
 * bucket, a key under `.provcat/` or one the store cannot hold exactly; `OfflineMiss` offline.
 */
export function writableLocation(ctx: StoreContext, u: Uri, what: string): Location {
  const loc = ctx.locate(u);
  const refuse = (why: string) => new UriError(`${what}: ${why}: ${u}`, { uri: u.toString() });
  if (u.at) throw refuse('a pinned URI (?at=) cannot be written');
  if (u.isFolder) throw refuse('a folder or bucket is not an object');
  if (`${loc.key}/`.startsWith(META_PREFIX))
    throw refuse(`keys under ${META_PREFIX} belong to provcat`);
  const problem = ctx.capabilities.keyProblem?.(loc.key);
  if (problem !== undefined)
    throw refuse(`the ${ctx.driver} store cannot hold this name exactly (${problem})`);
  ctx.online(u, what);
  return loc;
}

/**
 * The size of a local file to upload: SourceError when it cannot be read or is not a regular
 * file (a FIFO would block the put, a directory is not an object).
 */
async function sourceFileSize(file: string): Promise<number> {
  let stats: Awaited<ReturnType<typeof fsStat>>;
  try {
    stats = await fsStat(file);
  } catch (cause) {
    throw new SourceError(`cannot read ${file}: ${(cause as Error).message}`, { cause });
  }
  if (!stats.isFile()) throw new SourceError(`cannot upload ${file}: not a regular file`);
  return stats.size;
}
