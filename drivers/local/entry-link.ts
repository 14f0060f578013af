/**
 * Name-only entries of the local store (listing index entries and pending markers, `./layout.ts`)
 * made as hard links where the file system allows.
 *
 * Only such an entry's name counts, never its contents. An empty file costs an inode; a hard
 * link of a file that exists already (the version an index entry names, the batch marker a
 * batch's pending marker stands for) costs only the directory entry. Inode allocation is the
 * dearest step of a small write on ext4 (docs/performance.md, "Inodes per file"), and a push of
 * many small files made three inodes per file for entries like these. Where hard links are not
 * allowed (EPERM, EXDEV, EMLINK, ENOTSUP, ENOSYS) the entry is an empty file, as before.
 *
 * @module
 */
import { linkSync, writeFileSync } from 'node:fs';
import { errorCode } from './fs-errors.js';

/** Errors of `link` that mean "no hard link here", not "no entry": make an empty file instead. */
const NO_LINK = new Set(['EPERM', 'EXDEV', 'EMLINK', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS']);

/**
 * Create the name-only entry `entry`, as a hard link of `target` (which must exist) where the
 * file system allows, else as an empty file. True when this call created it, false when an
 * entry of that name existed already; other errors are thrown.
 */
export function linkEntrySync(target: string, entry: string): boolean {
  try {
    linkSync(target, entry);
    return true;
  } catch (error) {
    const code = errorCode(error);
    if (code === 'EEXIST') return false;
    if (code === undefined || !NO_LINK.has(code)) throw error;
  }
  try {
    writeFileSync(entry, '', { flag: 'wx' });
    return true;
  } catch (error) {
    if (errorCode(error) === 'EEXIST') return false;
    throw error;
  }
}
