/**
 * The log of a folder: `.provcat/log/<sha256 of the folder prefix>/<10^15 - N>`, each entry
 * holding the 64-hex ID of commit N. Names count down, so a plain ascending listing gives the
 * newest commit first and "the newest commit" is the first key of one short listing.
 *
 * Every reader takes the *oldest* version of an entry key (src/logs/create-only-log.ts): with an atomic create
 * there is only one, and on a store that ignores create-if-absent (`oldest-version-wins`) the
 * oldest is the write that won. Reading the current version there could return a loser's ID.
 *
 * @module
 */

import type { CachedStoreContext } from '../cache/context.js';
import { checkConcurrency, forEachLimit } from '../core/concurrency.js';
import { OfflineMiss, StoreError, UriError } from '../core/errors.js';
import { toUri, type Uri } from '../core/uri.js';
import { entryId, follows, MAX_ENTRY_BYTES, newestListed } from '../logs/create-only-log.js';
import { oldestVersionsIn, readOldest, readSmall } from '../logs/small-objects.js';
import { type CommitHead, isMetaKey, logPrefix, numberOfLogKey } from './format.js';
import { openCommit } from './read.js';

/** One commit of a folder as {@link logFolder} reports it. */
export interface LogEntry {
  /** The commit ID (SHA-256 of the commit object). */
  id: string;
  /** Its number in the folder's log (1 is the first commit). */
  number: number;
  /** The previous commit's ID, `null` for commit 1. */
  parent: string | null;
  message: string;
  metadata: Record<string, string>;
  /** ISO 8601 UTC time of the commit. */
  time: string;
  /** How many files the commit records. */
  files: number;
}

/** Where a log entry points. */
export interface LogPointer {
  number: number;
  id: string;
}

function parseEntry(bytes: Buffer, where: string): string {
  const id = entryId(bytes);
  if (id === undefined) {
    throw new StoreError(`log entry ${where} does not hold a commit ID`, { uri: where });
  }
  return id;
}

/** The objects of a paged listing, page after page. */
async function* objectsOf(pages: AsyncIterable<{ objects: readonly { key: string }[] }>) {
  for await (const page of pages) yield* page.objects;
}

/**
 * The newest commit of the folder with prefix `folder` (`` for the bucket), or `undefined` when
 * it has none. Three primitive calls: one listing of one key, its versions, one read.
 */
export async function newestEntry(
  store: CachedStoreContext,
  bucket: string,
  folder: string,
  signal?: AbortSignal,
): Promise<LogPointer | undefined> {
  const prefix = logPrefix(folder);
  const first = await newestListed(
    objectsOf(store._pages(bucket, prefix, { limit: 1, signal })),
    (key) => numberOfLogKey(prefix, key),
  );
  if (!first) return undefined;
  const where = `${store.scheme}://${bucket}/${first.key}`;
  const bytes = await readOldest(store, bucket, first.key, { limit: MAX_ENTRY_BYTES, signal });
  if (!bytes) throw new StoreError(`log entry ${where} is listed but has no version`);
  return { number: first.number, id: parseEntry(bytes, where) };
}

/**
 * Every entry of a folder's log, newest first, each the oldest version of its key. One
 * `_history` listing plus one read per entry (at most `concurrency` at once).
 */
export async function readLog(
  store: CachedStoreContext,
  bucket: string,
  folder: string,
  options: { signal?: AbortSignal | undefined; concurrency?: number | undefined } = {},
): Promise<LogPointer[]> {
  checkConcurrency(options.concurrency);
  const prefix = logPrefix(folder);
  const records = await oldestVersionsIn(store, bucket, prefix, { signal: options.signal });
  const pointers: LogPointer[] = [];
  await forEachLimit(
    records.entries(),
    options.concurrency ?? store.concurrency,
    async ([i, record], signal) => {
      const number = numberOfLogKey(prefix, record.key);
      if (number === undefined) return;
      const bytes = await readSmall(store, bucket, record.key, {
        versionId: record.versionId,
        limit: MAX_ENTRY_BYTES,
        signal,
      });
      pointers[i] = { number, id: parseEntry(bytes, `${store.scheme}://${bucket}/${record.key}`) };
    },
    options.signal,
  );
  return pointers.filter((p) => p !== undefined).sort((a, b) => b.number - a.number);
}

/** Check that commit `commit`, named by log entry `pointer` of `folder`, belongs there. */
export function checkEntry(
  commit: Pick<CommitHead, 'id' | 'number' | 'folder'>,
  pointer: LogPointer,
  folder: string,
): void {
  if (commit.number !== pointer.number || commit.folder !== folder) {
    throw new StoreError(
      `log entry ${pointer.number} of folder '${folder}' names commit ${commit.id}, which is ` +
        `commit ${commit.number} of folder '${commit.folder}'`,
    );
  }
}

/** Options of {@link logFolder}. */
export interface LogOptions {
  signal?: AbortSignal | undefined;
}

/** The folder prefix and bucket a commit/log call is about; refuses what it cannot be. */
export function folderOf(store: CachedStoreContext, uri: Uri | string, what: string) {
  const u = toUri(uri);
  if (u.at) {
    throw new UriError(`${what} takes a folder URI without ?at=: ${u}`, { uri: u.toString() });
  }
  const folderUri = u.asFolder();
  const { bucket } = store.locate(folderUri);
  const folder = folderUri.prefix;
  if (isMetaKey(folder)) {
    throw new UriError(`${what}: keys under .provcat/ belong to provcat: ${u}`, {
      uri: u.toString(),
    });
  }
  return { uri: folderUri, bucket, folder };
}

/**
 * The commits of a folder, newest first. Each entry is checked: its commit object hashes to its
 * ID, records this folder and this number, and names the next older entry as its parent (a
 * broken chain raises `StoreError`). A folder without commits gives `[]`; on a bucket that
 * keeps no versions, `NotSupported`. Offline: `OfflineMiss` (the log is a listing of the store).
 */
export async function logFolder(
  store: CachedStoreContext,
  uri: Uri | string,
  options: LogOptions = {},
): Promise<LogEntry[]> {
  const { uri: folderUri, bucket, folder } = folderOf(store, uri, 'log');
  if (store.offline) {
    throw new OfflineMiss(`offline: log of ${folderUri} needs the store`, {
      uri: folderUri.toString(),
    });
  }
  const pointers = await readLog(store, bucket, folder, { signal: options.signal });
  if (pointers.length === 0) {
    // No log entry is no answer on a bucket that keeps no versions (it can hold no commit): the
    // first record of the folder's own history tells. S3 and GCS refuse on the bucket's setting,
    // Azure when it lists a blob without a version ID; either is NotSupported.
    for await (const _ of store._history(bucket, folder, { signal: options.signal })) break;
    return [];
  }
  const entries: LogEntry[] = new Array(pointers.length);
  await forEachLimit(
    pointers.entries(),
    store.concurrency,
    async ([i, pointer], signal) => {
      const commit = (await openCommit(store, bucket, pointer.id, { signal })).head;
      checkEntry(commit, pointer, folder);
      entries[i] = {
        id: commit.id,
        number: commit.number,
        parent: commit.parent,
        message: commit.message,
        metadata: commit.metadata,
        time: commit.time,
        files: commit.count,
      };
    },
    options.signal,
  );
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i] as LogEntry;
    const older = entries[i + 1];
    const expected = older ? older.id : null;
    const gapless = follows(entry.number, older?.number);
    if (entry.parent !== expected || !gapless) {
      throw new StoreError(
        `the log of ${folderUri} is broken at commit ${entry.number} (${entry.id}): its parent ` +
          `is ${entry.parent}, the log's next older entry is ${older ? `${older.number} (${older.id})` : 'none'}`,
        { uri: folderUri.toString() },
      );
    }
  }
  return entries;
}
