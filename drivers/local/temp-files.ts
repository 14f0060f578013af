/**
 * The local store's temp files: how they are named, and when one is a dead writer's leftover.
 *
 * A write streams or copies its bytes into `.tmp-<pid>-<host>-<rand>` in the key's directory
 * and renames it into a version (see `./layout.ts`); a writer killed before the rename leaves
 * the temp behind, sometimes hundreds of megabytes. Every later write into that directory (a
 * put, create, copy or delete of the key) removes the temps of writers that are gone:
 *
 * - A temp named by a process of this machine (same `<host>`: the host name, the boot and the
 *   PID namespace) is removed when that PID is not running (`kill(pid, 0)` fails with `ESRCH`).
 *   A running PID (`EPERM` counts: it exists) keeps its temp however old, so a writer that was
 *   only stopped (SIGSTOP, a suspended laptop) never loses its temp. A PID reused by another
 *   process keeps a dead writer's temp until that process ends too.
 * - Any other temp (another machine sharing the root over a network disk, another container, an
 *   older provcat's `.tmp-<pid>-<rand>`) is removed once unmodified for {@link STALE_TEMP_MS}:
 *   a live writer modifies its temp all the time (the kernel's copy too), so an hour without a
 *   change is a dead one.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import os from 'node:os';
import { debuglog } from 'node:util';
import { sha256Hex } from '../../src/digest.js';

const debug = debuglog('provcat:local');

/** The prefix every temp file of the store starts with. */
export const TEMP_PREFIX = '.tmp-';

/** Age (since its last modification) after which a temp this machine cannot judge is removed. */
export const STALE_TEMP_MS = 60 * 60 * 1000;

const TEMP_NAME = /^\.tmp-(\d{1,10})-([0-9a-f]{8})-[0-9a-f]{12}$/;

let hostTagValue: string | undefined;

/**
 * 8 hex digits naming this machine, boot and PID namespace: PIDs are only comparable between
 * processes that share all three. Read once per process (Linux adds its boot ID and PID
 * namespace; elsewhere the host name alone).
 */
export function hostTag(): string {
  hostTagValue ??= sha256Hex(
    [
      os.hostname(),
      linuxId(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8')),
      linuxId(() => readlinkSync('/proc/self/ns/pid')),
    ].join('\0'),
  ).slice(0, 8);
  return hostTagValue;
}

function linuxId(read: () => string): string {
  if (process.platform !== 'linux') return '';
  try {
    return read().trim();
  } catch (error) {
    // Not readable here (a restricted /proc): the host name still separates machines, as on
    // other platforms.
    debug('cannot read a machine identity for temp names: %s', String(error));
    return '';
  }
}

/** A fresh temp file name for this process (see the module comment). */
export function tempName(): string {
  return `${TEMP_PREFIX}${process.pid}-${hostTag()}-${randomBytes(6).toString('hex')}`;
}

/** What {@link judgeTemp} decides about a temp file. */
export type TempVerdict =
  /** Its writer is alive (or this process): keep it. */
  | 'live'
  /** Its writer is a process of this machine that is gone: remove it. */
  | 'dead'
  /** Not this machine's, or not our name: remove it once older than {@link STALE_TEMP_MS}. */
  | 'by-age';

/**
 * Whose temp `name` is, and whether that writer still runs. `undefined` when `name` is not a
 * temp file at all. Makes at most one `kill(pid, 0)`, and no file-system call.
 */
export function judgeTemp(name: string): TempVerdict | undefined {
  if (!name.startsWith(TEMP_PREFIX)) return undefined;
  const m = TEMP_NAME.exec(name);
  if (m === null || m[2] !== hostTag()) return 'by-age';
  const pid = Number(m[1]);
  if (pid === process.pid) return 'live';
  return isRunning(pid) ? 'live' : 'dead';
}

/** True when a process with this PID exists (signal 0 only checks; EPERM means it exists). */
export function isRunning(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
