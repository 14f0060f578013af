/**
 * {@link branchFrom}: make a new top-level folder (a branch) by copying a branch or a commit,
 * file by file, server-side.
 *
 * The reference leaves a branch that fails halfway half made. Here a branch records its intent
 * before copying anything: `.provcat/branches/<name>.json` (src/commits/branch-record.ts), a
 * canonical JSON object naming the source and where the exact version of every file to copy is
 * recorded, created only if absent. Running the same command again reads that record and
 * completes the branch: it copies only the files that are missing, refuses (StoreError) when a
 * file that is there is not the recorded source version (size and ETag differ) or is not part
 * of the branch at all, and writes `.provcat/branches/<name>.done` at the end. A complete
 * branch, or a folder that exists without a record, is refused as existing.
 *
 * The record does not list the files (`provcat.branch/2`): a commit names them in its pages, and
 * a branch from a branch first writes the pages of a snapshot of the source's current versions,
 * taken like a commit's (snapshot.ts), and records their root — so the new branch is the source
 * at one instant even while it changes, and a rerun copies that same recorded state, not the
 * source's state at the rerun. The copy walks the pages in key order beside a listing of the
 * branch (a merge of two sorted streams), so its memory does not grow with the number of files.
 * Records of `provcat.branch/1`, which list every file, are still read and resumed.
 *
 * @module
 */
import { setMaxListeners } from 'node:events';
import { debuglog } from 'node:util';
import type { CachedStoreContext } from '../cache/context.js';
import type { CreateMode, ObjectInfo } from '../contract/primitives.js';
import type { ProgressCallback } from '../contract/store-context.js';
import { checkConcurrency } from '../core/concurrency.js';
import { NotFound, OfflineMiss, StoreError, UriError } from '../core/errors.js';
import { segmentProblem, toUri, Uri } from '../core/uri.js';
import { createOnce, isNotFound, noCreateError, readOldest } from '../logs/small-objects.js';
import {
  type BranchIntent,
  type BranchIntent2,
  type BranchSource,
  type BranchTree,
  branchRecordBytes,
  parseBranchRecord,
} from './branch-record.js';
import {
  BRANCH_FORMAT_2,
  branchDoneKey,
  branchIntentKey,
  COMMIT_FORMAT_2,
  type CommitFile,
  type CommitHead,
  canonicalJson,
  compareUtf8,
  isCommitId,
  isMetaKey,
  sha256Hex,
} from './format.js';
import { newestEntry } from './log.js';
import { PageReader } from './pages/page-store.js';
import { CommitTree } from './pages/tree.js';
import { writePages } from './pages/write.js';
import { hasKeysUnder } from './pin.js';
import { commitCovers, MAX_COMMIT_BYTES, openCommit } from './read.js';
import { snapshotStream } from './snapshot.js';

const debug = debuglog('provcat:commits');

/** Options of {@link branchFrom}. */
export interface BranchOptions {
  signal?: AbortSignal | undefined;
  /** Most copies in flight (default: the store's concurrency). */
  concurrency?: number | undefined;
  /** Progress: files and bytes copied so far, with totals (also sent to the store's callback). */
  onProgress?: ProgressCallback | undefined;
}

async function resolveSource(
  store: CachedStoreContext,
  bucket: string,
  source: string,
  signal: AbortSignal | undefined,
): Promise<BranchSource> {
  if (typeof source !== 'string' || source === '') {
    throw new UriError('a branch source is a branch name, a commit ID or a URI');
  }
  if (isCommitId(source)) {
    const commit = (await openCommit(store, bucket, source, { signal })).head;
    return { commit: source, folder: commit.folder };
  }
  if (source.includes('://')) {
    const s = toUri(source);
    const loc = store.locate(s);
    if (loc.bucket !== bucket) {
      throw new UriError(`a branch is copied within one bucket; ${s} is in another`, {
        uri: s.toString(),
      });
    }
    if (s.at?.kind === 'version') {
      throw new UriError(`a branch copies a folder or a commit, not one file version: ${s}`, {
        uri: s.toString(),
      });
    }
    const folder = s.asFolder().prefix;
    if (isMetaKey(folder)) throw new UriError('.provcat/ belongs to provcat', { uri: source });
    return { commit: s.at?.kind === 'commit' ? s.at.id : null, folder };
  }
  const name = source.endsWith('/') ? source.slice(0, -1) : source;
  const problem = segmentProblem(name);
  if (problem) throw new UriError(`bad branch name '${source}': ${problem}`);
  if (isMetaKey(`${name}/`)) throw new UriError('.provcat/ belongs to provcat', { uri: source });
  return { commit: null, folder: `${name}/` };
}

function sameSource(a: BranchSource, b: BranchSource): boolean {
  return a.folder === b.folder && a.commit === b.commit;
}

function describe(s: BranchSource): string {
  return s.commit ? `commit ${s.commit} at '${s.folder}'` : `folder '${s.folder}'`;
}

/**
 * Same bytes as recorded: equal size, and equal ETag when both sides report one that is
 * comparable (a multipart ETag, `"...-N"`, changes under a server-side copy, so only the size
 * speaks for it).
 */
function sameContent(there: ObjectInfo, file: CommitFile): boolean {
  if (there.size !== file.size) return false;
  const a = there.etag;
  const b = file.etag;
  if (a === undefined || b === undefined || b.includes('-')) return true;
  return a === b;
}

/**
 * Make the branch `uri` (a top-level folder, `scheme://bucket/name/`) from `source`: a branch
 * name (`main`), a commit ID (64 hex), or a URI in the same bucket (a folder, or a folder at
 * `?at=commit:`). Files keep their path relative to the source folder (a commit's source
 * folder is the committed folder). Returns the branch's folder URI.
 *
 * Guarantees:
 * - Copies exactly the recorded versions (a commit's list; for a live folder, a two-listing
 *   snapshot), server-side with `_copy`, at most `concurrency` at once.
 * - An existing branch raises `StoreError`, except an unfinished one from the same source: that
 *   run completes it, copying only the missing files. A file there that differs from its
 *   source, or a file not in the branch, raises `StoreError` and nothing is overwritten.
 * - `UriError` for a branch URI that is not a top-level folder, with `?at=`, or named
 *   `.provcat`; `NotFound` for an unknown commit or a source that holds no files (a folder
 *   that does not exist, a commit with nothing there); `StoreError` for a store that cannot
 *   create only-if-absent; `OfflineMiss` offline.
 */
export async function branchFrom(
  store: CachedStoreContext,
  uri: Uri | string,
  source: string,
  options: BranchOptions = {},
): Promise<Uri> {
  const u = toUri(uri);
  checkConcurrency(options.concurrency);
  const where = u.toString();
  if (u.at) throw new UriError(`a branch is a folder URI without ?at=: ${u}`, { uri: where });
  const branchUri = u.asFolder();
  const { bucket } = store.locate(branchUri);
  if (branchUri.segments.length !== 1) {
    throw new UriError(
      `a branch is a folder at the top of the bucket (scheme://bucket/name/): ${u}`,
      {
        uri: where,
      },
    );
  }
  const branch = branchUri.prefix;
  const name = branchUri.segments[0] as string;
  if (isMetaKey(branch)) throw new UriError('.provcat/ belongs to provcat', { uri: where });
  const { signal } = options;
  if (store.offline) throw new OfflineMiss(`offline: branch ${branchUri} needs the store`);
  const wanted = await resolveSource(store, bucket, source, signal);
  const mode = await store._createMode(bucket);
  if (mode === 'none') throw noCreateError(store, bucket, `branch ${branchUri}`);

  const intentKey = branchIntentKey(name);
  const readIntent = async (): Promise<BranchIntent | undefined> => {
    // A format 1 record lists every file: it may be as large as a format 1 commit.
    const bytes = await readOldest(store, bucket, intentKey, { limit: MAX_COMMIT_BYTES, signal });
    return bytes && parseBranchRecord(bytes, intentKey);
  };

  let intent = await readIntent();
  if (!intent) {
    if (await hasKeysUnder(store, bucket, branch, signal)) {
      throw new StoreError(`branch ${branchUri} already exists`, { uri: where });
    }
    const fresh: BranchIntent2 = {
      format: BRANCH_FORMAT_2,
      branch,
      source: wanted,
      time: new Date().toISOString(),
    };
    const tree = await recordSource(store, bucket, wanted, mode, signal);
    if (tree) fresh.tree = tree;
    if (await createOnce(store, bucket, intentKey, branchRecordBytes(fresh), mode, signal)) {
      intent = fresh;
    } else intent = await readIntent();
    if (!intent) throw new StoreError(`branch record ${intentKey} vanished while being created`);
  } else {
    debug('branch %s: found an intent record (%s); resuming', where, intent.format);
  }
  if (intent.branch !== branch || !sameSource(intent.source, wanted)) {
    throw new StoreError(
      `branch ${branchUri} already exists (made from ${describe(intent.source)}, not ${describe(wanted)})`,
      { uri: where },
    );
  }
  if (await isDone(store, bucket, name, signal)) {
    throw new StoreError(`branch ${branchUri} already exists`, { uri: where });
  }
  await complete(store, bucket, branchUri, intent, options);
  await store._put(bucket, branchDoneKey(name), Buffer.from(sha256Hex(canonicalJson(intent))), {
    signal,
  });
  return branchUri;
}

function nothingThere(store: CachedStoreContext, bucket: string, source: BranchSource): NotFound {
  // Nothing at the source: a folder that does not exist (a store has no empty folders), or a
  // commit with no file there. Nothing was recorded or copied.
  const where = Uri.fromKey(store.scheme, bucket, source.folder);
  return new NotFound(`nothing to branch: ${describe(source)} holds no files (no ${where})`, {
    uri: where.toString(),
  });
}

/**
 * What a new record names the files by, checked before it is written: for a commit, the commit
 * itself (it must cover the source folder and hold a file there: `UriError`, `NotFound`); for a
 * live folder, the page tree of a two-listing snapshot, written now (`NotFound` when empty).
 */
async function recordSource(
  store: CachedStoreContext,
  bucket: string,
  source: BranchSource,
  mode: CreateMode,
  signal: AbortSignal | undefined,
): Promise<BranchTree | undefined> {
  if (source.commit) {
    const tree = await openCommit(store, bucket, source.commit, { signal });
    const folderUri = Uri.fromKey(store.scheme, bucket, source.folder);
    if (!commitCovers(tree.head, folderUri)) {
      throw new UriError(`commit ${tree.head.id} does not cover ${folderUri}`, {
        uri: folderUri.toString(),
      });
    }
    if (!(await tree.hasUnder(folderUri.prefix))) throw nothingThere(store, bucket, source);
    return undefined;
  }
  // The snapshot streams into pages, as a commit's does: no listing is held in memory. The pages
  // the folder's newest commit already has (an unchanged folder: all of them) are not written.
  const pointer = await newestEntry(store, bucket, source.folder, signal);
  const known = pointer
    ? await (await openCommit(store, bucket, pointer.id, { signal })).pageHashes()
    : undefined;
  const root = await snapshotStream(
    store,
    bucket,
    source.folder,
    (files) => writePages(store, bucket, files, { mode, known, signal }),
    { signal },
  );
  if (root === undefined) throw nothingThere(store, bucket, source);
  return { count: root.count, height: root.height, root: root.root };
}

/** The recorded source files, in key order: a commit's, a snapshot's page tree, or a format 1 list. */
async function recordedFiles(
  store: CachedStoreContext,
  bucket: string,
  intent: BranchIntent,
  signal: AbortSignal | undefined,
): Promise<AsyncIterable<CommitFile> | Iterable<CommitFile>> {
  const folder = intent.source.folder;
  if (intent.format !== BRANCH_FORMAT_2) {
    return [...intent.files].sort((a, b) => compareUtf8(a.key, b.key));
  }
  if (intent.source.commit) {
    return (await openCommit(store, bucket, intent.source.commit, { signal })).files(folder);
  }
  const tree = intent.tree as BranchTree;
  // The snapshot's tree is read, and every page verified, as a commit's pages are.
  const label = `branch ${intent.branch}`;
  const head = {
    format: COMMIT_FORMAT_2,
    id: sha256Hex(canonicalJson(intent)),
    bucket,
    folder,
    parent: null,
    number: 1,
    message: label,
    metadata: {},
    time: intent.time,
    count: tree.count,
    tree: { root: tree.root, height: tree.height },
  } satisfies CommitHead;
  const pages = new PageReader(store, bucket, folder, `of ${label}`, signal);
  return new CommitTree(head, undefined, pages).files(folder);
}

async function isDone(
  store: CachedStoreContext,
  bucket: string,
  name: string,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  try {
    await store._head(bucket, branchDoneKey(name), { signal });
    return true;
  } catch (error) {
    if (isNotFound(error)) return false;
    throw error;
  }
}

/** A listing that is not in key order (the merge then sorts the branch's listing in memory). */
class OutOfOrder extends Error {}

/** The files under the branch, in key order (or `OutOfOrder`); `sorted`: read whole and sorted. */
async function* branchObjects(
  store: CachedStoreContext,
  bucket: string,
  branch: string,
  sorted: boolean,
  signal: AbortSignal | undefined,
): AsyncGenerator<ObjectInfo> {
  const all: ObjectInfo[] = [];
  let previous: string | undefined;
  for await (const page of store._pages(bucket, branch, { signal })) {
    for (const o of page.objects) {
      if (o.key.endsWith('/') || !o.key.startsWith(branch)) continue;
      if (sorted) {
        all.push(o);
        continue;
      }
      if (previous !== undefined && compareUtf8(previous, o.key) >= 0) throw new OutOfOrder();
      previous = o.key;
      yield o;
    }
  }
  if (sorted) yield* all.sort((a, b) => compareUtf8(a.key, b.key));
}

/**
 * The recorded files the branch lacks, in key order, with their keys in the branch: a merge of
 * the recorded files and the branch's listing, both in key order. A file the branch holds is
 * checked against its source ({@link sameContent}); a file the branch holds that is not part of
 * it is a `StoreError`, as is one that differs from its source.
 */
async function* missingFiles(
  store: CachedStoreContext,
  bucket: string,
  branchUri: Uri,
  intent: BranchIntent,
  listing: { sorted: boolean },
  signal: AbortSignal | undefined,
): AsyncGenerator<[string, CommitFile]> {
  const branch = intent.branch;
  const from = intent.source.folder;
  const objects = branchObjects(store, bucket, branch, listing.sorted, signal);
  const foreign = (o: ObjectInfo) => {
    const there = Uri.fromKey(store.scheme, bucket, o.key);
    return new StoreError(
      `branch ${branchUri} is unfinished and holds ${there}, which is not part of it; ` +
        'remove it to let the branch complete',
      { uri: there.toString() },
    );
  };
  try {
    let there = (await objects.next()).value as ObjectInfo | undefined;
    for await (const file of await recordedFiles(store, bucket, intent, signal)) {
      const toKey = branch + file.key.slice(from.length);
      if (there !== undefined && compareUtf8(there.key, toKey) < 0) throw foreign(there);
      if (there?.key === toKey) {
        if (!sameContent(there, file)) {
          const at = Uri.fromKey(store.scheme, bucket, toKey);
          throw new StoreError(
            `branch ${branchUri} is unfinished and ${at} differs from its source ` +
              `${file.key} (version ${file.versionId}); nothing was overwritten`,
            { uri: at.toString() },
          );
        }
        there = (await objects.next()).value as ObjectInfo | undefined;
        continue;
      }
      yield [toKey, file];
    }
    if (there !== undefined) throw foreign(there);
  } finally {
    await objects.return(undefined);
  }
}

/**
 * Run `fn` on each item of `items` as they come, at most `limit` at once; the first failure
 * aborts the others (their signal) and is thrown once all have settled.
 */
async function forEachOf<T>(
  items: AsyncIterable<T>,
  limit: number,
  fn: (item: T, signal: AbortSignal) => Promise<void>,
  signal: AbortSignal | undefined,
): Promise<void> {
  const inner = new AbortController();
  setMaxListeners(Math.max(10, limit * 2 + 4), inner.signal);
  const onAbort = () => inner.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const iterator = items[Symbol.asyncIterator]();
  let failure: { error: unknown } | undefined;
  const fail = (error: unknown) => {
    failure ??= { error };
    inner.abort(error);
  };
  const worker = async () => {
    while (!failure && !inner.signal.aborted) {
      let next: IteratorResult<T>;
      try {
        next = await iterator.next();
      } catch (error) {
        fail(error);
        return;
      }
      if (next.done) return;
      try {
        await fn(next.value, inner.signal);
      } catch (error) {
        fail(error);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: limit }, worker));
    if (failure) await iterator.return?.();
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
  if (failure) throw (failure as { error: unknown }).error;
  signal?.throwIfAborted();
}

/**
 * Copy what is missing of `intent` into the branch, after checking what is there: one pass of
 * the merge to check the branch and count what is missing (nothing is copied when a file there
 * is refused), a second to copy it.
 */
async function complete(
  store: CachedStoreContext,
  bucket: string,
  branchUri: Uri,
  intent: BranchIntent,
  options: BranchOptions,
): Promise<void> {
  const { signal } = options;
  const listing = { sorted: false };
  let totalBytes = 0;
  let totalFiles = 0;
  const count = async () => {
    totalBytes = 0;
    totalFiles = 0;
    for await (const [, f] of missingFiles(store, bucket, branchUri, intent, listing, signal)) {
      totalBytes += f.size;
      totalFiles += 1;
    }
  };
  try {
    await count();
  } catch (error) {
    if (!(error instanceof OutOfOrder)) throw error;
    debug('branch %s: the store lists out of key order; sorting the listing', branchUri);
    listing.sorted = true;
    await count();
  }
  debug('branch %s: %d file(s) to copy', branchUri, totalFiles);

  const sinks = [store.onProgress, options.onProgress].filter(
    (f): f is ProgressCallback => f !== undefined,
  );
  let bytes = 0;
  let files = 0;
  const report = () => {
    for (const sink of sinks) {
      sink({
        operation: 'branch',
        uri: branchUri.toString(),
        bytes,
        totalBytes,
        files,
        totalFiles,
      });
    }
  };
  report();
  await forEachOf(
    missingFiles(store, bucket, branchUri, intent, listing, signal),
    options.concurrency ?? store.concurrency,
    async ([toKey, file], s) => {
      const info = await store._copy(bucket, file.key, file.versionId, toKey, { signal: s });
      if (info.size !== file.size) {
        throw new StoreError(
          `copy of ${file.key} (version ${file.versionId}) to ${toKey} wrote ${info.size} bytes, not ${file.size}`,
        );
      }
      bytes += file.size;
      files += 1;
      report();
    },
    signal,
  );
}
