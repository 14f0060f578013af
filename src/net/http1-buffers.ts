/**
 * Memory of the lean download (src/net/http1-download.ts): the reusable read buffers
 * connections read into ({@link DownloadBufferPool}), and the slabs bodies read whole are cut
 * from ({@link wholeBody}). Both exist so that a download allocates nothing per socket read or
 * per small body (see the module comment of http1-download.ts for why).
 *
 * @module
 */

/**
 * Reusable read buffers, shared by connections. Keeps up to `maxIdle` idle buffers per size;
 * counts what it hands out so tests and diagnostics can check the memory bound.
 */
export class DownloadBufferPool {
  private readonly idle = new Map<number, Buffer[]>();
  /** Buffers handed out and not yet given back. */
  outstanding = 0;
  /** The most buffers that were out at once. */
  peakOutstanding = 0;
  /** Buffers allocated over the pool's life. */
  allocated = 0;

  constructor(readonly maxIdle = 4) {}

  /** A buffer of `size` bytes (contents undefined): an idle one, else a new one. */
  take(size: number): Buffer {
    this.outstanding++;
    if (this.outstanding > this.peakOutstanding) this.peakOutstanding = this.outstanding;
    const reused = this.idle.get(size)?.pop();
    if (reused) return reused;
    this.allocated++;
    // Outside Node's small-buffer slab; the socket overwrites it before anyone reads it.
    return Buffer.allocUnsafeSlow(size);
  }

  /** Give back a buffer from {@link take}; it must not be used afterwards. */
  give(buffer: Buffer): void {
    this.outstanding--;
    const list = this.idle.get(buffer.length);
    if (!list) this.idle.set(buffer.length, [buffer]);
    else if (list.length < this.maxIdle) list.push(buffer);
  }
}

/** The read buffers of every connection not given a {@link DownloadBufferPool} of its own. */
export const sharedBuffers = new DownloadBufferPool();

/** Whole bodies up to this size are cut from a shared slab (see {@link wholeBody}). */
const WHOLE_SLAB_MAX = 64 * 1024;
const WHOLE_SLAB_BYTES = 1024 * 1024;
/** Released slabs kept for reuse. */
const WHOLE_SLABS_KEPT = 2;

/** A region whole bodies are cut from; `live` counts bodies cut from it and not yet released. */
interface WholeSlab {
  buf: Buffer;
  used: number;
  live: number;
}
let wholeSlab: WholeSlab = { buf: Buffer.alloc(0), used: 0, live: 0 };
const spareWholeSlabs: WholeSlab[] = [];
const noop = (): void => {};

/**
 * Memory for a body read whole, and the function that gives it back. Small ones are cut from a
 * 1 MiB slab, as Node's own Buffer pool does for tiny buffers (a separate backing store per
 * 4 KiB body cost more than the rest of its handling). Once every body cut from a slab was
 * released, the slab is used again: fresh memory costs a page fault per 4 KiB on first touch,
 * which on these VMs cost more than the copy into it. A body never released keeps its slab
 * alive until the garbage collector takes both.
 */
export function wholeBody(n: number): { body: Buffer; release: () => void } {
  if (n > WHOLE_SLAB_MAX) return { body: Buffer.allocUnsafeSlow(n), release: noop };
  let slab = wholeSlab;
  if (slab.used + n > slab.buf.length) {
    if (slab.live === 0 && slab.buf.length > 0) {
      slab.used = 0;
    } else {
      slab = spareWholeSlabs.pop() ?? {
        buf: Buffer.allocUnsafeSlow(WHOLE_SLAB_BYTES),
        used: 0,
        live: 0,
      };
      wholeSlab = slab;
    }
  }
  const body = slab.buf.subarray(slab.used, slab.used + n);
  // Keep later bodies 8-byte aligned.
  slab.used += (n + 7) & ~7;
  slab.live++;
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    slab.live--;
    if (slab.live > 0) return;
    if (slab === wholeSlab) {
      slab.used = 0;
    } else if (spareWholeSlabs.length < WHOLE_SLABS_KEPT) {
      slab.used = 0;
      spareWholeSlabs.push(slab);
    }
  };
  return { body, release };
}
