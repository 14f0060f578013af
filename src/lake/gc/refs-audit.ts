/**
 * Every delta accounted for: what detects a log entry (or a whole set's log) deleted behind
 * provcat's back, the newest entry included.
 *
 * A set's log alone cannot tell that its newest entry is gone: entries 1..N-1 are gapless and
 * each follows the one before. But deltas are content-addressed and each names its set, its
 * number and its parent, and a log entry is only ever created *after* its delta was written
 * (refs.ts). So every delta in `.provcat/refs/deltas/` must be one of:
 *
 * - **in a chain**: the delta some set's entry N names (read and verified by refs-log.ts), or
 * - **a lost race**: a valid delta of a present set, for an entry number the log has
 *   (`number <= N`), whose parent is that set's entry `number - 1` (`null` for entry 1) — but
 *   entry `number` names another delta. That is what a writer leaves when another writer created
 *   the entry first (it then retries with the next number).
 *
 * Anything else fails closed ({@link ReferenceSetError}, nothing is planned or deleted):
 *
 * - a delta whose set has no log (`Missing`): the set's log folder was deleted;
 * - a delta numbered past the set's newest entry (`Missing`): entries were deleted from the end
 *   of the log — or a writer stopped (was killed) between writing its delta and creating its
 *   entry, which looks the same; rerunning that writer's add resolves it (its old delta is then a
 *   lost race);
 * - a delta whose parent is not the set's entry before it (`NonMonotonic`): a history that is
 *   not this log's;
 * - a key in the deltas folder that is not a delta (`Corrupt`), or a delta that does not verify
 *   (its hash, its form: refs-format.ts).
 *
 * What cannot be detected (docs/gc.md, "What an attacker with write access can do"): a newest
 * entry deleted **together with its delta** (the log is then exactly what it was before that
 * entry was written), a whole set deleted with all its deltas, and a deleted newest entry whose
 * number was then taken by a new entry (the old delta then looks like a lost race).
 *
 * The deltas folder is listed **before** the logs: a writer completes its delta before its
 * entry, so a write that starts and ends between the two listings is seen as a complete entry
 * (its delta is read through the log), never as a delta without an entry.
 *
 * @module
 */
import { ReferenceSetError } from './errors.js';
import { isDeltaId, REFS_DELTA_PREFIX, setHash } from './refs-format.js';
import { fullKey, type RefStage, readDelta } from './refs-log.js';

/**
 * The IDs of every delta in the stage's deltas folder (one listing). A key there that is not
 * `<64 hex>.json` is refused (`Corrupt`): nothing else belongs there.
 */
export async function listDeltaIds(stage: RefStage, signal?: AbortSignal): Promise<Set<string>> {
  const backend = await stage.backend();
  const prefix = fullKey(stage, REFS_DELTA_PREFIX);
  const ids = new Set<string>();
  for await (const info of backend.list(prefix, { signal })) {
    const name = info.key.slice(prefix.length);
    const id = name.endsWith('.json') ? name.slice(0, -'.json'.length) : '';
    if (!isDeltaId(id)) {
      throw new ReferenceSetError(
        'Corrupt',
        `${stage.uriOf(REFS_DELTA_PREFIX + name)} is in the reference deltas folder but is not a delta`,
      );
    }
    ids.add(id);
  }
  return ids;
}

/**
 * Check that every delta in `listed` (from {@link listDeltaIds}, taken before the logs were
 * read) is in a chain or a lost race (see the module comment). `chains` maps each present set's
 * log hash to the delta IDs of its entries 1..N, in order, as they were read and verified.
 * Throws {@link ReferenceSetError}; reads only the deltas that are in no chain.
 */
export async function checkEveryDelta(
  stage: RefStage,
  listed: ReadonlySet<string>,
  chains: ReadonlyMap<string, readonly string[]>,
  signal?: AbortSignal,
): Promise<void> {
  const inChains = new Set<string>();
  for (const chain of chains.values()) for (const id of chain) inChains.add(id);
  for (const id of listed) {
    if (inChains.has(id)) continue;
    signal?.throwIfAborted();
    let delta: Awaited<ReturnType<typeof readDelta>>;
    try {
      delta = await readDelta(stage, id, signal);
    } catch (error) {
      // Listed a moment ago and gone now: nothing of it can be missed.
      if (error instanceof ReferenceSetError && error.kind === 'Missing') continue;
      throw error;
    }
    const name = JSON.stringify(delta.name);
    const where = `reference delta ${stage.uriOf(`${REFS_DELTA_PREFIX}${id}.json`)}`;
    const chain = chains.get(setHash(delta.name));
    if (chain === undefined) {
      throw new ReferenceSetError(
        'Missing',
        `${where} is entry ${delta.number} of set ${name}, which has no log in the stage: its log was deleted (restore it, or delete the set's deltas to drop the set on purpose)`,
      );
    }
    if (delta.number > chain.length) {
      throw new ReferenceSetError(
        'Missing',
        `${where} is entry ${delta.number} of set ${name}, whose log ends at entry ${chain.length}: its newest entries were deleted, or a writer stopped between writing that delta and creating its entry (rerun that add, or restore the entry)`,
      );
    }
    const parent = delta.number === 1 ? null : (chain[delta.number - 2] as string);
    if (delta.parent !== parent) {
      throw new ReferenceSetError(
        'NonMonotonic',
        `${where} is entry ${delta.number} of set ${name} with parent ${delta.parent}, but the log's entry ${delta.number - 1} is ${parent}: it belongs to no history of this log`,
      );
    }
    // A writer that lost the race for this entry number: its add went into a later entry.
  }
}
