/**
 * The temporary folders of GC runs (a plan's sort runs and keep-set, an apply's keep-set, a
 * keep-set export's sort runs), named so that a later run can tell a killed run's folder from a
 * live one's — the rule every temp of provcat follows (src/core/fs-atomic.ts `judgeTemp`):
 *
 * `provcat-gc-<label>-<pid>-<host>-<random>` in the temp directory (`--tmp-dir`, default the OS
 * one). Each run removes its own folder when it ends; one killed (SIGKILL, a crash) cannot, so
 * every run first removes the folders of runs of this machine whose pid no longer runs. A live
 * run's folder stays however old it is; a folder of another machine sharing the directory is left
 * to that machine (this one cannot tell whether its run is alive).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { hostTag, isRunning } from '../../core/fs-atomic.js';

/** What a GC temp folder is for. */
export type WorkLabel = 'plan' | 'apply' | 'keep';

const NAME = /^provcat-gc-(plan|apply|keep)-(\d{1,10})-([0-9a-f]{8})-[0-9a-f]{8}$/;

/**
 * Remove from `dir` the GC temp folders of runs of this machine that are gone (see the module
 * comment); returns the folders removed. A missing `dir` has none.
 */
export async function sweepWorkDirs(dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    throw error;
  }
  const removed: string[] = [];
  for (const name of names) {
    const m = NAME.exec(name);
    if (m === null || m[3] !== hostTag() || isRunning(Number(m[2]))) continue;
    const folder = path.join(dir, name);
    const st = await lstat(folder).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    // Only a real folder (a link of that name is not followed, nor removed).
    if (st === undefined || !st.isDirectory()) continue;
    await rm(folder, { recursive: true, force: true });
    removed.push(folder);
  }
  return removed;
}

/**
 * Make a new GC temp folder for `label` in `base` (default the OS temp directory), after
 * sweeping the folders of killed runs there ({@link sweepWorkDirs}). The caller removes it.
 */
export async function makeWorkDir(base: string | undefined, label: WorkLabel): Promise<string> {
  const dir = base ?? tmpdir();
  await sweepWorkDirs(dir);
  const folder = path.join(
    dir,
    `provcat-gc-${label}-${process.pid}-${hostTag()}-${randomBytes(4).toString('hex')}`,
  );
  await mkdir(folder, { mode: 0o700 });
  return folder;
}
