import { createHash, createHmac } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { digestOf, recordedDigest, statedDigest } from '../../src/cache/content-digest.js';
import { Crc32cHash, crc32cHexOfBase64 } from '../../src/core/crc32c.js';
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

describe('CRC32C for the cache', () => {
  it('the check value of "123456789" is e3069283, as hex and as GCS base64', () => {
    expect(digestOf('crc32c', Buffer.from('123456789'))).toBe('e3069283');
    expect(crc32cHexOfBase64(Buffer.from('e3069283', 'hex').toString('base64'))).toBe('e3069283');
    expect(crc32cHexOfBase64('not four bytes')).toBeUndefined();
  });

  it('a running CRC32C over any chunks equals the one of the whole', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 40 }), { maxLength: 6 }), (chunks) => {
        const hash = new Crc32cHash();
        for (const c of chunks) hash.update(c);
        expect(hash.digest('hex')).toBe(digestOf('crc32c', Buffer.concat(chunks)));
      }),
    );
  });

  it('a record without SHA-256 or MD5 is checked by its CRC32C; the others come first', () => {
    expect(recordedDigest({ crc32c: 'e3069283' })).toEqual({
      algorithm: 'crc32c',
      hex: 'e3069283',
    });
    const md5 = '"0123456789abcdef0123456789abcdef"';
    expect(recordedDigest({ etag: md5, crc32c: 'e3069283' })?.algorithm).toBe('md5');
    const info = { key: 'k', size: 9, version: 'v', crc32c: 'e3069283' };
    expect(statedDigest({ info, contentMd5: '0123456789abcdef0123456789abcdef' })?.algorithm).toBe(
      'md5',
    );
    expect(statedDigest({ info })).toEqual({ algorithm: 'crc32c', hex: 'e3069283' });
  });
});
