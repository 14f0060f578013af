/**
 * {@link Store}: the abstract base of every store, holding the options all stores share.
 *
 * @module
 */
import { Cache } from '../cache/cache.js';
import { ADAPTIVE_MAX_CONCURRENCY, type ProgressCallback } from '../contract/store-context.js';
import { checkConcurrency } from '../core/concurrency.js';
import type { UploadSettingsOptions } from '../upload/settings.js';

export type { Progress, ProgressCallback } from '../contract/store-context.js';

/**
 * The options every store takes (with the upload settings of large puts, src/upload/put.ts).
 * Driver options extend these.
 */
export interface StoreOptions extends UploadSettingsOptions {
  /** The cache, or its root directory. Default: `PROVCAT_CACHE_DIR`, else env-paths' cache dir. */
  cache?: Cache | string | undefined;
  /** No network call at all; see docs/guide.md#offline. Default: `PROVCAT_OFFLINE=1`. */
  offline?: boolean | undefined;
  /**
   * Transfers in flight in a folder fetch or a branch. Default: a folder fetch starts at 16 and
   * grows (up to {@link ADAPTIVE_MAX_CONCURRENCY}) while more in flight makes it faster, as when
   * round trips dominate; a number given here fixes it. A whole number in 1..256
   * (`MAX_CONCURRENCY`), else `InvalidArgument`.
   */
  concurrency?: number | undefined;
  /** Progress of long transfers. */
  onProgress?: ProgressCallback | undefined;
  /** Where debug messages go (default: `node:util` debuglog `provcat`). */
  logger?: ((message: string) => void) | undefined;
}

export { ADAPTIVE_MAX_CONCURRENCY };

/** True when `PROVCAT_OFFLINE` asks for offline mode. */
export function offlineFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  const v = env.PROVCAT_OFFLINE;
  return v !== undefined && v !== '' && v !== '0' && v.toLowerCase() !== 'false';
}

/** The abstract base of all stores. */
export abstract class Store {
  /** The local cache this store fetches into. */
  readonly cache: Cache;
  /** Offline mode: no network call at all. */
  readonly offline: boolean;
  /** Transfers in flight for folder operations (where a fetch starts, when adaptive). */
  readonly concurrency: number;
  /** True when `concurrency` was not given: folder fetches adapt their window. */
  readonly adaptiveConcurrency: boolean;
  /** The progress callback, if any. */
  readonly onProgress: ProgressCallback | undefined;
  /** Debug logger. */
  protected readonly logger: (message: string) => void;

  constructor(options: StoreOptions = {}) {
    this.cache =
      options.cache instanceof Cache ? options.cache : new Cache({ root: options.cache });
    this.offline = options.offline ?? offlineFromEnv();
    this.concurrency = checkConcurrency(options.concurrency) ?? 16;
    this.adaptiveConcurrency = options.concurrency === undefined;
    this.onProgress = options.onProgress;
    this.logger = options.logger ?? (() => {});
  }

  /**
   * Release what the store holds open (keep-alive sockets, SDK clients it built) after writing
   * what it learned (the S3 driver's routes). The store stays usable: a later call reconnects.
   * Idempotent. The CLI calls it after every command; a long-lived program calls it at exit.
   */
  async close(): Promise<void> {}
}
