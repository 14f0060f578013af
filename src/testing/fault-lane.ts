/**
 * One direction of a proxied connection: an ordered queue of bytes and actions with a release
 * time, which gives latency, stalls and backpressure in one place.
 *
 * @module
 */
import type net from 'node:net';

/** A lane holding more than this pauses its source until it is down to a quarter. */
const HIGH_WATER = 1024 * 1024;

type LaneItem = { at: number; data?: Buffer; action?: () => void };

/** One direction of a connection: bytes and actions released in order, each at its time. */
export class Lane {
  private readonly queue: LaneItem[] = [];
  private queued = 0;
  private heldUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private waitingDrain = false;
  private last = 0;
  /** Writes not yet handed to the kernel: an action waits for them. */
  private unflushed = 0;
  closed = false;

  constructor(
    private readonly dest: net.Socket,
    private readonly source: net.Socket,
  ) {
    if (dest.connecting) dest.once('connect', this.pump);
  }

  push(item: { data?: Buffer; action?: () => void }, delayMs: number): void {
    if (this.closed) return;
    const at = Math.max(performance.now() + delayMs, this.last);
    this.last = at;
    this.queue.push({ at, ...item });
    this.queued += item.data?.length ?? 0;
    if (this.queued > HIGH_WATER) this.source.pause();
    this.pump();
  }

  /** Release nothing before `now + ms` (`Infinity`: never again). */
  hold(ms: number): void {
    this.heldUntil = Math.max(this.heldUntil, performance.now() + ms);
  }

  close(): void {
    this.closed = true;
    this.queue.length = 0;
    clearTimeout(this.timer);
  }

  private pump = (): void => {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (!this.closed && this.queue.length > 0) {
      if (this.dest.connecting || this.waitingDrain) return;
      const now = performance.now();
      const item = this.queue[0] as LaneItem;
      const wait = Math.max(item.at, this.heldUntil) - now;
      if (wait > 0) {
        if (wait !== Number.POSITIVE_INFINITY) this.timer = setTimeout(this.pump, wait);
        return;
      }
      if (item.action) {
        // A reset or a close comes after the bytes before it are out, as on the wire.
        if (this.unflushed > 0) return;
        this.queue.shift();
        item.action();
        continue;
      }
      this.queue.shift();
      const data = item.data as Buffer;
      this.queued -= data.length;
      if (this.queued <= HIGH_WATER / 4) this.source.resume();
      this.unflushed++;
      const flushed = () => {
        this.unflushed--;
        if (this.unflushed === 0) this.pump();
      };
      if (!this.dest.write(data, flushed)) {
        this.waitingDrain = true;
        this.dest.once('drain', () => {
          this.waitingDrain = false;
          this.pump();
        });
      }
    }
  };
}
