/**
 * {@link syncDirShared}: the directory fsync of a publish, shared by the writers of one process
 * that change the same directory at the same time (group commit).
 *
 * A writer's rename (or new entry) is durable once an fsync of its directory that *started after
 * the change* has completed. So a writer arriving while a sync of its directory runs cannot use
 * that one (it may have started before the change): it joins the next sync, which starts as soon
 * as the running one ends and serves every writer that joined it meanwhile. N writers of one
 * folder that publish together cost two fsyncs instead of N, and each still returns only after
 * its own change is on disk; a failed sync fails every writer that waited on it.
 *
 * @module
 */
import fs from 'node:fs/promises';
import { debug, errorCode, fsError } from './fs-errors.js';

interface DirState {
  running: Promise<void> | undefined;
  next: Promise<void> | undefined;
}

/** The syncs in flight, per directory; a directory leaves the map when none is. */
const states = new Map<string, DirState>();

/**
 * Resolve once `dir` was fsynced by a sync that started after this call (see the module
 * comment); `sync` is the fsync itself (tests pass their own).
 */
export function syncDirShared(
  dir: string,
  uri: string,
  sync: (dir: string, uri: string) => Promise<void> = syncDir,
): Promise<void> {
  let state = states.get(dir);
  if (state === undefined) {
    state = { running: undefined, next: undefined };
    states.set(dir, state);
  }
  const running = state.running;
  if (running === undefined) return start(dir, state, uri, sync);
  if (state.next === undefined) {
    const s = state;
    const go = () => {
      s.next = undefined;
      return start(dir, s, uri, sync);
    };
    // The running sync's failure is its own waiters'; the next one runs regardless.
    s.next = running.then(go, go);
  }
  return state.next as Promise<void>;
}

function start(
  dir: string,
  state: DirState,
  uri: string,
  syncNow: (dir: string, uri: string) => Promise<void>,
): Promise<void> {
  const done = (): void => {
    if (state.running === sync) state.running = undefined;
    if (state.running === undefined && state.next === undefined) states.delete(dir);
  };
  const sync: Promise<void> = syncNow(dir, uri).then(done, (error: unknown) => {
    done();
    throw error;
  });
  state.running = sync;
  return sync;
}

/** fsync a directory so a rename in it survives a crash (where the platform allows it). */
export async function syncDir(dir: string, uri: string): Promise<void> {
  let handle: fs.FileHandle | undefined;
  try {
    handle = await fs.open(dir, 'r');
    await handle.sync();
  } catch (error) {
    const code = errorCode(error);
    // Some platforms and file systems cannot open or fsync a directory; the rename stands.
    if (code === 'EISDIR' || code === 'EINVAL' || code === 'EPERM' || code === 'ENOTSUP') {
      debug('cannot fsync directory %s: %s', dir, code);
    } else throw fsError(error, `cannot sync ${uri}`, uri);
  } finally {
    await handle?.close();
  }
}
