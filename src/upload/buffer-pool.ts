/**
 * The {@link PartBufferPool}: the part buffers a stream's parts are read into (buffered-parts.ts),
 * reused part after part and upload after upload, and dropped once no upload is running.
 *
 * @module
 */

/**
 * Part buffers reused across the parts of the uploads of one store (or stage). A buffer is
 * taken when a part is read and given back when the store has answered it; the engine bounds the
 * parts in flight of each upload, so one upload holds at most `partsInFlight` buffers. Free
 * buffers are kept only while some upload uses the pool: an idle pool holds no part memory.
 * (Allocating a fresh 64 MiB buffer per part would cost a page-fault storm per part and leave
 * the garbage collector hundreds of MiB behind.)
 */
export class PartBufferPool {
  private readonly free = new Map<number, Buffer[]>();
  private users = 0;
  /** Buffers allocated over the pool's life (for tests and debug logs). */
  allocated = 0;

  /** An upload starts using the pool. Pair with {@link leave}. */
  enter(): void {
    this.users++;
  }

  /** An upload stops using the pool; the last one out drops the free buffers. */
  leave(): void {
    this.users--;
    if (this.users === 0) this.free.clear();
  }

  /** A buffer of exactly `size` bytes: a free one, else a new one. */
  take(size: number): Buffer {
    const reused = this.free.get(size)?.pop();
    if (reused) return reused;
    this.allocated++;
    // Not from Node's shared slab (that is for small buffers); contents are overwritten before use.
    return Buffer.allocUnsafeSlow(size);
  }

  /** Give a buffer back. It must not be used afterwards. */
  give(buffer: Buffer): void {
    if (this.users === 0) return;
    const list = this.free.get(buffer.length);
    if (list) list.push(buffer);
    else this.free.set(buffer.length, [buffer]);
  }
}
