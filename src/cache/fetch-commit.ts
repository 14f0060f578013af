/**
 * Fetching at `?at=commit:ID`: exactly the versions the commit lists, for the committed folder or
 * any file or folder below it.
 *
 * A commit never changes, so its cache copy (`commit/<scheme>/<bucket>/<id>/<key...>`) is
 * complete once marked done and is then answered with no store call, online or offline. Bytes
 * are shared: each file links to the blob of its version ID, so commits that share unchanged
 * files share their bytes, and a version already downloaded is never downloaded again. Every
 * downloaded version is checked against the commit's size and ETag, and its bytes against the
 * digest the commit records (`sha256`, or an ETag that is a plain MD5, unless the GET says that
 * ETag is not one: S3 SSE-KMS, SSE-C) before it is cached.
 *
 * @module
 */
import { dirname } from 'node:path';
import type { CommitFile } from '../commits/format.js';
import { commitCovers, openCommit } from '../commits/read.js';
import { forEachLimit } from '../core/concurrency.js';
import { NotFound, ObjectIntegrityError, OfflineMiss } from '../core/errors.js';
import { checkFolderKeys } from '../core/keys.js';
import type { Uri } from '../core/uri.js';
import {
  type FileRecord,
  lstatOrUndefined,
  matchesRecord,
  recordOf,
  type ViewState,
  wholeUpToFor,
} from './cache.js';
import { checkableWith, recordedDigest } from './content-digest.js';
import type { CachedStoreContext } from './context.js';
import { type FetchOptions, type FetchResult, Transfer } from './transfer.js';

/** Fetch exactly the versions a commit lists for `u` (a folder or file at or below it). */
export async function fetchCommit(
  store: CachedStoreContext,
  u: Uri,
  id: string,
  options: FetchOptions,
): Promise<FetchResult> {
  const { cache } = store;
  const { bucket } = store.locate(u);
  const tree = await openCommit(store, bucket, id, { signal: options.signal });
  const commit = tree.head;
  const single = u.isFolder || !commitCovers(commit, u) ? undefined : await tree.fileAt(u.key);
  const folder = single ? u : u.asFolder();
  const files = single
    ? [single]
    : commitCovers(commit, folder)
      ? await tree.filesUnder(folder.prefix)
      : [];
  if (files.length === 0 && folder.prefix !== commit.folder) {
    throw new NotFound(`nothing at ${u} in commit ${id}`, { uri: u.toString() });
  }
  const path = cache.commitTreePath(store.scheme, bucket, id, single ? single.key : folder.prefix);
  const viewId = `commit:${single ? u : folder}`;
  const destOf = (f: CommitFile) => cache.commitTreePath(store.scheme, bucket, id, f.key);
  // A file of the copy is reused while it is what the state recorded when it was linked (and
  // checked): a regular file, same inode, size and mtime, in real directories (no link
  // followed). One lstat per file; anything else is linked again from a checked blob.
  const intact = (f: CommitFile, rec: FileRecord | undefined): boolean => {
    if (rec === undefined || rec[0] !== f.versionId || rec[2] !== f.size) return false;
    const dest = destOf(f);
    return matchesRecord(lstatOrUndefined(dest), rec) && cache.isRealDir(dirname(dest));
  };
  const first = await cache.readState(viewId);
  if (first?.done && files.every((f) => intact(f, first.files[f.key]))) {
    return { path, files: files.length, downloaded: 0, bytes: 0 };
  }
  checkFolderKeys(
    folder,
    files.map((f) => f.key.slice(folder.prefix.length)),
  );
  return cache.withLock(viewId, async (lock) => {
    const state = await cache.readState(viewId);
    const record: ViewState['files'] = {};
    const missing: CommitFile[] = [];
    for (const f of files) {
      const rec = state?.files[f.key];
      if (rec && intact(f, rec)) record[f.key] = rec;
      else missing.push(f);
    }
    // Taking over from an interrupted fetch (a stale lock, or a copy there without a done
    // state): its temps are cleaned from the bucket's blob folder and the state folder.
    const recovering =
      lock.tookOver || (state ? !state.done : cache.isRealDir(single ? dirname(path) : path));
    if (recovering) cache.sweepBlobTemps(store.scheme, bucket);
    if (state && (missing.length > 0 || !state.done)) {
      lock.check();
      await cache.clearState(viewId);
    }
    const totalBytes = missing.reduce((n, f) => n + f.size, 0);
    const transfer = new Transfer(store, u, options, totalBytes, missing.length);
    let downloaded = 0;
    await forEachLimit(
      missing,
      options.concurrency ?? store.concurrency,
      async (f, signal) => {
        let blob = cache.blobPath(store.scheme, bucket, f.key, f.versionId);
        const expected = recordedDigest(f);
        const seen = state?.files[f.key];
        // A cached blob is linked only once checked: the commit's size, and its digest (once;
        // or unchanged since this copy linked it, by inode, size and mtime). A folder fetch
        // from a store whose listings give no version ID (S3) stored the same bytes under the
        // key's ETag: that blob serves too, once checked the same way.
        let cached = await cache.checkedBlob(blob, f.size, expected, seen);
        if (!cached && f.etag !== undefined) {
          const byEtag = cache.blobPath(store.scheme, bucket, f.key, `v:${f.etag}`);
          if (await cache.checkedBlob(byEtag, f.size, expected, seen)) {
            blob = byEtag;
            cached = true;
          }
        }
        if (!cached) {
          const where = `${store.scheme}://${bucket}/${f.key}?at=version:${f.versionId}`;
          if (store.offline) {
            throw new OfflineMiss(`offline, and ${where} of commit ${id} is not cached intact`, {
              uri: u.toString(),
            });
          }
          const res = await store._getVersion(bucket, f.key, f.versionId, {
            signal,
            wholeUpTo: wholeUpToFor(f.size),
          });
          const etag = res.info.etag;
          if (res.contentLength !== f.size || (f.etag && etag && etag !== f.etag)) {
            if (res.bytes) res.release?.();
            else res.body.destroy();
            throw new ObjectIntegrityError(
              'DigestMismatch',
              `${where}: the store returned ${res.contentLength} bytes with ETag ${etag}, commit ${id} says ${f.size} bytes with ETag ${f.etag}`,
              { uri: where },
            );
          }
          // The bytes must hash to what the commit records (its sha256, or an ETag that is a
          // plain MD5 — unless this GET says the ETag is none, SSE-KMS or SSE-C), checked
          // before the blob appears: bit rot in the store is never cached.
          const check = checkableWith(expected, res);
          await cache.installBlob(blob, res, {
            expectedSize: f.size,
            onBytes: transfer.add,
            signal,
            digest: check && { ...check, uri: where, source: `commit ${id}` },
          });
          downloaded++;
        }
        lock.check();
        const st = await cache.linkInto(blob, destOf(f));
        record[f.key] = recordOf(f.versionId, st);
        transfer.fileDone();
      },
      options.signal,
    );
    lock.check();
    if (!single) {
      await cache.prune(path, new Set(files.map((f) => f.key.slice(folder.prefix.length))));
    }
    lock.check();
    await cache.writeState({ uri: viewId, done: true, files: record }, { sweep: recovering });
    return { path, files: files.length, downloaded, bytes: transfer.bytes };
  });
}
