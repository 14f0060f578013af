/**
 * Fetching into the cache: the logic behind `ObjectStore.fetch`, written once for every driver.
 *
 * - A folder is fetched from ONE flat listing. Each file's state (version, inode, size) from the
 *   previous fetch is compared with the listing and one local `lstat`; only changed files are
 *   transferred, files deleted from the store are removed from the copy, and only then is the
 *   copy marked done. Its done mark is removed before the first change, so a fetch killed
 *   halfway is never taken as complete.
 * - Bytes land in a blob per (key, version) through temp + fsync + rename; views are hard links.
 *   A folder fetch shares the fsyncs: one sync pass per group of downloads, then their renames
 *   and links (src/cache/blob-group.ts), and a fetch that fails installs its group first.
 * - Every download is checked before its blob appears: its size, and its bytes against the digest
 *   its GET states (a recorded `sha256`, or an ETag that is a plain MD5; src/cache/content-digest.ts
 *   `statedDigest`), hashed as they stream. A mismatch (a byte flipped on the way) is
 *   `ObjectIntegrityError('DigestMismatch')` and nothing is cached.
 * - One fetch of a view at a time across processes (a lock that goes stale if its holder dies).
 * - Offline, nothing but the cache is read.
 *
 * @module
 */
import path from 'node:path';
import { debuglog } from 'node:util';
import type { Entry } from '../contract/entry.js';
import type { GetResult, ObjectInfo } from '../contract/primitives.js';
import { ADAPTIVE_MAX_CONCURRENCY } from '../contract/store-context.js';
import { type AdaptiveWindow, forEachAdaptive } from '../core/concurrency.js';
import { NotFound, ObjectIntegrityError } from '../core/errors.js';
import { checkFolderKeys } from '../core/keys.js';
import type { Uri } from '../core/uri.js';
import { listFiles } from '../folders/listing.js';
import { BlobGroup } from './blob-group.js';
import {
  type FileRecord,
  lstatOrUndefined,
  matchesRecord,
  recordOf,
  type VersionMeta,
  type ViewState,
  wholeUpToFor,
} from './cache.js';
import {
  type ContentDigest,
  checkableWith,
  type ExpectedContent,
  recordedDigest,
  statedDigest,
} from './content-digest.js';
import type { CachedStoreContext } from './context.js';
import { offlineFile, offlineFolder, sameFile } from './fetch-offline.js';
import { type FetchOptions, type FetchResult, Transfer } from './transfer.js';

/** Dispatch a fetch by the kind of URI. */
export async function fetchUri(
  store: CachedStoreContext,
  u: Uri,
  options: FetchOptions,
): Promise<FetchResult> {
  // Every directory this fetch reuses or writes is checked (once) for links planted since.
  store.cache.forgetDirs();
  if (u.at?.kind === 'version') return fetchVersion(store, u, u.at.id, options);
  if (u.at?.kind === 'commit') {
    // Commits' modules load only for a pinned fetch (docs/performance.md: start-up).
    const { fetchCommit } = await import('./fetch-commit.js');
    return fetchCommit(store, u, u.at.id, options);
  }
  if (u.isFolder) return fetchFolder(store, u, options);
  if (store.offline) return offlineFile(store, u);
  // Nothing cached for this file: one GET is the whole fetch (no HEAD first).
  if (!(await store.cache.readState(`file:${u}`))?.done) {
    const got = await fetchFileByGet(store, u, options);
    // No object: it may be a folder named without its trailing '/'.
    return got ?? fetchNamedFolder(store, u, options);
  }
  const { bucket, key } = store.locate(u);
  let info: ObjectInfo;
  try {
    info = await store._head(bucket, key, { signal: options.signal });
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
    return fetchNamedFolder(store, u, options);
  }
  return fetchFile(store, u, info, options);
}

/**
 * The folder a file-form URI may name (no object under its key): its fetch, or, when there is
 * no folder either, `NotFound` that says so of the URI as given (not of the folder `u/`).
 */
async function fetchNamedFolder(
  store: CachedStoreContext,
  u: Uri,
  options: FetchOptions,
): Promise<FetchResult> {
  const folder = u.asFolder();
  try {
    return await fetchFolder(store, folder, options);
  } catch (error) {
    if (!(error instanceof NotFound) || error.uri !== folder.toString()) throw error;
    throw new NotFound(`no file or folder at ${u}`, { uri: u.toString(), cause: error });
  }
}

/** The identity a blob is stored under: the version ID when known, else the version. */
export function blobIdentity(info: ObjectInfo): string {
  return info.versionId ?? `v:${info.version}`;
}

/**
 * The other name the bytes of `info` may be cached under: when a HEAD or GET reports a version
 * ID and a version that differ (S3: the ETag), a folder fetch, whose listing gives no version
 * ID, stored them under `v:<version>`. `undefined` where the two are one (the local store).
 */
function listedIdentity(info: ObjectInfo): string | undefined {
  return info.versionId !== undefined && info.version !== info.versionId
    ? `v:${info.version}`
    : undefined;
}

/**
 * What a GET's bytes must hash to before they are cached ({@link statedDigest}), for
 * `Cache.installBlob`; `undefined` when the answer states no digest (a multipart ETag, none).
 */
function expectedOf(
  res: Pick<GetResult, 'info' | 'etagNotMd5'>,
  uri: string,
): ExpectedContent | undefined {
  const digest = statedDigest(res);
  if (digest === undefined) return undefined;
  const source =
    digest.algorithm === 'sha256'
      ? "the object's recorded sha256"
      : digest.algorithm === 'crc32c'
        ? "the store's CRC32C"
        : "the store's ETag";
  return { ...digest, uri, source };
}

/** A download a folder fetch links into its view once its group is installed. */
interface GroupedBlob {
  rel: string;
  blob: string;
  version: string;
}

/** How {@link currentBlob} looks for and writes a blob. */
interface BlobLookup {
  signal: AbortSignal | undefined;
  /** The record of the view file the blob will replace, if any (see {@link Cache.checkedBlob}). */
  seen?: FileRecord | undefined;
  /** Clean gone writers' temps from the blob's folder before writing there (a recovery). */
  sweep?: boolean | undefined;
  /**
   * Defer a download's fsync and rename to this group (src/cache/blob-group.ts), recorded with
   * the file's path in the view.
   */
  group?: { group: BlobGroup<GroupedBlob>; rel: string } | undefined;
}

/**
 * The blob of the current object `key`, whose listing or HEAD said `known`: the cached one when
 * that version is there, intact ({@link Cache.checkedBlob}), else one GET into a new blob
 * (stored under the version of the bytes the GET returned, which may be newer than `known`).
 * Returns the blob, what the store said of its bytes, and whether bytes moved.
 */
async function currentBlob(
  store: CachedStoreContext,
  bucket: string,
  key: string,
  known: ObjectInfo,
  transfer: Transfer,
  { signal, seen, sweep, group }: BlobLookup,
): Promise<{ blob: string; info: ObjectInfo; downloaded: boolean }> {
  const identity = blobIdentity(known);
  const cached = store.cache.blobPath(store.scheme, bucket, key, identity);
  if (await store.cache.checkedBlob(cached, known.size, undefined, seen)) {
    return { blob: cached, info: known, downloaded: false };
  }
  const other = listedIdentity(known);
  if (other !== undefined) {
    const blob = store.cache.blobPath(store.scheme, bucket, key, other);
    if (await store.cache.checkedBlob(blob, known.size, undefined, seen)) {
      return { blob, info: known, downloaded: false };
    }
  }
  if (sweep) store.cache.sweepBlobTemps(store.scheme, bucket);
  // A small object comes whole (no stream) from drivers that can; a bigger one still streams.
  // What the listing said lets a driver open the listed version without asking which is
  // current (the local store: no readdir of the key's directory per file).
  const res = await store._get(bucket, key, {
    signal,
    wholeUpTo: wholeUpToFor(known.size),
    listed: known.versionId === undefined ? undefined : known,
  });
  // Bytes of the version the listing named are stored under the listing's name, which is where
  // the next listing looks: on S3, whose listings give no version ID, a GET's version ID would
  // name a blob no folder fetch finds, and a fetch killed before it wrote its state would be
  // downloaded again whole. Bytes of a newer version than listed go under their own name.
  const got = blobIdentity(res.info);
  const listed = got === identity || res.info.version === known.version;
  const blob = listed ? cached : store.cache.blobPath(store.scheme, bucket, key, got);
  await store.cache.installBlob(blob, res, {
    expectedSize: res.contentLength,
    onBytes: transfer.add,
    signal,
    digest: expectedOf(res, `${store.scheme}://${bucket}/${key}`),
    group: group && {
      group: group.group,
      item: { rel: group.rel, blob, version: res.info.version },
    },
  });
  return { blob, info: res.info, downloaded: true };
}

/** Fetch one file (no pin) given its HEAD. */
async function fetchFile(
  store: CachedStoreContext,
  u: Uri,
  info: ObjectInfo,
  options: FetchOptions,
): Promise<FetchResult> {
  const { cache } = store;
  const { bucket, key } = store.locate(u);
  const viewId = `file:${u}`;
  const dest = cache.filePath(store.scheme, bucket, key);
  return cache.withLock(viewId, async (lock) => {
    const state = await cache.readState(viewId);
    const cur = state?.files[''];
    if (state?.done && cur && cur[0] === info.version && sameFile(cache, dest, cur)) {
      return { path: dest, files: 1, downloaded: 0, bytes: 0 };
    }
    const transfer = new Transfer(store, u, options, info.size, 1);
    if (lock.tookOver) cache.sweepTemps(path.dirname(dest));
    const got = await currentBlob(store, bucket, key, info, transfer, {
      signal: options.signal,
      seen: cur,
      sweep: lock.tookOver,
    });
    lock.check();
    const st = await cache.linkInto(got.blob, dest);
    transfer.fileDone();
    lock.check();
    await cache.writeState(
      { uri: viewId, done: true, files: { '': recordOf(got.info.version, st) } },
      { sweep: lock.tookOver },
    );
    return { path: dest, files: 1, downloaded: got.downloaded ? 1 : 0, bytes: transfer.bytes };
  });
}

/**
 * Fetch one file that has no cached copy yet with a single GET: its response says which
 * version the bytes are, so no HEAD is needed first (a round trip saved, which on a cloud store
 * is most of a small file's fetch). `undefined` when there is no object. The GET is sent under
 * the view's lock, so a response is never left unread while another process holds it. When the
 * blob of that version is already cached (a folder fetch brought it), the body is dropped.
 */
async function fetchFileByGet(
  store: CachedStoreContext,
  u: Uri,
  options: FetchOptions,
): Promise<FetchResult | undefined> {
  const { cache } = store;
  const { bucket, key } = store.locate(u);
  const viewId = `file:${u}`;
  const dest = cache.filePath(store.scheme, bucket, key);
  return cache.withLock(viewId, async (lock) => {
    let res: GetResult;
    try {
      res = await store._get(bucket, key, { signal: options.signal });
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
    const transfer = new Transfer(store, u, options, res.info.size, 1);
    let blob = cache.blobPath(store.scheme, bucket, key, blobIdentity(res.info));
    const seen = (await cache.readState(viewId))?.files[''];
    let downloaded = 0;
    let cached = await cache.checkedBlob(blob, res.info.size, undefined, seen);
    const other = cached ? undefined : listedIdentity(res.info);
    if (other !== undefined) {
      const byListing = cache.blobPath(store.scheme, bucket, key, other);
      if (await cache.checkedBlob(byListing, res.info.size, undefined, seen)) {
        blob = byListing;
        cached = true;
      }
    }
    // A copy there but not marked done, or a stale lock: a fetch of this file was killed, and
    // its temps go.
    const recovering = lock.tookOver || cache.isRealDir(path.dirname(dest));
    if (!cached) {
      if (recovering) {
        cache.sweepTemps(path.dirname(dest));
        cache.sweepBlobTemps(store.scheme, bucket);
      }
      await cache.installBlob(blob, res, {
        expectedSize: res.contentLength,
        onBytes: transfer.add,
        signal: options.signal,
        digest: expectedOf(res, u.toString()),
      });
      downloaded = 1;
    } else {
      res.body.destroy();
    }
    lock.check();
    const st = await cache.linkInto(blob, dest);
    transfer.fileDone();
    lock.check();
    await cache.writeState(
      { uri: viewId, done: true, files: { '': recordOf(res.info.version, st) } },
      { sweep: recovering },
    );
    return { path: dest, files: 1, downloaded, bytes: transfer.bytes };
  });
}

/** Fetch a folder (no pin). */
async function fetchFolder(
  store: CachedStoreContext,
  u: Uri,
  options: FetchOptions,
): Promise<FetchResult> {
  const { cache } = store;
  const { bucket } = store.locate(u);
  const dir = cache.treePath(store.scheme, bucket, u.prefix);
  const viewId = `tree:${u}`;
  if (store.offline) return offlineFolder(store, u, dir);
  return cache.withLock(viewId, async (lock) => {
    let entries: Entry[];
    try {
      entries = await listFiles(store, u, { signal: options.signal });
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      // No such folder (or bucket) in the store: nor in the cache.
      lock.check();
      if (await cache.readState(viewId)) await cache.clearState(viewId);
      await cache.prune(dir, new Set());
      throw error;
    }
    const rels = entries.map((e) => u.relative(e.uri) as string);
    checkFolderKeys(u, rels);
    const state = await cache.readState(viewId);
    // Taking over from an interrupted fetch (a stale lock, or a copy not marked done): its
    // temps are cleaned from the bucket's blob folder (whatever versions it was downloading),
    // from the state folder (when the state is written) and from the copy (by prune).
    const recovering = lock.tookOver || (state ? !state.done : cache.isRealDir(dir));
    if (recovering) cache.sweepBlobTemps(store.scheme, bucket);
    const files: ViewState['files'] = {};
    const todo: number[] = [];
    entries.forEach((e, i) => {
      const rel = rels[i] as string;
      const cur = state?.files[rel];
      if (cur && cur[0] === e.version) {
        const st = lstatOrUndefined(`${dir}/${rel}`);
        // Its folder is checked once for the whole fetch: a link planted there is not followed.
        const slash = rel.lastIndexOf('/');
        if (
          matchesRecord(st, cur) &&
          cache.isRealDir(slash < 0 ? dir : `${dir}/${rel.slice(0, slash)}`)
        ) {
          files[rel] = cur;
          return;
        }
      }
      todo.push(i);
    });
    if (state?.done && (todo.length > 0 || Object.keys(state.files).length !== entries.length)) {
      lock.check();
      await cache.clearState(viewId);
    }
    const totalBytes = todo.reduce((n, i) => n + ((entries[i]?.size as number) ?? 0), 0);
    const transfer = new Transfer(store, u, options, totalBytes, todo.length);
    let downloaded = 0;
    // Downloads are made durable in groups that double in size: one sync pass, then renamed and
    // linked (see src/cache/blob-group.ts); what a group holds is installed before the fetch
    // returns or throws, and progress counts a file once it is installed.
    const group = new BlobGroup<GroupedBlob>(cache.root);
    const installGroup = async (link: boolean) => {
      for (const { rel, blob, version } of await group.flush()) {
        if (!link) continue;
        lock.check();
        const st = await cache.linkInto(blob, `${dir}/${rel}`);
        files[rel] = recordOf(version, st);
        transfer.fileDone();
      }
    };
    try {
      await forEachAdaptive(
        todo,
        windowOf(store, options, (w, rate) =>
          debug('%s: %d in flight (%d files/s at the smaller window)', u, w, Math.round(rate)),
        ),
        async (i, signal) => {
          const e = entries[i];
          const rel = rels[i];
          if (!e || rel === undefined) return;
          const key = e.uri.key;
          const listed: ObjectInfo = {
            key,
            size: e.size ?? 0,
            version: e.version ?? '',
            versionId: e.versionId,
            etag: e.etag,
          };
          const seen = state?.files[rel];
          const got = await currentBlob(store, bucket, key, listed, transfer, {
            signal,
            seen,
            sweep: recovering,
            group: { group, rel },
          });
          if (got.downloaded) downloaded++;
          if (group.holds(got.blob)) {
            // Progress counts it once the group is installed: a file counted is durable.
            if (group.full) await installGroup(true);
            return;
          }
          lock.check();
          const st = await cache.linkInto(got.blob, `${dir}/${rel}`);
          files[rel] = recordOf(got.info.version, st);
          transfer.fileDone();
        },
        options.signal,
      );
    } catch (error) {
      // Keep what was downloaded: the refetch then downloads only the rest.
      await installGroup(false).catch((flushError: unknown) => {
        debug('%s: cannot install the downloaded blobs: %s', u, String(flushError));
      });
      throw error;
    }
    await installGroup(true);
    lock.check();
    await cache.prune(dir, new Set(rels));
    const unchanged =
      todo.length === 0 && state?.done === true && Object.keys(state.files).length === rels.length;
    if (!unchanged) {
      await cache.ensureDir(dir);
      await cache.syncDir(dir);
      lock.check();
      await cache.writeState({ uri: viewId, done: true, files }, { sweep: recovering });
    }
    return { path: dir, files: entries.length, downloaded, bytes: transfer.bytes };
  });
}

/**
 * Fetch one file at `?at=version:ID` (immutable: once cached and intact, never fetched again).
 *
 * The copy is reused while it is the file its state recorded (inode, size, mtime). Otherwise
 * it is linked again from its blob when that is intact — the size the version's metadata
 * records, and its ETag's MD5 when that is a plain one ({@link Cache.checkedBlob}) — or
 * downloaded again (online; offline that is an `OfflineMiss`). A download is checked against
 * the store's ETag and the metadata recorded before it.
 */
async function fetchVersion(
  store: CachedStoreContext,
  u: Uri,
  versionId: string,
  options: FetchOptions,
): Promise<FetchResult> {
  const { cache } = store;
  const { bucket, key } = store.locate(u);
  const dest = cache.pinPath(store.scheme, bucket, key, versionId);
  const viewId = `pin:${u}`;
  const state = await cache.readState(viewId);
  const cur = state?.files[''];
  if (state?.done && cur && sameFile(cache, dest, cur)) {
    return { path: dest, files: 1, downloaded: 0, bytes: 0 };
  }
  const where = u.toString();
  const blob = cache.blobPath(store.scheme, bucket, key, versionId);
  const meta = await cache.readVersionMeta(store.scheme, bucket, key, versionId);
  const transfer = new Transfer(store, u, options, 0, 1);
  let downloaded = 0;
  if (!(meta && (await cache.checkedBlob(blob, meta.size, metaDigest(meta), cur)))) {
    store.online(u, 'fetch');
    const res = await store._getVersion(bucket, key, versionId, { signal: options.signal });
    const etagDiffers =
      meta?.etag !== undefined && res.info.etag !== undefined && res.info.etag !== meta.etag;
    if (meta && (res.contentLength !== meta.size || etagDiffers)) {
      if (!res.bytes) res.body.destroy();
      throw new ObjectIntegrityError(
        'DigestMismatch',
        `${where}: the store returned ${res.contentLength} bytes with ETag ${res.info.etag}, an earlier read recorded ${meta.size} bytes with ETag ${meta.etag}`,
        { uri: where },
      );
    }
    // The digest the store states for the version (sha256, or an ETag that is a plain MD5) is
    // checked against the bytes.
    await cache.installBlob(blob, res, {
      expectedSize: res.contentLength,
      onBytes: transfer.add,
      signal: options.signal,
      digest: expectedOf(res, where),
    });
    await cache.writeVersionMeta(store.scheme, bucket, {
      key,
      versionId,
      size: res.info.size,
      etag: res.info.etag,
      sha256: res.info.sha256,
      crc32c: res.info.crc32c,
      etagNotMd5: res.etagNotMd5 === true ? true : undefined,
    });
    downloaded = 1;
  }
  const st = await cache.linkInto(blob, dest);
  await cache.writeState({ uri: viewId, done: true, files: { '': recordOf(versionId, st) } });
  transfer.fileDone();
  return { path: dest, files: 1, downloaded, bytes: transfer.bytes };
}

/** The digest a cached blob of a pinned version must have, from what its first download recorded. */
function metaDigest(meta: VersionMeta): ContentDigest | undefined {
  return checkableWith(recordedDigest(meta), meta);
}

const debug = debuglog('provcat:fetch');

/**
 * The window of a folder fetch's downloads: fixed at the call's or the store's `concurrency`
 * when one was given, else starting at the store's default and growing while it pays
 * (src/core/concurrency.ts `forEachAdaptive`).
 */
function windowOf(
  store: CachedStoreContext,
  options: FetchOptions,
  onGrow: AdaptiveWindow['onGrow'],
): AdaptiveWindow {
  const fixed = options.concurrency ?? (store.adaptiveConcurrency ? undefined : store.concurrency);
  if (fixed !== undefined) return { start: fixed, max: fixed };
  return {
    start: store.concurrency,
    max: Math.max(store.concurrency, ADAPTIVE_MAX_CONCURRENCY),
    onGrow,
  };
}
