/**
 * The one routine for writing a file (or making a directory) the user named: `provcat cat -o
 * FILE`, `gc keep-set --out FILE`, `gc plan --out DIR`, and every later `--out`/`--to`. Use it at
 * every such call site; nothing else should open a user-named output path.
 *
 * A file's bytes go to a temp file in the target's own directory (so the rename is atomic: same
 * file system), which is fsynced and renamed over the target only once the writer succeeded;
 * otherwise it is removed and the target is untouched. A rename replaces whatever name it is
 * given, so the target is checked first, without following links: only a missing name or a
 * regular file is replaced. A device (`/dev/null`, `/dev/full`), a FIFO, a socket, a directory or
 * a symlink is refused with a usage error (exit 2) before anything is created: writing "through"
 * them is not what a rename does, and replacing them with a regular file breaks whatever relied
 * on them. A target whose folder does not exist, or has a file where a folder should be, is a
 * usage error too (not a raw `ENOENT`/`ENOTDIR`). `-` means stdout and is the caller's to handle
 * ({@link isStdout}).
 *
 * An output *directory* ({@link checkOutputDirectory}) is a missing name or a real directory —
 * never a file, a device, a FIFO or a symlink.
 *
 * @module
 */
import {
  closeSync,
  constants as fsc,
  fsyncSync,
  lstatSync,
  openSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
import path from 'node:path';
import { InvalidArgument } from './errors.js';
import { fsyncDir, tempPathFor } from './fs-atomic.js';

/** True for the target that means stdout: `-`. */
export function isStdout(target: string): boolean {
  return target === '-';
}

/** What a file-system entry is, for messages; `undefined` for a regular file. */
function kindOf(st: ReturnType<typeof lstatSync> & object): string | undefined {
  if (st.isFile()) return undefined;
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/** What is wrong with the folder of `full` (an absolute path), or `undefined`. */
function folderProblem(full: string): string | undefined {
  const folder = path.dirname(full);
  let st: ReturnType<typeof statSync>;
  try {
    // Followed: a link to a folder is fine as a folder (only the last name is never followed).
    st = statSync(folder, { throwIfNoEntry: false });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOTDIR') throw error;
    st = undefined;
  }
  if (st === undefined) {
    return `in ${folder}, which does not exist (or has a file where a folder should be)`;
  }
  if (!st.isDirectory()) return `in ${folder}, which is a file where a folder should be`;
  return undefined;
}

/**
 * Why `target` may not be written as an output file, or `undefined` when it may: it must be a
 * missing name or a regular file (links not followed), in a folder that exists. Creates nothing.
 */
export function outputFileProblem(target: string): string | undefined {
  const full = path.resolve(target);
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(full, { throwIfNoEntry: false });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOTDIR') return folderProblem(full);
    throw error;
  }
  if (st === undefined) return folderProblem(full);
  return kindOf(st);
}

/**
 * Throw a {@link InvalidArgument} (exit status 2) unless `target` may be written by {@link writeOutputFile} (see
 * {@link outputFileProblem}). `option` names the option in the message (`-o`, `--out`); `-`
 * (stdout) is mentioned only for `-o`. Links are not followed. Creates nothing.
 */
export function checkOutputTarget(target: string, option = '-o'): void {
  const problem = outputFileProblem(target);
  if (problem !== undefined) {
    const stdout = option === '-o' ? ', or - for stdout' : '';
    throw new InvalidArgument(
      `${option} ${target} is ${problem}: ${option} takes a new or regular file (replaced atomically)${stdout}`,
    );
  }
}

/**
 * Throw a {@link InvalidArgument} (exit status 2) unless `dir` may be used as an output directory: a missing name
 * (to be made) or a real directory, not a symlink, a file, a device or a FIFO. Whether it is
 * empty is the caller's rule. Creates nothing.
 */
export function checkOutputDirectory(dir: string, option = '--out'): void {
  const full = path.resolve(dir);
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(full, { throwIfNoEntry: false });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOTDIR') throw error;
    throw new InvalidArgument(
      `${option} ${dir} has a file where a folder should be: ${option} takes a new or empty directory`,
    );
  }
  if (st === undefined || st.isDirectory()) return;
  const kind = st.isFile() ? 'a file' : kindOf(st);
  throw new InvalidArgument(
    `${option} ${dir} is ${kind}: ${option} takes a new or empty directory`,
  );
}

/** An output file being written ({@link openOutputFile}): a temp beside the target. */
export interface OutputFile {
  /** The target, absolute. */
  readonly path: string;
  /** The descriptor of the temp file (mode 0644, opened `O_EXCL | O_NOFOLLOW`). */
  readonly fd: number;
  /**
   * fsync and close the temp, check the target again, rename the temp over it and fsync the
   * directory. On failure the temp is removed and the target untouched.
   */
  commit(): Promise<void>;
  /** Close and remove the temp; the target is untouched. */
  abort(): void;
}

/**
 * Start writing `target` complete-or-not-at-all: check it ({@link checkOutputTarget}; a refused
 * target creates nothing), then open a new temp beside it. The caller writes to `fd` and then
 * calls `commit` (or `abort`).
 */
export function openOutputFile(target: string, option = '-o'): OutputFile {
  checkOutputTarget(target, option);
  const full = path.resolve(target);
  const temp = tempPathFor(full);
  const fd = openSync(temp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o644);
  let open = true;
  const discard = () => {
    if (open) closeSync(fd);
    open = false;
    rmSync(temp, { force: true });
  };
  return {
    path: full,
    fd,
    async commit() {
      try {
        fsyncSync(fd);
        open = false;
        closeSync(fd);
        // The target may have changed while the bytes were written (a long transfer).
        checkOutputTarget(target, option);
        renameSync(temp, full);
      } catch (error) {
        discard();
        throw error;
      }
      await fsyncDir(path.dirname(full));
    },
    abort: discard,
  };
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
  option = '-o',
): Promise<void> {
  const out = openOutputFile(target, option);
  try {
    await write(out.fd);
  } catch (error) {
    out.abort();
    throw error;
  }
  await out.commit();
}
