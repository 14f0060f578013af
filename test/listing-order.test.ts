/**
 * Listings put into UTF-8 byte order (src/listing-order.ts): random names served in UTF-16 or
 * UTF-8 order with random page cuts come out in UTF-8 order, only entries that must wait are
 * held back, and `utf8Pages` keeps prefixes and objects together within the page limit.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ListPage, ObjectInfo } from '../src/driver.js';
import { compareUtf8 } from '../src/keys.js';
import { inUtf8Order, Utf8Order, utf8Pages } from '../src/listing-order.js';

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

async function* from<T>(items: T[]): AsyncIterable<T> {
  yield* items;
}

const object = (key: string): ObjectInfo => ({ key, size: 1, version: '"v"' });

describe('listing order', () => {
  it('orders pages that come in UTF-16 or UTF-8 order into UTF-8 order, holding back only what must wait', () => {
    const alphabet = ['a', 'b', '/', '\uff61', '\ue000', '\u{1F600}', '\u{10000}', 'é'];
    const name = fc
      .array(fc.constantFrom(...alphabet), { minLength: 1, maxLength: 5 })
      .map((cs) => `p/${cs.join('')}`);
    fc.assert(
      fc.property(
        fc.uniqueArray(name, { maxLength: 40 }),
        fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 20 }),
        fc.boolean(),
        (names, cuts, utf16) => {
          const served = [...names].sort(utf16 ? undefined : compareUtf8);
          const order = new Utf8Order<string>(2, (s) => s);
          const out: string[] = [];
          let at = 0;
          for (let i = 0; at < served.length; i++) {
            const size = cuts[i % cuts.length] as number;
            // Within a page the service may put entries in any order (Azurite: prefixes first).
            out.push(...order.push(served.slice(at, at + size).reverse()));
            at += size;
          }
          out.push(...order.end());
          expect(out).toEqual([...names].sort(compareUtf8));
        },
      ),
      { numRuns: 300 },
    );
    // Names without astral characters pass at once.
    expect(new Utf8Order<string>(0, (s) => s).push(['b', 'a'])).toEqual(['a', 'b']);
    // An astral name waits while later names could still sort before it...
    const held = new Utf8Order<string>(0, (s) => s);
    expect(held.push(['a', '\u{1F600}x'])).toEqual(['a']);
    expect(held.push(['\u{1F600}y', '\uff61'])).toEqual(['\uff61']);
    expect(held.end()).toEqual(['\u{1F600}x', '\u{1F600}y']);
    // ...and goes once the service listed past every name sharing what comes before it.
    const released = new Utf8Order<string>(0, (s) => s);
    expect(released.push(['k\u{1F600}a'])).toEqual([]);
    expect(released.push(['m'])).toEqual(['k\u{1F600}a', 'm']);
  });

  it('inUtf8Order releases batches as they become final and never yields an empty one', async () => {
    const batches = [['p/b', 'p/a'], ['p/\u{1F600}'], [], ['p/\uff61', 'p/z']];
    const out = await collect(inUtf8Order(from(batches), 2, (s: string) => s));
    expect(out).toEqual([['p/a', 'p/b'], ['p/z', 'p/\uff61'], ['p/\u{1F600}']]);
    expect(await collect(inUtf8Order(from<string[]>([[], []]), 0, (s: string) => s))).toEqual([]);
  });

  it('utf8Pages orders prefixes and objects together, in pages of at most the limit', async () => {
    // As Azurite serves them: UTF-16 order across pages, folder prefixes first within a page.
    const served: ListPage[] = [
      { prefixes: ['p/\uff61/'], objects: [object('p/a'), object('p/\u{1F600}')] },
      { prefixes: [], objects: [object('p/\u{1F600}2'), object('p/\uff62')] },
      { prefixes: ['p/\uffff/'], objects: [] },
    ];
    const pages = await collect(utf8Pages(from(served), 2, 2));
    expect(pages.every((p) => p.prefixes.length + p.objects.length <= 2)).toBe(true);
    // Each page's entries, in order; the pages one after another.
    const names = pages.flatMap((p) =>
      [...p.prefixes, ...p.objects.map((o) => o.key)].sort(compareUtf8),
    );
    const expected = ['p/a', 'p/\uff61/', 'p/\uff62', 'p/\uffff/', 'p/\u{1F600}', 'p/\u{1F600}2'];
    expect(names).toEqual(expected);
    expect([...names].sort(compareUtf8)).toEqual(names);
    expect(pages.flatMap((p) => p.prefixes)).toEqual(['p/\uff61/', 'p/\uffff/']);
    expect(await collect(utf8Pages(from<ListPage>([{ prefixes: [], objects: [] }]), 0, 5))).toEqual(
      [],
    );
  });
});
