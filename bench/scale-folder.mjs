// The folder of the scale benches (branch-scale.mjs, commit-scale.mjs): `data/` in `dirs`
// subfolders of one-byte files, named so that key order and index order agree. Kept in one
// place so both benches measure the same folder.

/** The key of file `i` of a folder of `dirs` subfolders: `data/dNNN/fNNNNNNN.bin`. */
export function scaleKeyOf(dirs) {
  return (i) => `data/d${String(i % dirs).padStart(3, '0')}/f${String(i).padStart(7, '0')}.bin`;
}

/** The bytes of file `i`: one byte, so the listing, not the data, is what costs. */
export function scaleBytes(i) {
  return Buffer.from([i % 256]);
}

/** Puts `files` files named by `keyOf` into `bucket` of `store`, 16 at a time (not timed). */
export async function fillScaleFolder(store, bucket, files, keyOf) {
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < files) {
        const i = next++;
        await store._put(bucket, keyOf(i), scaleBytes(i));
      }
    }),
  );
}
