/**
 * The one canonical form of a path in garbage collection, and the matching rules on it.
 *
 * **Canonical form: the stage-relative key** — the object's key below the stage's prefix and
 * tenant (`ab/ab12…`, `data/live%25name.bin`), as a JavaScript string compared by its UTF-8
 * bytes ({@link compareUtf8}, the order S3 lists in). It is decoded exactly once, where it
 * enters: a location URI through the stage's containment check (`stage.contain`), a listing as
 * the store gives it, an inventory file per its declared key encoding. From then on it is only
 * ever carried inside JSON strings (reference deltas, the keep-set file, plan pages, sort runs):
 * never percent-encoded or decoded again, so `%25` stays `%25` through any number of exports and
 * imports (the bug a reviewed keep-set design shipped with: reparsing an already-canonical path
 * encoded `%` a second time, and a live object looked unreferenced).
 *
 * **Entries** of a reference set are canonical keys, or prefixes: a canonical key ending in `/`,
 * which covers every key that starts with it. {@link covers} is the rule; the matchers in
 * matcher.ts implement exactly it, and callers never re-derive it.
 *
 * **Reserved**: `.provcat/` at the top of the stage (reference sets, upload markers) is never a
 * candidate; a `.provcat` segment deeper down marks another stage nested in this one (a tenant),
 * whose whole folder is left alone.
 *
 * @module
 */
import { ObjectIntegrityError } from '../../core/errors.js';
import { compareUtf8 } from '../../core/keys.js';
import { segmentProblem } from '../../core/uri.js';
import type { DataLocation } from '../data-location.js';

export { compareUtf8 };

/** The reserved folder at the top of every stage. */
export const RESERVED_PREFIX = '.provcat/';
const RESERVED_SEGMENT = '.provcat';

/** True when a stage-relative key lies in the stage's reserved `.provcat/` folder. */
export function isReservedKey(key: string): boolean {
  return key === RESERVED_SEGMENT || key.startsWith(RESERVED_PREFIX);
}

/**
 * The folder of a stage nested in this one that `key` lies in (`acme/` for
 * `acme/.provcat/refs/…`), when `key` has a `.provcat` segment below the top; else `undefined`.
 */
export function nestedStageOf(key: string): string | undefined {
  if (!key.includes(`/${RESERVED_SEGMENT}`)) return undefined;
  const segments = key.split('/');
  for (let i = 1; i < segments.length; i++) {
    if (segments[i] === RESERVED_SEGMENT) return `${segments.slice(0, i).join('/')}/`;
  }
  return undefined;
}

/** True when `entry` is a prefix entry (ends in `/`). */
export function isPrefixEntry(entry: string): boolean {
  return entry.endsWith('/');
}

/**
 * The matching rule, the only one: a prefix entry covers every key starting with it (the key
 * equal to it included); any other entry covers exactly the equal key.
 */
export function covers(entry: string, key: string): boolean {
  return isPrefixEntry(entry) ? key.startsWith(entry) : entry === key;
}

/**
 * Why `entry` is not a canonical reference entry (a key or a prefix, stage-relative), or
 * `undefined` when it is: non-empty; every segment non-empty, not `.`/`..`, no control
 * character, no lone surrogate; not in the reserved `.provcat/` folder.
 */
export function entryProblem(entry: string): string | undefined {
  if (typeof entry !== 'string' || entry === '') return 'empty';
  if (entry.startsWith('/')) return 'starts with /';
  const body = isPrefixEntry(entry) ? entry.slice(0, -1) : entry;
  for (const segment of body.split('/')) {
    const problem = segmentProblem(segment);
    if (problem) return problem;
  }
  if (isReservedKey(entry) || entry === RESERVED_PREFIX) return `under ${RESERVED_PREFIX}`;
  return undefined;
}

/** Why `key` is not a canonical object key (an entry that is not a prefix), or `undefined`. */
export function keyProblem(key: string): string | undefined {
  if (typeof key === 'string' && isPrefixEntry(key)) return 'ends with /';
  return entryProblem(key);
}

/** What {@link entryOfLocation} needs of a stage. */
export interface Containment {
  /** The stage-relative key of a location inside the stage; `OutsideStage` otherwise. */
  contain(uri: string): string;
}

/**
 * The canonical entry of a location given to `addReferences`: a DataLocation (its `uri`), a
 * location URI (an exact object), or a location URI ending in `/` (a prefix). Decoded once,
 * by the stage's containment check: anything outside the stage, the stage itself, or a URI
 * the check refuses is `ObjectIntegrityError('OutsideStage')`; an entry in the reserved folder
 * is refused the same way (nothing there is ever collected).
 */
export function entryOfLocation(stage: Containment, location: string | DataLocation): string {
  const uri = typeof location === 'string' ? location : location.uri;
  const prefix = typeof uri === 'string' && uri.endsWith('/');
  const key = stage.contain(prefix ? uri.slice(0, -1) : uri);
  const entry = prefix ? `${key}/` : key;
  const problem = entryProblem(entry);
  if (problem) {
    // The containment check already refused every malformed URI; what is left is the
    // reserved folder.
    throw new ObjectIntegrityError('OutsideStage', `${uri} cannot be a reference: ${problem}`, {
      uri,
    });
  }
  return entry;
}

/** Sort entries in canonical order and drop repeats (a new array). */
export function sortEntries(entries: Iterable<string>): string[] {
  return [...new Set(entries)].sort(compareUtf8);
}
