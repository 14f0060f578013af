/**
 * {@link BlobGroup}: blob installs of one folder fetch whose fsyncs are shared — one sync pass
 * (`sync -f` of the cache's file system, src/core/sync-fs.ts) per group of up to
 * {@link BLOB_GROUP_MAX} blobs instead of an fsync per file.
 *
 * A grouped install writes and checks its temp exactly as an ungrouped one (size, digest) and
 * closes it unsynced; the group then syncs every temp it holds, and only after that renames each
 * over its blob. So a blob still only ever appears complete and durable (the promise of
 * src/cache/install-blob.ts): a crash before the sync pass leaves temps, which the next fetch of
 * the bucket sweeps, never a blob. The folder fetch links a grouped blob into its view after the
 * flush, and flushes what it holds before it returns or throws, so a fetch stopped halfway keeps
 * every blob it downloaded and the refetch downloads only what is missing.
 *
 * @module
 */
import { closeSync, fsyncSync, openSync, renameSync, rmSync } from 'node:fs';
import { forEachLimit } from '../core/concurrency.js';
import { SYNCFS_MIN_FILES, syncFileSystems } from '../core/sync-fs.js';

/** The most blobs one sync pass covers. */
export const BLOB_GROUP_MAX = 16384;

/** The blobs of a group's first sync pass (each next pass covers twice as many). */
export const BLOB_GROUP_FIRST = 64;

/** fsyncs in flight where `sync -f` cannot run. */
const FALLBACK_CONCURRENCY = 16;

/** One deferred install: the written temp and the blob it becomes. */
interface Pending<T> {
  temp: string;
  blob: string;
  item: T;
}

/** A group of deferred blob installs (see the module comment); `T` is the caller's record. */
export class BlobGroup<T = undefined> {
  #pending: Pending<T>[] = [];
  readonly #held = new Set<string>();

  /** The size at which the group flushes next: it doubles per flush, up to `max`. */
  #limit: number;

  /**
   * A group for blobs below `root` (the cache's root: one file system). The first flush comes
   * after `first` blobs and each next one after twice as many, up to `max`: a fetch killed
   * halfway loses at most about as many downloads as it had installed (plus `first`), while
   * the number of sync passes grows only with the logarithm of the folder's size.
   */
  constructor(
    private readonly root: string,
    private readonly max = BLOB_GROUP_MAX,
    first = BLOB_GROUP_FIRST,
  ) {
    this.#limit = Math.min(first, max);
  }

  /** Defer the install of `temp` (written, checked, closed) as `blob`. */
  defer(temp: string, blob: string, item: T): void {
    this.#pending.push({ temp, blob, item });
    this.#held.add(blob);
  }

  /**
   * True when the install of `blob` waits for a {@link flush}: the next one, or one running now
   * (then that flush's caller gets its record back and links it).
   */
  holds(blob: string): boolean {
    return this.#held.has(blob);
  }

  /** True when the group should be flushed now. */
  get full(): boolean {
    return this.#pending.length >= this.#limit;
  }

  /**
   * Sync every temp deferred so far, then rename each over its blob; returns their records.
   * When the sync fails the temps are removed and the error thrown: no blob appears.
   */
  async flush(): Promise<T[]> {
    const batch = this.#pending;
    this.#pending = [];
    if (batch.length === 0) return [];
    // Held until renamed: a caller that deferred a blob just before this flush took it asks
    // `holds` only after its install resolved, and must not link a blob not renamed yet (this
    // flush's caller links it).
    const release = () => {
      for (const p of batch) this.#held.delete(p.blob);
    };
    this.#limit = Math.min(this.#limit * 2, this.max);
    try {
      if (batch.length < SYNCFS_MIN_FILES || !(await syncFileSystems([this.root]))) {
        await forEachLimit(batch, FALLBACK_CONCURRENCY, async ({ temp }) => {
          const fd = openSync(temp, 'r');
          try {
            fsyncSync(fd);
          } finally {
            closeSync(fd);
          }
        });
      }
    } catch (error) {
      for (const { temp } of batch) rmSync(temp, { force: true });
      release();
      throw error;
    }
    try {
      for (const { temp, blob } of batch) renameSync(temp, blob);
    } finally {
      release();
    }
    return batch.map((p) => p.item);
  }
}
