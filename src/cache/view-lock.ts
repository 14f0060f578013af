/**
 * The lock of one cache view across processes, with fencing: a holder that was stopped
 * (SIGSTOP, a suspended laptop) long enough to lose its lock finds out before it writes again.
 *
 * The lock is proper-lockfile's: a directory `<target>.lock` made with `mkdir` (atomic), whose
 * mtime the holder refreshes every {@link LOCK_UPDATE_MS}; one not refreshed for
 * {@link LOCK_STALE_MS} is taken over (removed and made again) by the next fetch, so a killed
 * holder never blocks the cache for long. A stopped holder is indistinguishable from a dead one,
 * and when it continues its writes would land on top of the newer fetch's — proper-lockfile
 * only reports the loss (`onCompromised`) at its next refresh, after whatever the holder did
 * first.
 *
 * Fencing closes that gap: the lock directory's mtime is the owner token. The holder knows
 * every mtime it set (proper-lockfile's `fs` is wrapped to see its `utimes` calls); a taker's
 * `mkdir` and refreshes set others, at least {@link LOCK_STALE_MS} later. {@link ViewLock.check}
 * compares the directory's mtime with the holder's before each write (each link into the view,
 * each prune, each state write) and throws once it differs. The comparison is an `lstat`, made
 * at most every {@link FENCE_TRUST_MS} of wall-clock time — and always after a gap, since a
 * stop shows as time passing — so the cost per file is a clock read. A process that lost its
 * lock also never removes the lock directory (now someone else's) on exit.
 *
 * What fencing cannot do on a local file system: stop a write already between its check and
 * the system call when the process is stopped. The gap is a few microseconds of synchronous
 * code; the state file the holder writes last is checked right before it is written.
 *
 * @module
 */
import * as fs from 'node:fs';
import { StoreError } from '../core/errors.js';

/** A lock not refreshed for this long is taken over by the next fetch (ms). */
export const LOCK_STALE_MS = 5000;
/** How often the holder refreshes the lock's mtime (ms). */
export const LOCK_UPDATE_MS = 1000;
/**
 * After a successful {@link ViewLock.check}, further checks within this much wall-clock time
 * trust it without an `lstat` (ms). Far below the stale time: no taker can appear meanwhile.
 */
export const FENCE_TRUST_MS = 250;
/** Checks stop trusting this long before the lock would be stale by its own mtime (ms). */
const STALE_MARGIN_MS = 1500;
/** How long a lock is waited for: attempts, and the pause between them (ms, growing). */
const LOCK_ATTEMPTS = 100_000;
const LOCK_PAUSE = { first: 20, factor: 1.2, most: 250 };

/** A lock held by {@link holdViewLock}. */
export interface ViewLock {
  /**
   * Throw `StoreError` ("lost the lock") unless this process still holds the lock. Call right
   * before every write to the view or its state; cheap (see the module comment). Once lost,
   * every later call throws the same error.
   */
  check(): void;
  /**
   * True when the lock was taken over from a holder that had gone (its lock was stale): the
   * view and the blob folders it wrote may hold what that interrupted fetch left.
   */
  readonly tookOver: boolean;
}

/** The mtimes this process set on each lock directory it holds (current, and one in flight). */
const owned = new Map<string, { current: number; pending: number | undefined }>();
/** Lock directories this process held and lost: never removed by it (they are someone else's). */
const lost = new Set<string>();

/**
 * The `fs` proper-lockfile uses: node's, with `utimes` watched (to know the mtimes this process
 * set) and `rmdirSync` — used only by its exit handler, for locks it still thinks held — made a
 * no-op for a lock this process lost.
 */
const lockFs = {
  mkdir: fs.mkdir,
  stat: fs.stat,
  rmdir: fs.rmdir,
  realpath: fs.realpath,
  rmdirSync(p: string): void {
    if (!lost.has(p)) fs.rmdirSync(p);
  },
  utimes(p: string, atime: Date, mtime: Date, callback: (error: Error | null) => void): void {
    const own = owned.get(p);
    if (own) own.pending = mtime.getTime();
    fs.utimes(p, atime, mtime, (error) => {
      if (own) {
        if (!error && own.pending !== undefined) own.current = own.pending;
        own.pending = undefined;
      }
      callback(error);
    });
  },
};

let lockLibrary: Promise<typeof import('proper-lockfile')> | undefined;

/**
 * proper-lockfile, loaded by the first lock. With graceful-fs (which patches a copy of `fs`)
 * and signal-exit (a handler per signal) it costs a CLI process ~5 ms to load, which commands
 * that take no lock (`stat`, `ls`, a cached commit's reads) need not pay.
 */
function properLockfile(): Promise<typeof import('proper-lockfile')> {
  lockLibrary ??= import('proper-lockfile').then((m) => m.default);
  return lockLibrary;
}

/** `lstat`, or `undefined` when nothing is there (or a component is not a directory). */
function lstatOrUndefined(p: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(p, { throwIfNoEntry: false });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw error;
  }
}

/** Two mtimes as read back through different paths (Date, float ms) are the same one. */
function sameMtime(a: number, b: number | undefined): boolean {
  return b !== undefined && Math.abs(a - b) < 2;
}

class HeldLock implements ViewLock {
  private failure: StoreError | undefined;
  private trustedUntil = 0;

  constructor(
    private readonly dir: string,
    private readonly what: string,
    readonly tookOver: boolean,
  ) {}

  check(): void {
    if (this.failure) throw this.failure;
    const now = Date.now();
    if (now < this.trustedUntil) return;
    let st: fs.Stats | undefined;
    try {
      st = lstatOrUndefined(this.dir);
    } catch (cause) {
      this.lose('its lock directory cannot be read', cause);
    }
    const own = owned.get(this.dir);
    const mtime = st?.mtime.getTime();
    if (st === undefined || !st.isDirectory() || own === undefined || mtime === undefined) {
      this.lose('its lock directory is gone');
    }
    if (!sameMtime(mtime, own.current) && !sameMtime(mtime, own.pending)) {
      this.lose('another process took the lock over');
    }
    this.trustedUntil = Math.min(now + FENCE_TRUST_MS, mtime + LOCK_STALE_MS - STALE_MARGIN_MS);
  }

  /** proper-lockfile found the lock compromised (its refresh failed or was not ours). */
  compromised(error: Error): void {
    if (!this.failure) this.fail('its lock was compromised', error);
  }

  /** True once the lock is known lost (then it is never released by this process). */
  get isLost(): boolean {
    return this.failure !== undefined;
  }

  private fail(why: string, cause?: unknown): StoreError {
    this.failure = new StoreError(
      `lost the lock of ${this.what} (${why}: this process was probably stopped for over ${LOCK_STALE_MS / 1000} s and another fetch went ahead); nothing more was written, fetch again`,
      { cause },
    );
    lost.add(this.dir);
    return this.failure;
  }

  private lose(why: string, cause?: unknown): never {
    throw this.fail(why, cause);
  }
}

/**
 * Take the lock at `target` (a path whose `.lock` sibling is the lock directory) for `what`
 * (a view, for messages), waiting while another holder has it (about 7 hours at most). Returns
 * the {@link ViewLock} to check before writes, and `release`, which frees it unless it was lost.
 *
 * proper-lockfile's own `retries` option precomputes a table of every timeout (100,000 numbers
 * per call, copied once more per operation): a quarter of a second of CPU per fetch, so the
 * waiting is done here, one attempt at a time.
 */
export async function holdViewLock(
  target: string,
  what: string,
): Promise<{ lock: ViewLock; release(): Promise<void> }> {
  const lockfile = await properLockfile();
  const dir = `${target}.lock`;
  let held: HeldLock | undefined;
  const onCompromised = (error: Error) => held?.compromised(error);
  let pause = LOCK_PAUSE.first;
  let unlock: () => Promise<void>;
  let stale = false;
  for (let attempt = 1; ; attempt++) {
    // A lock there and not refreshed for the stale time is taken over by this attempt.
    const prior = lstatOrUndefined(dir);
    stale = prior !== undefined && Date.now() - prior.mtimeMs > LOCK_STALE_MS;
    try {
      unlock = await lockfile.lock(target, {
        realpath: false,
        stale: LOCK_STALE_MS,
        update: LOCK_UPDATE_MS,
        retries: 0,
        fs: lockFs,
        onCompromised,
      });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ELOCKED' || attempt >= LOCK_ATTEMPTS) {
        throw error;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(LOCK_PAUSE.most, pause * LOCK_PAUSE.factor);
  }
  // The mtime proper-lockfile left on the directory it just made is the first token.
  lost.delete(dir);
  owned.set(dir, { current: fs.lstatSync(dir).mtime.getTime(), pending: undefined });
  const lock = new HeldLock(dir, what, stale);
  held = lock;
  return {
    lock,
    async release() {
      owned.delete(dir);
      if (!lock.isLost) await unlock().catch(() => {});
    },
  };
}
