/**
 * Where to cut a folder's key space into ranges that can be listed at once
 * (src/folders/parallel-listing.ts). A cut is any string: the ranges `(b_i, b_i+1]` it makes
 * partition every possible key, so the choice of cuts decides only how evenly the work spreads,
 * never what is listed.
 *
 * - **Subfolders** ({@link subfolderCuts}): the common prefixes of one delimiter listing are the
 *   best cuts there are, found in one request; each cut is a subfolder's name without its
 *   delimiter, so a range holds whole subfolders. Grouped evenly by count to a few ranges per
 *   listing slot: their sizes are unknown, and more, smaller ranges keep every slot busy.
 * - **Past the subfolders** ({@link KeySpace}): a store can neither count keys nor seek to the
 *   n-th one, and the first page shows only the smallest 1,000 keys. So a key is read as a number:
 *   a sequence of digits over the alphabet of code points seen in the first page, one digit
 *   below them all for "the key ends here" (UTF-8 byte order is code point order, so the numbers
 *   order as the keys do). The entries listed so far per unit of that number give a density, and
 *   a range is cut where about the wanted number of entries should lie ({@link KeySpace.cutAfter},
 *   by halving the span). Uniform names (hashes, UUIDs) are cut evenly at once; clustered ones
 *   (`img_000123.jpg`) at first land cuts in empty space, each costing one short request, and the
 *   density then corrects itself. A wrong estimate costs time or requests, never entries.
 *
 * @module
 */
import { compareUtf8 } from '../core/keys.js';

/** Most code points of a cut below the folder prefix: deeper cuts are not worth a request. */
const MAX_DEPTH = 256;

/** Digits of the span estimate (enough to rank ranges; the cut itself is exact). */
const SPAN_DIGITS = 12;

/**
 * Cuts from the common prefixes of a delimiter listing (each ending in `delimiter`): each
 * prefix without its delimiter, only those after `after` (the last key already listed), at most
 * `count` of them, spread evenly over the list. In key (UTF-8 byte) order, without repeats.
 */
export function subfolderCuts(
  prefixes: readonly string[],
  delimiter: string,
  after: string,
  count: number,
): string[] {
  const cuts = [
    ...new Set(
      prefixes
        .filter((p) => p.endsWith(delimiter))
        .map((p) => p.slice(0, p.length - delimiter.length))
        .filter((c) => compareUtf8(c, after) > 0),
    ),
  ].sort(compareUtf8);
  if (cuts.length <= count) return cuts;
  const out: string[] = [];
  for (let i = 1; i <= count; i++) {
    const cut = cuts[Math.floor((i * cuts.length) / (count + 1))] as string;
    if (out[out.length - 1] !== cut) out.push(cut);
  }
  return out;
}

/** The code points of `s` (UTF-8 byte order is code point order). */
function codePoints(s: string): number[] {
  const out: number[] = [];
  for (const ch of s) out.push(ch.codePointAt(0) as number);
  return out;
}

/**
 * The key space below one folder prefix, as numbers over the alphabet of a sample of its keys
 * (see the module comment): midpoints to cut a range at, and spans to rank ranges by.
 */
export class KeySpace {
  private readonly alphabet: number[];

  /**
   * @param prefix the folder prefix every key and cut starts with.
   * @param sample keys seen (the first page): their code points below `prefix` make the alphabet.
   */
  constructor(
    private readonly prefix: string,
    sample: Iterable<string>,
  ) {
    const seen = new Set<number>();
    for (const key of sample) {
      if (!key.startsWith(prefix)) continue;
      for (const cp of codePoints(key.slice(prefix.length))) seen.add(cp);
    }
    this.alphabet = [...seen].sort((a, b) => a - b);
  }

  /**
   * A string strictly between `lo` and `hi` (`undefined`: no upper bound) in UTF-8 byte order,
   * near the middle of that span, starting with the prefix; `undefined` when there is none worth
   * cutting at (the two are adjacent at the depth tried, or not below the prefix).
   */
  midpoint(lo: string, hi: string | undefined): string | undefined {
    const p = this.prefix.length;
    if (!lo.startsWith(this.prefix) || (hi !== undefined && !hi.startsWith(this.prefix))) {
      return undefined;
    }
    const a = codePoints(lo.slice(p));
    const b = hi === undefined ? undefined : codePoints(hi.slice(p));
    const alphabet = [...new Set([...this.alphabet, ...a, ...(b ?? [])])].sort((x, y) => x - y);
    const digit = new Map(alphabet.map((cp, i) => [cp, i + 1]));
    // Digits 1..n are the alphabet, 0 "the key ends here", n + 1 a virtual top above every key.
    const top = alphabet.length + 1;
    const base = alphabet.length + 2;
    let common = 0;
    if (b !== undefined) while (common < a.length && a[common] === b[common]) common++;
    const depth = Math.min(MAX_DEPTH, Math.max(a.length, common + 3) + 1);
    if (a.length >= depth) return undefined;
    const digitsOf = (cps: number[]) =>
      Array.from({ length: depth }, (_, i) =>
        i < cps.length ? (digit.get(cps[i] as number) as number) : 0,
      );
    const x = digitsOf(a);
    const y = b === undefined ? digitsOf([]).map((_, i) => (i === 0 ? top : 0)) : digitsOf(b);
    // (x + y) / 2, digit by digit: add from the right, then halve from the left.
    const sum = new Array<number>(depth + 1).fill(0);
    let carry = 0;
    for (let i = depth - 1; i >= 0; i--) {
      const s = (x[i] as number) + (y[i] as number) + carry;
      sum[i + 1] = s % base;
      carry = Math.floor(s / base);
    }
    sum[0] = carry;
    const mid: number[] = [];
    let rest = 0;
    for (let i = 0; i <= depth; i++) {
      const v = rest * base + (sum[i] as number);
      if (i > 0) mid.push(Math.floor(v / 2));
      rest = v % 2;
    }
    while (mid.length > 0 && mid[mid.length - 1] === 0) mid.pop();
    // A 0 inside is no key ("ends here" then more): the smallest character; the virtual top: the
    // greatest. Either moves the cut a little; the check below keeps it strictly inside.
    let cut = this.prefix;
    for (const d of mid) {
      const i = d === 0 ? 0 : d === top ? alphabet.length - 1 : d - 1;
      cut += String.fromCodePoint(alphabet[i] as number);
    }
    if (compareUtf8(lo, cut) >= 0) return undefined;
    if (hi !== undefined && compareUtf8(cut, hi) >= 0) return undefined;
    return cut;
  }

  /**
   * A cut strictly between `lo` and `hi` about `span` of key space after `lo` (within a factor
   * of two above it where the space is that fine), found by halving; `undefined` as
   * {@link midpoint}.
   */
  cutAfter(lo: string, hi: string | undefined, span: number): string | undefined {
    let cut: string | undefined;
    let upper = hi;
    for (let i = 0; i < 64; i++) {
      const mid = this.midpoint(lo, upper);
      if (mid === undefined) break;
      cut = mid;
      if (this.span(lo, mid) <= span) break;
      upper = mid;
    }
    return cut;
  }

  /** An estimate of how much of the key space lies between `lo` and `hi` (`undefined`: the end), in [0, 1]. */
  span(lo: string | undefined, hi: string | undefined): number {
    return (hi === undefined ? 1 : this.position(hi)) - (lo === undefined ? 0 : this.position(lo));
  }

  /** Where a key lies in the space, in [0, 1). */
  private position(key: string): number {
    const cps = codePoints(key.startsWith(this.prefix) ? key.slice(this.prefix.length) : key);
    const base = this.alphabet.length + 2;
    let value = 0;
    let scale = 1;
    for (let i = 0; i < Math.min(SPAN_DIGITS, cps.length); i++) {
      scale /= base;
      value += this.floorDigit(cps[i] as number) * scale;
    }
    return value;
  }

  /** The digit of the greatest alphabet code point at most `cp` (0.5 below them all). */
  private floorDigit(cp: number): number {
    let lo = 0;
    let hi = this.alphabet.length;
    while (lo < hi) {
      const m = (lo + hi) >> 1;
      if ((this.alphabet[m] as number) <= cp) lo = m + 1;
      else hi = m;
    }
    return lo === 0 ? 0.5 : lo;
  }
}
