/**
 * {@link pinUri}: turn a URI into one that names fixed bytes forever.
 *
 * A file pins to its current version (`?at=version:`). A folder pins to a commit: its own newest
 * commit, else the newest commit of the nearest folder above it whose files include something
 * below it (a folder inside a committed folder is read at that commit). A URI that already has
 * `?at=` is checked, so a pin handed around can be validated before a long job starts.
 *
 * @module
 */

import type { CachedStoreContext } from '../cache/context.js';
import { NotFound, OfflineMiss, StoreError, UriError } from '../core/errors.js';
import { toUri, Uri } from '../core/uri.js';
import { isNotFound } from '../logs/small-objects.js';
import { isMetaKey } from './format.js';
import { checkEntry, newestEntry } from './log.js';
import { commitCovers, openCommit } from './read.js';

/** Options of {@link pinUri}. */
export interface PinOptions {
  signal?: AbortSignal | undefined;
}

function offline(uri: Uri, why: string): OfflineMiss {
  return new OfflineMiss(`offline: ${why} of ${uri} needs the store`, { uri: uri.toString() });
}

async function checkPinned(store: CachedStoreContext, u: Uri, signal?: AbortSignal): Promise<Uri> {
  const at = u.at as NonNullable<Uri['at']>;
  const { bucket, key } = store.locate(u);
  if (at.kind === 'version') {
    if (store.offline) throw offline(u, 'checking a version');
    try {
      await store._headVersion(bucket, key, at.id, { signal });
    } catch (error) {
      if (isNotFound(error)) {
        throw new NotFound(`no version ${at.id} of ${u.withAt(undefined)}`, {
          uri: u.toString(),
          cause: error,
        });
      }
      throw error;
    }
    return u;
  }
  const tree = await openCommit(store, bucket, at.id, { signal });
  const commit = tree.head;
  const held = u.isFolder
    ? commitCovers(commit, u) && (u.prefix === commit.folder || (await tree.hasUnder(u.prefix)))
    : commitCovers(commit, u) && (await tree.fileAt(u.key)) !== undefined;
  if (!held) {
    throw new NotFound(
      `commit ${at.id} (of ${Uri.fromKey(store.scheme, bucket, commit.folder)}) holds nothing at ${u.withAt(undefined)}`,
      { uri: u.toString() },
    );
  }
  return u;
}

/**
 * Pin a URI.
 *
 * - A file: `?at=version:<versionId>` of its current version (`StoreError` when the bucket keeps
 *   no versions, `NotFound` when absent). A file-form URI that names a folder is pinned as one.
 * - A folder: `?at=commit:<id>` of its newest commit; else of the newest commit of the nearest
 *   folder above it (up to the bucket) that records files below it; `StoreError` when there is
 *   none.
 * - A URI with `?at=`: checked (the version exists; the commit exists, verifies, and holds the
 *   file or something below the folder) and returned unchanged; `NotFound` otherwise.
 *
 * Offline: a commit pin is checked from the cache (no store call); anything else needs the store
 * (`OfflineMiss`).
 */
export async function pinUri(
  store: CachedStoreContext,
  uri: Uri | string,
  options: PinOptions = {},
): Promise<Uri> {
  const u = toUri(uri);
  const { signal } = options;
  const { bucket, key } = store.locate(u);
  if (u.at) return checkPinned(store, u, signal);
  if (store.offline) throw offline(u, 'pinning');
  if (isMetaKey(u.isFolder ? u.prefix : key)) {
    throw new UriError(`keys under .provcat/ belong to provcat and are not pinned: ${u}`, {
      uri: u.toString(),
    });
  }
  if (!u.isFolder) {
    try {
      const versionId = await store._versionOf(bucket, key, { signal });
      return u.withAt({ kind: 'version', id: versionId });
    } catch (error) {
      if (!isNotFound(error)) throw error;
      if (!(await hasKeysUnder(store, bucket, `${key}/`, signal))) {
        throw new NotFound(`no file or folder at ${u}`, { uri: u.toString(), cause: error });
      }
    }
  }
  const folderUri = u.asFolder();
  for (let depth = folderUri.segments.length; depth >= 0; depth--) {
    const segments = folderUri.segments.slice(0, depth);
    const folder = segments.length === 0 ? '' : `${segments.join('/')}/`;
    const pointer = await newestEntry(store, bucket, folder, signal);
    if (!pointer) continue;
    const tree = await openCommit(store, bucket, pointer.id, { signal });
    checkEntry(tree.head, pointer, folder);
    if (depth === folderUri.segments.length || (await tree.hasUnder(folderUri.prefix))) {
      return folderUri.withAt({ kind: 'commit', id: tree.head.id });
    }
  }
  throw new StoreError(
    `no commit holds ${folderUri}: commit it (or a folder above it) first, e.g. provcat commit ${folderUri} -m MSG`,
    { uri: folderUri.toString() },
  );
}

/** True when any key lies under `prefix` (one short listing). */
export async function hasKeysUnder(
  store: CachedStoreContext,
  bucket: string,
  prefix: string,
  signal?: AbortSignal,
): Promise<boolean> {
  for await (const page of store._pages(bucket, prefix, { limit: 1, signal })) {
    if (page.objects.length > 0 || page.prefixes.length > 0) return true;
  }
  return false;
}
