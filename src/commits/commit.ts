/**
 * {@link commitFolder}: record the version of every file under a folder as a new commit.
 *
 * The steps, each safe against other writers and other committers:
 *
 * 1. Read the folder's newest commit (the parent), N = its number + 1.
 * 2. Take a two-listing snapshot of the folder (snapshot.ts). It is taken *after* the parent
 *    was seen, and the parent's snapshot was taken before its log entry existed, so snapshots
 *    follow the log order: a commit never records an older state than its parent.
 * 3. Write the pages of the file list (`provcat.commit/2`, src/commits/pages/): only those the
 *    parent's tree does not already name, so a child shares every unchanged page with its
 *    parent. Then the canonical commit object, `.provcat/commits/<id>.json` (content-addressed:
 *    an existing object with the same name is the same commit, after a check of its bytes).
 * 4. Create log entry N only if absent. Losing that race means another commit took N: go back
 *    to step 1 (new parent, new snapshot, N + 1). Each loss is another committer's progress,
 *    so the loop is lock-free; it is still bounded ({@link COMMIT_ATTEMPTS}).
 *
 * Create modes (`_createMode`): `atomic` as above; `oldest-version-wins` writes the entry with
 * `_put` and the oldest version of the key wins (src/logs/create-only-log.ts); `none` refuses before writing anything.
 *
 * @module
 */
import { debuglog } from 'node:util';
import type { CachedStoreContext } from '../cache/context.js';
import { type FileFacts, sameBytes } from '../contract/entry.js';
import { InvalidArgument, OfflineMiss, StoreError } from '../core/errors.js';
import { type Backoff, backoffMs, sleep } from '../core/retry.js';
import type { Uri } from '../core/uri.js';
import { createOnce, noCreateError } from '../logs/small-objects.js';
import {
  COMMIT_FORMAT_2,
  type CommitBody2,
  type CommitFile,
  commitBytes,
  commitKey,
  logKey,
  MAX_COMMIT_NUMBER,
  sha256Hex,
} from './format.js';
import { checkEntry, folderOf, newestEntry } from './log.js';
import { diffTrees } from './pages/diff-trees.js';
import { PageReader } from './pages/page-store.js';
import { CommitTree } from './pages/tree.js';
import {
  type KnownDigests,
  type PageWrites,
  writeContentAddressed,
  writePages,
} from './pages/write.js';
import { cacheCommit, MAX_COMMIT_BYTES, openCommit } from './read.js';
import { snapshotStream } from './snapshot.js';

const debug = debuglog('provcat:commits');

export type { KnownDigests };

/** The wait after a lost log race: full jitter, at most 320 ms (after five losses in a row). */
const RACE_BACKOFF: Backoff = { baseMs: 10, capMs: 1000 };

/** Log races lost in a row before a commit gives up with a StoreError. */
export const COMMIT_ATTEMPTS = 64;

/** Options of {@link commitFolder}. */
export interface CommitOptions {
  /** Key-value pairs stored with the commit. */
  metadata?: Record<string, string> | undefined;
  /** Commit even when the files are exactly those of the parent commit. */
  allowEmpty?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * Refuse a commit message that is not a string or is only white space: {@link InvalidArgument},
 * before any I/O (`where` is the folder, for the message).
 */
export function checkMessage(message: unknown, where: string): void {
  if (typeof message !== 'string' || message.trim() === '') {
    throw new InvalidArgument(`commit of ${where} refused: the message is empty`, { uri: where });
  }
}

/** What {@link sameBytes} compares of a commit's file record. */
function factsOf(f: CommitFile): FileFacts {
  const sha256 = typeof f.sha256 === 'string' ? f.sha256 : undefined;
  return {
    key: f.key,
    size: f.size,
    version: f.versionId,
    versionId: f.versionId,
    etag: f.etag,
    sha256,
  };
}

/**
 * True when `next` records the same files as `parent`: the same keys, each the same file by the
 * rule `diff` uses ({@link sameBytes}), so "no change since commit N" means `diff` finds none.
 * Equal pages are skipped unread (diff-trees.ts).
 */
async function sameFiles(parent: CommitTree, next: CommitTree): Promise<boolean> {
  if (parent.head.tree && next.head.tree && parent.head.tree.root === next.head.tree.root) {
    return true;
  }
  for await (const change of diffTrees(parent, next, '')) {
    if (!change.a || !change.b || !sameBytes(factsOf(change.a), factsOf(change.b))) return false;
  }
  return true;
}

function checkMetadata(metadata: unknown): Record<string, string> {
  if (metadata === undefined) return {};
  if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata)) {
    throw new TypeError('commit metadata is an object of string values');
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(metadata)) {
    if (typeof v !== 'string') throw new TypeError(`commit metadata '${k}' is not a string`);
    out[k] = v;
  }
  return out;
}

/**
 * Record the version of every file under a folder as a new commit; returns the folder URI
 * pinned to it (`?at=commit:<id>`).
 *
 * Guarantees:
 * - The commit is a consistent snapshot of the folder (one instant), or a `StoreError` if the
 *   folder kept changing; never a mix of two states.
 * - Commits of one folder are numbered 1, 2, 3... without gaps or duplicates, each naming the
 *   previous as its parent, however many processes commit at once (on `atomic` and
 *   `oldest-version-wins` stores; `none` fails closed with a StoreError before writing).
 * - A commit that returned is in the log; one that threw is not (its commit object may remain
 *   as an unreferenced, harmless object).
 *
 * Refusals: `UriError` for a URI with `?at=` or under `.provcat/`; `InvalidArgument` for an
 * empty message (before any I/O); `StoreError` for a folder with no files, no change since the
 * parent (every file the same as the parent's by the rule `diff` uses, `sameBytes` in
 * src/contract/entry.ts; unless `allowEmpty`); `NotSupported` for a bucket without versions;
 * `OfflineMiss` offline. A file URI is taken as the folder of that name.
 *
 * `digests`: the SHA-256s the caller knows of exact versions (`commit --from`); each file record
 * whose key, version ID and size one of them names records it as `sha256`, which every fetch at
 * the commit then checks the bytes against.
 */
export async function commitFolder(
  store: CachedStoreContext,
  uri: Uri | string,
  message: string,
  options: CommitOptions = {},
  digests?: KnownDigests,
): Promise<Uri> {
  const { uri: folderUri, bucket, folder } = folderOf(store, uri, 'commit');
  const where = folderUri.toString();
  checkMessage(message, where);
  const metadata = checkMetadata(options.metadata);
  const { signal } = options;
  if (store.offline) throw new OfflineMiss(`offline: commit of ${where} needs the store`);
  const mode = await store._createMode(bucket);
  if (mode === 'none') throw noCreateError(store, bucket, `commit of ${where}`);

  for (let attempt = 0; attempt < COMMIT_ATTEMPTS; attempt++) {
    if (attempt > 0)
      await sleep(backoffMs(Math.min(attempt, 5), Math.random, RACE_BACKOFF), signal);
    const pointer = await newestEntry(store, bucket, folder, signal);
    let parent: CommitTree | undefined;
    if (pointer) {
      parent = await openCommit(store, bucket, pointer.id, { signal });
      checkEntry(parent.head, pointer, folder);
    }
    const known = parent ? await parent.pageHashes() : new Set<string>();
    const counts: PageWrites = { written: 0, shared: 0 };
    // The snapshot streams into pages: no listing is held in memory (snapshot.ts).
    const tree = await snapshotStream(
      store,
      bucket,
      folder,
      async (files) => {
        const root = await writePages(store, bucket, files, {
          mode,
          known,
          counts,
          digests,
          signal,
        });
        if (root === undefined) {
          throw new StoreError(`commit of ${where} refused: the folder has no files`, {
            uri: where,
          });
        }
        return root;
      },
      { signal },
    );
    const number = (parent?.head.number ?? 0) + 1;
    const body: CommitBody2 = {
      format: COMMIT_FORMAT_2,
      folder,
      parent: parent?.head.id ?? null,
      number,
      message,
      metadata,
      time: new Date().toISOString(),
      count: tree.count,
      root: tree.root,
      height: tree.height,
    };
    const bytes = commitBytes(body);
    const id = sha256Hex(bytes);
    if (parent && !options.allowEmpty) {
      const next = new CommitTree(
        { ...body, id, bucket, tree: { root: tree.root, height: tree.height } },
        undefined,
        new PageReader(store, bucket, folder, id, signal),
      );
      if (await sameFiles(parent, next)) {
        throw new StoreError(
          `commit of ${where} refused: no change since commit ${parent.head.number} (${parent.head.id}); ` +
            'pass allowEmpty to commit anyway',
          { uri: where },
        );
      }
    }
    if (number > MAX_COMMIT_NUMBER) {
      throw new StoreError(`the log of ${where} is full (${MAX_COMMIT_NUMBER} commits)`);
    }
    debug('commit of %s: %d page(s) written, %d shared', where, counts.written, counts.shared);
    await writeContentAddressed(
      store,
      bucket,
      commitKey(id),
      id,
      bytes,
      mode,
      signal,
      MAX_COMMIT_BYTES,
    );
    const won = await createOnce(
      store,
      bucket,
      logKey(folder, number),
      Buffer.from(id, 'utf8'),
      mode,
      signal,
    );
    if (won) {
      debug('committed %s as %d (%s)', where, number, id);
      try {
        await cacheCommit(store, bucket, id, bytes);
      } catch (error) {
        // The commit is made; a cache that cannot be written only costs a read later.
        debug('could not cache commit %s: %s', id, error);
      }
      return folderUri.withAt({ kind: 'commit', id });
    }
    debug('commit %d of %s was taken by another commit; retrying', number, where);
  }
  throw new StoreError(
    `commit of ${where} gave up: ${COMMIT_ATTEMPTS} commits in a row were taken by others`,
    { uri: where },
  );
}
