/**
 * {@link syncFileSystems}: one `sync -f` (Linux `syncfs`) over the file systems holding some
 * paths — the one sync pass of a batch of unsynced writes (the local store's batched puts, the
 * cache's grouped blob installs). Node has no `syncfs`; starting `sync` costs a few
 * milliseconds, against an fsync (a journal commit) per file. Where it cannot run (not Linux, no
 * `sync`, one without `-f`) the caller fsyncs each file itself.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { StoreError } from './errors.js';

/**
 * The fewest files a sync pass covers by `sync -f`. `syncfs` flushes the whole file system, so
 * it also waits for whatever other programs left dirty there: worth it against hundreds of
 * fsyncs, not against a few, so a smaller pass fsyncs its own files and costs only their writes.
 */
export const SYNCFS_MIN_FILES = 64;

let syncPath: string | null | undefined;

/** `/usr/bin/sync` or `/bin/sync` on Linux, else `null`. */
export function syncCommand(): string | null {
  if (syncPath === undefined) {
    syncPath =
      process.platform === 'linux'
        ? (['/usr/bin/sync', '/bin/sync'].find((p) => existsSync(p)) ?? null)
        : null;
  }
  return syncPath;
}

/**
 * Run `command -f paths…` (default {@link syncCommand}): true once every write made before the
 * call to the file systems of `paths` is durable; false when the command cannot run here (the
 * caller then fsyncs each file). A failure of the sync itself (an I/O error) is a `StoreError`.
 */
export async function syncFileSystems(
  paths: readonly string[],
  command: string | null = syncCommand(),
): Promise<boolean> {
  if (command === null) return false;
  const ended = await new Promise<{ code: number | null; error?: Error; stderr: string }>(
    (resolve) => {
      let stderr = '';
      const child = spawn(command, ['-f', ...paths], { stdio: ['ignore', 'ignore', 'pipe'] });
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (t: string) => {
        if (stderr.length < 4096) stderr += t;
      });
      child.once('error', (error) => resolve({ code: null, error, stderr }));
      child.once('close', (code) => resolve({ code, stderr }));
    },
  );
  if (ended.code === 0) return true;
  if (ended.error !== undefined || /invalid option|unrecognized option|usage/i.test(ended.stderr)) {
    return false;
  }
  throw new StoreError(
    `cannot make written files durable: ${command} -f ended with ${ended.code}: ${ended.stderr.trim()}`,
  );
}
