/**
 * Writing a file the user named on the command line (`provcat cat -o FILE`).
 *
 * The bytes go to a temp file in the target's own directory (so the rename is atomic: same file
 * system), which is fsynced and renamed over the target only once the writer succeeded;
 * otherwise it is removed and the target is untouched. A rename replaces whatever name it is
 * given, so the target is checked first, without following links: only a missing name or a
 * regular file is replaced. A device (`/dev/null`, `/dev/full`), a FIFO, a socket, a directory or
 * a symlink is refused with a usage error (exit 2) before anything is created: writing "through"
 * them is not what a rename does, and replacing them with a regular file breaks whatever relied
 * on them. `-` means stdout and is the caller's to handle ({@link isStdout}).
 *
 * @module
 */
import { closeSync, constants as fsc, lstatSync, openSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fsyncDir, tempPathFor } from '../fs-atomic.js';
import { UsageError } from './command.js';

/** True for the target that means stdout: `-`. */
export function isStdout(target: string): boolean {
  return target === '-';
}

/** What is at `full` (an absolute path), for the usage error; `undefined` when it may be written. */
function problemWith(full: string): string | undefined {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(full, { throwIfNoEntry: false });
  } catch (error) {
    // ENOTDIR: a component of the path is a file; the open reports it.
    if ((error as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw error;
  }
  if (st === undefined || st.isFile()) return undefined;
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/**
 * Throw a {@link UsageError} unless `target` may be written by {@link writeOutputFile}: it does
 * not exist, or it is a regular file. Links are not followed. Creates nothing.
 */
export function checkOutputTarget(target: string): void {
  const problem = problemWith(path.resolve(target));
  if (problem !== undefined) {
    throw new UsageError(
      `-o ${target} is ${problem}: -o takes a new or regular file (replaced atomically), or - for stdout`,
    );
  }
}

/**
 * Write `target` (a path; not `-`) with `write`, complete or not at all.
 *
 * Guarantees:
 * - The target is checked first ({@link checkOutputTarget}); a refused one creates nothing.
 * - `write` gets the descriptor of a new temp file beside the target (mode 0644, opened with
 *   `O_EXCL | O_NOFOLLOW`) and must write and fsync it. When it resolves, the temp is renamed
 *   over the target (checked again right before) and the directory fsynced; when it rejects,
 *   the temp is removed, the target is untouched and the error is rethrown.
 */
export async function writeOutputFile(
  target: string,
  write: (fd: number) => Promise<void>,
): Promise<void> {
  checkOutputTarget(target);
  const full = path.resolve(target);
  const temp = tempPathFor(full);
  const fd = openSync(temp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o644);
  let open = true;
  try {
    await write(fd);
    open = false;
    closeSync(fd);
    // The target may have changed while the bytes were written (a long transfer).
    checkOutputTarget(target);
    renameSync(temp, full);
  } catch (error) {
    if (open) closeSync(fd);
    rmSync(temp, { force: true });
    throw error;
  }
  await fsyncDir(path.dirname(full));
}
