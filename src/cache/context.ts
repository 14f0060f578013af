/**
 * {@link CachedStoreContext}: the narrow interface of a service that reads or writes the cache
 * (fetch, reads at `?at=`), the store context (src/contract/store-context.ts) plus the cache.
 *
 * @module
 */
import type { StoreContext } from '../contract/store-context.js';
import { defaultLocalRoot, type OwnFolder } from '../core/own-folders.js';
import type { Cache } from './cache.js';

/** A store's primitives and settings with its local cache. `ObjectStore` is one. */
export interface CachedStoreContext extends StoreContext {
  /** The local cache the store fetches into. */
  readonly cache: Cache;
}

/**
 * provcat's own local folders for `store`: its cache, its objects' folder when it has one, and
 * the embedded store's root as the environment names it (whichever store is at work: a fetch
 * from `s3://` must not delete the `local://` buckets either).
 */
export function ownFolders(store: Pick<CachedStoreContext, 'cache' | 'localRoot'>): OwnFolder[] {
  const own: OwnFolder[] = [{ path: store.cache.root, what: "provcat's cache" }];
  if (store.localRoot !== undefined)
    own.push({ path: store.localRoot, what: 'the embedded store' });
  const local = defaultLocalRoot();
  if (local !== store.localRoot) own.push({ path: local, what: 'the embedded store' });
  return own;
}
