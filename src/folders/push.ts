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
 *    listing carries metadata, as Azure's does): unchanged when it equals the file's SHA-256;
 * 3. else an MD5 the listing states (`statedMd5`: an ETag of the exact form `"<32 hex>"` — S3's
 *    ETag of an object put in one request, every object of the local store — Azure's
 *    `Content-MD5`, GCS's `md5Hash`): unchanged when it equals the file's MD5;
 * 4. else (a multipart ETag `"…-N"`, which depends on the part size, not only the bytes; an
 *    Azure blob of staged blocks, which has no MD5), on a driver that records the SHA-256 of
 *    provcat's puts (`sha256Metadata`): one HEAD reads the recorded SHA-256 — S3 returns
 *    `x-amz-meta-sha256` on HEAD but not in ListObjectsV2. Such objects are large (above the
 *    multipart threshold), so the HEAD is small beside the upload it saves;
 * 5. else: sent (unknown is never taken as unchanged).
 *
 * A file is hashed at most once: with the one digest its object states (the SHA-256 when it
 * states both, since a driver that records SHA-256s needs it for the upload anyway), and a file
 * read from disk computes the SHA-256 to record in the same pass as the MD5 it compares.
 *
 * So a second push of an unchanged folder of small files is one listing and no other request.
 * A store whose plain ETags are no MD5 (S3 with SSE-KMS or SSE-C) never matches in step 3, and
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
 * **Every upload is one state of its file** (local-tree.ts): a file up to
 * {@link WHOLE_READ_MAX} bytes (and the store's multipart threshold) is read whole between two
 * agreeing `stat`s and those bytes are sent, within a shared memory budget
 * ({@link MEMORY_BUDGET}); a larger file is sent from disk by the upload engine, which refuses a
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
 * @module
 */

import { debuglog } from 'node:util';
import { statedMd5 } from '../cache/content-digest.js';
import type { CachedStoreContext } from '../cache/context.js';
import type { ObjectInfo, PutBatch } from '../contract/primitives.js';
import type { ProgressCallback } from '../contract/store-context.js';
import { checkConcurrency, forEachLimit } from '../core/concurrency.js';
import { contentTypeFor } from '../core/content-type.js';
import { NotFound, SourceChanged, StoreError, UriError } from '../core/errors.js';
import { checkDiskNames, checkFolderKeys, compareUtf8, isMetaKey } from '../core/keys.js';
import { toUri, type Uri } from '../core/uri.js';
import type { UploadSettings } from '../upload/settings.js';
import {
  digestFile,
  digestsOf,
  type FileDigests,
  type FileStamp,
  type LocalFile,
  readLocalTree,
  readWhole,
  readWholeSync,
  STABLE_ATTEMPTS,
  SYNC_READ_MAX,
  sameStamp,
  stampNow,
} from './local-tree.js';
import { ByteBudget, PushProgress } from './push-bookkeeping.js';
import { PushIndex, wallNs } from './push-index.js';
import type { DigestSink } from './pushed-digests.js';
import { listRemote } from './remote-listing.js';

const debug = debuglog('provcat:push');

/** Largest file read whole into memory and sent from there (64 MiB). */
export const WHOLE_READ_MAX = 64 * 1024 * 1024;

/** Most bytes of files held in memory at once by one push (128 MiB). */
export const MEMORY_BUDGET = 128 * 1024 * 1024;

/**
 * What a push takes of the store: the store context and its upload settings (a large file goes
 * through the upload engine). `ObjectStore` is one.
 */
export interface PushContext extends CachedStoreContext {
  /** How large objects are put (the threshold decides which files are read whole). */
  readonly uploads: UploadSettings;
}

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

/** One thing a push did (or, in a dry run, would do). */
export interface PushAction {
  action: 'upload' | 'delete';
  /** The path relative to the folder (the key below it). */
  path: string;
  /** Bytes uploaded; for a delete, the size of the object deleted. */
  size: number;
}

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

function refusal(localDir: string, folder: Uri): string {
  return `push of ${localDir} to ${folder} refused`;
}

/**
 * Refuse names no URI can name or the store cannot hold exactly (src/core/keys.ts `checkFolderKeys`),
 * and `.provcat/` at a bucket root: no store call needed.
 */
function checkLocalNames(
  files: readonly LocalFile[],
  folder: Uri,
  localDir: string,
  keyProblem: (key: string) => string | undefined = () => undefined,
): void {
  const where = refusal(localDir, folder);
  for (const f of files) {
    if (folder.isBucket && isMetaKey(f.rel)) {
      throw new UriError(`${where}: ${f.path}: keys under .provcat/ belong to provcat`, {
        uri: folder.toString(),
      });
    }
    try {
      checkFolderKeys(folder, [f.rel], { keyProblem, disk: false });
    } catch (cause) {
      const why = (cause as Error).message.slice(`${folder}: `.length);
      throw new UriError(`${where}: ${f.path}: ${why}`, { uri: folder.toString(), cause });
    }
  }
}

/**
 * Refuse a push after which the store folder would not fetch back (the checks of a fetch):
 * names one case-insensitive disk stores as one, a name both a file and a folder. Checked on
 * the folder as it will be: the local files, plus the objects a push without `delete` keeps.
 */
function checkResultNames(
  files: readonly LocalFile[],
  folder: Uri,
  localDir: string,
  remote: ReadonlyMap<string, ObjectInfo>,
  deleting: boolean,
): void {
  const where = refusal(localDir, folder);
  const local = files.map((f) => f.rel);
  const result = deleting ? local : [...new Set([...local, ...remote.keys()])];
  try {
    checkDiskNames(result, folder);
  } catch (cause) {
    if (!(cause instanceof StoreError)) throw cause;
    const text = cause.message.replace(/; refusing to fetch$/, '');
    throw new StoreError(`${where}: the folder would not fetch back (${text})`, {
      uri: folder.toString(),
      cause,
    });
  }
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
  return (await runPush(store, localDir, uri, options)).result;
}

/**
 * {@link pushFolder}, also returning the local folder's paths (src/folders/commit-from.ts), and
 * telling `digests` the SHA-256 of every file it sent or found unchanged, with the version that
 * holds it (src/folders/pushed-digests.ts; every file is then hashed or found in the push index).
 */
export async function runPush(
  store: PushContext,
  localDir: string,
  uri: Uri | string,
  options: PushOptions,
  digests?: DigestSink,
): Promise<{ result: PushResult; local: ReadonlySet<string> }> {
  checkConcurrency(options.concurrency);
  const { folderOf } = await import('../commits/log.js');
  const { uri: folder, bucket, folder: prefix } = folderOf(store, toUri(uri), 'push');
  store.online(folder, 'push');
  const { signal } = options;
  const dryRun = options.dryRun === true;
  const files = await readLocalTree(localDir);
  checkLocalNames(files, folder, localDir, store.capabilities.keyProblem);
  const remote = await listRemote(store, bucket, prefix, signal);
  checkResultNames(files, folder, localDir, remote, options.delete === true);
  const localRels = new Set(files.map((f) => f.rel));
  const gone =
    options.delete === true
      ? [...remote.entries()]
          .filter(([rel]) => !localRels.has(rel))
          .sort(([a], [b]) => compareUtf8(a, b))
      : [];

  const totalBytes = files.reduce((n, f) => n + f.stamp.size, 0);
  const progress = new PushProgress(
    store,
    folder.toString(),
    options.onProgress,
    totalBytes,
    files.length,
  );
  const index = await PushIndex.open(store.cache.root, localDir);
  const batch = dryRun ? undefined : store.batchPuts(bucket, prefix);
  const pusher = new FilePusher(
    store,
    bucket,
    prefix,
    dryRun,
    progress,
    options.contentType,
    index,
    batch,
    digests,
  );
  const uploads: PushAction[] = [];
  let skipped = 0;
  const concurrency = options.concurrency ?? store.concurrency;
  try {
    try {
      await forEachLimit(
        files,
        concurrency,
        async (file, inner) => {
          const sent = await pusher.push(file, remote.get(file.rel), inner);
          if (sent === undefined) skipped++;
          else uploads.push({ action: 'upload', path: file.rel, size: sent });
        },
        signal,
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
    if (!dryRun) {
      await index.save(localRels).catch((error: unknown) => {
        debug('cannot save the push index (the next push hashes again): %s', String(error));
      });
    }
  }
  const deletes: PushAction[] = [];
  await forEachLimit(
    gone,
    concurrency,
    async ([rel, info], inner) => {
      if (!dryRun) {
        try {
          await store._delete(bucket, prefix + rel, { signal: inner });
        } catch (error) {
          if (error instanceof NotFound) return; // deleted meanwhile by someone else
          throw error;
        }
      }
      deletes.push({ action: 'delete', path: rel, size: info.size });
    },
    signal,
  );
  const byPath = (a: PushAction, b: PushAction) => compareUtf8(a.path, b.path);
  uploads.sort(byPath);
  deletes.sort(byPath);
  const result: PushResult = {
    uri: folder,
    uploaded: uploads.length,
    skipped,
    hashed: pusher.hashed,
    deleted: deletes.length,
    bytes: uploads.reduce((n, a) => n + a.size, 0),
    dryRun,
    actions: [...uploads, ...deletes],
  };
  return { result, local: localRels };
}

/** Sends one file at a time; see the module comment. */
class FilePusher {
  /** Files read and hashed (`PushResult.hashed`). */
  hashed = 0;
  private readonly budget = new ByteBudget(MEMORY_BUDGET);
  private readonly wholeMax: number;
  private readonly recordSha: boolean;
  /** The SHA-256 of every file is needed: to record with its object, or to tell `digests`. */
  private readonly wantSha: boolean;
  constructor(
    private readonly store: PushContext,
    private readonly bucket: string,
    private readonly prefix: string,
    private readonly dryRun: boolean,
    private readonly progress: PushProgress,
    private readonly contentType: string | undefined,
    private readonly index: PushIndex,
    /** Where small files go when the store batches their durability (see the module comment). */
    private readonly batch: PutBatch | undefined,
    private readonly digests?: DigestSink | undefined,
  ) {
    this.wholeMax = Math.min(WHOLE_READ_MAX, store.uploads.multipartThreshold);
    this.recordSha = store.capabilities.sha256Metadata === true;
    this.wantSha = this.recordSha || digests !== undefined;
  }

  /** Push one file: the bytes sent, or `undefined` when its object already held them. */
  async push(
    file: LocalFile,
    info: ObjectInfo | undefined,
    signal: AbortSignal,
  ): Promise<number | undefined> {
    const sent =
      file.stamp.size <= this.wholeMax
        ? await this.pushWhole(file, info, signal)
        : await this.pushFromDisk(file, info, signal);
    return sent;
  }

  /**
   * The digests the index holds for the file in the state `stamp`, when they include `want`
   * (and the SHA-256 to record, on a driver that records it).
   */
  private known(
    file: LocalFile,
    stamp: FileStamp,
    want: { md5: boolean; sha256: boolean },
  ): FileDigests | undefined {
    const known = this.index.lookup(file.rel, stamp);
    if (known === undefined) return undefined;
    if (want.md5 && known.md5 === undefined) return undefined;
    if ((want.sha256 || this.wantSha) && known.sha256 === undefined) return undefined;
    return known;
  }

  /**
   * A small file: unchanged by the index's digests of its state when the folder was read (no
   * read), else read whole (one snapshot), hashed, compared and sent from memory.
   */
  private async pushWhole(
    file: LocalFile,
    info: ObjectInfo | undefined,
    signal: AbortSignal,
  ): Promise<number | undefined> {
    const progress = this.progress.file();
    if (info !== undefined && this.index.lookup(file.rel, file.stamp) !== undefined) {
      let short = false;
      let sha256: string | undefined;
      const same = await this.unchanged(
        file,
        info,
        file.stamp.size,
        async (want) => {
          const known = this.known(file, file.stamp, want);
          short ||= known === undefined;
          sha256 = known?.sha256;
          return known ?? {};
        },
        signal,
      );
      if (same !== undefined && !short) {
        this.digests?.learn(file.rel, same, sha256);
        progress.done(file.stamp.size);
        return undefined;
      }
    }
    const held = await this.budget.acquire(file.stamp.size);
    try {
      const started = wallNs();
      const { value: bytes, stamp } =
        file.stamp.size <= SYNC_READ_MAX ? readWholeSync(file.path) : await readWhole(file.path);
      this.hashed++;
      // Both digests, so the index serves any store's listing (MD5 ETags, SHA-256 records).
      const digests = digestsOf(bytes, { md5: true, sha256: true });
      this.index.record(file.rel, stamp, digests, started);
      const same = await this.unchanged(file, info, bytes.length, async () => digests, signal);
      if (same !== undefined) {
        this.digests?.learn(file.rel, same, digests.sha256);
        progress.done(bytes.length);
        return undefined;
      }
      if (!this.dryRun) {
        const key = this.prefix + file.rel;
        const putOptions = {
          size: bytes.length,
          contentType: await contentTypeFor(file.rel, this.contentType),
          sha256: this.recordSha ? digests.sha256 : undefined,
          signal,
          onProgress: progress.onProgress,
        };
        const put =
          this.batch !== undefined
            ? await this.batch.put(key, bytes, putOptions)
            : await this.store._put(this.bucket, key, bytes, putOptions);
        if (put.size === bytes.length) this.digests?.learn(file.rel, put, digests.sha256);
      }
      progress.done(bytes.length);
      return bytes.length;
    } finally {
      this.budget.release(held);
    }
  }

  /** A large file: hashed and sent from disk, its state checked before and after. */
  private async pushFromDisk(
    file: LocalFile,
    info: ObjectInfo | undefined,
    signal: AbortSignal,
  ): Promise<number | undefined> {
    const progress = this.progress.file();
    for (let attempt = 1; attempt <= STABLE_ATTEMPTS; attempt++) {
      progress.undo();
      const before = await stampNow(file.path);
      const digests: FileDigests = {};
      let hashedAt: bigint | undefined;
      const digest = async (want: { md5: boolean; sha256: boolean }) => {
        const known = this.known(file, before, want);
        if (known !== undefined) return Object.assign(digests, known);
        // One pass: the SHA-256 to record comes with the one to compare.
        const more = { md5: want.md5, sha256: want.sha256 || this.wantSha };
        hashedAt = wallNs();
        Object.assign(digests, await digestFile(file.path, more, signal));
        this.hashed++;
        return digests;
      };
      const same = await this.unchanged(file, info, before.size, digest, signal);
      if (!sameStamp(before, await stampNow(file.path))) continue;
      if (hashedAt !== undefined) this.index.record(file.rel, before, digests, hashedAt);
      if (same !== undefined || this.dryRun) {
        if (same !== undefined) this.digests?.learn(file.rel, same, digests.sha256);
        progress.done(before.size);
        return same !== undefined ? undefined : before.size;
      }
      if (this.wantSha && digests.sha256 === undefined) {
        await digest({ md5: false, sha256: true });
        if (!sameStamp(before, await stampNow(file.path))) continue;
        if (hashedAt !== undefined) this.index.record(file.rel, before, digests, hashedAt);
      }
      let put: ObjectInfo;
      try {
        put = await this.store._put(this.bucket, this.prefix + file.rel, file.path, {
          size: before.size,
          contentType: await contentTypeFor(file.rel, this.contentType),
          sha256: digests.sha256,
          signal,
          onProgress: progress.onProgress,
        });
      } catch (error) {
        if (error instanceof SourceChanged) continue;
        throw error;
      }
      // The engine compared the file with its state when it opened it; this compares it with
      // the state that was hashed.
      if (!sameStamp(before, await stampNow(file.path))) continue;
      if (put.size === before.size) this.digests?.learn(file.rel, put, digests.sha256);
      progress.done(before.size);
      return before.size;
    }
    throw new SourceChanged(
      `${file.path} kept changing while it was pushed (${STABLE_ATTEMPTS} attempts); ` +
        'the files sent before it stay, and a rerun of the push sends the rest',
    );
  }

  /**
   * The listing's entry (or, when it states no digest, on a driver that records SHA-256s, the
   * HEAD's) when a digest it states proves the object holds the file's bytes, else `undefined`;
   * see the module comment. `digest` hashes the file on demand.
   */
  private async unchanged(
    file: LocalFile,
    info: ObjectInfo | undefined,
    size: number,
    digest: (want: { md5: boolean; sha256: boolean }) => Promise<FileDigests>,
    signal: AbortSignal,
  ): Promise<ObjectInfo | undefined> {
    const proved = (same: boolean, by: ObjectInfo) => (same ? by : undefined);
    if (info === undefined || info.size !== size) return undefined;
    if (info.sha256 !== undefined) {
      return proved((await digest({ md5: false, sha256: true })).sha256 === info.sha256, info);
    }
    const md5 = statedMd5(info);
    if (md5 !== undefined) {
      return proved((await digest({ md5: true, sha256: false })).md5 === md5, info);
    }
    if (!this.recordSha) return undefined;
    let head: ObjectInfo;
    try {
      head = await this.store._head(this.bucket, this.prefix + file.rel, { signal });
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
    if (head.size !== size) return undefined;
    const recorded = head.sha256;
    const headMd5 = recorded === undefined ? statedMd5(head) : undefined;
    if (headMd5 !== undefined) {
      return proved((await digest({ md5: true, sha256: false })).md5 === headMd5, head);
    }
    if (recorded === undefined) return undefined;
    return proved((await digest({ md5: false, sha256: true })).sha256 === recorded, head);
  }
}
