/**
 * The upload engine's two small clocks and counters: the stall {@link Watchdog} of one upload and
 * the {@link Slots} that bound its parts in flight. See engine.ts for what counts as progress.
 *
 * @module
 */
import { raceAbort } from '../core/concurrency.js';

/**
 * The stall clock of one upload. Parts being sent bracket their attempts with {@link begin} and
 * {@link end} and report progress with {@link moved}; when parts are being sent and nothing moved
 * for `timeoutMs`, `onStall` is called once with how long nothing moved. One timer, re-armed for
 * the time left when it finds progress.
 */
export class Watchdog {
  /** Numbers of the parts being sent. */
  readonly waiting = new Set<number>();
  private last = 0;
  private timer: NodeJS.Timeout | undefined;
  private done = false;

  constructor(
    private readonly timeoutMs: number,
    private readonly onStall: (idleMs: number) => void,
  ) {}

  /** Part `number` starts being sent (all its attempts). */
  begin(number: number): void {
    if (this.done) return;
    if (this.waiting.size === 0) {
      this.last = performance.now();
      this.timer ??= this.arm(this.timeoutMs);
    }
    this.waiting.add(number);
  }

  /** Part `number` is no longer being sent (acknowledged, failed or cancelled). */
  end(number: number): void {
    this.waiting.delete(number);
  }

  /** The store acknowledged a part, or took body bytes it had not taken before. */
  moved(): void {
    this.last = performance.now();
  }

  /** No more stalls (the upload completed or failed). */
  stop(): void {
    this.done = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(ms: number): NodeJS.Timeout {
    return setTimeout(() => this.check(), Math.max(1, Math.ceil(ms)));
  }

  private check(): void {
    this.timer = undefined;
    // Nothing being sent: the clock stops; `begin` restarts it.
    if (this.done || this.waiting.size === 0) return;
    const idle = performance.now() - this.last;
    if (idle < this.timeoutMs) {
      this.timer = this.arm(this.timeoutMs - idle);
      return;
    }
    this.done = true;
    this.onStall(idle);
  }
}

/** At most `limit` holders at once; `acquire` waits for a free slot (rejects when `signal` aborts). */
export class Slots {
  private used = 0;
  private waiters: Array<() => void> = [];
  constructor(private readonly limit: number) {}

  async acquire(signal: AbortSignal): Promise<void> {
    while (this.used >= this.limit) {
      await raceAbort(
        new Promise<void>((resolve) => {
          this.waiters.push(resolve);
        }),
        signal,
      );
    }
    signal.throwIfAborted();
    this.used++;
  }

  release(): void {
    this.used--;
    this.waiters.shift()?.();
  }
}
