/**
 * The one rule for "the same file" (src/contract/entry.ts `sameBytes`), which diff and commit's no-change
 * check share; the drivers' side of it is in the conformance suite (src/testing/digests.ts).
 */
import { describe, expect, it } from 'vitest';
import { type FileFacts, sameBytes } from '../../src/contract/entry.js';

const MD5 = 'ab'.repeat(16);
const OTHER = 'cd'.repeat(16);
const f = (facts: Partial<FileFacts>): FileFacts => ({ key: 'p/a.csv', size: 10, ...facts });

describe('sameBytes', () => {
  it('one state of one key: the same version ID, version or ETag', () => {
    expect(sameBytes(f({ versionId: 'v1' }), f({ versionId: 'v1' }))).toBe(true);
    expect(sameBytes(f({ version: '7' }), f({ version: '7' }))).toBe(true);
    // Azure ETags are write markers: equal on one key is one write, on two keys proves nothing.
    expect(sameBytes(f({ etag: '"0x8D1"' }), f({ etag: '"0x8D1"' }))).toBe(true);
    expect(sameBytes(f({ etag: '"0x8D1"' }), f({ key: 'q/a.csv', etag: '"0x8D1"' }))).toBe(false);
    expect(sameBytes(f({ versionId: 'v1' }), f({ versionId: 'v2' }))).toBe(false);
  });

  it('equal stated digests on any keys: SHA-256, MD5 (field or plain ETag), multipart ETag', () => {
    const sha = 'ef'.repeat(32);
    expect(sameBytes(f({ sha256: sha }), f({ key: 'q', sha256: sha }))).toBe(true);
    expect(sameBytes(f({ md5: MD5 }), f({ key: 'q', etag: `"${MD5}"` }))).toBe(true);
    expect(sameBytes(f({ etag: `"${MD5}-3"` }), f({ key: 'q', etag: `"${MD5}-3"` }))).toBe(true);
    // A multipart ETag is no MD5 of the bytes.
    expect(sameBytes(f({ etag: `"${MD5}-3"` }), f({ key: 'q', md5: MD5 }))).toBe(false);
    expect(sameBytes(f({ md5: MD5 }), f({ key: 'q', md5: OTHER }))).toBe(false);
  });

  it('another size, or nothing that proves it: not the same', () => {
    expect(sameBytes(f({ versionId: 'v1' }), f({ versionId: 'v1', size: 11 }))).toBe(false);
    expect(sameBytes(f({ versionId: 'v1' }), f({ etag: '"0x8D1"' }))).toBe(false);
    expect(sameBytes(f({}), f({}))).toBe(false);
  });
});
