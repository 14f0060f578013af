/**
 * The local folders provcat keeps its own files in — the cache, the embedded store's root — and
 * the refusal of a user's folder that overlaps one.
 *
 * A user's folder given to `fetch --to DIR` or `push DIR` is provcat's to write, delete or send
 * whole, so it must not hold provcat's own files: `fetch --to DIR --delete` would delete a cache
 * or store under DIR as files the fetched folder lacks, and a push of a folder holding the cache
 * would send the temp files the push itself writes there. Paths are compared as the disk resolves
 * them (links followed, through the nearest existing folder for a path not made yet).
 *
 * @module
 */
import { realpathSync } from 'node:fs';
import path from 'node:path';
import envPaths from 'env-paths';

/**
 * The default root of the embedded store (the `local://` driver's): `PROVCAT_LOCAL_ROOT` when
 * set and not empty, else env-paths' data directory for `provcat`. Always absolute. Here, not in
 * the driver, because every store keeps it apart from the folders it writes and deletes.
 */
export function defaultLocalRoot(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.PROVCAT_LOCAL_ROOT;
  return path.resolve(
    fromEnv !== undefined && fromEnv !== '' ? fromEnv : envPaths('provcat', { suffix: '' }).data,
  );
}

/** One of provcat's own local folders. */
export interface OwnFolder {
  /** Its path. */
  path: string;
  /** What it is, for messages: `provcat's cache`, `the embedded store`. */
  what: string;
}

/** `p` as the disk resolves it, through its nearest existing ancestor. */
function resolved(p: string): string {
  const full = path.resolve(p);
  const rest: string[] = [];
  for (let at = full; ; at = path.dirname(at)) {
    try {
      return path.join(realpathSync(at), ...rest.reverse());
    } catch {
      if (path.dirname(at) === at) return full;
      rest.push(path.basename(at));
    }
  }
}

/** Whether `inner` is `outer` or lies below it (both resolved). */
function within(inner: string, outer: string): boolean {
  const rel = path.relative(outer, inner);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

/** How `dir` overlaps `own` (`is`, `holds`, `is inside`), or `undefined` when apart. */
export function overlap(dir: string, own: string): 'is' | 'holds' | 'is inside' | undefined {
  const a = resolved(dir);
  const b = resolved(own);
  if (a === b) return 'is';
  if (within(b, a)) return 'holds';
  if (within(a, b)) return 'is inside';
  return undefined;
}

/**
 * The first of `owned` that `dir` overlaps in one of the ways in `refused`, with how, for the
 * caller's refusal; `undefined` when none.
 */
export function overlapping(
  dir: string,
  owned: readonly OwnFolder[],
  refused: readonly ('is' | 'holds' | 'is inside')[],
): { folder: OwnFolder; how: 'is' | 'holds' | 'is inside' } | undefined {
  for (const folder of owned) {
    const how = overlap(dir, folder.path);
    if (how !== undefined && refused.includes(how)) return { folder, how };
  }
  return undefined;
}
