/**
 * The reference-set API of a stage: {@link addReferences}, {@link retireReferences},
 * {@link listReferenceSets} (also as `Stage` methods). The format is refs-format.ts; the log
 * reading and the create modes are refs-log.ts.
 *
 * Writing entry N follows the commit log's protocol (docs/commit-format.md#ordering): read the
 * newest entry (N - 1), write the delta object (content-addressed: writing it twice is
 * harmless), then create entry N only if absent. A writer that loses the race for N reads the
 * winner as its new parent and tries N + 1, so no write is lost and numbers stay gapless. An add
 * of more than {@link MAX_DELTA_ENTRIES} entries is written as several deltas, one log entry
 * each; a crash between them leaves the first part recorded and the call without an answer —
 * the caller retries it (within the horizon, docs/gc.md), and entries recorded twice are
 * harmless.
 *
 * A delta's time is never earlier than its parent's (a writer whose clock is behind takes its
 * parent's time), so readers can require times that never decrease.
 *
 * @module
 */

import { sha256Hex } from '../../core/digest.js';
import { StoreError } from '../../core/errors.js';
import type { DataLocation } from '../data-location.js';
import { ReferenceSetError } from './errors.js';
import { type Containment, compareUtf8, entryOfLocation, sortEntries } from './keys.js';
import { checkEveryDelta, listDeltaIds } from './refs-audit.js';
import {
  deltaBytes,
  deltaKey,
  entryKey,
  MAX_DELTA_ENTRIES,
  nameProblem,
  REFS_FORMAT,
  type ReferenceDelta,
  setHash,
} from './refs-format.js';
import {
  createEntry,
  fullKey,
  listSets,
  newestOf,
  noCreate,
  type RefStage,
  readSet,
  type SetDelta,
} from './refs-log.js';

/** A stage as the reference-set API needs it (a `Stage` is one). */
export type ReferenceStage = RefStage & Containment;

/** Options of the reference-set calls. */
export interface ReferenceOptions {
  signal?: AbortSignal | undefined;
}

/** What {@link addReferences} wrote. */
export interface AddReferencesResult {
  /** The set's name. */
  name: string;
  /** The set's newest entry number after the call. */
  number: number;
  /** How many distinct entries the call recorded (after canonicalization). */
  added: number;
}

/** What {@link retireReferences} wrote. */
export interface RetireReferencesResult {
  name: string;
  /** The number of the retiring entry. */
  number: number;
  retired: true;
}

/** One reference set as {@link listReferenceSets} reports it. */
export interface ReferenceSetInfo {
  name: string;
  /** Its newest entry number. */
  number: number;
  /** How many entries its deltas add in all (an entry added twice counts twice). */
  entries: number;
  /** True once the set was retired: its entries no longer keep anything. */
  retired: boolean;
}

/** Give up after this many lost races in a row (another writer's progress each time). */
const MAX_RACES = 64;

function checkName(name: string): void {
  const problem = nameProblem(name);
  if (problem) throw new ReferenceSetError('Corrupt', `${JSON.stringify(name)}: ${problem}`);
}

/**
 * Write one delta after the newest entry of set `name` (see the module comment); returns the
 * new head. Refuses a retired set (`Retired`) and a store without create-if-absent.
 */
async function append(
  stage: ReferenceStage,
  name: string,
  make: (
    head: (SetDelta & { number: number }) | undefined,
  ) => Omit<ReferenceDelta, 'format' | 'name' | 'number' | 'parent' | 'time'>,
  signal: AbortSignal | undefined,
): Promise<SetDelta & { number: number }> {
  const backend = await stage.backend();
  const hash = setHash(name);
  const mode = await backend.createMode();
  if (mode === 'none') throw noCreate(stage.uriOf(entryKey(hash, 1)));
  for (let race = 0; race < MAX_RACES; race++) {
    const head = await newestOf(stage, hash, signal);
    if (head?.delta.retired) {
      throw new ReferenceSetError(
        'Retired',
        `reference set ${JSON.stringify(name)} was retired at entry ${head.number}; use a new name`,
      );
    }
    if (head && head.delta.name !== name) {
      throw new ReferenceSetError(
        'Corrupt',
        `the log of ${JSON.stringify(name)} holds another set`,
      );
    }
    const number = (head?.number ?? 0) + 1;
    const now = new Date().toISOString();
    const time = head && head.delta.time > now ? head.delta.time : now;
    const delta: ReferenceDelta = {
      format: REFS_FORMAT,
      name,
      number,
      parent: head?.id ?? null,
      time,
      ...make(head),
    };
    const bytes = deltaBytes(delta);
    const id = sha256Hex(bytes);
    await backend.put(fullKey(stage, deltaKey(id)), bytes, {
      signal,
      contentType: 'application/json',
    });
    const rel = entryKey(hash, number);
    if (
      await createEntry(
        backend,
        mode,
        fullKey(stage, rel),
        Buffer.from(id),
        stage.uriOf(rel),
        signal,
      )
    ) {
      return { id, delta, number };
    }
  }
  throw new StoreError(
    `reference set ${JSON.stringify(name)}: lost the race for its next entry ${MAX_RACES} times in a row`,
  );
}

/**
 * Record that set `name` references `locations`: DataLocations, location URIs, or location
 * URIs ending in `/` (prefixes: everything below). Each is turned into its canonical entry by
 * the stage's containment check first — anything outside the stage is
 * `ObjectIntegrityError('OutsideStage')` and nothing is written. The set is created by its first
 * add; an add of no locations to a set that exists writes nothing. Entries are sorted and
 * deduplicated, written as one delta per {@link MAX_DELTA_ENTRIES}. Resolves once every delta
 * is in the log: from then on no GC plan made afterwards deletes what they cover.
 */
export async function addReferences(
  stage: ReferenceStage,
  name: string,
  locations: Iterable<string | DataLocation>,
  options: ReferenceOptions = {},
): Promise<AddReferencesResult> {
  checkName(name);
  const entries = sortEntries([...locations].map((l) => entryOfLocation(stage, l)));
  const chunks: string[][] = [];
  for (let i = 0; i < entries.length; i += MAX_DELTA_ENTRIES) {
    chunks.push(entries.slice(i, i + MAX_DELTA_ENTRIES));
  }
  if (chunks.length === 0) {
    const head = await newestOf(stage, setHash(name), options.signal);
    if (head) return { name, number: head.number, added: 0 };
    chunks.push([]);
  }
  let number = 0;
  for (const add of chunks) {
    const head = await append(stage, name, () => ({ add, retired: false }), options.signal);
    number = head.number;
  }
  return { name, number, added: entries.length };
}

/**
 * Retire set `name` as a whole: a final entry after which its entries keep nothing and no
 * entry may follow. `ReferenceSetError('Missing')` when the set does not exist;
 * retiring a retired set returns its retiring entry and writes nothing.
 */
export async function retireReferences(
  stage: ReferenceStage,
  name: string,
  options: ReferenceOptions = {},
): Promise<RetireReferencesResult> {
  checkName(name);
  const head = await newestOf(stage, setHash(name), options.signal);
  if (!head) {
    throw new ReferenceSetError('Missing', `no reference set ${JSON.stringify(name)} in the stage`);
  }
  if (head.delta.retired) return { name, number: head.number, retired: true };
  try {
    const written = await append(stage, name, () => ({ add: [], retired: true }), options.signal);
    return { name, number: written.number, retired: true };
  } catch (error) {
    // Another writer retired it first: that is the outcome asked for.
    if (error instanceof ReferenceSetError && error.kind === 'Retired') {
      const now = await newestOf(stage, setHash(name), options.signal);
      if (now?.delta.retired) return { name, number: now.number, retired: true };
    }
    throw error;
  }
}

/**
 * Every reference set of the stage, sorted by name (UTF-8 bytes), each read whole and verified
 * as GC reads it, every delta accounted for (refs-audit.ts): any problem is a
 * {@link ReferenceSetError}, never a shorter list.
 */
export async function listReferenceSets(
  stage: ReferenceStage,
  options: ReferenceOptions = {},
): Promise<ReferenceSetInfo[]> {
  const deltaIds = await listDeltaIds(stage, options.signal);
  const sets = await listSets(stage, options.signal);
  const out: ReferenceSetInfo[] = [];
  const chains = new Map<string, string[]>();
  for (const set of sets.values()) {
    let info: ReferenceSetInfo | undefined;
    const chain: string[] = [];
    chains.set(set.hash, chain);
    for await (const { id, delta } of readSet(stage, set, options.signal)) {
      chain.push(id);
      info ??= { name: delta.name, number: 0, entries: 0, retired: false };
      info.number = delta.number;
      info.entries += delta.add.length;
      info.retired = delta.retired;
    }
    if (info) out.push(info);
  }
  await checkEveryDelta(stage, deltaIds, chains, options.signal);
  return out.sort((a, b) => compareUtf8(a.name, b.name));
}
