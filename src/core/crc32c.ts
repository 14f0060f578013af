/**
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum GCS keeps for every object.
 *
 * provcat checks a download against it where GCS states no MD5 (a composite object:
 * src/cache/content-digest.ts), and the project's GCS test server computes it for every object
 * (servers/gcs/content.ts). Written here rather than borrowed from the SDK: the SDK validates
 * its uploads with its own CRC32C, so a bug here would show as uploads to the test server that
 * the SDK refuses, not as a function that agrees with itself. Slicing-by-8 (eight 256-entry
 * tables) keeps a 200 MiB checksum well under a second without a native module; it is the same
 * function as the one-table version, checked against the standard vectors in
 * test/test-servers/gcs-server.test.ts.
 *
 * GCS renders the value as base64 of the four bytes in big-endian order (`crc32c` in the JSON
 * resource, `x-goog-hash: crc32c=...`).
 *
 * @module
 */

const POLY = 0x82f63b78;

/** TABLES[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8). */
const TABLES: Uint32Array[] = (() => {
  const tables = Array.from({ length: 8 }, () => new Uint32Array(256));
  const first = tables[0] as Uint32Array;
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    first[n] = c >>> 0;
  }
  for (let t = 1; t < 8; t++) {
    const prev = tables[t - 1] as Uint32Array;
    const table = tables[t] as Uint32Array;
    for (let n = 0; n < 256; n++) {
      const p = prev[n] as number;
      table[n] = ((p >>> 8) ^ (first[p & 0xff] as number)) >>> 0;
    }
  }
  return tables;
})();

/**
 * CRC32C of `data`, continuing from `previous` (the value returned for the bytes before it;
 * 0 for the start). `crc32c(b, crc32c(a))` equals `crc32c(a ++ b)`, so content that arrives in
 * chunks is checksummed without concatenating it.
 */
export function crc32c(data: Uint8Array, previous = 0): number {
  const [t0, t1, t2, t3, t4, t5, t6, t7] = TABLES as [
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
  ];
  let crc = ~previous >>> 0;
  let i = 0;
  const n = data.length;
  const fast = n - (n % 8);
  while (i < fast) {
    const lo =
      (crc ^
        ((data[i] as number) |
          ((data[i + 1] as number) << 8) |
          ((data[i + 2] as number) << 16) |
          ((data[i + 3] as number) << 24))) >>>
      0;
    crc =
      (t7[lo & 0xff] as number) ^
      (t6[(lo >>> 8) & 0xff] as number) ^
      (t5[(lo >>> 16) & 0xff] as number) ^
      (t4[lo >>> 24] as number) ^
      (t3[data[i + 4] as number] as number) ^
      (t2[data[i + 5] as number] as number) ^
      (t1[data[i + 6] as number] as number) ^
      (t0[data[i + 7] as number] as number);
    i += 8;
  }
  while (i < n) {
    crc = (t0[(crc ^ (data[i] as number)) & 0xff] as number) ^ (crc >>> 8);
    i++;
  }
  return ~crc >>> 0;
}

/** The GCS rendering of a CRC32C value: base64 of its four bytes, big-endian. */
export function crc32cBase64(value: number): string {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(value >>> 0, 0);
  return bytes.toString('base64');
}

/** A running CRC32C with the `update`/`digest('hex')` shape of a `node:crypto` Hash. */
export class Crc32cHash {
  private value = 0;

  /** Add `data`; returns this, as Hash does. */
  update(data: Uint8Array): this {
    this.value = crc32c(data, this.value);
    return this;
  }

  /** The CRC32C so far as 8 lower-case hex digits (its four bytes, big-endian). */
  digest(_encoding: 'hex'): string {
    return this.value.toString(16).padStart(8, '0');
  }
}

/** A GCS CRC32C (base64 of four bytes, big-endian) as 8 lower-case hex; `undefined` if not one. */
export function crc32cHexOfBase64(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const bytes = Buffer.from(value, 'base64');
  return bytes.length === 4 ? bytes.toString('hex') : undefined;
}
