/**
 * A listing of a large folder in key ranges at once, merged back into one stream in exact key
 * order: what one sequential listing returns, entry for entry, in fewer round trips' time.
 *
 * A store lists 1,000 entries a round trip, so a million files are a thousand sequential round
 * trips. Where the driver can start a listing after a given key (`capabilities.startAfter`),
 * the folder is cut into ranges `(cut_i, cut_i+1]` that partition every key, and up to
 * `concurrency` of them are listed at once, each from its lower cut until it lists a key past
 * its upper one. Because the ranges partition the key space and each is in key order, their
 * concatenation in range order is exactly the sequential listing, whatever the cuts: all the
 * versions of one key fall in one range, and nothing is listed twice or skipped.
 *
 * The sequential listing is also the first range: a listing whose first page (1,000 entries) is
 * all there is costs one request as before and fans out nothing. A longer one keeps listing in
 * its first range while the others start, cut first at the folder's subfolders (one delimiter
 * listing), then, whenever a slot is free, the first range from the merge's position on that is
 * expected to hold more than two targets (a target: `buffered / concurrency` entries, five pages
 * by default) is cut about one target past where it has got to (src/folders/range-splits.ts
 * places the cut from the key density that range has listed; see `next` for which qualify). So the ranges being listed are the ones
 * the merge needs next, each short enough to be listed through within the buffer. Memory is
 * bounded: the merge hands on the first range's entries as they come (it waits beyond two pages),
 * and the ranges after it hold at most `buffered` entries between them (a range waits beyond
 * that). The price is one request per range beyond its pages: the page that reads past its upper
 * cut, whose entries belong to the next range (a store cannot be told where to stop).
 * Any range's failure fails the listing (never a listing cut short, which would read as
 * deletions); stopping early aborts every range's request.
 *
 * @module
 */
import type { VersionRecord } from '../contract/primitives.js';
import type { StoreContext } from '../contract/store-context.js';
import { StoreError } from '../core/errors.js';
import { compareUtf8 } from '../core/keys.js';
import { KeySpace, subfolderCuts } from './range-splits.js';

/** Ranges listed at once by default. */
export const LISTING_CONCURRENCY = 8;

/** Entries of the first page: a listing no longer than this is never split. */
export const FIRST_PAGE = 1000;

/**
 * Pages a range is cut to by default: each range costs one request more than its pages (the
 * one that reads past its end), so longer ranges waste fewer requests; `buffered` holds this
 * many pages for each range listed at once.
 */
const TARGET_PAGES = 5;

/** Most ranges one listing is cut into (a bound on the requests cuts can add). */
const MAX_RANGES = 1024;

/** A listing that can start after a key. */
export interface RangeSource<T> {
  /** The entries whose key sorts after `startAfter` (all with `undefined`), in key order. */
  list(startAfter: string | undefined, signal: AbortSignal): AsyncIterable<T>;
  /** The key of an entry. */
  keyOf(entry: T): string;
}

/** What a parallel listing did, for benches and tests. */
export interface ListingStats {
  /** Ranges listed (1: the sequential listing alone). */
  ranges: number;
  /** Ranges made by cutting a range already being listed. */
  cuts: number;
}

/** Options of {@link parallelListing}. */
export interface ParallelListingOptions {
  /** Ranges listed at once (default {@link LISTING_CONCURRENCY}); 1 lists sequentially. */
  concurrency?: number | undefined;
  /** Entries that decide: a listing of at most this many is not split (default {@link FIRST_PAGE}). */
  firstPage?: number | undefined;
  /** Most entries the ranges after the first hold (default `concurrency × 5 × firstPage`). */
  buffered?: number | undefined;
  /**
   * The first cuts, given the last key of the first page and the first page's keys: strings in
   * key order (those not after `after` are ignored). Default: none (cuts by key space only).
   */
  plan?:
    | ((after: string, sample: readonly string[], signal: AbortSignal) => Promise<string[]>)
    | undefined;
  /** The folder prefix every key starts with (for the key space of cuts). Default ``. */
  prefix?: string | undefined;
  /** Cut ranges being listed when a slot is free (default true). */
  cutWhileListing?: boolean | undefined;
  /** Filled in as the listing runs. */
  stats?: ListingStats | undefined;
  signal?: AbortSignal | undefined;
}

/** One range `(lo, hi]` of the key space (`undefined`: unbounded). */
interface Range<T> {
  lo: string | undefined;
  hi: string | undefined;
  /** The last key listed in it (every later entry sorts after it). */
  pos: string | undefined;
  /** The first key listed in it. */
  first?: string | undefined;
  /** Entries listed in it. */
  count: number;
  /** The entries per unit of key space of the range it was cut from, if known. */
  inherited?: number | undefined;
  items: T[];
  state: 'waiting' | 'listing' | 'done';
  iterator?: AsyncIterator<T> | undefined;
  /** No cut was found inside it: do not try again. */
  uncuttable?: boolean | undefined;
}

/** Wakes everyone waiting on it. */
class Wake {
  private waiters: (() => void)[] = [];
  wait(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }
  notify(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const resolve of w) resolve();
  }
}

/**
 * Every entry of `source` from `undefined` on, exactly as one sequential listing gives them and
 * in the same order, listed in ranges at once when there are more than `firstPage` (see the
 * module comment). The source must honour `startAfter` (entries after it only) and list in key
 * (UTF-8 byte) order; an entry of a range that is not after its lower cut is a `StoreError`.
 * A failure of any range fails the listing; stopping early aborts every request.
 */
export async function* parallelListing<T>(
  source: RangeSource<T>,
  options: ParallelListingOptions = {},
): AsyncGenerator<T> {
  const concurrency = Math.max(1, Math.floor(options.concurrency ?? LISTING_CONCURRENCY));
  const firstPage = Math.max(1, Math.floor(options.firstPage ?? FIRST_PAGE));
  const controller = new AbortController();
  const signal = options.signal
    ? AbortSignal.any([options.signal, controller.signal])
    : controller.signal;
  const stats = options.stats;
  if (stats) {
    stats.ranges = 1;
    stats.cuts = 0;
  }
  const first = source.list(undefined, signal)[Symbol.asyncIterator]();
  if (concurrency === 1) {
    try {
      for (;;) {
        const next = await first.next();
        if (next.done) return;
        yield next.value;
      }
    } finally {
      await first.return?.();
    }
  }
  const sample: T[] = [];
  try {
    while (sample.length <= firstPage) {
      const next = await first.next();
      if (next.done) {
        yield* sample;
        return;
      }
      sample.push(next.value);
    }
  } catch (error) {
    controller.abort();
    throw error;
  }
  const keys = sample.map((e) => source.keyOf(e));
  const after = keys[keys.length - 1] as string;
  const buffered = Math.max(1, options.buffered ?? concurrency * TARGET_PAGES * firstPage);
  const merge = new Merge(source, signal, {
    concurrency,
    buffered,
    target: Math.max(1, Math.floor(buffered / concurrency)),
    firstPage,
    headCap: 2 * firstPage,
    space: new KeySpace(options.prefix ?? '', keys),
    cutWhileListing: options.cutWhileListing ?? true,
    stats,
  });
  try {
    const cuts = options.plan ? await options.plan(after, keys, signal) : [];
    merge.start(first, sample, after, cuts);
    yield* merge.entries();
  } finally {
    controller.abort();
    await merge.close(first);
  }
}

interface MergeConfig {
  concurrency: number;
  buffered: number;
  /** Entries a range is cut to: `buffered / concurrency`. */
  target: number;
  firstPage: number;
  headCap: number;
  space: KeySpace;
  cutWhileListing: boolean;
  stats: ListingStats | undefined;
}

/** The ranges, their listings and the merge of their entries (see the module comment). */
class Merge<T> {
  private readonly ranges: Range<T>[] = [];
  private head = 0;
  private active = 0;
  /** Entries held by ranges after the head. */
  private held = 0;
  private failure: { error: unknown } | undefined;
  private closed = false;
  private readonly changed = new Wake();
  private readonly room = new Wake();
  private readonly running = new Set<Promise<void>>();
  private wakePending = false;

  constructor(
    private readonly source: RangeSource<T>,
    private readonly signal: AbortSignal,
    private readonly config: MergeConfig,
  ) {}

  /** The first range continues `first` (which listed `sample`, up to `after`); then `cuts`. */
  start(first: AsyncIterator<T>, sample: T[], after: string, cuts: readonly string[]): void {
    const bounds = [...new Set(cuts)].filter((c) => compareUtf8(c, after) > 0).sort(compareUtf8);
    const head: Range<T> = {
      lo: undefined,
      hi: bounds[0],
      pos: after,
      first: this.source.keyOf(sample[0] as T),
      count: sample.length,
      items: sample,
      state: 'listing',
      iterator: first,
    };
    this.ranges.push(head);
    for (let i = 0; i < bounds.length; i++) {
      this.ranges.push({
        lo: bounds[i],
        hi: bounds[i + 1],
        pos: undefined,
        count: 0,
        items: [],
        state: 'waiting',
      });
    }
    if (this.config.stats) this.config.stats.ranges = this.ranges.length;
    this.run(head);
    this.schedule();
  }

  /** The entries of every range, in range order. */
  async *entries(): AsyncGenerator<T> {
    for (;;) {
      if (this.failure) throw this.failure.error;
      const range = this.ranges[this.head];
      if (range === undefined) return;
      if (range.items.length > 0) {
        const batch = range.items;
        range.items = [];
        this.room.notify();
        yield* batch;
        continue;
      }
      if (range.state === 'done') {
        this.head++;
        const next = this.ranges[this.head];
        if (next) this.held -= next.items.length;
        this.room.notify();
        this.schedule();
        continue;
      }
      await this.changed.wait();
    }
  }

  /** Stop every range and wait for their listings to end. */
  async close(first: AsyncIterator<T>): Promise<void> {
    this.closed = true;
    this.room.notify();
    this.changed.notify();
    await Promise.allSettled([...this.running]);
    if (this.ranges.length === 0) await first.return?.();
  }

  /**
   * Wake the merge once the listings have run out of entries already in memory (the rest of a
   * page): one wake-up per page of the first range, not one per entry.
   */
  private wakeSoon(): void {
    if (this.wakePending) return;
    this.wakePending = true;
    setImmediate(() => {
      this.wakePending = false;
      this.changed.notify();
    });
  }

  private isHead(range: Range<T>): boolean {
    return this.ranges[this.head] === range;
  }

  /** Start or cut ranges until `concurrency` are listing. */
  private schedule(): void {
    while (!this.closed && !this.failure && this.active < this.config.concurrency) {
      if (!this.next()) return;
    }
  }

  /**
   * Give a free slot to the first range from the head on that needs one: a range not started
   * yet is started; a range being listed is cut about one target past where it has got to, and
   * the rest, right after it, is started, when its own listing so far says it holds more than
   * two targets more. Only a range that has listed a page itself is judged (a density carried
   * over from elsewhere misleads: names dense in one subfolder say nothing of the next; the open
   * tail cut off such a range is the exception, judged by its parent's density until it has
   * listed a page, since it may wait for room in the buffer), and a
   * range with an upper cut only once it has listed a target (the subfolders of one delimiter
   * listing are already good ranges; zero-padded names make any density overrate what is left,
   * and a cut past a range's last key costs a request for nothing). False when none needs one.
   */
  private next(): boolean {
    const { space, stats, target, firstPage } = this.config;
    for (let i = this.head; i < this.ranges.length; i++) {
      const r = this.ranges[i] as Range<T>;
      if (r.state === 'waiting') {
        this.run(r);
        return true;
      }
      if (r.state !== 'listing' || r.uncuttable || !this.config.cutWhileListing) continue;
      if (this.ranges.length >= MAX_RANGES) return false;
      const from = r.lo ?? r.first;
      const pos = r.pos ?? r.lo;
      if (from === undefined || pos === undefined) continue;
      let density: number | undefined;
      if (r.count >= (r.hi === undefined ? firstPage : target)) {
        const covered = space.span(from, pos);
        density = covered > 0 ? r.count / covered : undefined;
      } else if (r.hi === undefined && r.inherited !== undefined) {
        // The open tail cut off a range that had listed enough: its density, until the tail
        // has listed a page of its own (it may be waiting for room in the buffer meanwhile).
        density = r.inherited;
      } else {
        continue;
      }
      const cut =
        density === undefined
          ? space.midpoint(pos, r.hi)
          : density * space.span(pos, r.hi) < 2 * target
            ? undefined
            : space.cutAfter(pos, r.hi, target / density);
      if (cut === undefined) {
        r.uncuttable = density === undefined;
        continue;
      }
      const rest: Range<T> = {
        lo: cut,
        hi: r.hi,
        pos: undefined,
        count: 0,
        inherited: density,
        items: [],
        state: 'waiting',
      };
      r.hi = cut;
      this.ranges.splice(i + 1, 0, rest);
      if (stats) {
        stats.ranges++;
        stats.cuts++;
      }
      this.run(rest);
      return true;
    }
    return false;
  }

  /** List one range into its buffer until it ends or lists a key past its upper cut. */
  private run(range: Range<T>): void {
    range.state = 'listing';
    this.active++;
    const task = this.list(range).finally(() => {
      this.running.delete(task);
      this.active--;
      range.state = 'done';
      this.changed.notify();
      this.schedule();
    });
    this.running.add(task);
  }

  private async list(range: Range<T>): Promise<void> {
    const iterator =
      range.iterator ?? this.source.list(range.lo, this.signal)[Symbol.asyncIterator]();
    range.iterator = iterator;
    try {
      for (;;) {
        while (!this.closed && this.mustWait(range)) await this.room.wait();
        if (this.closed || this.failure) return;
        const next = await iterator.next();
        if (next.done) return;
        const key = this.source.keyOf(next.value);
        if (range.lo !== undefined && compareUtf8(key, range.lo) <= 0) {
          throw new StoreError(
            `a listing after ${JSON.stringify(range.lo)} gave ${JSON.stringify(key)}, not after it`,
          );
        }
        if (range.hi !== undefined && compareUtf8(key, range.hi) > 0) return;
        range.items.push(next.value);
        range.pos = key;
        range.first ??= key;
        range.count++;
        if (this.isHead(range)) this.wakeSoon();
        else this.held++;
      }
    } catch (error) {
      if (!this.closed) this.failure ??= { error };
      this.changed.notify();
      this.room.notify();
    } finally {
      try {
        await iterator.return?.();
      } catch {
        // The listing failed or was aborted already; its own error (if any) was kept above.
      }
    }
  }

  /** The head range waits for the merge beyond `headCap` entries; the others beyond `buffered` together. */
  private mustWait(range: Range<T>): boolean {
    if (this.failure) return false;
    return this.isHead(range)
      ? range.items.length >= this.config.headCap
      : this.held >= this.config.buffered;
  }
}

/** Options of {@link historyListing}. */
export interface HistoryListingOptions {
  signal?: AbortSignal | undefined;
  /** Ranges listed at once (default {@link LISTING_CONCURRENCY}). */
  concurrency?: number | undefined;
  /** As {@link ParallelListingOptions.firstPage} (default: a store's page, {@link FIRST_PAGE}). */
  firstPage?: number | undefined;
  /** As {@link ParallelListingOptions.buffered}. */
  buffered?: number | undefined;
  /** Filled in as the listing runs. */
  stats?: ListingStats | undefined;
}

/**
 * `_history` of `prefix` (a folder prefix ending `/`, or `` for the bucket), exactly as the
 * store lists it (every version and delete marker, key order, newest first within a key),
 * listed in ranges at once when it is longer than a page and the driver has
 * `capabilities.startAfter`; otherwise the one sequential listing. The first cuts are the
 * folder's subfolders (one delimiter listing, asked only when the first page is not the last).
 */
export function historyListing(
  store: StoreContext,
  bucket: string,
  prefix: string,
  options: HistoryListingOptions = {},
): AsyncIterable<VersionRecord> {
  const { signal } = options;
  const concurrency = options.concurrency ?? LISTING_CONCURRENCY;
  if (store.capabilities.startAfter !== true || concurrency <= 1) {
    return store._history(bucket, prefix, { signal });
  }
  return parallelListing<VersionRecord>(
    {
      list: (startAfter, s) => store._history(bucket, prefix, { startAfter, signal: s }),
      keyOf: (r) => r.key,
    },
    {
      concurrency,
      firstPage: options.firstPage,
      buffered: options.buffered,
      prefix,
      signal,
      stats: options.stats,
      plan: async (after, _sample, s) => {
        for await (const page of store._pages(bucket, prefix, { delimiter: '/', signal: s })) {
          return subfolderCuts(page.prefixes, '/', after, 4 * concurrency);
        }
        return [];
      },
    },
  );
}
