/**
 * The on-store format of reference sets (`provcat.refs/1`): the delta objects, the log keys, and
 * strict validation on read. docs/gc.md is the user-facing statement of the same rules.
 *
 * A reference set is a named, append-only log, kept in the stage's reserved folder exactly as a
 * folder's commit log is kept (docs/commit-format.md):
 *
 * ```
 * .provcat/refs/log/<sha256 hex of the name>/<10^15 - N>   entry N: the 64-hex ID of a delta
 * .provcat/refs/deltas/<ID>.json                           a delta; ID = SHA-256 of its bytes
 * ```
 *
 * Entry N is created only if absent, in the stage's create mode; a delta is canonical JSON
 * (RFC 8785, as commits) whose ID is the SHA-256 of its bytes. One content has one ID, and a
 * reader re-hashes, re-serializes and re-validates every delta, so a changed byte, a reordered
 * entry or a foreign field is refused, never read as something smaller.
 *
 * A delta only adds (`add`): a set never shrinks entry by entry. The last entry of a set may
 * retire it as a whole (`retired: true`, `add: []`); nothing may follow it.
 *
 * @module
 */

import { sha256Hex } from '../../core/digest.js';
import { canonicalJson, parseCanonical } from '../../logs/canonical-json.js';
import {
  entryId,
  MAX_ENTRY_BYTES as LOG_MAX_ENTRY_BYTES,
  logName,
  MAX_LOG_NUMBER,
  numberOfLogKey,
} from '../../logs/create-only-log.js';
import { ReferenceSetError } from './errors.js';
import { compareUtf8, entryProblem } from './keys.js';

/** The `format` of every delta this version writes and reads. */
export const REFS_FORMAT = 'provcat.refs/1';

/** The folder of reference sets, stage-relative. */
export const REFS_PREFIX = '.provcat/refs/';
/** Where the logs are: one folder per set. */
export const REFS_LOG_PREFIX = `${REFS_PREFIX}log/`;
/** Where the deltas are. */
export const REFS_DELTA_PREFIX = `${REFS_PREFIX}deltas/`;

/** Most entries one delta may add; a larger add is written as several deltas. */
export const MAX_DELTA_ENTRIES = 10_000;
/** Largest delta a reader accepts (bytes). */
export const MAX_DELTA_BYTES = 16 * 1024 * 1024;
/** Largest log entry a reader accepts (a delta ID is 64 bytes). */
export const MAX_ENTRY_BYTES = LOG_MAX_ENTRY_BYTES;
/** Longest set name (UTF-8 bytes). */
export const MAX_NAME_BYTES = 1024;

/** One delta of a reference set: what entry `number` adds (or that it retires the set). */
export interface ReferenceDelta {
  format: typeof REFS_FORMAT;
  /** The set's name. */
  name: string;
  /** Its entry number in the set's log: 1, 2, ... */
  number: number;
  /** The ID of entry `number - 1`'s delta; `null` exactly for entry 1. */
  parent: string | null;
  /** When it was written (ISO 8601 UTC); never earlier than its parent's time. */
  time: string;
  /** Canonical entries (keys, or prefixes ending in `/`), sorted by UTF-8 bytes, no repeats. */
  add: string[];
  /** True for the entry that retires the set (its `add` is empty; it is the last entry). */
  retired: boolean;
}

const HEX64 = /^[0-9a-f]{64}$/;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const FIELDS = new Set(['add', 'format', 'name', 'number', 'parent', 'retired', 'time']);
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are refused
const CONTROL = /[\u0000-\u001f\u007f]/;

/** True when `id` has the form of a delta ID (64 lowercase hex). */
export function isDeltaId(id: string): boolean {
  return HEX64.test(id);
}

/** Why `name` cannot name a reference set, or `undefined`. */
export function nameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string' || name.trim() === '') return 'a set name is a non-empty string';
  if (CONTROL.test(name)) return 'a set name has no control characters';
  if (!(name as unknown as { isWellFormed(): boolean }).isWellFormed()) {
    return 'a set name has no lone UTF-16 surrogate';
  }
  if (Buffer.byteLength(name, 'utf8') > MAX_NAME_BYTES) {
    return `a set name has at most ${MAX_NAME_BYTES} UTF-8 bytes`;
  }
  return undefined;
}

/** The hash that names a set's log folder: SHA-256 hex of the name's UTF-8 bytes. */
export function setHash(name: string): string {
  return sha256Hex(name);
}

/** The log folder of a set (stage-relative). */
export function setLogPrefix(hash: string): string {
  return `${REFS_LOG_PREFIX}${hash}/`;
}

/** The key of entry `number` of the set with log hash `hash` (stage-relative). */
export function entryKey(hash: string, number: number): string {
  return setLogPrefix(hash) + logName(number);
}

/** The key of a delta (stage-relative). */
export function deltaKey(id: string): string {
  return `${REFS_DELTA_PREFIX}${id}.json`;
}

/**
 * A key below {@link REFS_LOG_PREFIX} as `(set hash, entry number)`, or `undefined` when it is
 * not one (readers refuse such keys: nothing else belongs there).
 */
export function parseEntryKey(relKey: string): { hash: string; number: number } | undefined {
  if (!relKey.startsWith(REFS_LOG_PREFIX)) return undefined;
  const rest = relKey.slice(REFS_LOG_PREFIX.length);
  const hash = rest.slice(0, 64);
  if (!HEX64.test(hash) || rest[64] !== '/') return undefined;
  const number = numberOfLogKey(setLogPrefix(hash), relKey);
  return number === undefined ? undefined : { hash, number };
}

/** Largest entry number a set can hold. */
export const MAX_ENTRY_NUMBER = MAX_LOG_NUMBER;

/** The canonical bytes of a delta. */
export function deltaBytes(delta: ReferenceDelta): Buffer {
  return Buffer.from(canonicalJson(delta), 'utf8');
}

function corrupt(id: string, why: string, cause?: unknown): ReferenceSetError {
  return new ReferenceSetError('Corrupt', `reference delta ${id}: ${why}`, { cause });
}

/**
 * Parse and validate delta `id` from its stored bytes: the SHA-256 of the bytes must be `id`
 * (`DigestMismatch`), the bytes UTF-8 JSON (`Corrupt`), the format known (`UnknownFormat`),
 * every field present and typed, nothing else (`Corrupt`), every entry canonical, the entries
 * sorted with no repeats and the bytes in canonical form (`NonCanonical`).
 */
export function parseDelta(bytes: Uint8Array, id: string): ReferenceDelta {
  if (bytes.byteLength > MAX_DELTA_BYTES) {
    throw new ReferenceSetError(
      'TooLarge',
      `reference delta ${id} is over ${MAX_DELTA_BYTES} bytes`,
    );
  }
  const actual = sha256Hex(bytes);
  if (actual !== id) {
    throw new ReferenceSetError(
      'DigestMismatch',
      `reference delta ${id} hashes to ${actual}: it is not the delta its log entry names`,
    );
  }
  const record = parseCanonical(bytes, {
    fail: (problem, why, cause) =>
      problem === 'not-canonical'
        ? new ReferenceSetError(
            'NonCanonical',
            `reference delta ${id} is not in canonical form (sorted members, no whitespace)`,
          )
        : corrupt(id, why, cause),
    validate: (value) => checkDeltaFields(value, id),
  });
  return record as unknown as ReferenceDelta;
}

/** The field checks of {@link parseDelta} (everything but the digest, size and canonical form). */
function checkDeltaFields(record: Record<string, unknown>, id: string): void {
  if (record.format !== REFS_FORMAT) {
    throw new ReferenceSetError(
      'UnknownFormat',
      `reference delta ${id} has format ${JSON.stringify(record.format)} (this reader knows ${REFS_FORMAT})`,
    );
  }
  for (const field of Object.keys(record)) {
    if (!FIELDS.has(field)) throw corrupt(id, `unknown field ${JSON.stringify(field)}`);
  }
  const { name, number, parent, time, add, retired } = record;
  const problem = nameProblem(name);
  if (problem) throw corrupt(id, problem);
  if (typeof number !== 'number' || !Number.isSafeInteger(number) || number < 1) {
    throw corrupt(id, 'number is not a positive integer');
  }
  if (number > MAX_ENTRY_NUMBER) throw corrupt(id, 'number is too large');
  if (parent !== null && (typeof parent !== 'string' || !isDeltaId(parent))) {
    throw corrupt(id, 'parent is neither null nor a delta ID');
  }
  if ((number === 1) !== (parent === null)) {
    throw corrupt(id, 'entry 1 and only entry 1 has no parent');
  }
  if (typeof time !== 'string' || !ISO_TIME.test(time) || Number.isNaN(Date.parse(time))) {
    throw corrupt(id, 'time is not an ISO 8601 UTC timestamp');
  }
  if (typeof retired !== 'boolean') throw corrupt(id, 'retired is not true or false');
  if (!Array.isArray(add)) throw corrupt(id, 'add is not an array');
  if (add.length > MAX_DELTA_ENTRIES) {
    throw new ReferenceSetError(
      'TooLarge',
      `reference delta ${id} adds ${add.length} entries, more than ${MAX_DELTA_ENTRIES}`,
    );
  }
  if (retired && add.length > 0) throw corrupt(id, 'a retiring entry adds nothing');
  let previous: string | undefined;
  for (const [i, entry] of add.entries()) {
    if (typeof entry !== 'string') throw corrupt(id, `add[${i}] is not a string`);
    const why = entryProblem(entry);
    if (why) throw corrupt(id, `add[${i}] ${JSON.stringify(entry)}: ${why}`);
    if (previous !== undefined && compareUtf8(previous, entry) >= 0) {
      throw new ReferenceSetError(
        'NonCanonical',
        `reference delta ${id}: add is not sorted by UTF-8 bytes (or repeats) at ${JSON.stringify(entry)}`,
      );
    }
    previous = entry;
  }
}

/** Parse a log entry's bytes: exactly a delta ID. */
export function parseEntry(bytes: Uint8Array, where: string): string {
  const id = entryId(bytes);
  if (id === undefined) {
    throw new ReferenceSetError('Corrupt', `log entry ${where} does not hold a delta ID`);
  }
  return id;
}

/**
 * Check that `delta` (read through entry `number` of the set with log hash `hash`) follows
 * `previous` (entry `number - 1`, `undefined` for entry 1): the same name, whose hash names the
 * folder; its own number; the previous delta's ID as parent; a time no earlier; and no entry
 * after a retiring one. `NonMonotonic` otherwise.
 */
export function checkFollows(
  delta: ReferenceDelta,
  id: string,
  hash: string,
  number: number,
  previous: { delta: ReferenceDelta; id: string } | undefined,
): void {
  const fail = (why: string) =>
    new ReferenceSetError(
      'NonMonotonic',
      `entry ${number} of reference set ${JSON.stringify(delta.name)} (delta ${id}): ${why}`,
    );
  if (setHash(delta.name) !== hash) {
    throw fail(`its name does not hash to the log folder ${hash}`);
  }
  if (delta.number !== number) throw fail(`the delta says it is entry ${delta.number}`);
  if (previous === undefined) {
    if (delta.parent !== null) throw fail('entry 1 names a parent');
    return;
  }
  if (previous.delta.name !== delta.name) throw fail('the previous entry is of another set');
  if (delta.parent !== previous.id) {
    throw fail(`its parent is ${delta.parent}, entry ${number - 1} is ${previous.id}`);
  }
  if (compareUtf8(delta.time, previous.delta.time) < 0) {
    throw fail(`its time ${delta.time} is before entry ${number - 1}'s ${previous.delta.time}`);
  }
  if (previous.delta.retired) throw fail(`entry ${number - 1} retired the set`);
}
