/**
 * The two-listing snapshot: the current version of every file under a folder at one moment,
 * taken while other programs may be writing.
 *
 * An object store lists page by page, so no single listing is a snapshot. But every write makes
 * a new version ID, and `_history` lists every version, delete markers included. Take listing A,
 * then listing B. If they are equal, no key gained or lost a version between the moment A read
 * it and the moment B read it; A finished reading every key before B started, so at the moment
 * between the two listings every key held exactly the listed versions. The current version of
 * each key in that listing is therefore a snapshot of one instant. If they differ, wait briefly
 * and take a fresh pair; after {@link SNAPSHOT_ATTEMPTS} pairs give up with a `StoreError`.
 *
 * A listing that lists one file current twice is no snapshot either, and counts as a pair that
 * differed. A write that lands while a listing is between two pages makes one where the driver
 * builds its history from a listing of generations (src/driver-kit/version-history.ts: GCS,
 * Azure): the page before the write listed the key's old version as current, the page after it
 * lists the new one. Two equal listings never both show it (the second one reads the new state
 * on every page), so the argument above is unchanged; such a listing is never handed on (two
 * records of one key would be refused by the page tree as a caller's error).
 *
 * Each listing of a folder longer than a page is listed in key ranges at once where the driver
 * can start a listing after a key (src/folders/parallel-listing.ts): the same entries in the
 * same order, so the argument above holds unchanged (each range is read through before the
 * listing ends, and the second listing starts after the first one ended).
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { debuglog } from 'node:util';
import type { VersionRecord } from '../contract/primitives.js';
import type { StoreContext } from '../contract/store-context.js';
import { StoreError } from '../core/errors.js';
import { checkFolderKeys, FolderKeyStream } from '../core/keys.js';
import { type Backoff, backoffMs, sleep } from '../core/retry.js';
import { Uri } from '../core/uri.js';
import { historyListing } from '../folders/parallel-listing.js';
import { type CommitFile, compareUtf8, isMetaKey } from './format.js';

const debug = debuglog('provcat:commits');

/** Pairs of listings tried before a folder that keeps changing is refused. */
export const SNAPSHOT_ATTEMPTS = 5;

/** The wait before listing again: full jitter, 20 ms × 2^attempt on average, 2 s at most. */
const LISTING_BACKOFF: Backoff = { baseMs: 40, capMs: 2000 };

/** Options of {@link snapshotFolder}. */
export interface SnapshotOptions {
  signal?: AbortSignal | undefined;
  /** Pairs of listings to try (default {@link SNAPSHOT_ATTEMPTS}). */
  attempts?: number | undefined;
  /**
   * Key ranges each listing reads at once (src/folders/parallel-listing.ts; default 8); 1
   * lists sequentially. The same listing either way.
   */
  concurrency?: number | undefined;
}

async function listVersions(
  store: StoreContext,
  bucket: string,
  folder: string,
  options: SnapshotOptions,
): Promise<VersionRecord[]> {
  const out: VersionRecord[] = [];
  const { signal, concurrency } = options;
  for await (const r of historyListing(store, bucket, folder, { signal, concurrency })) {
    if (isMetaKey(r.key) || !r.key.startsWith(folder)) continue;
    out.push(r);
  }
  return out;
}

function sameListing(a: readonly VersionRecord[], b: readonly VersionRecord[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as VersionRecord;
    const y = b[i] as VersionRecord;
    if (
      x.key !== y.key ||
      x.versionId !== y.versionId ||
      x.size !== y.size ||
      x.current !== y.current
    ) {
      return false;
    }
  }
  return true;
}

/**
 * The current version of every file under the folder prefix `folder` (`` for the whole bucket,
 * `.provcat/` always left out), as commit file records sorted by the UTF-8 bytes of the key.
 * Deleted files (a current delete marker) and folder markers (keys ending `/`) are left out.
 *
 * Guarantees: the records are the current versions at one instant between two equal listings
 * (see the module comment); `StoreError` after `attempts` unequal pairs; the folder's keys pass
 * the one rule of src/core/keys.ts `checkFolderKeys`: `UriError` for a key no URI can name (`a//b`),
 * which a commit could record but no read at the commit could name, and `StoreError` for names
 * one disk would merge (case, NFC/NFD) or a name both a file and a folder, which a fetch at the
 * commit would refuse.
 * StoreError from `_history` when the bucket keeps no versions.
 */
export async function snapshotFolder(
  store: StoreContext,
  bucket: string,
  folder: string,
  options: SnapshotOptions = {},
): Promise<CommitFile[]> {
  const { signal } = options;
  const attempts = options.attempts ?? SNAPSHOT_ATTEMPTS;
  let listing: VersionRecord[] | undefined;
  for (let attempt = 0; attempt < attempts; attempt++) {
    if (attempt > 0) await sleep(backoffMs(attempt, Math.random, LISTING_BACKOFF), signal);
    const a = await listVersions(store, bucket, folder, options);
    const b = await listVersions(store, bucket, folder, options);
    if (sameListing(a, b)) {
      listing = b;
      break;
    }
    debug('snapshot of %s/%s: listings differ (attempt %d)', bucket, folder, attempt + 1);
  }
  if (!listing) {
    throw new StoreError(
      `${store.scheme}://${bucket}/${folder} kept changing: ${attempts} pairs of listings ` +
        'differed, so no consistent snapshot could be taken; retry when writes settle',
      { uri: `${store.scheme}://${bucket}/${folder}` },
    );
  }
  const files: CommitFile[] = [];
  for (const r of listing) {
    if (!r.current || r.size === null || r.key.endsWith('/')) continue;
    const file: CommitFile = { key: r.key, versionId: r.versionId, size: r.size };
    if (r.etag !== undefined) file.etag = r.etag;
    files.push(file);
  }
  files.sort((x, y) => compareUtf8(x.key, y.key));
  for (let i = 1; i < files.length; i++) {
    if ((files[i - 1] as CommitFile).key === (files[i] as CommitFile).key) {
      throw new StoreError(
        `${store.driver} listed two current versions of ${(files[i] as CommitFile).key}`,
      );
    }
  }
  // A folder no fetch could hold is no commit: refused before anything is written.
  const where = Uri.fromKey(store.scheme, bucket, folder);
  checkFolderKeys(
    where,
    files.map((f) => f.key.slice(folder.length)),
  );
  return files;
}

/**
 * A listing that turned out not to be in key order, or a folder where two names may fold to one
 * (the exact refusal needs every name): the streaming snapshot falls back to the in-memory one.
 */
class OutOfOrder extends Error {}

/**
 * The digest of a listing, record by record, as {@link sameListing} compares them: each record
 * as its key and version ID with their lengths (so no two listings encode alike), its size and
 * whether it is current. Records are gathered into text of about 64 KiB per hash update (one
 * update a record cost a commit about a microsecond a file).
 */
class ListingDigest {
  private readonly hash = createHash('sha256');
  private text = '';

  add(r: VersionRecord): void {
    this.text += `${r.key.length}:${r.key}${r.versionId.length}:${r.versionId}${r.size ?? '-'}${r.current ? '+' : '.'}`;
    if (this.text.length >= 65_536) this.flush();
  }

  /** The hex digest of every record added (once). */
  digest(): string {
    this.flush();
    return this.hash.digest('hex');
  }

  private flush(): void {
    // UTF-16 code units, as the lengths count them: lossless for any string, a lone surrogate too.
    this.hash.update(this.text, 'utf16le');
    this.text = '';
  }
}

/**
 * The snapshot of {@link snapshotFolder}, streamed: `consume` gets the current files in key
 * order while the second listing of each pair is read, and its result is returned once that
 * pair proved equal. Memory holds no listing and no key names: the first listing of a pair is
 * kept as a digest, and its names pass the rule of `checkFolderKeys` as they stream by
 * (src/core/keys.ts `FolderKeyStream`: 8 bytes a file), before `consume` is called; the second
 * is streamed. A `consume` of a pair that differed is discarded (what it wrote must be harmless:
 * content-addressed pages), and so is one of a second listing that gives a file twice: it ends
 * there with a `StoreError`, which `consume` must let through or turn into an error of its own.
 * A store that lists out of key order, or a folder where two names may be one on a
 * case-insensitive disk, gets the in-memory snapshot instead (which names the clash).
 * Same refusals, with the same messages, as {@link snapshotFolder}, except that a listing giving
 * a file current twice is taken as a pair that differed (see the module comment), named in the
 * `StoreError` when it was the last.
 */
export async function snapshotStream<T>(
  store: StoreContext,
  bucket: string,
  folder: string,
  consume: (files: AsyncIterable<CommitFile>) => Promise<T>,
  options: SnapshotOptions = {},
): Promise<T> {
  const { signal } = options;
  const listing = { signal, concurrency: options.concurrency };
  const attempts = options.attempts ?? SNAPSHOT_ATTEMPTS;
  const where = Uri.fromKey(store.scheme, bucket, folder);
  const inFolder = (r: VersionRecord) => !isMetaKey(r.key) && r.key.startsWith(folder);
  const isFile = (r: VersionRecord) => r.current && r.size !== null && !r.key.endsWith('/');
  /** How the last pair's listing was no snapshot, if one was (for the final refusal). */
  let inconsistent: string | undefined;
  const listedTwice = (key: string) => `${store.driver} listed two current versions of ${key}`;
  try {
    for (let attempt = 0; attempt < attempts; attempt++) {
      if (attempt > 0) await sleep(backoffMs(attempt, Math.random, LISTING_BACKOFF), signal);
      inconsistent = undefined;
      const first = new ListingDigest();
      const names = new FolderKeyStream(where);
      let twice: string | undefined;
      let previous: string | undefined;
      let previousFile: string | undefined;
      for await (const r of historyListing(store, bucket, folder, listing)) {
        if (!inFolder(r)) continue;
        if (previous !== undefined && compareUtf8(previous, r.key) > 0) throw new OutOfOrder();
        previous = r.key;
        first.add(r);
        if (!isFile(r)) continue;
        if (r.key === previousFile) twice ??= r.key;
        previousFile = r.key;
        names.add(r.key.slice(folder.length));
      }
      if (twice !== undefined) {
        // Crossed by a write between two of its pages: no snapshot, so no second listing.
        inconsistent = listedTwice(twice);
        debug('snapshot of %s/%s: %s (attempt %d)', bucket, folder, inconsistent, attempt + 1);
        continue;
      }
      // A folder no fetch could hold is no commit: refused before anything is written.
      if (names.finish() === 'recheck') throw new OutOfOrder();
      const second = new ListingDigest();
      /** The file the second listing gave twice: it stopped there, and `consume` failed. */
      let again: string | undefined;
      const files = async function* (): AsyncGenerator<CommitFile> {
        let last: string | undefined;
        let lastFile: string | undefined;
        for await (const r of historyListing(store, bucket, folder, listing)) {
          if (!inFolder(r)) continue;
          if (last !== undefined && compareUtf8(last, r.key) > 0) throw new OutOfOrder();
          last = r.key;
          second.add(r);
          if (!isFile(r)) continue;
          if (r.key === lastFile) {
            again = r.key;
            throw new StoreError(listedTwice(r.key));
          }
          lastFile = r.key;
          const file: CommitFile = { key: r.key, versionId: r.versionId, size: r.size as number };
          if (r.etag !== undefined) file.etag = r.etag;
          yield file;
        }
      };
      let result: T;
      try {
        result = await consume(files());
      } catch (error) {
        // Whatever `consume` made of the listing's end, the pair differed: list again.
        if (again === undefined) throw error;
        inconsistent = listedTwice(again);
        debug('snapshot of %s/%s: %s (attempt %d)', bucket, folder, inconsistent, attempt + 1);
        continue;
      }
      if (first.digest() === second.digest()) return result;
      debug('snapshot of %s/%s: listings differ (attempt %d)', bucket, folder, attempt + 1);
    }
  } catch (error) {
    if (!(error instanceof OutOfOrder)) throw error;
    debug('%s: listed out of key order or names to recheck: snapshot in memory', where);
    const listed = await snapshotFolder(store, bucket, folder, options);
    return consume(
      (async function* () {
        yield* listed;
      })(),
    );
  }
  throw new StoreError(
    `${store.scheme}://${bucket}/${folder} kept changing: ${attempts} pairs of listings ` +
      `differed${inconsistent ? ` (the last: ${inconsistent})` : ''}, so no consistent ` +
      'snapshot could be taken; retry when writes settle',
    { uri: where.toString() },
  );
}
