/**
 * {@link deleteFolder}: remove every object under a folder (`provcat rm -r`).
 *
 * One flat listing gives the keys; each is deleted with the `_delete` primitive, at most
 * `concurrency` at a time. Every key under the folder goes — folder markers (`a/`) and keys no URI
 * can name included, since a delete needs no URI — except the bucket's `.provcat/` (commits and
 * logs), which is never deleted. On a bucket that keeps versions a delete leaves a delete marker:
 * the files are gone from the folder now, and every commit that recorded them still reads them.
 *
 * @module
 */

import type { StoreContext } from '../contract/store-context.js';
import { checkConcurrency, forEachLimit } from '../core/concurrency.js';
import { NotFound, UriError } from '../core/errors.js';
import { isMetaKey } from '../core/keys.js';
import { toUri, type Uri } from '../core/uri.js';

/** Options of {@link deleteFolder}. */
export interface DeleteFolderOptions {
  /** Allow a bucket root (every object in the bucket, `.provcat/` excepted). */
  force?: boolean | undefined;
  /** Most deletes in flight (default: the store's `concurrency`). */
  concurrency?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** What {@link deleteFolder} did. */
export interface DeleteFolderResult {
  /** The folder. */
  uri: Uri;
  /** Objects this call deleted (one deleted meanwhile by another writer is not counted). */
  deleted: number;
}

/**
 * Delete every object under the folder `uri` (a file-form URI is taken as the folder of that
 * name). Refused with `UriError`: a URI with `?at=`, a folder under `.provcat/`, and a bucket
 * root unless `force`. `NotFound` when nothing is under the folder. Not atomic: a failure midway
 * leaves the objects not yet deleted (a rerun deletes the rest). `OfflineMiss` offline.
 */
export async function deleteFolder(
  store: StoreContext,
  uri: Uri | string,
  options: DeleteFolderOptions = {},
): Promise<DeleteFolderResult> {
  const u = toUri(uri);
  checkConcurrency(options.concurrency);
  const refuse = (why: string) =>
    new UriError(`delete of folder ${u} refused: ${why}`, { uri: u.toString() });
  if (u.at) throw refuse('a pinned URI (?at=) cannot be written');
  const folder = u.asFolder();
  const { bucket } = store.locate(folder);
  const prefix = folder.prefix;
  if (isMetaKey(prefix)) throw refuse('keys under .provcat/ belong to provcat');
  if (folder.isBucket && options.force !== true) {
    throw refuse('it is a bucket root, and would delete every file in the bucket (force it)');
  }
  store.online(folder, 'delete');
  const keys: string[] = [];
  for await (const page of store._pages(bucket, prefix, { signal: options.signal })) {
    for (const o of page.objects) {
      if (!o.key.startsWith(prefix) || (prefix === '' && isMetaKey(o.key))) continue;
      keys.push(o.key);
    }
  }
  if (keys.length === 0) {
    throw new NotFound(`no folder at ${folder}`, { uri: folder.toString() });
  }
  let deleted = 0;
  await forEachLimit(
    keys,
    options.concurrency ?? store.concurrency,
    async (key, signal) => {
      try {
        await store._delete(bucket, key, { signal });
        deleted++;
      } catch (error) {
        if (!(error instanceof NotFound)) throw error;
      }
    },
    options.signal,
  );
  return { uri: folder, deleted };
}
