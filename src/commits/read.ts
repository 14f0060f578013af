/**
 * Reading commits: {@link openCommit} (the commit object from the store or cache, always
 * re-hashed, and a {@link CommitTree} over its files in either format), {@link loadCommit} (the
 * same, every file read into memory) and the helpers that answer reads at a loaded commit
 * ({@link commitCovers}, {@link filesUnder}).
 *
 * A commit object is immutable and named by the SHA-256 of its bytes, so once read and verified
 * it is kept in the cache (`Cache#commitPath`) and never asked of the store again; that is what
 * lets a pinned URI work offline. Every read, from the store or from the cache, re-hashes the
 * bytes: a tampered or corrupt object is refused, never answered from.
 *
 * @module
 */
import { rm } from 'node:fs/promises';
import { debuglog } from 'node:util';
import type { CachedStoreContext } from '../cache/context.js';
import { NotFound, ObjectIntegrityError, OfflineMiss } from '../core/errors.js';
import { readIfExists, writeFileAtomic } from '../core/fs-atomic.js';
import type { Uri } from '../core/uri.js';
import { isNotFound, readSmall } from '../logs/small-objects.js';
import {
  type Commit,
  type CommitFile,
  type CommitHead,
  checkCommitId,
  commitKey,
  parseCommitObject,
  sha256Hex,
} from './format.js';
import { PageReader } from './pages/page-store.js';
import { CommitTree, lowerBoundFiles } from './pages/tree.js';

const debug = debuglog('provcat:commits');

/** The largest commit object read (256 MiB: a format 1 commit of about a million files). */
export const MAX_COMMIT_BYTES = 256 * 1024 * 1024;

/** Options of {@link loadCommit}. */
export interface LoadCommitOptions {
  signal?: AbortSignal | undefined;
}

/**
 * Open commit `id` of `bucket`, verified: its metadata and a reader of its files, in either
 * format (a format 2 commit's pages are read, verified and cached as the reader needs them).
 *
 * Guarantees:
 * - The bytes hash to `id`, else `ObjectIntegrityError('DigestMismatch')`: a tampered commit is
 *   refused, never parsed. (A corrupt *cached* copy is deleted and read again from the store;
 *   offline, that is an `OfflineMiss` carrying the integrity error as its cause.) Pages are
 *   checked the same way on every read (src/commits/pages/page-store.ts); a missing page is a
 *   `StoreError`, never an empty answer.
 * - The object is a valid, canonical `provcat.commit/1` or `/2` object, else `StoreError`.
 * - A commit found in the cache is answered with no store call at all (offline or not); one read
 *   from the store is then cached (atomically: complete or absent).
 * - `NotFound` when the bucket has no such commit; `UriError` for an `id` that is not 64 hex;
 *   `OfflineMiss` when offline and not cached.
 */
export async function openCommit(
  store: CachedStoreContext,
  bucket: string,
  id: string,
  options: LoadCommitOptions = {},
): Promise<CommitTree> {
  const { head, files } = await loadObject(store, bucket, id, options);
  const pages = files ? undefined : new PageReader(store, bucket, head.folder, id, options.signal);
  return new CommitTree(head, files, pages);
}

/**
 * Read commit `id` of `bucket`, verified, with every file record in memory (a format 2 commit:
 * every page read and checked). The guarantees of {@link openCommit}; prefer it for one file or
 * one folder of a large commit.
 */
export async function loadCommit(
  store: CachedStoreContext,
  bucket: string,
  id: string,
  options: LoadCommitOptions = {},
): Promise<Commit> {
  const tree = await openCommit(store, bucket, id, options);
  return materialize(tree);
}

/** The whole {@link Commit} of an opened commit (every file record read). */
export async function materialize(tree: CommitTree): Promise<Commit> {
  const { count: _count, tree: _root, ...rest } = tree.head;
  const files = await tree.filesUnder('');
  return { ...rest, files };
}

async function loadObject(
  store: CachedStoreContext,
  bucket: string,
  id: string,
  options: LoadCommitOptions,
): Promise<{ head: CommitHead; files?: CommitFile[] | undefined }> {
  checkCommitId(id);
  const path = store.cache.commitPath(store.scheme, bucket, id);
  const where = `${store.scheme}://${bucket}/${commitKey(id)}`;
  let cacheProblem: ObjectIntegrityError | undefined;
  const cached = await readIfExists(path);
  if (cached !== undefined) {
    if (sha256Hex(cached) === id) return parseCommitObject(cached, id, bucket);
    cacheProblem = new ObjectIntegrityError(
      'DigestMismatch',
      `the cached copy of commit ${id} (${path}) does not hash to its ID; dropped`,
      { uri: where },
    );
    debug('%s', cacheProblem.message);
    await rm(path, { force: true });
  }
  if (store.offline) {
    throw new OfflineMiss(`offline: commit ${id} of ${store.scheme}://${bucket} is not cached`, {
      uri: where,
      cause: cacheProblem,
    });
  }
  let bytes: Buffer;
  try {
    bytes = await readSmall(store, bucket, commitKey(id), {
      limit: MAX_COMMIT_BYTES,
      signal: options.signal,
    });
  } catch (error) {
    if (isNotFound(error)) {
      throw new NotFound(`no commit ${id} in ${store.scheme}://${bucket}`, {
        uri: where,
        cause: error,
      });
    }
    throw error;
  }
  const actual = sha256Hex(bytes);
  if (actual !== id) {
    throw new ObjectIntegrityError(
      'DigestMismatch',
      `commit object ${where} hashes to ${actual}, not to its ID (tampered or corrupt)`,
      { uri: where },
    );
  }
  const commit = parseCommitObject(bytes, id, bucket);
  await writeFileAtomic(path, bytes);
  return commit;
}

/** Keep verified commit bytes in the cache (used right after writing a commit). */
export async function cacheCommit(
  store: CachedStoreContext,
  bucket: string,
  id: string,
  bytes: Uint8Array,
): Promise<void> {
  await writeFileAtomic(store.cache.commitPath(store.scheme, bucket, id), bytes);
}

/**
 * True when `uri` is the committed folder or lies below it, in the commit's bucket (whether or
 * not a file exists there at the commit; see {@link filesUnder}). The `?at=` of `uri` is ignored.
 */
export function commitCovers(commit: Pick<CommitHead, 'bucket' | 'folder'>, uri: Uri): boolean {
  if (uri.bucket !== commit.bucket) return false;
  return (uri.isFolder ? uri.prefix : uri.key).startsWith(commit.folder);
}

/**
 * The files of the commit at `uri`: for a file URI, that file (an empty array when the commit
 * does not hold it); for a folder URI, every file below it at any depth, in key order (empty
 * when none). A URI the commit does not cover gives an empty array. O(log n + result).
 */
export function filesUnder(commit: Commit, uri: Uri): CommitFile[] {
  if (!commitCovers(commit, uri)) return [];
  const files = commit.files;
  if (!uri.isFolder) {
    const i = lowerBoundFiles(files, uri.key);
    const f = files[i];
    return f !== undefined && f.key === uri.key ? [f] : [];
  }
  const prefix = uri.prefix;
  const out: CommitFile[] = [];
  for (let i = lowerBoundFiles(files, prefix); i < files.length; i++) {
    const f = files[i] as CommitFile;
    if (!f.key.startsWith(prefix)) break;
    out.push(f);
  }
  return out;
}

/** The file of the commit at exactly `key`, or `undefined`. */
export function fileAt(commit: Commit, key: string): CommitFile | undefined {
  const f = commit.files[lowerBoundFiles(commit.files, key)];
  return f !== undefined && f.key === key ? f : undefined;
}
