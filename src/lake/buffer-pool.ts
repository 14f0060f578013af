/**
 * Part buffers, reused.
 *
 * A 64 MiB part buffer is expensive to get: the allocation itself is cheap, but touching its
 * pages for the first time costs some sixteen thousand page faults, and the garbage collector
 * frees such buffers late, so allocating one per part lets the resident set grow with the
 * object. Instead every upload borrows at most `partsInFlight` buffers from a pool owned by its
 * stage, and gives each back when its part has been answered; the pool keeps a few idle buffers
 * for the next upload and drops the rest.
 *
 * Memory of one upload is therefore bounded by `partsInFlight` × part size (256 MiB at the
 * defaults), plus what the pool keeps idle between uploads (`maxIdle` buffers per size).
 *
 * @module
 */

/** A pool of equally sized buffers per size. Not tied to any upload. */
export class BufferPool {
  private readonly idle = new Map<number, Buffer[]>();
  /** Buffers handed out and not yet given back (for tests and diagnostics). */
  outstanding = 0;
  /** Buffers allocated over the pool's life (for tests and diagnostics). */
  allocated = 0;

  /** @param maxIdle how many idle buffers of each size to keep between uploads. */
  constructor(readonly maxIdle = 4) {}

  /** A buffer of exactly `size` bytes: an idle one if there is one, else a new one. */
  take(size: number): Buffer {
    const list = this.idle.get(size);
    const reused = list?.pop();
    this.outstanding++;
    if (reused) return reused;
    this.allocated++;
    // Not from Node's shared slab (that is for small buffers); contents are overwritten before use.
    return Buffer.allocUnsafeSlow(size);
  }

  /** Give a buffer back. It must not be used afterwards. */
  give(buffer: Buffer): void {
    this.outstanding--;
    const list = this.idle.get(buffer.length) ?? [];
    if (list.length < this.maxIdle) {
      list.push(buffer);
      this.idle.set(buffer.length, list);
    }
  }

  /** Drop every idle buffer (memory returns once the garbage collector runs). */
  clear(): void {
    this.idle.clear();
  }
}

/**
 * At most `limit` buffers at a time for one upload, from a shared {@link BufferPool}. `acquire`
 * waits for a free slot; it rejects as soon as `signal` aborts.
 */
export class BufferSlots {
  private inUse = 0;
  private waiters: Array<() => void> = [];

  constructor(
    private readonly pool: BufferPool,
    private readonly size: number,
    private readonly limit: number,
  ) {}

  /** Wait for a slot and take a buffer. Rejects with `signal.reason` when `signal` aborts. */
  async acquire(signal: AbortSignal): Promise<Buffer> {
    while (this.inUse >= this.limit) {
      signal.throwIfAborted();
      await new Promise<void>((resolve) => {
        const wake = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = () => {
          this.waiters = this.waiters.filter((w) => w !== wake);
          resolve();
        };
        this.waiters.push(wake);
        signal.addEventListener('abort', onAbort, { once: true });
      });
    }
    signal.throwIfAborted();
    this.inUse++;
    return this.pool.take(this.size);
  }

  /** Return a buffer taken with {@link acquire}. */
  release(buffer: Buffer): void {
    this.inUse--;
    this.pool.give(buffer);
    this.waiters.shift()?.();
  }
}
