/**
 * `_history` for stores whose version listings have no delete markers (GCS generations, Azure
 * blob versions): there a deleted key is one whose versions are all noncurrent. provcat's
 * history says so the way S3 lists it — a delete marker (`size: null`, `current: true`) before
 * the key's versions — so pins, commits and `log` skip a deleted key on every store by the one
 * rule they already apply to S3's markers. Written once, so no driver guesses it differently.
 *
 * The input is the store's listing of versions in key order (UTF-8 bytes), each key's versions
 * together and in any order among themselves; each key's group is sorted newest first here. A
 * key that comes back after a later one is refused (fail closed): two groups of one key would
 * give two answers about what was current.
 *
 * @module
 */
import type { VersionRecord } from '../contract/primitives.js';
import { StoreError } from '../core/errors.js';
import { compareUtf8 } from '../core/keys.js';

/** One version as the store listed it (never a marker), with when it stopped being current. */
export interface ListedVersion extends VersionRecord {
  size: number;
  /** When it became noncurrent (GCS `timeDeleted`), if the store says. */
  deletedAt?: Date | undefined;
}

/**
 * Newer first, for version IDs that grow with time as numbers (GCS generations) or as
 * fixed-width text (Azure's timestamps): the longer ID first, then the later in text order.
 */
export function newerIdFirst(a: VersionRecord, b: VersionRecord): number {
  const [x, y] = [a.versionId, b.versionId];
  return y.length - x.length || (x < y ? 1 : x > y ? -1 : 0);
}

/**
 * The history records of a key-ordered listing (see the module comment): per key, a delete
 * marker when no version is current (ID `markerId(newest)`, time the newest one's `deletedAt`),
 * then the versions sorted by `newerFirst`. StoreError for a listing out of key order.
 */
export async function* historyOf(
  listing: AsyncIterable<ListedVersion>,
  newerFirst: (a: ListedVersion, b: ListedVersion) => number = newerIdFirst,
  markerId: (newest: ListedVersion) => string = (v) => `deleted@${v.versionId}`,
): AsyncIterable<VersionRecord> {
  let group: ListedVersion[] = [];
  for await (const version of listing) {
    const last = group[0]?.key;
    if (last !== undefined && last !== version.key) {
      if (compareUtf8(last, version.key) > 0) {
        throw new StoreError(
          `a version listing out of key order: ${JSON.stringify(version.key)} after ${JSON.stringify(last)}`,
        );
      }
      yield* keyHistory(group, newerFirst, markerId);
      group = [];
    }
    group.push(version);
  }
  if (group.length > 0) yield* keyHistory(group, newerFirst, markerId);
}

function* keyHistory(
  group: ListedVersion[],
  newerFirst: (a: ListedVersion, b: ListedVersion) => number,
  markerId: (newest: ListedVersion) => string,
): Iterable<VersionRecord> {
  group.sort(newerFirst);
  const newest = group[0] as ListedVersion;
  if (!group.some((v) => v.current)) {
    yield {
      key: newest.key,
      versionId: markerId(newest),
      size: null,
      current: true,
      lastModified: newest.deletedAt,
    };
  }
  for (const { deletedAt: _, ...record } of group) yield record;
}
