/**
 * Listings in UTF-8 byte order from a service that may list in UTF-16 order.
 *
 * The base wants keys in UTF-8 byte order (code point order): commits, walks and the managed
 * stage rely on it. Azure lists that way; Azurite 3.35 lists in JavaScript's UTF-16 order, and
 * within a page puts the folder prefixes before the blobs. The driver orders what it hands the
 * base rather than asking the base to tolerate disorder: the rule then holds for every consumer,
 * and only this file knows about the emulator.
 *
 * Re-sorting each page is not enough (a key can belong pages later) and reading every page first
 * would make listings unbounded in memory. But the two orders differ in one way only: at the
 * first differing position, a surrogate pair (U+10000 and up) sorts before U+E000..U+FFFF in
 * UTF-16 and after it in UTF-8. So an entry `m` can be out of place only if it has a surrogate
 * after the listing prefix, at index `i`, and only before entries that share `m`'s first `i`
 * units. In UTF-16 order those entries are contiguous; once the service has listed a name
 * beyond them (`last` no longer starts with `m.slice(0, i)`), nothing later can sort before `m`.
 * {@link Utf8Order} therefore holds back only entries with such a surrogate, until that is
 * known, and releases everything else at once: a page without astral characters streams through
 * unchanged. On a service that lists in UTF-8 order the same rule is merely conservative (every
 * later name sorts after everything seen), so the driver needs no guess about which one it talks
 * to. Tested with random names in either order and random page cuts.
 *
 * @module
 */
import { compareUtf8 } from '../../src/keys.js';

/** Re-orders entries that arrive page by page in UTF-16 (or UTF-8) order into UTF-8 order. */
export class Utf8Order<T> {
  private held: T[] = [];
  /** The greatest name seen so far, in UTF-16 order (the service's order, or a safe bound). */
  private last = '';

  /**
   * @param prefixLength the listing prefix's length (every name starts with it).
   * @param nameOf the name of an entry (a blob name, a folder prefix).
   */
  constructor(
    private readonly prefixLength: number,
    private readonly nameOf: (entry: T) => string,
  ) {}

  /** Take one page (in any order within it); returns the entries now final, in UTF-8 order. */
  push(page: readonly T[]): T[] {
    for (const entry of page) {
      const name = this.nameOf(entry);
      if (name > this.last) this.last = name;
    }
    this.held.push(...page);
    this.held.sort((a, b) => compareUtf8(this.nameOf(a), this.nameOf(b)));
    let n = 0;
    while (n < this.held.length && this.final(this.nameOf(this.held[n] as T))) n++;
    return this.held.splice(0, n);
  }

  /** The listing ended: everything held, in UTF-8 order. */
  end(): T[] {
    return this.held.splice(0);
  }

  /** No name the service lists later can sort before `name` in UTF-8 order. */
  private final(name: string): boolean {
    for (let i = this.prefixLength; i < name.length; i++) {
      const unit = name.charCodeAt(i);
      if (unit >= 0xd800 && unit < 0xdc00) return !this.last.startsWith(name.slice(0, i));
    }
    return true;
  }
}
