/**
 * {@link pushFolder}: send a local folder's files to a store folder, skipping the unchanged ones,
 * and {@link commitFrom}: push, then commit, in one call.
 *
 * **One listing decides what is unchanged.** The store folder is listed once (flat). A file is
 * sent unless the listing proves the object holds its bytes, by a digest the listing states —
 * whoever wrote the object (provcat, the store's own SDK, another tool):
 *
 * 1. no object under its key, or another size: sent;
 * 2. a SHA-256 the listing reports (`ObjectInfo.sha256`: provcat's own record, where a driver's
 *    listing carries metadata, as Azure's does) or an MD5 it states (`statedMd5`: an ETag of
 *    the exact form `"<32 hex>"` — S3's ETag of an object put in one request, every object of
 *    the local store — Azure's `Content-MD5`, GCS's `md5Hash`): unchanged when the file's
 *    digests equal every one stated (both, where both are: a SHA-256 record another client
 *    wrote is metadata, and may disagree with the MD5 the service computed of the bytes);
 * 3. else (a multipart ETag `"…-N"`, which depends on the part size, not only the bytes; an
 *    Azure blob of staged blocks, which has no MD5), on a driver that records the SHA-256 of
 *    provcat's puts (`sha256Metadata`): one HEAD reads the recorded SHA-256 — S3 returns
 *    `x-amz-meta-sha256` on HEAD but not in ListObjectsV2. Such objects are large (above the
 *    multipart threshold), so the HEAD is small beside the upload it saves;
 * 4. else: sent (unknown is never taken as unchanged).
 *
 * A file is hashed at most once: with the digests its object states, and a file read from disk
 * computes the SHA-256 to record in the same pass as the MD5 it compares.
 *
 * So a second push of an unchanged folder of small files is one listing and no other request.
 * A store whose plain ETags are no MD5 (S3 with SSE-KMS or SSE-C) never matches in step 2, and
 * every file is sent again: correct, not cheap.
 *
 * **Every object gets its Content-Type by the one rule** of src/core/content-type.ts: `contentType`
 * when given (`--content-type`), else the type of the file's extension.
 *
 * **Refusals come before anything is sent.** Names no URI can name, links to folders, special
 * files and `.provcat/` at a bucket root raise before any store call; names that collide on a
 * case-insensitive disk or would be both a file and a folder in the store folder after the push
 * (the checks of a fetch, src/cache/fetch.ts, so what is pushed fetches back) raise after the
 * listing and before the first write. A dry run raises them too.
 *
 * **Every upload is one state of its file** (local-tree.ts; the sending is file-pusher.ts): a
 * file up to `WHOLE_READ_MAX` bytes (and the store's multipart threshold) is read whole between
 * two agreeing `stat`s and those bytes are sent, within a shared memory budget
 * (`MEMORY_BUDGET`); a larger file is sent from disk by the upload engine, which refuses a
 * file whose size or mtime changed before the upload completes (no object appears), and whose
 * state before hashing must equal its state after the upload. A file that changed is sent again,
 * then {@link SourceChanged} fails the push; the files already sent stay, and a rerun sends the
 * rest.
 *
 * **Small files go through one batch** where the store has `batchPuts` (the local store): their
 * objects are made durable together when the batch closes, before the push returns (a failed
 * close fails the push; src/contract/primitives.ts `PutBatch`). Large files are put one by one.
 *
 * Uploads run first, then deletes (`delete`), each with at most `concurrency` requests in flight.
 *
 * **Two passes, in memory that does not grow with the folder.** The first (src/folders/push-plan.ts)
 * walks the folder and lists the store folder, both in key order, checks the refusals and writes
 * the merged plan to a temp file; the second reads the plan in order and sends, with the push
 * index read beside it and the next one written in the same order as the files are done
 * (src/core/ordered.ts), so a million files cost about 160 MiB of peak RSS, not 2 GiB.
 *
 * @module
 */

import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { debuglog } from 'node:util';
import type { ProgressCallback } from '../contract/store-context.js';
import { checkConcurrency } from '../core/concurrency.js';
import { sweepAbandonedTemps } from '../core/fs-atomic.js';
import { forEachInOrder, type Outcome } from '../core/ordered.js';
import { toUri, type Uri } from '../core/uri.js';
import { FilePusher, type PushContext, type Pushed, PushItem } from './file-pusher.js';
import { owned } from './line-files.js';
import { PushProgress } from './push-bookkeeping.js';
import { deleteExtra, type PushAction } from './push-deletes.js';
import { indexFolder, PushIndex, type PushIndexWriter } from './push-index.js';
import { makePlan, type Plan, planBatches, removeEmpty } from './push-plan.js';
import type { DigestSink } from './pushed-digests.js';

export type { PushContext } from './file-pusher.js';

const debug = debuglog('provcat:push');

/** Options of {@link pushFolder}. */
export interface PushOptions {
  /** Also delete the objects under the store folder that the local folder lacks (never `.provcat/`). */
  delete?: boolean | undefined;
  /**
   * The Content-Type of every object sent (default: by each file's extension,
   * src/core/content-type.ts).
   */
  contentType?: string | undefined;
  /** Decide everything (listing, digests) and report it, but write and delete nothing. */
  dryRun?: boolean | undefined;
  /** Most requests in flight (default: the store's `concurrency`). */
  concurrency?: number | undefined;
  /**
   * Progress: `bytes` of files dealt with (sent, or found unchanged) of `totalBytes` (the local
   * folder's), `files` of `totalFiles`.
   */
  onProgress?: ProgressCallback | undefined;
  signal?: AbortSignal | undefined;
}

export type { PushAction } from './push-deletes.js';

/** What {@link pushFolder} did. */
export interface PushResult {
  /** The store folder. */
  uri: Uri;
  /** Files sent (a dry run: files that would be sent). */
  uploaded: number;
  /** Files whose object already held their bytes. */
  skipped: number;
  /**
   * Files read and hashed by this push (sent or compared). A file whose digests the push index
   * (src/folders/push-index.ts) holds for its exact state is neither read nor hashed.
   */
  hashed: number;
  /** Objects deleted (`delete`; a dry run: that would be deleted). */
  deleted: number;
  /** Bytes sent (a dry run: that would be sent). */
  bytes: number;
  /** True when nothing was written (`dryRun`). */
  dryRun: boolean;
  /** Every upload and delete, uploads first, each in path order. */
  actions: PushAction[];
}

/**
 * Upload the files of the local folder `localDir` to the store folder `uri` (a file-form URI is
 * taken as the folder of that name), skipping files whose object already holds their bytes, and
 * with `delete` removing the objects under the folder that `localDir` lacks. See the module
 * comment for what counts as unchanged, what is refused before anything is sent, and how files
 * that change during the push are handled.
 *
 * Guarantees: every object written holds one state of its file; refusals (`UriError`,
 * `StoreError`, `SourceError`) come before any write; a dry run writes nothing; `.provcat/` is
 * never written or deleted. Not atomic: a push that fails midway leaves the files it sent (a
 * rerun sends only the rest). `OfflineMiss` offline; `UriError` for a URI with `?at=`.
 */
export async function pushFolder(
  store: PushContext,
  localDir: string,
  uri: Uri | string,
  options: PushOptions = {},
): Promise<PushResult> {
  return runPush(store, localDir, uri, options);
}

/**
 * The plan's local files, as push items, a batch at a time, each with its entry of the push
 * index (read beside the plan, in the same order).
 */
async function* localItems(
  planFile: string,
  prefix: string,
  localDir: string,
  index: PushIndex,
): AsyncGenerator<PushItem[]> {
  for await (const batch of planBatches(planFile, prefix)) {
    const items: PushItem[] = [];
    for (const r of batch) {
      if (r.local === undefined) continue;
      items.push(new PushItem(r.rel, r.local, r.remote, index.entryFor(r.rel), localDir));
    }
    yield items;
  }
}

/**
 * {@link pushFolder}, also telling `digests` every local file in key order, with the SHA-256 of
 * each file it sent or found unchanged and the version that holds it
 * (src/folders/pushed-digests.ts; every file is then hashed or found in the push index).
 *
 * In two passes of bounded memory: the plan — walk, listing, refusals (src/folders/push-plan.ts)
 * — then the uploads from it with the last push index read beside it, the next index and the
 * digests written in key order as the files are done (src/core/ordered.ts).
 */
export async function runPush(
  store: PushContext,
  localDir: string,
  uri: Uri | string,
  options: PushOptions,
  digests?: DigestSink,
): Promise<PushResult> {
  checkConcurrency(options.concurrency);
  const { folderOf } = await import('../commits/log.js');
  const { uri: folder, bucket, folder: prefix } = folderOf(store, toUri(uri), 'push');
  store.online(folder, 'push');
  const { signal } = options;
  const dryRun = options.dryRun === true;
  const cacheRoot = store.cache.root;
  const temps = indexFolder(cacheRoot);
  // A dry run leaves the cache as it was: the folders made for its plan go after it.
  const made = await mkdir(temps, { recursive: true });
  // A killed push's plan; never a live one's (src/core/fs-atomic.ts).
  await sweepAbandonedTemps(temps).catch((error: unknown) => {
    debug('cannot sweep %s: %s', temps, String(error));
  });
  let plan: Plan;
  try {
    plan = await makePlan({
      store,
      localDir,
      folder,
      bucket,
      prefix,
      deleting: options.delete === true,
      beside: path.join(temps, 'plan'),
      signal,
    });
  } catch (error) {
    if (dryRun && made !== undefined) await removeEmpty(temps, made);
    throw error;
  }
  try {
    const progress = new PushProgress(
      store,
      folder.toString(),
      options.onProgress,
      plan.bytes,
      plan.files,
    );
    const last = await PushIndex.open(cacheRoot, localDir);
    let index: PushIndexWriter | undefined;
    try {
      index = dryRun ? undefined : await PushIndex.next(cacheRoot, localDir);
    } catch (error) {
      last.close();
      throw error;
    }
    const batch = dryRun ? undefined : store.batchPuts(bucket, prefix);
    const pusher = new FilePusher(
      store,
      bucket,
      prefix,
      dryRun,
      progress,
      options.contentType,
      batch,
      digests !== undefined,
    );
    const uploads: PushAction[] = [];
    let skipped = 0;
    const concurrency = options.concurrency ?? store.concurrency;
    const done = (item: PushItem, outcome: Outcome<Pushed>) => {
      const wrote = index?.add(item.rel, item.old, item.entry);
      const pushed = outcome !== undefined && 'value' in outcome ? outcome.value : undefined;
      if (pushed !== undefined) {
        if (pushed.sent === undefined) skipped++;
        else uploads.push({ action: 'upload', path: owned(item.rel), size: pushed.sent });
      }
      if (digests === undefined) return wrote;
      const learnt = pushed?.learnt;
      return chain(wrote, () => digests.file(item.rel, learnt?.info, learnt?.sha256));
    };
    try {
      try {
        await forEachInOrder(
          localItems(plan.file, prefix, localDir, last),
          concurrency,
          (item, inner) => pusher.push(item, inner),
          done,
          { signal, quick: (item) => pusher.quick(item) },
        );
      } catch (error) {
        // The push fails with its own error; the batch still ends (its marker goes).
        await batch?.close().catch((closeError: unknown) => {
          debug('cannot close the batch of a failed push: %s', String(closeError));
        });
        throw error;
      }
      // Nothing sent counts as pushed before it is durable.
      await batch?.close();
    } finally {
      // What was hashed stays true whether or not the push completed; a dry run changes nothing.
      // Whether entries of the last index were left out (files gone, or not reached).
      const stale = last.close();
      await index?.finish(stale).catch((error: unknown) => {
        debug('cannot save the push index (the next push hashes again): %s', String(error));
      });
    }
    const deletes =
      options.delete === true
        ? await deleteExtra(store, bucket, prefix, plan.file, { concurrency, dryRun, signal })
        : [];
    return {
      uri: folder,
      uploaded: uploads.length,
      skipped,
      hashed: pusher.hashed,
      deleted: deletes.length,
      bytes: uploads.reduce((n, a) => n + a.size, 0),
      dryRun,
      actions: [...uploads, ...deletes],
    };
  } finally {
    await rm(plan.file, { force: true });
    if (dryRun && made !== undefined) await removeEmpty(temps, made);
  }
}

/** `first`, then `then`: one promise only when either needs one. */
function chain(
  first: Promise<void> | undefined,
  then: () => Promise<void> | undefined,
): Promise<void> | undefined {
  return first === undefined ? then() : first.then(then);
}
