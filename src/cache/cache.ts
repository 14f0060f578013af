/**
 * The local cache (being written; see docs/cache.md).
 *
 * @module
 */
import path from 'node:path';
import envPaths from 'env-paths';

/** Options of {@link Cache}. */
export interface CacheOptions {
  /** The cache root. Default: `PROVCAT_CACHE_DIR`, else env-paths('provcat').cache. */
  root?: string | undefined;
}

/** The default cache root: `PROVCAT_CACHE_DIR`, else env-paths('provcat').cache. */
export function defaultCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.PROVCAT_CACHE_DIR;
  return path.resolve(
    fromEnv && fromEnv !== '' ? fromEnv : envPaths('provcat', { suffix: '' }).cache,
  );
}

/** The local cache shared by every store (and every process) using the same root. */
export class Cache {
  /** The absolute root directory. */
  readonly root: string;
  constructor(options: CacheOptions = {}) {
    this.root = path.resolve(options.root ?? defaultCacheRoot());
  }

  /**
   * Where a verified commit object is kept once read: `commits/<scheme>/<bucket>/<id>.json`.
   * Write it with writeFileAtomic (src/fs-atomic.ts) and re-hash it on every read.
   */
  commitPath(scheme: string, bucket: string, id: string): string {
    return path.join(this.root, 'commits', scheme, bucket, `${id}.json`);
  }
}
