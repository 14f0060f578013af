/**
 * Push a local folder, then commit the store folder (`ObjectStore.commit` with `from`): the
 * push of src/folders/push.ts followed by the commit of src/commits/commit.ts, with what refuses
 * every commit checked before anything is sent.
 *
 * The push knows each file's SHA-256 (it hashed the file, or its index holds the digest of the
 * file's state) and the version that holds those bytes; the commit records it in each file
 * record whose version and size are those (src/folders/pushed-digests.ts), so a fetch at the
 * commit checks the bytes against the SHA-256 and not only against the ETag.
 *
 * @module
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import type { CommitOptions, KnownDigests } from '../commits/commit.js';
import { checkConcurrency } from '../core/concurrency.js';
import { NotCommitted } from '../core/errors.js';
import { tempPathFor } from '../core/fs-atomic.js';
import { toUri, type Uri } from '../core/uri.js';
import { type PushContext, type PushOptions, type PushResult, runPush } from './push.js';
import { indexFolder } from './push-index.js';
import { PushedDigests } from './pushed-digests.js';

/** Options of {@link commitFrom}: the commit's and the push's (no dry run). */
export interface CommitFromOptions extends CommitOptions, Omit<PushOptions, 'dryRun'> {}

/** What {@link commitFrom} did. */
export interface CommitFromResult {
  /** The folder pinned to the new commit (`?at=commit:ID`). */
  uri: Uri;
  /** The push before the commit. */
  push: PushResult;
  /**
   * Files in the commit that the local folder lacks (objects that were already under the folder
   * and that a push without `delete` leaves), in path order.
   */
  extra: string[];
}

/**
 * Push `localDir` to the folder `uri` (`pushFolder`, src/folders/push.ts), then commit the folder
 * (`ObjectStore.commit`), and return the folder pinned to the commit. With `delete` the commit
 * holds exactly the local folder's files (byte for byte); without it, also the files already
 * under the folder that `localDir` lacks (listed in `extra`).
 *
 * A failure of the push is the push's error (no commit was tried). A failure of the commit after
 * the push (no change since the last commit without `allowEmpty`, a bucket without versions, a
 * folder that kept changing...) is {@link NotCommitted}: the pushed files stay, `pushed` says
 * what was sent, and `cause` is the commit's error.
 */
export async function commitFrom(
  store: PushContext,
  localDir: string,
  uri: Uri | string,
  message: string,
  options: CommitFromOptions = {},
): Promise<CommitFromResult> {
  const { folderOf } = await import('../commits/log.js');
  const { uri: folder, bucket, folder: prefix } = folderOf(store, toUri(uri), 'commit');
  // What refuses every commit of this folder is refused before anything is pushed.
  const { checkMessage } = await import('../commits/commit.js');
  checkMessage(message, folder.toString());
  checkConcurrency(options.concurrency);
  store.online(folder, 'commit');
  if ((await store._createMode(bucket)) === 'none') {
    const { noCreateError } = await import('../logs/small-objects.js');
    throw noCreateError(store, bucket, `commit of ${folder}`);
  }
  const temps = indexFolder(store.cache.root);
  await mkdir(temps, { recursive: true });
  const digests = await PushedDigests.create(prefix, tempPathFor(path.join(temps, 'digests')));
  try {
    const pushed = await runPush(store, localDir, uri, { ...options, dryRun: false }, digests);
    await digests.seal();
    return await commitPushed(store, localDir, pushed, prefix, message, options, digests);
  } finally {
    await digests.dispose();
  }
}

/** The commit after the push (see {@link commitFrom}). */
async function commitPushed(
  store: PushContext,
  localDir: string,
  pushed: PushResult,
  prefix: string,
  message: string,
  options: CommitFromOptions,
  digests: PushedDigests,
): Promise<CommitFromResult> {
  const { commitFolder } = await import('../commits/commit.js');
  let pinned: Uri;
  // The files of the commit that the local folder lacks, seen as its records stream into pages
  // (the last pass is the commit's: a pass begins again when a snapshot is retried).
  const extra: string[] = [];
  const known: KnownDigests = {
    begin: () => {
      extra.length = 0;
      digests.begin();
    },
    sha256Of: (record) => {
      if (!digests.hasFile(record.key)) extra.push(record.key.slice(prefix.length));
      return digests.sha256Of(record);
    },
  };
  try {
    pinned = await commitFolder(store, pushed.uri, message, options, known);
  } catch (cause) {
    const why = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
    throw new NotCommitted(
      `pushed ${localDir} to ${pushed.uri} (${pushed.uploaded} sent, ${pushed.skipped} unchanged, ${pushed.deleted} deleted), but no commit was made: ${why}`,
      {
        uri: pushed.uri.toString(),
        cause,
        pushed: {
          uploaded: pushed.uploaded,
          skipped: pushed.skipped,
          deleted: pushed.deleted,
          bytes: pushed.bytes,
        },
      },
    );
  }
  return { uri: pinned, push: pushed, extra };
}
