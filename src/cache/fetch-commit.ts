/**
 * Fetching at `?at=commit:ID`: exactly the versions the commit lists, for the committed folder or
 * any file or folder below it.
 *
 * A commit never changes, so its cache copy (`commit/<scheme>/<bucket>/<id>/<key...>`) is
 * complete once marked done and is then answered with no store call, online or offline. Bytes
 * are shared: each file links to the blob of its version ID, so commits that share unchanged
 * files share their bytes, and a version already downloaded is never downloaded again. Every
 * downloaded version is checked against the commit's size and ETag, and its bytes against the
 * digest the commit records (`sha256`, or an ETag that is a plain MD5) before it is cached.
 *
 * @module
 */
import { dirname } from 'node:path';
import type { CommitFile } from '../commits/format.js';
import { fileAt, filesUnder, loadCommit } from '../commits/load.js';
import { forEachLimit } from '../concurrency.js';
import { NotFound, ObjectIntegrityError, OfflineMiss } from '../errors.js';
import type { FetchOptions, FetchResult, ObjectStore } from '../object-store.js';
import type { Uri } from '../uri.js';
import { lstatOrUndefined, wholeUpToFor } from './cache.js';
import { recordedDigest } from './content-digest.js';
import { checkDiskNames, Transfer } from './fetch.js';

/** Fetch exactly the versions a commit lists for `u` (a folder or file at or below it). */
export async function fetchCommit(
  store: ObjectStore,
  u: Uri,
  id: string,
  options: FetchOptions,
): Promise<FetchResult> {
  const { cache } = store;
  const { bucket } = store.locate(u);
  const commit = await loadCommit(store, bucket, id, { signal: options.signal });
  const single = u.isFolder ? undefined : fileAt(commit, u.key);
  const folder = single ? u : u.asFolder();
  const files = single ? [single] : filesUnder(commit, folder);
  if (files.length === 0 && folder.prefix !== commit.folder) {
    throw new NotFound(`nothing at ${u} in commit ${id}`, { uri: u.toString() });
  }
  const path = cache.commitTreePath(store.scheme, bucket, id, single ? single.key : folder.prefix);
  const viewId = `commit:${single ? u : folder}`;
  // A file of the copy is trusted as a regular file of the recorded size in real directories
  // (no link followed); anything else is linked again from its blob.
  const intact = (f: CommitFile): boolean => {
    const dest = cache.commitTreePath(store.scheme, bucket, id, f.key);
    const st = lstatOrUndefined(dest);
    return st?.isFile() === true && st.size === f.size && cache.isRealDir(dirname(dest));
  };
  const state = await cache.readState(viewId);
  if (state?.done && files.every(intact)) {
    return { path, files: files.length, downloaded: 0, bytes: 0 };
  }
  checkDiskNames(
    files.map((f) => f.key.slice(folder.prefix.length)),
    folder,
  );
  return cache.withLock(viewId, async () => {
    const missing = files.filter((f) => !intact(f));
    if (missing.length > 0) await cache.clearState(viewId);
    const totalBytes = missing.reduce((n, f) => n + f.size, 0);
    const transfer = new Transfer(store, u, options, totalBytes, missing.length);
    let downloaded = 0;
    await forEachLimit(
      missing,
      options.concurrency ?? store.concurrency,
      async (f, signal) => {
        const blob = cache.blobPath(store.scheme, bucket, f.key, f.versionId);
        if ((await cache.hasBlob(blob)) === undefined) {
          const where = `${store.scheme}://${bucket}/${f.key}?at=version:${f.versionId}`;
          if (store.offline) {
            throw new OfflineMiss(`offline, and ${where} of commit ${id} is not cached`, {
              uri: u.toString(),
            });
          }
          const res = await store._getVersion(bucket, f.key, f.versionId, {
            signal,
            wholeUpTo: wholeUpToFor(f.size),
          });
          const etag = res.info.etag;
          if (res.contentLength !== f.size || (f.etag && etag && etag !== f.etag)) {
            if (!res.bytes) res.body.destroy();
            throw new ObjectIntegrityError(
              'DigestMismatch',
              `${where}: the store returned ${res.contentLength} bytes with ETag ${etag}, commit ${id} says ${f.size} bytes with ETag ${f.etag}`,
              { uri: where },
            );
          }
          // The bytes must hash to what the commit records (its sha256, or an ETag that is a
          // plain MD5), checked before the blob appears: bit rot in the store is never cached.
          const expected = recordedDigest(f);
          await cache.installBlob(
            blob,
            res,
            f.size,
            transfer.add,
            signal,
            expected && { ...expected, uri: where, source: `commit ${id}` },
          );
          downloaded++;
        }
        await cache.linkInto(blob, cache.commitTreePath(store.scheme, bucket, id, f.key));
        transfer.fileDone();
      },
      options.signal,
    );
    if (!single) {
      await cache.prune(path, new Set(files.map((f) => f.key.slice(folder.prefix.length))));
    }
    await cache.writeState({ uri: viewId, done: true, files: {} });
    return { path, files: files.length, downloaded, bytes: transfer.bytes };
  });
}
