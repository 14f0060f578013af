/**
 * Listings that come in pages chained by a continuation token, paged the same way by every
 * driver: each page asked with the previous page's token until one has none. A failure of any
 * page fails the listing rather than ending it short (a cut listing would read as deletions);
 * a missing bucket is the first page's `NotFound`, which the listing primitives raise naming the
 * bucket. Page sizes asked of a store are clamped to what it serves.
 *
 * @module
 */
/** A page size for `limit` (whole, at least 1): at most the store's `max`, `max` by default. */
export function pageSize(limit: number | undefined, max: number): number {
  return Math.min(max, Math.max(1, Math.floor(limit ?? max)));
}

/**
 * The pages of one listing (see the module comment): `page(token)` asks one (`undefined`: the
 * first), `next(page)` is the token of the following one, or `undefined` after the last.
 */
export async function* tokenPages<P>(
  page: (token: string | undefined) => Promise<P>,
  next: (page: P) => string | undefined,
): AsyncIterable<P> {
  let token: string | undefined;
  for (;;) {
    const got = await page(token);
    yield got;
    token = next(got);
    if (!token) return;
  }
}
