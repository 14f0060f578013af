/**
 * What every driver, the cache and the commit format agree on about keys: the order object
 * stores list them in, and the folder of a bucket that belongs to provcat.
 *
 * @module
 */

/** The top-level folder of the bucket where provcat keeps its objects. */
export const META_PREFIX = '.provcat/';

/** True when a key lies in the bucket's `.provcat/` folder. */
export function isMetaKey(key: string): boolean {
  return key === META_PREFIX.slice(0, -1) || key.startsWith(META_PREFIX);
}

/**
 * Compare strings in the order of their UTF-8 bytes (code point order), as S3 sorts keys. This
 * differs from JavaScript's UTF-16 order only where a surrogate meets a unit in U+E000..U+FFFF.
 */
export function compareUtf8(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      // Surrogates (U+10000 and up) sort after every BMP unit: move them above U+FFFF.
      x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
      y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}
