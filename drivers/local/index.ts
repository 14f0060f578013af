/**
 * `provcat/drivers/local`: the embedded, versioned object store behind `local://bucket/key`.
 *
 * ```ts
 * import { LocalStore } from 'provcat/drivers/local';
 * const store = new LocalStore({ root: '/data/provcat' }); // default: PROVCAT_LOCAL_ROOT
 * ```
 *
 * @module
 */
export { defaultLocalRoot, LocalStore, type LocalStoreOptions } from './local-store.js';
