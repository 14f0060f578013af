/**
 * Listings in UTF-8 byte order from a service that may list in UTF-16 order.
 *
 * The base wants keys in UTF-8 byte order (`compareUtf8`): commits, walks, the managed stage and
 * GC rely on it. A driver whose service may list otherwise (Azurite 3.35 lists in JavaScript's
 * UTF-16 order and puts a page's folder prefixes before its blobs) passes its pages through
 * {@link utf8Pages} (or {@link inUtf8Order}); the rule then holds for every consumer.
 *
 * Re-sorting each page is not enough (a key can belong pages later) and reading every page first
 * would make listings unbounded in memory. But the two orders differ in one way only: at the
 * first differing position, a surrogate pair (U+10000 and up) sorts before U+E000..U+FFFF in
 * UTF-16 and after it in UTF-8. So an entry `m` can be out of place only if it has a surrogate
 * after the listing prefix, at index `i`, and only before entries that share `m`'s first `i`
 * units. In UTF-16 order those entries are contiguous; once the service has listed a name beyond
 * them (`last` no longer starts with `m.slice(0, i)`), nothing later can sort before `m`.
 * {@link Utf8Order} therefore holds back only entries with such a surrogate, until that is known,
 * and releases everything else at once: a page without astral characters streams through. On a
 * service that lists in UTF-8 order the same rule is merely conservative, so a driver needs no
 * guess about which order it is served.
 *
 * @module
 */
import type { ListPage, ObjectInfo } from '../contract/primitives.js';
import { compareUtf8 } from '../core/keys.js';

/** Re-orders entries that arrive page by page in UTF-16 (or UTF-8) order into UTF-8 order. */
export class Utf8Order<T> {
  private held: T[] = [];
  /** The greatest name seen so far, in UTF-16 order (the service's order, or a safe bound). */
  private last = '';

  /**
   * @param prefixLength the listing prefix's length (every name starts with it).
   * @param nameOf the name of an entry (a key, a folder prefix).
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

/**
 * The entries of `batches` (each in any order; across batches in UTF-16 or UTF-8 order of
 * `nameOf`, every name starting with `prefixLength` units of the listing prefix), in UTF-8 order,
 * as soon as each is final. Memory: the entries held back (see the module comment).
 */
export async function* inUtf8Order<T>(
  batches: AsyncIterable<readonly T[]>,
  prefixLength: number,
  nameOf: (entry: T) => string,
): AsyncIterable<T[]> {
  const order = new Utf8Order<T>(prefixLength, nameOf);
  for await (const batch of batches) {
    const ready = order.push(batch);
    if (ready.length > 0) yield ready;
  }
  const rest = order.end();
  if (rest.length > 0) yield rest;
}

/**
 * A service's listing pages under a prefix of `prefixLength` units, as `_pages` must yield them:
 * folder prefixes and objects together in UTF-8 order, at most `limit` entries a page. No empty
 * page is yielded (an empty listing yields nothing).
 */
export async function* utf8Pages(
  pages: AsyncIterable<ListPage>,
  prefixLength: number,
  limit: number,
): AsyncIterable<ListPage> {
  type Entry = { name: string; info?: ObjectInfo };
  async function* entries(): AsyncIterable<Entry[]> {
    for await (const page of pages) {
      yield [
        ...page.prefixes.map((name) => ({ name })),
        ...page.objects.map((info) => ({ name: info.key, info })),
      ];
    }
  }
  for await (const ready of inUtf8Order(entries(), prefixLength, (e) => e.name)) {
    for (let i = 0; i < ready.length; i += limit) {
      const chunk = ready.slice(i, i + limit);
      yield {
        prefixes: chunk.flatMap((e) => (e.info ? [] : [e.name])),
        objects: chunk.flatMap((e) => (e.info ? [e.info] : [])),
      };
    }
  }
}
