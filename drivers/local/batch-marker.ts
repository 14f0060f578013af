/**
 * Batch markers of the local store, and the recovery under a dead one (the power-loss argument is
 * in `./layout.ts`, "Batched durability").
 *
 * A batch (`./batch.ts`) writes `<root>/.batches/<host tag>-<pid>-<start ms>-<rand>.batch`
 * (JSON: bucket, prefix, pid, host, start), fsyncs it and the `.batches` directory, and only
 * then writes its first version; it removes its stage (`<marker>.stage/`, where fresh keys'
 * first versions are written before they are renamed into the bucket) and then the marker after
 * its one sync pass. A marker is
 * **dead** when its writer can no longer finish: a process of this machine and boot (same host
 * tag, src/core/fs-atomic.ts `hostTag`) that no longer runs, or a marker of an earlier boot of
 * this machine (same host name, another tag: every power loss is followed by a boot). A marker
 * of another machine sharing the root is dead once untouched for an hour, as temps are.
 *
 * Every store instance runs {@link recoverBatches} once before its first read or write. Under a
 * dead marker, every object directory below the batch's prefix is checked: each version from
 * the batch's start on whose file does not hold the size and MD5 its name states is removed
 * (the one case where a version file is ever removed), then the folder's listing index of that
 * key is made to match its versions exactly; the changed directories are fsynced, then the
 * marker removed. Recovery is idempotent, and safe beside live writers and recoverers: a version
 * appears only by the `rename` of a complete temp and an index entry only after its version, so
 * reading the folder before the object directory never mistakes a live writer's entry for a
 * stale one, and a whole version always passes the check.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import { ABANDONED_TEMP_AGE_MS, hostTag, isRunning } from '../../src/core/fs-atomic.js';
import { syncDir } from './dir-sync.js';
import { errorCode, fsError, type Trace } from './fs-errors.js';
import { listStart } from './key-paths.js';
import { indexName, objectDirName, parseFolderEntry, type VersionFile } from './layout.js';
import { sweepTemps } from './temp-sweep.js';
import { sortVersions, versionNames } from './versions.js';

/** The directory of batch markers, inside the root (no bucket can be named so). */
export const BATCHES_DIR = '.batches';

/** What a marker file holds. */
export interface BatchMarker {
  bucket: string;
  prefix: string;
  pid: number;
  /** The host name (a marker of an earlier boot of this machine has it, with another tag). */
  host: string;
  /** The host tag of the writer (machine, boot, PID namespace). */
  tag: string;
  /** When the batch started, ms since the epoch: every version it writes has ticks from there on. */
  start: number;
}

const MARKER_NAME = /^([0-9a-f]{8})-(\d{1,10})-(\d{13,16})-[0-9a-f]{8}\.batch$/;

/** The file name of a marker. */
export function markerName(marker: BatchMarker, rand: string): string {
  return `${marker.tag}-${marker.pid}-${marker.start}-${rand}.batch`;
}

/**
 * Write a marker durably (the file, then the `.batches` directory, both fsynced) and return its
 * path. Nothing of the batch may be written before this resolves.
 */
export async function writeMarker(
  root: string,
  marker: BatchMarker,
  rand: string,
): Promise<string> {
  const dir = path.join(root, BATCHES_DIR);
  const file = path.join(dir, markerName(marker, rand));
  try {
    await fs.mkdir(dir, { recursive: true });
    const handle = await fs.open(file, 'wx');
    try {
      await handle.writeFile(JSON.stringify(marker));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await syncDir(dir, `local batch marker ${file}`);
    await syncDir(root, `local root ${root}`);
  } catch (error) {
    throw fsError(error, `cannot start a batch of puts in ${root}`);
  }
  return file;
}

/**
 * What a batch's stage directory is called: its marker's path plus this. The stage holds the
 * directories of fresh keys while their first version is written (`./publish.ts`
 * `publishFresh`); nothing in it is ever read.
 */
export const STAGE_SUFFIX = '.stage';

/**
 * Remove the stage of the batch whose marker is `marker` (what is left in it: versions staged by
 * a batch that died before publishing them). Before its marker, so no stage outlives one.
 */
export async function removeStage(marker: string): Promise<void> {
  try {
    await fs.rm(`${marker}${STAGE_SUFFIX}`, { recursive: true, force: true });
  } catch (error) {
    throw fsError(error, `cannot remove the stage of the batch of puts ${marker}`);
  }
}

/** Remove a marker once its batch is durable, and make the removal durable. */
export async function removeMarker(root: string, file: string): Promise<void> {
  try {
    await fs.rm(file, { force: true });
    await syncDir(path.join(root, BATCHES_DIR), `local batch marker ${file}`);
  } catch (error) {
    throw fsError(error, `cannot finish the batch of puts ${file}`);
  }
}

/** Whether the marker named `name` (last modified at `mtimeMs`) is dead (module comment). */
async function isDead(dir: string, name: string, now: number): Promise<boolean> {
  const m = MARKER_NAME.exec(name);
  if (m === null) return false;
  if (m[1] === hostTag()) return !isRunning(Number(m[2]));
  const marker = await readMarker(path.join(dir, name));
  if (marker !== undefined && marker.host === hostname()) return true; // an earlier boot
  try {
    const { mtimeMs } = await fs.stat(path.join(dir, name));
    return now - mtimeMs > ABANDONED_TEMP_AGE_MS;
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return false; // recovered meanwhile
    throw error;
  }
}

async function readMarker(file: string): Promise<BatchMarker | undefined> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return undefined;
    throw error;
  }
  try {
    const m = JSON.parse(text) as Partial<BatchMarker>;
    if (
      typeof m.bucket === 'string' &&
      typeof m.prefix === 'string' &&
      typeof m.start === 'number' &&
      typeof m.host === 'string'
    ) {
      return m as BatchMarker;
    }
  } catch {
    // A marker torn by a power loss while it was written: its batch wrote nothing yet.
  }
  return undefined;
}

/**
 * Recover every dead batch of the store at `root` (see the module comment); a live one is left
 * alone. Resolves once each dead marker's repairs are durable and the marker is gone.
 */
export async function recoverBatches(root: string, trace: Trace): Promise<void> {
  const dir = path.join(root, BATCHES_DIR);
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return;
    throw fsError(error, `cannot read the batch markers of ${root}`);
  }
  const now = Date.now();
  for (const name of names) {
    try {
      if (!(await isDead(dir, name, now))) continue;
      const file = path.join(dir, name);
      const marker = await readMarker(file);
      if (marker !== undefined) {
        trace(`recovering the dead batch ${name} (local://${marker.bucket}/${marker.prefix})`);
        await repairBatch(root, marker, trace);
      } else trace(`removing the empty batch marker ${name}`);
      await removeStage(file);
      await removeMarker(root, file);
    } catch (error) {
      throw fsError(error, `cannot recover the batch of puts ${path.join(dir, name)}`);
    }
  }
}

/** Check and repair what the dead batch `marker` may have written (see the module comment). */
async function repairBatch(root: string, marker: BatchMarker, trace: Trace): Promise<void> {
  const start = listStart(root, marker.bucket, marker.prefix);
  if (start === undefined) return;
  await repairFolder(start.dir, marker.start * 1000, trace);
}

async function repairFolder(folder: string, fromTicks: number, trace: Trace): Promise<void> {
  let names: string[];
  try {
    names = await fs.readdir(folder);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return;
    throw error;
  }
  // The folder is read before its object directories: see the module comment.
  const index = new Map<string, Set<string>>();
  const objects: string[] = [];
  const folders: string[] = [];
  for (const name of names) {
    const entry = parseFolderEntry(name);
    if (entry?.tag === 'v') {
      const set = index.get(entry.ref) ?? new Set<string>();
      set.add(entry.version.name);
      index.set(entry.ref, set);
    } else if (entry?.tag === 'o') objects.push(entry.ref);
    else if (entry?.tag === 'd') folders.push(name);
  }
  let changed = false;
  const seen = new Set<string>();
  for (const ref of objects) {
    seen.add(ref);
    const dir = path.join(folder, objectDirName({ ref, hashed: ref.startsWith('h.') }));
    const raw = await versionNames(dir, dir);
    await sweepTemps(dir, raw, trace);
    const kept: VersionFile[] = [];
    let removed = false;
    for (const v of sortVersions(raw)) {
      if (v.ticks >= fromTicks && v.size !== null && !(await isWhole(path.join(dir, v.name), v))) {
        trace(`removing the torn version ${path.join(dir, v.name)} of a dead batch`);
        await fs.rm(path.join(dir, v.name), { force: true });
        removed = true;
      } else kept.push(v);
    }
    if (removed) await syncDir(dir, dir);
    const indexed = index.get(ref) ?? new Set<string>();
    const want = new Set(kept.map((v) => v.name));
    for (const name of want) {
      if (indexed.has(name)) continue;
      await fs.writeFile(path.join(folder, indexName({ ref, hashed: false }, name)), '', {
        flag: 'w',
      });
      changed = true;
    }
    for (const name of indexed) {
      if (want.has(name)) continue;
      await fs.rm(path.join(folder, indexName({ ref, hashed: false }, name)), { force: true });
      changed = true;
    }
  }
  // Index entries of an object directory a power loss took (never created, or lost).
  for (const [ref, indexed] of index) {
    if (seen.has(ref)) continue;
    for (const name of indexed) {
      await fs.rm(path.join(folder, indexName({ ref, hashed: false }, name)), { force: true });
      changed = true;
    }
  }
  if (changed) await syncDir(folder, folder);
  for (const name of folders) await repairFolder(path.join(folder, name), fromTicks, trace);
}

/** True when the file holds the size and (when its name states one) the MD5 its name states. */
async function isWhole(file: string, v: VersionFile): Promise<boolean> {
  try {
    const { size } = await fs.stat(file);
    if (size !== v.size) return false;
    if (v.md5 === undefined) return true;
    const hash = createHash('md5');
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    return hash.digest('hex') === v.md5;
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return true; // gone already: nothing to remove
    throw error;
  }
}
