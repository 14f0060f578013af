/**
 * The bookkeeping of one push (src/folders/push.ts): {@link ByteBudget}, the memory budget of
 * whole-file reads, and {@link PushProgress}, the progress it reports.
 *
 * @module
 */
import type { ProgressCallback, StoreContext } from '../contract/store-context.js';

/** A byte semaphore: whole-file reads wait until their bytes fit in the budget. */
export class ByteBudget {
  private free: number;
  private readonly waiting: Array<{ n: number; go: () => void }> = [];
  constructor(private readonly limit: number) {
    this.free = limit;
  }
  async acquire(bytes: number): Promise<number> {
    const n = Math.min(bytes, this.limit);
    if (this.waiting.length === 0 && n <= this.free) {
      this.free -= n;
      return n;
    }
    await new Promise<void>((go) => this.waiting.push({ n, go }));
    return n;
  }
  release(n: number): void {
    this.free += n;
    for (let w = this.waiting[0]; w !== undefined && w.n <= this.free; w = this.waiting[0]) {
      this.waiting.shift();
      this.free -= w.n;
      w.go();
    }
  }
}

/** Aggregated progress of one push. */
export class PushProgress {
  private bytes = 0;
  private files = 0;
  private readonly sinks: ProgressCallback[];
  constructor(
    store: Pick<StoreContext, 'onProgress'>,
    private readonly uri: string,
    extra: ProgressCallback | undefined,
    private readonly totalBytes: number,
    private readonly totalFiles: number,
  ) {
    this.sinks = [store.onProgress, extra].filter((f): f is ProgressCallback => f !== undefined);
  }
  /**
   * The progress of one file: `onProgress` takes the cumulative bytes an upload sent; `done`
   * counts the file as `size` bytes dealt with in all; `undo` takes back what an attempt that
   * is sent again reported.
   */
  file(): { onProgress: (sent: number) => void; done(size: number): void; undo(): void } {
    let last = 0;
    return {
      onProgress: (sent) => {
        this.bytes += sent - last;
        last = sent;
        this.report();
      },
      done: (size) => {
        this.bytes += size - last;
        last = size;
        this.files++;
        this.report();
      },
      undo: () => {
        this.bytes -= last;
        last = 0;
      },
    };
  }
  private report(): void {
    for (const sink of this.sinks) {
      sink({
        operation: 'push',
        uri: this.uri,
        bytes: this.bytes,
        totalBytes: this.totalBytes,
        files: this.files,
        totalFiles: this.totalFiles,
      });
    }
  }
}
