/**
 * The folder-key rule at commit in bounded memory (issue 27 follow-up): src/core/keys.ts
 * `FolderKeyStream` checks names one at a time in key order without keeping them, and must refuse
 * exactly what `checkFolderKeys` refuses, with the same error class and message; `commit`
 * (`snapshotStream`) uses it and still refuses file-and-folder (`a` and `a/b`, also with names
 * between them in key order), case and NFC/NFD clashes and unnameable keys, writing nothing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkFolderKeys, compareUtf8, FolderKeyStream } from '../../src/core/keys.js';
import { Uri } from '../../src/core/uri.js';
import { rejection } from '../../src/testing/rejection.js';
import { MemoryStore } from '../support/memory-store.js';

const where = Uri.parse('mem://bkt/data/');

/** What checkFolderKeys says of `rels`: `ok` or the error's class and message. */
function whole(rels: readonly string[]): string {
  try {
    checkFolderKeys(where, rels);
    return 'ok';
  } catch (error) {
    return `${(error as Error).name}: ${(error as Error).message}`;
  }
}

/** What FolderKeyStream says of `rels` (added in key order). */
function streamed(rels: readonly string[]): string {
  const s = new FolderKeyStream(where);
  try {
    for (const rel of rels) s.add(rel);
    return s.finish();
  } catch (error) {
    return `${(error as Error).name}: ${(error as Error).message}`;
  }
}

const sorted = (rels: Iterable<string>) => [...new Set(rels)].sort(compareUtf8);

describe('FolderKeyStream', () => {
  it('refuses a name that is both a file and a folder, also with names between them', () => {
    for (const rels of [
      ['a', 'a/b'],
      ['a', 'a!', 'a-b', 'a.txt', 'a/b'],
      ['x/a', 'x/a-1', 'x/a-1/z', 'x/a/b'],
      ['p', 'p/q', 'p/q/r'],
      ['m/n', 'm/n.d', 'm/n/o'],
    ]) {
      const s = sorted(rels);
      expect(whole(s)).toMatch(/^StoreError: .* is both a file and a folder/);
      expect(streamed(s)).toBe(whole(s));
    }
  });

  it('answers recheck where names may be one on a case-insensitive disk, never ok', () => {
    for (const rels of [
      ['Dir/a', 'dir/a'],
      ['caf\u00e9.txt', 'cafe\u0301.txt'],
      ['CAF\u00c9', 'cafe\u0301'],
      ['A/b', 'a', 'a/B'],
    ]) {
      const s = sorted(rels);
      expect(whole(s)).toMatch(
        /case-insensitive disk|two Unicode spellings|both a file and a folder/,
      );
      expect(streamed(s)).toBe('recheck');
    }
  });

  it('refuses an unnameable name first, with the message of checkFolderKeys', () => {
    for (const rels of [['a//b'], ['a', 'a/b', 'b/./c'], ['Dir/a', 'dir/a', 'x/../y']]) {
      const s = sorted(rels);
      expect(whole(s)).toMatch(/^UriError: .*no URI can name/);
      expect(streamed(s)).toBe(whole(s));
    }
  });

  it('agrees with checkFolderKeys on random folders', () => {
    const parts = ['a', 'A', 'b', 'a-', 'a.', '!', '\u00e9', 'e\u0301', 'c'];
    let seed = 7;
    const rand = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    const seen = new Set<string>();
    for (let t = 0; t < 3000; t++) {
      const rels = Array.from({ length: 1 + rand(6) }, () =>
        Array.from({ length: 1 + rand(3) }, () => parts[rand(parts.length)]).join('/'),
      );
      const s = sorted(rels);
      const expected = whole(s);
      const got = streamed(s);
      if (got === 'recheck') expect(expected, s.join(' ')).toMatch(/^StoreError: /);
      else expect(got, s.join(' ')).toBe(expected);
      seen.add(got === 'recheck' || got === 'ok' ? got : (got.split(':')[0] as string));
    }
    // The random folders reached every answer.
    expect([...seen].sort()).toEqual(['StoreError', 'ok', 'recheck']);
  });

  it('accepts a large folder in key order', () => {
    const rels = sorted(Array.from({ length: 50_000 }, (_, i) => `d${i % 97}/f${i}.bin`));
    expect(streamed(rels)).toBe('ok');
  });

  it('finds a case clash of the first and the last name among 300,000', () => {
    const many = Array.from({ length: 300_000 }, (_, i) => `e/f${i}`);
    expect(streamed(sorted(many))).toBe('ok');
    const rels = sorted(['Zz', ...many, 'zz']);
    expect(rels[0]).toBe('Zz');
    expect(rels[rels.length - 1]).toBe('zz');
    expect(streamed(rels)).toBe('recheck');
  });

  it('refuses names added out of key order', () => {
    const s = new FolderKeyStream(where);
    s.add('b');
    expect(() => s.add('a')).toThrow(/out of key order/);
  });
});

describe('commit refuses a folder no fetch could hold, with the messages of checkFolderKeys', () => {
  const work = mkdtempSync(path.join(tmpdir(), 'provcat-folder-keys-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));
  let caches = 0;
  it.each([
    [['a', 'a-b', 'a.txt', 'a/b']],
    [['x/Dir/a', 'x/dir/a', 'y']],
    [['caf\u00e9.txt', 'cafe\u0301.txt']],
    [['A/b', 'a', 'a/B']],
    [['p/q', 'p/q-r', 'p/q/r/s']],
  ])('%j', async (rels) => {
    const s = new MemoryStore({ cache: path.join(work, `cache-${++caches}`) });
    for (const rel of rels) await s._put('bkt', `data/${rel}`, Buffer.from(rel));
    const error = (await rejection(s.commit('mem://bkt/data/', 'clash'))) as Error;
    expect(`${error.name}: ${error.message}`).toBe(whole(sorted(rels)));
    expect(await s.log('mem://bkt/data/')).toEqual([]);
  });
});
