/**
 * {@link PageReader}: read the pages of one format 2 commit, verified on every read, from the
 * cache or the store, and keep them in the cache (a page is immutable: named by its SHA-256).
 *
 * Fail closed: a page whose bytes do not hash to its name is `ObjectIntegrityError`
 * (`DigestMismatch`) and nothing of it is served; a page that is not where its parent says
 * (another height, other first or last key, another count of files) is `StoreError`; a page
 * the store does not have is `StoreError` (the commit is incomplete), never an empty answer.
 *
 * @module
 */
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { debuglog } from 'node:util';
import type { CachedStoreContext } from '../../cache/context.js';
import { ObjectIntegrityError, OfflineMiss, StoreError } from '../../core/errors.js';
import { readIfExists, tempPathFor } from '../../core/fs-atomic.js';
import { isNotFound, readSmall } from '../../logs/small-objects.js';
import { sha256Hex } from '../format.js';
import {
  isLeaf,
  MAX_PAGE_BYTES,
  type Page,
  type PageRef,
  pageKey,
  parsePage,
} from './page-format.js';

const debug = debuglog('provcat:commits');

/** Parsed pages kept in memory per reader (about 256 entries each). */
const MEMO_PAGES = 128;

/** Where the cache keeps page `hash` of `bucket`: beside the bucket's commit objects. */
export function pagePath(store: CachedStoreContext, bucket: string, hash: string): string {
  const commits = dirname(store.cache.commitPath(store.scheme, bucket, hash));
  return join(commits, 'pages', hash);
}

/**
 * Keep verified page bytes in the cache (a writer calls this for the pages it wrote): complete or
 * absent (a temp renamed into place), but not fsynced — thousands of pages would cost two fsyncs
 * each, and a copy a crash left torn fails its hash on the next read and is read again.
 */
export async function cachePage(
  store: CachedStoreContext,
  bucket: string,
  hash: string,
  bytes: Uint8Array,
): Promise<void> {
  const target = pagePath(store, bucket, hash);
  await mkdir(dirname(target), { recursive: true });
  const temp = tempPathFor(target);
  try {
    await writeFile(temp, bytes, { flag: 'wx', mode: 0o644 });
    await rename(temp, target);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

/** Reads the pages of one commit (of `folder`, commit `commitId`, in `bucket`). */
export class PageReader {
  private readonly memo = new Map<string, Promise<Page>>();
  /** Pages read from the store or the cache (not from memory) so far. */
  reads = 0;

  constructor(
    private readonly store: CachedStoreContext,
    private readonly bucket: string,
    private readonly folder: string,
    private readonly commitId: string,
    private readonly signal?: AbortSignal,
  ) {}

  /**
   * Page `hash` at `height`, checked against what names it: `ref` (its parent's entry) or, for
   * the root, `count` (the commit's number of files).
   */
  load(hash: string, height: number, expect: { ref?: PageRef; count?: number }): Promise<Page> {
    const known = this.memo.get(hash);
    if (known) {
      this.memo.delete(hash);
      this.memo.set(hash, known);
      return known;
    }
    const loading = this.read(hash, height, expect);
    this.memo.set(hash, loading);
    loading.catch(() => this.memo.delete(hash));
    while (this.memo.size > MEMO_PAGES) {
      const oldest = this.memo.keys().next().value as string;
      this.memo.delete(oldest);
    }
    return loading;
  }

  private where(hash: string): string {
    return `${this.store.scheme}://${this.bucket}/${pageKey(hash)}`;
  }

  private async read(
    hash: string,
    height: number,
    expect: { ref?: PageRef; count?: number },
  ): Promise<Page> {
    const where = this.where(hash);
    const path = pagePath(this.store, this.bucket, hash);
    this.reads++;
    let cacheProblem: ObjectIntegrityError | undefined;
    const cached = await readIfExists(path);
    if (cached !== undefined) {
      if (sha256Hex(cached) === hash) return this.check(cached, hash, height, expect);
      cacheProblem = new ObjectIntegrityError(
        'DigestMismatch',
        `the cached copy of page ${hash} (${path}) does not hash to its name; dropped`,
        { uri: where },
      );
      debug('%s', cacheProblem.message);
      await rm(path, { force: true });
    }
    if (this.store.offline) {
      throw new OfflineMiss(`offline: page ${hash} of commit ${this.commitId} is not cached`, {
        uri: where,
        cause: cacheProblem,
      });
    }
    let bytes: Buffer;
    try {
      bytes = await readSmall(this.store, this.bucket, pageKey(hash), {
        limit: MAX_PAGE_BYTES,
        signal: this.signal,
      });
    } catch (error) {
      if (isNotFound(error)) {
        throw new StoreError(
          `commit ${this.commitId} is incomplete: its page ${where} is missing`,
          { uri: where, cause: error },
        );
      }
      throw error;
    }
    const actual = sha256Hex(bytes);
    if (actual !== hash) {
      throw new ObjectIntegrityError(
        'DigestMismatch',
        `page ${where} of commit ${this.commitId} hashes to ${actual}, not to its name (tampered or corrupt)`,
        { uri: where },
      );
    }
    const page = this.check(bytes, hash, height, expect);
    await cachePage(this.store, this.bucket, hash, bytes);
    return page;
  }

  private check(
    bytes: Buffer,
    hash: string,
    height: number,
    expect: { ref?: PageRef; count?: number },
  ): Page {
    const where = this.where(hash);
    const page = parsePage(bytes, height, this.folder, where);
    const keys = isLeaf(page) ? page.files : undefined;
    const refs = isLeaf(page) ? undefined : page.pages;
    const first = keys ? keys[0]?.key : refs?.[0]?.first;
    const last = keys ? keys[keys.length - 1]?.key : refs?.[refs.length - 1]?.last;
    const count = keys ? keys.length : (refs ?? []).reduce((n, r) => n + r.count, 0);
    const { ref } = expect;
    const wrong =
      (ref && (ref.first !== first || ref.last !== last || ref.count !== count)) ||
      (expect.count !== undefined && expect.count !== count);
    if (wrong) {
      throw new StoreError(
        `page ${where} of commit ${this.commitId} does not hold what its parent says ` +
          `(keys ${JSON.stringify(first)}..${JSON.stringify(last)}, ${count} files)`,
        { uri: where },
      );
    }
    return page;
  }
}
