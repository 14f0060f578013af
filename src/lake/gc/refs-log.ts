/**
 * Reading and writing reference-set logs on a stage's storage (the {@link StageBackend} only, so
 * every driver's stage has the same logs).
 *
 * - Every log entry is read as the *oldest* version of its key (`getOldest`): with an atomic
 *   create there is only one; where a store ignores create-if-absent and writers are ordered by
 *   their oldest version (`oldest-version-wins`), a losing writer's newer version is never read.
 * - A set is read whole and checked link by link ({@link readSet}): entries 1..N all present
 *   (`Gap`), each delta hashed, parsed and canonical (refs-format.ts), each following the one
 *   before (`NonMonotonic`). Nothing is skipped: a reader gets every delta or an error.
 * - The *fingerprint* of the stage's references names the head of every set (its log hash, entry
 *   count and number, and the ID of its newest delta). Each delta names its parent's ID, so a
 *   head ID stands for its whole verified chain: equal fingerprints mean equal reference sets.
 *
 * @module
 */
import type { CreateMode, GetResult } from '../../contract/primitives.js';
import { sha256Hex } from '../../core/digest.js';
import { NotFound, StoreError } from '../../core/errors.js';
import { canonicalJson } from '../../logs/canonical-json.js';
import { createOnlyIfAbsent, firstMissing, newestListed } from '../../logs/create-only-log.js';
import { readWhole } from '../../logs/small-objects.js';
import type { StageBackend } from '../backend.js';
import { ReferenceSetError } from './errors.js';
import {
  checkFollows,
  deltaKey,
  entryKey,
  MAX_DELTA_BYTES,
  MAX_ENTRY_BYTES,
  parseDelta,
  parseEntry,
  parseEntryKey,
  REFS_LOG_PREFIX,
  type ReferenceDelta,
  setLogPrefix,
} from './refs-format.js';

/** What the log code needs of a stage (a `Stage` is one). */
export interface RefStage {
  /** The key prefix of the stage (prefix and tenant), `''` for none. */
  readonly keyPrefix: string;
  /** A stable, credential-free name of the stage's storage. */
  readonly identity: string;
  backend(): Promise<StageBackend>;
  /** The location URI of a stage-relative key (for messages). */
  uriOf(key: string): string;
}

/** The full key of a stage-relative key. */
export function fullKey(stage: RefStage, rel: string): string {
  return stage.keyPrefix === '' ? rel : `${stage.keyPrefix}/${rel}`;
}

/** The stage, for messages: its identity (`s3|endpoint|bucket|prefix`, `local|root|tenant`). */
export function stageText(stage: RefStage): string {
  return stage.identity;
}

/** Read a whole small body, at most `limit` bytes (`TooLarge` beyond). */
function readBody(result: GetResult, limit: number, where: string): Promise<Buffer> {
  return readWhole(result, limit, where, (message) => new ReferenceSetError('TooLarge', message));
}

/** One set as its log lists it. */
export interface LoggedSet {
  /** SHA-256 hex of the set's name: its log folder. */
  hash: string;
  /** The entry numbers listed, ascending. */
  numbers: number[];
}

/**
 * Every set whose log has at least one entry, by log hash, with the entry numbers listed
 * (ascending). A key in the log folder that is not an entry key is refused (`Corrupt`).
 */
export async function listSets(
  stage: RefStage,
  signal?: AbortSignal,
): Promise<Map<string, LoggedSet>> {
  const backend = await stage.backend();
  const prefix = fullKey(stage, REFS_LOG_PREFIX);
  const strip = stage.keyPrefix === '' ? 0 : stage.keyPrefix.length + 1;
  const sets = new Map<string, LoggedSet>();
  for await (const info of backend.list(prefix, { signal })) {
    const rel = info.key.slice(strip);
    const parsed = parseEntryKey(rel);
    if (!parsed) {
      throw new ReferenceSetError(
        'Corrupt',
        `${stage.uriOf(rel)} is in the reference-set log folder but is not a log entry`,
      );
    }
    let set = sets.get(parsed.hash);
    if (!set) {
      set = { hash: parsed.hash, numbers: [] };
      sets.set(parsed.hash, set);
    }
    set.numbers.push(parsed.number);
  }
  for (const set of sets.values()) set.numbers.sort((a, b) => a - b);
  return sets;
}

/** The delta ID entry `number` of set `hash` holds (its oldest version). */
export async function readEntry(
  stage: RefStage,
  hash: string,
  number: number,
  signal?: AbortSignal,
): Promise<string> {
  const backend = await stage.backend();
  const rel = entryKey(hash, number);
  const where = stage.uriOf(rel);
  let result: GetResult;
  try {
    result = await backend.getOldest(fullKey(stage, rel), { signal });
  } catch (error) {
    if (error instanceof NotFound) {
      throw new ReferenceSetError('Missing', `log entry ${where} is gone`, { cause: error });
    }
    throw error;
  }
  return parseEntry(await readBody(result, MAX_ENTRY_BYTES, where), where);
}

/** Delta `id`, verified (refs-format.ts `parseDelta`). `Missing` when it is not there. */
export async function readDelta(
  stage: RefStage,
  id: string,
  signal?: AbortSignal,
): Promise<ReferenceDelta> {
  const backend = await stage.backend();
  const rel = deltaKey(id);
  const where = stage.uriOf(rel);
  let result: GetResult;
  try {
    result = await backend.get(fullKey(stage, rel), { signal });
  } catch (error) {
    if (error instanceof NotFound) {
      throw new ReferenceSetError('Missing', `reference delta ${where} is gone`, { cause: error });
    }
    throw error;
  }
  return parseDelta(await readBody(result, MAX_DELTA_BYTES, where), id);
}

/** One verified delta of a set. */
export interface SetDelta {
  id: string;
  delta: ReferenceDelta;
}

/** How many entries {@link readSet} reads ahead. */
const READ_AHEAD = 8;

/**
 * Every delta of one set, in order, each verified and checked to follow the one before
 * (see the module comment). The listed numbers must be exactly 1..N (`Gap` otherwise). Reads
 * up to {@link READ_AHEAD} entries ahead; yields one delta at a time.
 */
export async function* readSet(
  stage: RefStage,
  set: LoggedSet,
  signal?: AbortSignal,
): AsyncGenerator<SetDelta> {
  const { hash, numbers } = set;
  const missing = firstMissing(numbers);
  if (missing !== undefined) {
    throw new ReferenceSetError(
      'Gap',
      `the log of reference set ${hash} has no entry ${missing} (entries ${numbers.slice(0, 3).join(', ')}${numbers.length > 3 ? ', …' : ''} are listed)`,
    );
  }
  const fetch = (number: number): Promise<SetDelta & { number: number }> => {
    const p = (async () => {
      const id = await readEntry(stage, hash, number, signal);
      return { id, delta: await readDelta(stage, id, signal), number };
    })();
    // Awaited below in order; a failure of one read ahead is reported when its turn comes.
    p.catch(() => undefined);
    return p;
  };
  const ahead: Promise<SetDelta & { number: number }>[] = [];
  let next = 1;
  let previous: SetDelta | undefined;
  const last = numbers.length;
  while (next <= last || ahead.length > 0) {
    while (next <= last && ahead.length < READ_AHEAD) ahead.push(fetch(next++));
    const { id, delta, number } = await (ahead.shift() as Promise<SetDelta & { number: number }>);
    checkFollows(delta, id, hash, number, previous);
    previous = { id, delta };
    yield previous;
  }
}

/** The head of one set, as the fingerprint names it. */
export interface SetHead {
  /** The log hash (SHA-256 hex of the name). */
  set: string;
  /** The newest entry's number (equal to the number of entries). */
  number: number;
  /** The newest entry's delta ID. */
  head: string;
}

/** The fingerprint of the stage's references: SHA-256 of the canonical list of set heads. */
export function fingerprintOf(heads: readonly SetHead[]): string {
  const sets = [...heads].sort((a, b) => (a.set < b.set ? -1 : a.set > b.set ? 1 : 0));
  return sha256Hex(canonicalJson({ format: 'provcat.refs-heads/1', sets }));
}

/**
 * The heads of every set, read without verifying the chains (one listing of the log folder and
 * one small read per set): what apply compares before each page. A set whose entries are not
 * exactly 1..N is a `Gap` here too.
 */
export async function readHeads(
  stage: RefStage,
  signal?: AbortSignal,
): Promise<{ fingerprint: string; heads: SetHead[] }> {
  const sets = await listSets(stage, signal);
  const heads: SetHead[] = [];
  for (const set of sets.values()) {
    const number = set.numbers.length;
    if (firstMissing(set.numbers) !== undefined) {
      throw new ReferenceSetError('Gap', `the log of reference set ${set.hash} has a gap`);
    }
    heads.push({ set: set.hash, number, head: await readEntry(stage, set.hash, number, signal) });
  }
  return { fingerprint: fingerprintOf(heads), heads };
}

/**
 * The newest entry of the set with log hash `hash` (its number, delta ID and delta), or
 * `undefined` when the set has none. One listing of the set's log (its first key is the newest),
 * one entry read, one delta read.
 */
export async function newestOf(
  stage: RefStage,
  hash: string,
  signal?: AbortSignal,
): Promise<(SetDelta & { number: number }) | undefined> {
  const backend = await stage.backend();
  const rel = setLogPrefix(hash);
  const strip = stage.keyPrefix === '' ? 0 : stage.keyPrefix.length + 1;
  const newest = await newestListed(backend.list(fullKey(stage, rel), { signal }), (key) => {
    const parsed = parseEntryKey(key.slice(strip));
    return parsed && parsed.hash === hash ? parsed.number : undefined;
  });
  if (newest === undefined) return undefined;
  const { number } = newest;
  const id = await readEntry(stage, hash, number, signal);
  const delta = await readDelta(stage, id, signal);
  if (delta.number !== number) {
    throw new ReferenceSetError(
      'NonMonotonic',
      `entry ${number} of reference set ${hash} names delta ${id}, which is entry ${delta.number}`,
    );
  }
  return { number, id, delta };
}

/**
 * Create `key` holding `bytes` only if absent, in the store's create mode: `true` when this
 * write is the one that counts (create-only-log.ts {@link createOnlyIfAbsent}). `atomic`: the
 * store's conditional write. `oldest-version-wins`: a plain write, then the key's oldest version
 * decides (equal bytes mean the entry names this delta, whoever wrote it). `none`: refused with a
 * StoreError before anything is written.
 */
export function createEntry(
  backend: StageBackend,
  mode: CreateMode,
  key: string,
  bytes: Uint8Array,
  where: string,
  signal?: AbortSignal,
): Promise<boolean> {
  return createOnlyIfAbsent(
    {
      create: (k, b, s) => backend.create(k, b, { signal: s }),
      put: (k, b, s) => backend.put(k, b, { signal: s }),
      async oldestWins(k, b, _written, s) {
        const oldest = await readBody(
          await backend.getOldest(k, { signal: s }),
          MAX_ENTRY_BYTES,
          where,
        );
        return Buffer.from(b).equals(oldest);
      },
      refuse: () => noCreate(where),
    },
    mode,
    key,
    bytes,
    signal,
  );
}

/** The StoreError of a store that cannot create only-if-absent. */
export function noCreate(where: string): StoreError {
  return new StoreError(
    `writing ${where} refused: the store ignores create-only-if-absent and keeps no versions to ` +
      'order writers by, so two writers could both take one entry number ' +
      '(see docs/commit-format.md#create-modes)',
  );
}
