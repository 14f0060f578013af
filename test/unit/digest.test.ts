import { createHash, createHmac } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { hmacSha256Hex, sha256Hex } from '../../src/core/digest.js';

describe('digest', () => {
  it('sha256Hex equals createHash for any text, UTF-8 included', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 300 }), (text) => {
        expect(sha256Hex(text)).toBe(createHash('sha256').update(text, 'utf8').digest('hex'));
      }),
    );
  });

  it('hmacSha256Hex equals createHmac, with each key used for every text it is given', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 1, maxLength: 80 }),
        fc.array(fc.string({ unit: 'grapheme', maxLength: 200 }), { minLength: 1, maxLength: 4 }),
        (key, texts) => {
          for (const text of texts) {
            expect(hmacSha256Hex(key, text)).toBe(
              createHmac('sha256', key).update(text, 'utf8').digest('hex'),
            );
          }
        },
      ),
    );
  });

  it('two keys of the same length never share an imported key', () => {
    const a = new Uint8Array([1, 2, 3]);
    const b = new Uint8Array([1, 2, 4]);
    expect(hmacSha256Hex(a, 'x')).toBe(createHmac('sha256', a).update('x').digest('hex'));
    expect(hmacSha256Hex(b, 'x')).toBe(createHmac('sha256', b).update('x').digest('hex'));
    expect(hmacSha256Hex(a, 'x')).not.toBe(hmacSha256Hex(b, 'x'));
  });
});
