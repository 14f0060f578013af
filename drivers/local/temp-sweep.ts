/**
 * Removing what killed writers leave in the local store: temp files whose writer is gone (the
 * rule of `judgeTemp`, src/core/fs-atomic.ts). A key's directory is swept by the next write into
 * it; a key never written again (a commit object, named by its ID) by its folder: the first
 * write into a folder directory in a process also sweeps every object directory there that has
 * no version yet (an `o.` entry without index entries or a pending marker — only a killed first
 * write leaves one). One `readdir` of the folder per process; the object directories with
 * versions, where a later write of their key sweeps, are not opened.
 *
 * Best effort: a directory or a temp that cannot be read or removed is traced, never an error of
 * the write that sweeps.
 *
 * @module
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { isAbandonedTemp, judgeTemp } from '../../src/core/fs-atomic.js';
import { errorCode, type Trace } from './fs-errors.js';
import type { KeyPath } from './key-paths.js';
import { objectDirName, parseFolderEntry } from './layout.js';

/** Folder directories swept of killed first writes in this process (see the module comment). */
const sweptFolders = new Set<string>();

/**
 * Remove the temp files among `names` (the entries of `dir`) whose writers are gone: a process
 * of this machine that no longer runs, or a writer that has not touched its temp for an hour.
 */
export async function sweepTemps(dir: string, names: string[], trace: Trace): Promise<void> {
  for (const name of names) {
    const verdict = judgeTemp(name);
    if (verdict === undefined || verdict === 'live') continue;
    const file = path.join(dir, name);
    try {
      if (verdict === 'by-age') {
        const { mtimeMs } = await fs.stat(file);
        if (!isAbandonedTemp(name, mtimeMs)) continue;
      }
      await fs.rm(file, { force: true });
      trace(`removed the stale temp file ${file}`);
    } catch (error) {
      // Another writer may have renamed or removed it meanwhile; nothing depends on this.
      if (errorCode(error) !== 'ENOENT') trace(`cannot sweep ${file}: ${String(error)}`);
    }
  }
}

/**
 * Once per folder directory and process: remove the temps of gone writers from the object
 * directories of `where.folder` that hold no version (see the module comment).
 */
export async function sweepFolder(where: KeyPath, trace: Trace): Promise<void> {
  if (sweptFolders.has(where.folder)) return;
  sweptFolders.add(where.folder);
  let names: string[];
  try {
    names = await fs.readdir(where.folder);
  } catch (error) {
    trace(`cannot sweep the folder ${where.folder}: ${String(error)}`);
    return;
  }
  const written = new Set<string>([where.ref.ref]);
  const objects: string[] = [];
  for (const name of names) {
    const entry = parseFolderEntry(name);
    if (entry?.tag === 'o') objects.push(entry.ref);
    else if (entry?.tag === 'v' || entry?.tag === 'p') written.add(entry.ref);
  }
  for (const ref of objects) {
    if (written.has(ref)) continue;
    const dir = path.join(where.folder, objectDirName({ ref, hashed: ref.startsWith('h.') }));
    let inside: string[];
    try {
      inside = await fs.readdir(dir);
    } catch (error) {
      if (errorCode(error) !== 'ENOENT') trace(`cannot sweep ${dir}: ${String(error)}`);
      continue;
    }
    await sweepTemps(dir, inside, trace);
  }
}
