/**
 * Writing content-addressed objects: the pages of a tree ({@link writePages}) and a commit
 * object ({@link writeContentAddressed}). Every writer of one key writes the same bytes, so a
 * second write is harmless, and an existing copy is trusted only once its bytes hash to its name.
 *
 * @module
 */
import { debuglog } from 'node:util';
import type { CachedStoreContext } from '../../cache/context.js';
import type { CreateMode } from '../../contract/primitives.js';
import { Exists } from '../../core/errors.js';
import { readSmall } from '../../logs/small-objects.js';
import { type CommitFile, sha256Hex } from '../format.js';
import { TreeBuilder, type TreeRoot } from './build.js';
import { MAX_PAGE_BYTES, pageKey } from './page-format.js';
import { cachePage } from './page-store.js';

const debug = debuglog('provcat:commits');

/** What a commit wrote: pages written (the others were its parent's, or already there). */
export interface PageWrites {
  written: number;
  shared: number;
}

/**
 * What a committer knows of files beyond what the listing says: the SHA-256 of one exact version
 * of a key (`commit --from`: src/folders/pushed-digests.ts), or `undefined`.
 */
export interface KnownDigests {
  /**
   * The SHA-256 to record for this file record, or `undefined`. Called for every record, in key
   * order, in each pass over the files.
   */
  sha256Of(record: {
    key: string;
    versionId: string;
    size: number;
    etag?: string | undefined;
  }): string | undefined;
  /**
   * A pass over the files begins: the records seen before are void (a snapshot whose listings
   * differed, or a commit that lost its log race, passes over the files again).
   */
  begin?(): void;
}

/** Options of {@link writePages}. */
export interface WritePagesOptions {
  /** How the bucket creates only-if-absent (`_createMode`). */
  mode: CreateMode;
  /** Pages already in the store, not written again (a parent's tree). */
  known?: ReadonlySet<string> | undefined;
  /** Counts of the pages written and shared, added to. */
  counts?: PageWrites | undefined;
  /** SHA-256s to record in the file records they name (see {@link KnownDigests}). */
  digests?: KnownDigests | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * Write the page tree of `files` (in key order, as a commit's snapshot gives them) and return
 * its root, or `undefined` when there are no files (nothing written). Each page `known` does
 * not name is created (content-addressed; an existing copy is checked and rewritten if
 * corrupt), and cached; at most the store's concurrency of writes are in flight, and none is
 * left running when this returns or throws. A commit writes its pages so (src/commits/commit.ts),
 * and a branch of a live folder the pages of its snapshot (src/commits/branch.ts).
 */
export async function writePages(
  store: CachedStoreContext,
  bucket: string,
  files: Iterable<CommitFile> | AsyncIterable<CommitFile>,
  options: WritePagesOptions,
): Promise<TreeRoot | undefined> {
  const { mode, signal, digests } = options;
  const known = options.known ?? new Set<string>();
  const counts = options.counts ?? { written: 0, shared: 0 };
  const done = new Set<string>();
  // Up to the store's concurrency of page writes in flight; the first failure fails the commit.
  const inflight = new Set<Promise<void>>();
  const state: { failure?: { error: unknown } } = {};
  const check = (): void => {
    if (state.failure) throw state.failure.error;
  };
  const write = async (hash: string, bytes: Buffer) => {
    const key = pageKey(hash);
    await writeContentAddressed(store, bucket, key, hash, bytes, mode, signal, MAX_PAGE_BYTES);
    counts.written++;
    try {
      await cachePage(store, bucket, hash, bytes);
    } catch (error) {
      // A cache that cannot be written only costs a read later.
      debug('could not cache page %s: %s', hash, error);
    }
  };
  const builder = new TreeBuilder(async (hash, bytes) => {
    check();
    if (known.has(hash) || done.has(hash)) {
      counts.shared++;
      return;
    }
    done.add(hash);
    const tracked: Promise<void> = write(hash, bytes).then(
      () => {
        inflight.delete(tracked);
      },
      (error: unknown) => {
        state.failure ??= { error };
        inflight.delete(tracked);
      },
    );
    inflight.add(tracked);
    while (inflight.size >= store.concurrency) await Promise.race(inflight);
    check();
  });
  const settle = async () => {
    await Promise.all(inflight);
    check();
  };
  let n = 0;
  digests?.begin?.();
  try {
    for await (const f of files) {
      const sha256 = digests?.sha256Of(f);
      if (sha256 !== undefined) f.sha256 = sha256;
      await builder.add(f);
      n++;
    }
    if (n === 0) return undefined;
    const root = await builder.finish();
    await settle();
    return root;
  } finally {
    // Never leave a write running past the commit's return or failure.
    await Promise.all(inflight);
  }
}

/**
 * Write a content-addressed object (a commit or a page) named `id` (the SHA-256 of `bytes`):
 * created only if absent, and an existing copy that does not hash to `id` (corrupt) is written
 * again; on a store without atomic create, a plain put (every writer writes the same bytes).
 */
export async function writeContentAddressed(
  store: CachedStoreContext,
  bucket: string,
  key: string,
  id: string,
  bytes: Buffer,
  mode: CreateMode,
  signal: AbortSignal | undefined,
  limit: number,
): Promise<void> {
  if (mode !== 'atomic') {
    // A plain put is safe here: every writer of this key writes these very bytes.
    await store._put(bucket, key, bytes, { size: bytes.byteLength, signal });
    return;
  }
  try {
    await store._create(bucket, key, bytes, { signal });
    return;
  } catch (error) {
    if (!(error instanceof Exists)) throw error;
  }
  const there = await readSmall(store, bucket, key, { limit, signal });
  if (sha256Hex(there) !== id) {
    debug('object %s was corrupt; writing it again', key);
    await store._put(bucket, key, bytes, { size: bytes.byteLength, signal });
  }
}
