/**
 * The two ways to ask a keep-set whether it covers a key, both implementing exactly the rule of
 * keys.ts ({@link covers}: a prefix entry covers every key starting with it, any other entry
 * the equal key), so no caller re-derives it:
 *
 * - {@link KeepSetIndex}: in memory, any order of questions. A key is covered when it is an
 *   entry, or when one of its ancestor folders (`a/`, `a/b/` for `a/b/c`) is: only those can be
 *   prefix entries that cover it, so each question is a handful of hash lookups.
 * - {@link SortedMatcher}: streaming, for questions in ascending key order against entries in
 *   ascending order — the merge GC runs, whose memory does not grow with the keep-set. It keeps
 *   the prefix entries passed so far that are ancestors of the current position (a stack):
 *   the keys starting with a prefix are one contiguous range in byte order, so a passed prefix
 *   that is not a prefix of the current key covers no later key either and is dropped.
 *
 * @module
 */
import { compareUtf8, covers, isPrefixEntry } from './keys.js';

/** A keep-set held in memory (see the module comment). */
export class KeepSetIndex {
  private readonly entries: Set<string>;

  /** An index of `entries` (canonical entries; repeats are fine). */
  constructor(entries: Iterable<string>) {
    this.entries = new Set(entries);
  }

  /** How many distinct entries it holds. */
  get size(): number {
    return this.entries.size;
  }

  /** True when some entry covers `key` ({@link covers}). */
  isReferenced(key: string): boolean {
    if (this.entries.has(key)) return true;
    for (let i = key.indexOf('/'); i >= 0 && i < key.length - 1; i = key.indexOf('/', i + 1)) {
      if (this.entries.has(key.slice(0, i + 1))) return true;
    }
    return false;
  }
}

/** Asks a sorted stream of entries about keys in ascending order (see the module comment). */
export class SortedMatcher {
  private readonly stack: string[] = [];
  private pending: string | undefined;
  private started = false;
  private ended = false;
  private last: string | undefined;

  /** @param entries canonical entries in strictly ascending UTF-8 byte order */
  constructor(private readonly entries: AsyncIterator<string>) {}

  private async pull(): Promise<void> {
    if (this.ended) {
      this.pending = undefined;
      return;
    }
    const next = await this.entries.next();
    if (next.done) {
      this.ended = true;
      this.pending = undefined;
      return;
    }
    if (this.pending !== undefined && compareUtf8(this.pending, next.value) >= 0) {
      throw new RangeError(
        `keep-set entries out of order: ${JSON.stringify(next.value)} after ${JSON.stringify(this.pending)}`,
      );
    }
    this.pending = next.value;
  }

  /**
   * True when some entry covers `key`. Keys must be asked in strictly ascending order
   * (a RangeError otherwise: an answer out of order would be wrong, not slow).
   */
  async isReferenced(key: string): Promise<boolean> {
    if (this.last !== undefined && compareUtf8(this.last, key) >= 0) {
      throw new RangeError(
        `keys must be asked in ascending order: ${JSON.stringify(key)} after ${JSON.stringify(this.last)}`,
      );
    }
    this.last = key;
    if (!this.started) {
      this.started = true;
      await this.pull();
    }
    let exact = false;
    while (this.pending !== undefined && compareUtf8(this.pending, key) <= 0) {
      const entry = this.pending;
      if (entry === key) exact = true;
      if (isPrefixEntry(entry)) {
        while (this.stack.length > 0 && !entry.startsWith(this.stack.at(-1) as string)) {
          this.stack.pop();
        }
        this.stack.push(entry);
      }
      await this.pull();
    }
    while (this.stack.length > 0 && !covers(this.stack.at(-1) as string, key)) this.stack.pop();
    return exact || this.stack.length > 0;
  }

  /** Stop reading entries (the iterator's `return`). */
  async close(): Promise<void> {
    this.ended = true;
    await this.entries.return?.();
  }
}
