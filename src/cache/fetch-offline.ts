/**
 * Fetches offline (src/cache/fetch.ts, when the store is offline): what the cache holds intact of
 * a file or folder, at any version, from its own fetch or from that of a folder above it — never
 * a copy that is not one state of the store (a file changed, or a file added by a fetch of a
 * folder inside it) — else `OfflineMiss`.
 *
 * @module
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { OfflineMiss } from '../core/errors.js';
import type { Uri } from '../core/uri.js';
import { type FileRecord, lstatOrUndefined, matchesRecord } from './cache.js';
import type { CachedStoreContext } from './context.js';
import type { FetchResult } from './transfer.js';

/**
 * True when `dest` is still the file a state recorded ({@link matchesRecord}: a regular file,
 * same inode, size and mtime), in real directories (no link on the way).
 */
export function sameFile(
  cache: CachedStoreContext['cache'],
  dest: string,
  rec: FileRecord,
): boolean {
  return matchesRecord(lstatOrUndefined(dest), rec) && cache.isRealDir(path.dirname(dest));
}

/** Offline folder fetch: the folder's own complete copy, or one of a folder above it. */
export async function offlineFolder(
  store: CachedStoreContext,
  u: Uri,
  dir: string,
): Promise<FetchResult> {
  let changed = false;
  for (let f: Uri = u; ; f = f.parent()) {
    const state = await store.cache.readState(`tree:${f}`);
    if (state?.done && store.cache.isRealDir(dir)) {
      // Complete only if every file recorded below `u` is still there as it was linked (one
      // lstat per file: a file the user deleted, truncated or replaced by a link is a miss) and
      // nothing else is: a fetch of a folder inside `u` shares its files, and one that found
      // files added upstream linked them in, beside files of `u`'s older state.
      const rel = f.relative(u) ?? '';
      const top = store.cache.treePath(store.scheme, u.bucket, f.prefix);
      let count = 0;
      let intact = true;
      for (const [k, rec] of Object.entries(state.files)) {
        if (!k.startsWith(rel)) continue;
        count++;
        if (!sameFile(store.cache, `${top}/${k}`, rec)) {
          intact = false;
          break;
        }
      }
      if (intact && (count > 0 || u.isBucket) && entriesBelow(dir) === count) {
        return { path: dir, files: count, downloaded: 0, bytes: 0 };
      }
      changed = true;
    }
    if (f.isBucket) break;
  }
  const why = changed
    ? 'its cached copy is no longer the one fetched (a fetch of a folder inside it, or a change in the cache, replaced or added files): fetch it online again'
    : 'it was never fetched completely into the cache';
  throw new OfflineMiss(`offline, and ${u}: ${why}`, { uri: u.toString() });
}

/** Entries other than folders below `dir`, at any depth (files, links, anything else). */
function entriesBelow(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isDirectory()) n++;
  }
  return n;
}

/** Offline file fetch: its own cached copy, or the copy inside a fetched folder. */
export async function offlineFile(store: CachedStoreContext, u: Uri): Promise<FetchResult> {
  const { cache } = store;
  const { bucket, key } = store.locate(u);
  const own = await cache.readState(`file:${u}`);
  const cur = own?.files[''];
  const dest = cache.filePath(store.scheme, bucket, key);
  if (own?.done && cur && sameFile(cache, dest, cur)) {
    return { path: dest, files: 1, downloaded: 0, bytes: 0 };
  }
  for (let f = u.parent(); ; f = f.parent()) {
    const state = await cache.readState(`tree:${f}`);
    const rel = f.relative(u) ?? '';
    const entry = state?.files[rel];
    const inTree = `${cache.treePath(store.scheme, bucket, f.prefix)}/${rel}`;
    if (state?.done && entry && sameFile(cache, inTree, entry)) {
      return { path: inTree, files: 1, downloaded: 0, bytes: 0 };
    }
    if (f.isBucket) break;
  }
  // Maybe it is a folder named without its '/'.
  try {
    return await offlineFolder(
      store,
      u.asFolder(),
      cache.treePath(store.scheme, bucket, `${key}/`),
    );
  } catch {
    throw new OfflineMiss(`offline, and ${u} is not in the cache`, { uri: u.toString() });
  }
}
