/**
 * The numbered, create-only log: what a folder's commit log (commits/log.ts) and a reference-set
 * log (lake/gc/refs-log.ts) both are (docs/commit-format.md, docs/gc.md).
 *
 * - **Keys**: entry N of a log under `prefix` is `prefix + (10^15 - N)`, zero-padded to 16
 *   digits ({@link logName}). Names count down, so an ascending listing gives the newest entry
 *   first: "the newest entry" is the first key of one short listing ({@link newestListed}).
 * - **Entries**: each holds one 64-hex ID (of a commit or a delta; {@link entryId}), and is
 *   created only if absent ({@link createOnlyIfAbsent}): two writers never both take one number.
 * - **Oldest version wins**: on a versioned store that ignores the create condition, a writer
 *   writes plainly and the key's *oldest* version is the one that counts, for the writer and for
 *   every reader ({@link oldestVersions}); a loser's newer version is never read.
 * - **Gapless**: a reader takes entries 1..N or refuses the log ({@link firstMissing},
 *   {@link follows}); nothing is skipped.
 *
 * What differs between the two logs is passed in: the storage (an object store's primitives or
 * a stage's backend), how a writer of the oldest-version-wins mode tells it won, and the errors.
 *
 * @module
 */
import type { CreateMode, ObjectInfo, VersionRecord } from '../contract/primitives.js';
import { Exists } from '../core/errors.js';

/** Log entries are named `10^15 - N`, so N runs from 1 to 10^15 - 1. */
export const LOG_BASE = 1_000_000_000_000_000;

/** Largest entry number a log can hold. */
export const MAX_LOG_NUMBER = LOG_BASE - 1;

/** Largest log entry a reader accepts (an entry holds a 64-hex ID). */
export const MAX_ENTRY_BYTES = 1024;

/** The name of log entry N: `10^15 - N`, zero-padded to 16 digits (newest sorts first). */
export function logName(number: number): string {
  if (!Number.isSafeInteger(number) || number < 1 || number > MAX_LOG_NUMBER) {
    throw new RangeError(`a commit number is an integer in 1..${MAX_LOG_NUMBER}, not ${number}`);
  }
  return String(LOG_BASE - number).padStart(16, '0');
}

/** The entry number a key of the log under `prefix` names, or `undefined` for another key. */
export function numberOfLogKey(prefix: string, key: string): number | undefined {
  if (!key.startsWith(prefix)) return undefined;
  const name = key.slice(prefix.length);
  if (!/^[0-9]{16}$/.test(name)) return undefined;
  const n = LOG_BASE - Number(name);
  return n >= 1 && n <= MAX_LOG_NUMBER ? n : undefined;
}

const HEX64 = /^[0-9a-f]{64}$/;

/** The ID an entry's bytes hold (exactly 64 lowercase hex), or `undefined` when they hold none. */
export function entryId(bytes: Uint8Array): string | undefined {
  const id = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  return HEX64.test(id) ? id : undefined;
}

/**
 * The newest entry of a log from its ascending listing: the first key that `numberOf` names an
 * entry (other keys are passed over). Stops reading the listing there.
 */
export async function newestListed(
  listing: AsyncIterable<{ key: string }>,
  numberOf: (key: string) => number | undefined,
): Promise<{ key: string; number: number } | undefined> {
  for await (const { key } of listing) {
    const number = numberOf(key);
    if (number !== undefined) return { key, number };
  }
  return undefined;
}

/**
 * The oldest version that is not a delete marker of every key in a version listing that gives
 * each key's versions newest first (the `_history` order), in key order; only `exactKey`'s when
 * given. The last version seen of a key is its oldest.
 */
export async function oldestVersions(
  history: AsyncIterable<VersionRecord>,
  exactKey?: string,
): Promise<VersionRecord[]> {
  const byKey = new Map<string, VersionRecord>();
  for await (const record of history) {
    if (exactKey !== undefined && record.key !== exactKey) continue;
    if (record.size === null) continue;
    byKey.set(record.key, record);
  }
  return [...byKey.values()];
}

/**
 * The first entry number missing from a log whose listed numbers are `ascending`, or
 * `undefined` when they are exactly 1..N (a gapless log).
 */
export function firstMissing(ascending: readonly number[]): number | undefined {
  for (let i = 0; i < ascending.length; i++) {
    if (ascending[i] !== i + 1) return i + 1;
  }
  return undefined;
}

/** True when entry `number` directly follows `older` (`undefined`: it is the first, entry 1). */
export function follows(number: number, older: number | undefined): boolean {
  return older === undefined ? number === 1 : older === number - 1;
}

/** What {@link createOnlyIfAbsent} needs of the storage a log lives on. */
export interface CreateOnlyTarget {
  /** Write `bytes` only if no object has `key`; `Exists` when one has (mode `atomic`). */
  create(key: string, bytes: Uint8Array, signal?: AbortSignal): Promise<unknown>;
  /** Write `bytes` plainly (mode `oldest-version-wins`). */
  put(key: string, bytes: Uint8Array, signal?: AbortSignal): Promise<ObjectInfo>;
  /**
   * After this writer's plain write (`written`), whether it is the one that counts: the key's
   * oldest version decides (by version ID, or by bytes where equal bytes mean the same entry).
   */
  oldestWins(
    key: string,
    bytes: Uint8Array,
    written: ObjectInfo,
    signal?: AbortSignal,
  ): Promise<boolean>;
  /** The error of a store that cannot create only-if-absent (mode `none`); nothing is written. */
  refuse(key: string): Error;
}

/**
 * Create `key` holding `bytes` only if absent, in the store's create `mode`: `true` when this
 * write is the one that counts, `false` when another got there first. `atomic` uses the store's
 * conditional write; `oldest-version-wins` a plain write, then `target.oldestWins`; `none` throws
 * `target.refuse` before writing anything.
 */
export async function createOnlyIfAbsent(
  target: CreateOnlyTarget,
  mode: CreateMode,
  key: string,
  bytes: Uint8Array,
  signal?: AbortSignal,
): Promise<boolean> {
  if (mode === 'atomic') {
    try {
      await target.create(key, bytes, signal);
      return true;
    } catch (error) {
      if (error instanceof Exists) return false;
      throw error;
    }
  }
  if (mode === 'oldest-version-wins') {
    const written = await target.put(key, bytes, signal);
    return target.oldestWins(key, bytes, written, signal);
  }
  throw target.refuse(key);
}
