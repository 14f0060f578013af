/**
 * The options and result of a fetch, and {@link Transfer}, the progress bookkeeping one fetch
 * shares across its downloads (src/cache/fetch.ts, src/cache/fetch-commit.ts).
 *
 * @module
 */
import type { ProgressCallback, StoreContext } from '../contract/store-context.js';
import type { Uri } from '../core/uri.js';

/** Options of `ObjectStore.fetch`. */
export interface FetchOptions {
  signal?: AbortSignal | undefined;
  /** Progress of this fetch (in addition to the store's own callback). */
  onProgress?: ProgressCallback | undefined;
  /** Most downloads in flight (default: the store's concurrency, 16). */
  concurrency?: number | undefined;
}

/** What `ObjectStore.fetch` returns. */
export interface FetchResult {
  /** The cached file, or the cached folder (a real directory whose paths equal the keys). */
  path: string;
  /** Files in the result. */
  files: number;
  /** Files actually transferred by this call (0 when everything was current). */
  downloaded: number;
  /** Bytes transferred by this call. */
  bytes: number;
}

/** Shared progress bookkeeping of one fetch. */
export class Transfer {
  bytes = 0;
  files = 0;
  private readonly report: ((bytes: number) => void) | undefined;
  constructor(
    store: Pick<StoreContext, 'onProgress'>,
    uri: Uri,
    options: FetchOptions,
    readonly totalBytes: number,
    readonly totalFiles: number,
  ) {
    const sinks = [store.onProgress, options.onProgress].filter((f) => f !== undefined);
    const text = uri.toString();
    this.report =
      sinks.length === 0
        ? undefined
        : (bytes) => {
            for (const sink of sinks) {
              sink({
                operation: 'fetch',
                uri: text,
                bytes,
                totalBytes: this.totalBytes,
                files: this.files,
                totalFiles: this.totalFiles,
              });
            }
          };
  }
  add = (n: number): void => {
    this.bytes += n;
    this.report?.(this.bytes);
  };
  fileDone(): void {
    this.files++;
    this.report?.(this.bytes);
  }
}
