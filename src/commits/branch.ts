/**
 * {@link branchFrom}: make a new top-level folder (a branch) by copying a branch or a commit,
 * file by file, server-side.
 *
 * The reference leaves a branch that fails halfway half made. Here a branch records its intent
 * before copying anything: `.provcat/branches/<name>.json`, a canonical JSON object
 * (`provcat.branch/1`) with the source and the exact version of every file to copy, created
 * only if absent. Running the same command again reads that record and completes the branch:
 * it copies only the files that are missing, refuses (StoreError) when a file that is there is
 * not the recorded source version (size and ETag differ) or is not part of the branch at all,
 * and writes `.provcat/branches/<name>.done` at the end. A complete branch, or a folder that
 * exists without a record, is refused as existing.
 *
 * A branch from a branch copies a snapshot of the source's current versions taken like a
 * commit's (snapshot.ts), so the new branch is the source at one instant even while it changes;
 * a rerun copies that same recorded state, not the source's state at the rerun.
 *
 * @module
 */
import { debuglog } from 'node:util';
import type { CachedStoreContext } from '../cache/context.js';
import type { ObjectInfo } from '../contract/primitives.js';
import type { ProgressCallback } from '../contract/store-context.js';
import { checkConcurrency, forEachLimit } from '../core/concurrency.js';
import { NotFound, OfflineMiss, StoreError, UriError } from '../core/errors.js';
import { segmentProblem, toUri, Uri } from '../core/uri.js';
import { createOnce, isNotFound, noCreateError, readOldest } from '../logs/small-objects.js';
import {
  BRANCH_FORMAT,
  branchDoneKey,
  branchIntentKey,
  type CommitFile,
  canonicalJson,
  compareUtf8,
  isCommitId,
  isMetaKey,
  sha256Hex,
} from './format.js';
import { hasKeysUnder } from './pin.js';
import { commitCovers, MAX_COMMIT_BYTES, openCommit } from './read.js';
import { snapshotFolder } from './snapshot.js';

const debug = debuglog('provcat:commits');

/** Options of {@link branchFrom}. */
export interface BranchOptions {
  signal?: AbortSignal | undefined;
  /** Most copies in flight (default: the store's concurrency). */
  concurrency?: number | undefined;
  /** Progress: files and bytes copied so far, with totals (also sent to the store's callback). */
  onProgress?: ProgressCallback | undefined;
}

/** What a branch copies from: a commit (of `folder` or a folder above it) or a live folder. */
interface BranchSource {
  /** The commit ID, or `null` for a snapshot of the live folder. */
  commit: string | null;
  /** The source folder prefix; file keys are copied relative to it. */
  folder: string;
}

/** The intent record, `.provcat/branches/<name>.json`. */
interface BranchIntent {
  format: typeof BRANCH_FORMAT;
  /** The branch's folder prefix (`name/`). */
  branch: string;
  source: BranchSource;
  time: string;
  /** The source files, exactly as copied (full source keys, their versions). */
  files: CommitFile[];
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

function parseIntent(bytes: Buffer, key: string): BranchIntent {
  let value: BranchIntent;
  try {
    value = JSON.parse(bytes.toString('utf8')) as BranchIntent;
  } catch (cause) {
    throw new StoreError(`branch record ${key} is not JSON`, { cause });
  }
  const ok =
    value !== null &&
    typeof value === 'object' &&
    value.format === BRANCH_FORMAT &&
    typeof value.branch === 'string' &&
    typeof value.source?.folder === 'string' &&
    (value.source.commit === null || isCommitId(String(value.source.commit))) &&
    Array.isArray(value.files) &&
    value.files.every(
      (f) =>
        typeof f?.key === 'string' &&
        f.key.startsWith(value.source.folder) &&
        typeof f.versionId === 'string' &&
        Number.isSafeInteger(f.size),
    );
  if (!ok) throw new StoreError(`branch record ${key} is not a valid ${BRANCH_FORMAT} object`);
  return value;
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
    const bytes = await readOldest(store, bucket, intentKey, { limit: MAX_COMMIT_BYTES, signal });
    return bytes && parseIntent(bytes, intentKey);
  };

  let intent = await readIntent();
  if (!intent) {
    if (await hasKeysUnder(store, bucket, branch, signal)) {
      throw new StoreError(`branch ${branchUri} already exists`, { uri: where });
    }
    const files = await sourceFiles(store, bucket, wanted, signal);
    const fresh: BranchIntent = {
      format: BRANCH_FORMAT,
      branch,
      source: wanted,
      time: new Date().toISOString(),
      files,
    };
    const bytes = Buffer.from(canonicalJson(fresh), 'utf8');
    if (await createOnce(store, bucket, intentKey, bytes, mode, signal)) intent = fresh;
    else intent = await readIntent();
    if (!intent) throw new StoreError(`branch record ${intentKey} vanished while being created`);
  } else {
    debug('branch %s: found an intent record; resuming', where);
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

async function sourceFiles(
  store: CachedStoreContext,
  bucket: string,
  source: BranchSource,
  signal: AbortSignal | undefined,
): Promise<CommitFile[]> {
  let files: CommitFile[];
  if (source.commit) {
    const tree = await openCommit(store, bucket, source.commit, { signal });
    const folderUri = Uri.fromKey(store.scheme, bucket, source.folder);
    if (!commitCovers(tree.head, folderUri)) {
      throw new UriError(`commit ${tree.head.id} does not cover ${folderUri}`, {
        uri: folderUri.toString(),
      });
    }
    files = await tree.filesUnder(folderUri.prefix);
  } else {
    files = await snapshotFolder(store, bucket, source.folder, { signal });
  }
  if (files.length === 0) {
    // Nothing at the source: a folder that does not exist (a store has no empty folders), or a
    // commit with no file there. Nothing was recorded or copied.
    const where = Uri.fromKey(store.scheme, bucket, source.folder);
    throw new NotFound(`nothing to branch: ${describe(source)} holds no files (no ${where})`, {
      uri: where.toString(),
    });
  }
  return files;
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

/** Copy what is missing of `intent` into the branch, after checking what is there. */
async function complete(
  store: CachedStoreContext,
  bucket: string,
  branchUri: Uri,
  intent: BranchIntent,
  options: BranchOptions,
): Promise<void> {
  const { signal } = options;
  const branch = intent.branch;
  const sourceFolder = intent.source.folder;
  const target = new Map<string, CommitFile>();
  for (const f of intent.files) target.set(branch + f.key.slice(sourceFolder.length), f);

  const present = new Set<string>();
  for await (const page of store._pages(bucket, branch, { signal })) {
    for (const o of page.objects) {
      if (o.key.endsWith('/')) continue;
      const file = target.get(o.key);
      const there = Uri.fromKey(store.scheme, bucket, o.key);
      if (!file) {
        throw new StoreError(
          `branch ${branchUri} is unfinished and holds ${there}, which is not part of it; ` +
            'remove it to let the branch complete',
          { uri: there.toString() },
        );
      }
      if (!sameContent(o, file)) {
        throw new StoreError(
          `branch ${branchUri} is unfinished and ${there} differs from its source ` +
            `${file.key} (version ${file.versionId}); nothing was overwritten`,
          { uri: there.toString() },
        );
      }
      present.add(o.key);
    }
  }
  const missing = [...target.entries()]
    .filter(([key]) => !present.has(key))
    .sort(([a], [b]) => compareUtf8(a, b));
  debug('branch %s: %d of %d files to copy', branchUri, missing.length, target.size);

  const sinks = [store.onProgress, options.onProgress].filter(
    (f): f is ProgressCallback => f !== undefined,
  );
  const totalBytes = missing.reduce((n, [, f]) => n + f.size, 0);
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
        totalFiles: missing.length,
      });
    }
  };
  report();
  await forEachLimit(
    missing,
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
