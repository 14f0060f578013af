import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UriError } from '../../src/core/errors.js';
import { keyNameProblem, segmentProblem, Uri } from '../../src/core/uri.js';

/** Key segments a URI can name: any string without '/', control characters or lone surrogates. */
const segment = fc
  .string({ unit: 'grapheme', minLength: 1, maxLength: 12 })
  .filter((s) => segmentProblem(s) === undefined);
const key = fc.array(segment, { minLength: 1, maxLength: 5 }).map((segs) => segs.join('/'));

describe('Uri', () => {
  it('round-trips every nameable key exactly: key -> URI -> key -> URI', () => {
    fc.assert(
      fc.property(key, fc.boolean(), (k, folder) => {
        const u = Uri.fromKey('s3', 'bucket', folder ? `${k}/` : k);
        const text = u.toString();
        const back = Uri.parse(text);
        expect(back.key).toBe(k);
        expect(back.isFolder).toBe(folder);
        expect(back.toString()).toBe(text);
        expect(Uri.parse(back.toString()).key).toBe(k);
      }),
      { numRuns: 500 },
    );
  });

  it('keeps %, +, spaces and non-ASCII as bytes of the key', () => {
    const cases: [string, string][] = [
      ['local://b/100%25.csv', '100%.csv'],
      ['local://b/a+b.csv', 'a+b.csv'],
      ['local://b/my%20file.csv', 'my file.csv'],
      ['local://b/my file.csv', 'my file.csv'],
      ['local://b/caf%C3%A9/%E6%97%A5.txt', 'café/日.txt'],
      ['local://b/café/日.txt', 'café/日.txt'],
      ['local://b/%2525', '%25'],
    ];
    for (const [text, k] of cases) {
      const u = Uri.parse(text);
      expect(u.key).toBe(k);
      expect(Uri.parse(u.toString()).key).toBe(k);
    }
  });

  it('parses pins, folders and buckets', () => {
    const v = Uri.parse('s3://b/x/y.csv?at=version:abc.DEF_1');
    expect(v.at).toEqual({ kind: 'version', id: 'abc.DEF_1' });
    expect(v.isFolder).toBe(false);
    const id = 'a'.repeat(64);
    const c = Uri.parse(`s3://b/x/?at=commit:${id}`);
    expect(c.at).toEqual({ kind: 'commit', id });
    expect(c.isFolder).toBe(true);
    expect(c.prefix).toBe('x/');
    const b = Uri.parse('s3://b');
    expect(b.isBucket && b.isFolder).toBe(true);
    expect(b.toString()).toBe('s3://b/');
    expect(Uri.parse('s3://b/').key).toBe('');
  });

  it('refuses hostile and malformed URIs with UriError and the reason', () => {
    const bad: [string, RegExp][] = [
      ['local://b/a//b', /empty path segment/],
      ['local://b/../etc/passwd', /'\.\.' segment/],
      ['local://b/a/./b', /'\.' segment/],
      ['local://b/%2e%2e/x', /'\.\.' segment/],
      ['local://b/%2E/x', /'\.' segment/],
      ['local://b/a%00b', /control/],
      ['local://b/a\u0000b', /control/],
      ['local://b/a\nb', /control/],
      ['local://b/a%2Fb', /'\/' inside a segment/],
      ['local://b/100%', /percent-escape/],
      ['local://b/%zz', /percent-escape/],
      ['local://b/%C3', /UTF-8/],
      ['local://b/a#frag', /fragment/],
      ['local://b/a?x=1', /only query/],
      ['local://b/a/?at=version:1', /names one file/],
      ['local://b/a?at=commit:xyz', /64 lowercase hex/],
      ['local://b/a?at=version:', /only query/],
      ['local://B/a', /bad bucket/],
      ['local://../a', /bad bucket/],
      ['local:///etc/passwd', /bad bucket/],
      ['/etc/passwd', /not a URI/],
      ['local:b/a', /not a URI/],
      ['1x://b/a', /bad scheme/],
    ];
    for (const [text, why] of bad) {
      expect(() => Uri.parse(text), text).toThrow(UriError);
      expect(() => Uri.parse(text), text).toThrow(why);
    }
  });

  it('refuses keys no URI can name when they come from a listing', () => {
    for (const k of ['a//b', '../x', 'a/../b', './a', 'a\u0000', 'a\u001fb', '/abs']) {
      expect(() => Uri.fromKey('s3', 'b', k), k).toThrow(UriError);
    }
    expect(Uri.fromKey('s3', 'b', 'a/b/').isFolder).toBe(true);
    expect(() => Uri.fromKey('s3', 'b', 'a/\ud800')).toThrow(/lone UTF-16 surrogate/);
    expect(() => Uri.fromKey('s3', 'b', 'x\udc00/a')).toThrow(/lone UTF-16 surrogate/);
    expect(Uri.fromKey('s3', 'b', 'a/\ud83d\ude00').name).toBe('\ud83d\ude00');
  });

  it('refuses a listed key exactly when one of its segments has a problem, naming the first', () => {
    const unit = fc.constantFrom(
      'a',
      '/',
      '.',
      '\u0000',
      '\u001f',
      '\u007f',
      '\ud800',
      '\udc00',
      'é',
    );
    fc.assert(
      fc.property(
        fc.array(unit, { maxLength: 8 }).map((units) => units.join('')),
        (key) => {
          const body = key.endsWith('/') ? key.slice(0, -1) : key;
          // `/` alone has an empty segment too: it is not the bucket (`''`).
          const first =
            body === ''
              ? key === ''
                ? undefined
                : segmentProblem('')
              : body.split('/').map(segmentProblem).find(Boolean);
          if (first === undefined) expect(() => Uri.fromKey('s3', 'b', key)).not.toThrow();
          else expect(() => Uri.fromKey('s3', 'b', key)).toThrow(first);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('refuses keys with a leading / at a bucket root: the folder / is not the bucket', () => {
    for (const key of ['/', '/x', '/x/', '//']) {
      expect(() => Uri.fromKey('s3', 'b', key), key).toThrow(/empty path segment/);
      expect(keyNameProblem(key), key).toMatch(/empty path segment/);
    }
    expect(Uri.fromKey('s3', 'b', '').isBucket).toBe(true);
    expect(keyNameProblem('')).toBeUndefined();
    expect(keyNameProblem('a/b/')).toBeUndefined();
  });

  it('relates folders and the files below them', () => {
    const folder = Uri.parse('s3://b/data/');
    const file = Uri.parse('s3://b/data/sub/x.csv');
    expect(folder.relative(file)).toBe('sub/x.csv');
    expect(folder.contains(file)).toBe(true);
    expect(Uri.parse('s3://b/dat/').contains(file)).toBe(false);
    expect(folder.relative(Uri.parse('s3://b/database/x'))).toBeUndefined();
    expect(file.parent().toString()).toBe('s3://b/data/sub/');
    const pinned = Uri.parse(`s3://b/data/?at=commit:${'0'.repeat(64)}`);
    expect(pinned.join('sub/x.csv').toString()).toBe(
      `s3://b/data/sub/x.csv?at=commit:${'0'.repeat(64)}`,
    );
  });
});
