/**
 * The second half of every local write: making a written temp (or a new delete marker) the
 * key's next version, under the key's writer lock (the protocol is in `./layout.ts`).
 *
 * The lock is a lock directory per key (proper-lockfile: `mkdir` is atomic; a lock left by a
 * crashed process goes stale after 10 s), held for a few metadata calls, never while bytes are
 * copied. It makes version IDs grow in the order writes finish, across processes, and makes
 * "create only if absent" (check "no current object", then publish) atomic: exactly one of
 * several racing creators wins. A version becomes visible only by `rename`, so a reader never
 * sees a partial object; the key's directory and its folder are fsynced before a write returns
 * (by an fsync that started after the write's change, shared by concurrent writers: ./dir-sync.ts).
 *
 * @module
 */
import { mkdirSync, readdirSync, renameSync, rmdirSync, rmSync, unlinkSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import lockfile from 'proper-lockfile';
import { Exists, NotFound, StoreError } from '../../src/core/errors.js';
import { judgeTemp } from '../../src/core/fs-atomic.js';
import { syncDirShared } from './dir-sync.js';
import { linkEntrySync } from './entry-link.js';
import { errorCode, fsError, type Trace } from './fs-errors.js';
import type { KeyPath } from './key-paths.js';
import {
  indexName,
  nextVersionId,
  parseVersionFile,
  pendingName,
  type VersionFile,
  versionFileName,
} from './layout.js';
import { sweepFolder, sweepTemps } from './temp-sweep.js';
import { newestVersion, sortVersions, versionNames } from './versions.js';
import { removeTemp, type TempFile } from './write-temp.js';

/** How long a writer waits for a key's lock: longer than the 10 s after which a lock is stale. */
const LOCK_RETRIES = { retries: 80, factor: 1.2, minTimeout: 2, maxTimeout: 250, randomize: true };

/**
 * Publish `temp` as the key's next version under its lock; with `ifAbsent`, only when the key
 * has no current object (else `Exists`): `_create`'s one winner. On failure the temp is removed.
 */
export async function publishTemp(
  where: KeyPath,
  temp: TempFile,
  signal: AbortSignal | undefined,
  trace: Trace,
  ifAbsent = false,
): Promise<VersionFile> {
  try {
    return await locked(where, signal, trace, async () => {
      if (ifAbsent) {
        const newest = await newestVersion(where);
        if (newest !== undefined && newest.size !== null) {
          throw new Exists(`${where.uri} exists (version ${newest.versionId})`, { uri: where.uri });
        }
      }
      return publish(where, temp, trace);
    });
  } catch (error) {
    await removeTemp(temp.path, trace);
    throw error;
  }
}

/** Under the key's lock: a delete marker over its current object; `NotFound` when it has none. */
export async function publishMarker(
  where: KeyPath,
  signal: AbortSignal | undefined,
  trace: Trace,
): Promise<VersionFile> {
  return locked(where, signal, trace, async () => {
    const newest = await newestVersion(where);
    if (newest === undefined || newest.size === null) {
      throw new NotFound(`${where.uri} not found`, { uri: where.uri });
    }
    return publish(where, undefined, trace);
  });
}

/**
 * Under the key's lock: give the temp file (or, for `undefined`, a new delete marker) the next
 * version ID, make it visible, and index it in the folder (the protocol is in `./layout.ts`).
 */
async function publish(
  where: KeyPath,
  bytes: TempFile | undefined,
  trace: Trace,
): Promise<VersionFile> {
  const pending = path.join(where.folder, pendingName(where.ref));
  const leftover = !(await createEmpty(pending, where.uri));
  const names = await versionNames(where.dir, where.uri);
  await sweepTemps(where.dir, names, trace);
  await sweepFolder(where, trace);
  const versions = sortVersions(names);
  if (leftover) {
    // A writer died between publishing and indexing: complete the index first.
    trace(`repairing the listing index of ${where.uri}`);
    for (const v of versions) {
      const entry = path.join(where.folder, indexName(where.ref, v.name));
      try {
        linkEntrySync(path.join(where.dir, v.name), entry);
      } catch (error) {
        throw fsError(error, `cannot write ${where.uri}`, where.uri);
      }
    }
  }
  const versionId = nextVersionId(versions.at(-1));
  const name =
    bytes === undefined
      ? versionFileName(versionId, null)
      : versionFileName(versionId, bytes.size, bytes.md5);
  const file = path.join(where.dir, name);
  try {
    if (bytes === undefined) await fs.writeFile(file, '', { flag: 'wx' });
    else await fs.rename(bytes.path, file);
  } catch (error) {
    throw fsError(error, `cannot publish ${where.uri}`, where.uri);
  }
  await syncDirShared(where.dir, where.uri);
  try {
    // Synchronous: one `link`, cheaper than a trip through the thread pool.
    linkEntrySync(file, path.join(where.folder, indexName(where.ref, name)));
  } catch (error) {
    throw fsError(error, `cannot write ${where.uri}`, where.uri);
  }
  // Shared with the writers of the same folder publishing now (./dir-sync.ts).
  await syncDirShared(where.folder, where.uri);
  try {
    await fs.unlink(pending);
  } catch (error) {
    throw fsError(error, `cannot finish writing ${where.uri}`, where.uri);
  }
  return parseVersionFile(name) as VersionFile;
}

/**
 * A batch's publish (`./batch.ts`): {@link publish}'s protocol in synchronous calls and without
 * its fsyncs, under the same lock taken with one `mkdir` (proper-lockfile's lock is that same
 * directory, so the two exclude each other). The lock is what keeps version IDs growing in the
 * order writes finish across processes and keeps `_create`'s one winner; held for a handful of
 * metadata calls, it costs two system calls. `undefined`, with nothing done, when another writer
 * holds the lock: the caller then publishes through {@link publishTemp} (which waits for it and
 * fsyncs). The ID is at least `minMs` (the batch's start), so recovery finds every version of
 * the batch by its ID. The pending marker is a hard link of the batch's marker file `marker`
 * (`./entry-link.ts`). On failure the temp is removed.
 */
export function publishUnsynced(
  where: KeyPath,
  temp: TempFile,
  minMs: number,
  marker: string,
  trace: Trace,
): VersionFile | undefined {
  const lock = path.join(where.dir, '.lock');
  try {
    mkdirSync(lock);
  } catch (error) {
    if (errorCode(error) === 'EEXIST') return undefined;
    rmSync(temp.path, { force: true });
    throw fsError(error, `cannot lock ${where.uri} for writing`, where.uri);
  }
  try {
    const pending = path.join(where.folder, pendingName(where.ref));
    const leftover = !linkEntrySync(marker, pending);
    const names = readdirSync(where.dir);
    for (const n of names) {
      if (judgeTemp(n) !== 'dead') continue;
      rmSync(path.join(where.dir, n), { force: true });
      trace(`removed the stale temp file ${path.join(where.dir, n)}`);
    }
    const versions = sortVersions(names);
    if (leftover) {
      trace(`repairing the listing index of ${where.uri}`);
      for (const v of versions) {
        linkEntrySync(
          path.join(where.dir, v.name),
          path.join(where.folder, indexName(where.ref, v.name)),
        );
      }
    }
    const versionId = nextVersionId(versions.at(-1), Math.max(Date.now(), minMs));
    const name = versionFileName(versionId, temp.size, temp.md5);
    const file = path.join(where.dir, name);
    renameSync(temp.path, file);
    linkEntrySync(file, path.join(where.folder, indexName(where.ref, name)));
    unlinkSync(pending);
    return parseVersionFile(name) as VersionFile;
  } catch (error) {
    rmSync(temp.path, { force: true });
    throw fsError(error, `cannot publish ${where.uri}`, where.uri);
  } finally {
    try {
      rmdirSync(lock);
    } catch (error) {
      trace(`cannot release the lock of ${where.uri}: ${String(error)}`);
    }
  }
}

/**
 * A batch's publish of a key that has no object directory yet, with no lock: the version was
 * written, under its final name, into `stage` (a directory of the batch outside every bucket,
 * `./batch.ts`), and `stage` becomes the key's directory by one `rename`. A rename onto a path
 * that exists fails unless that path is an empty directory (which it replaces), so exactly one
 * of this and any other writer's first version of the key wins: a writer that made the key's
 * directory and put a temp or its lock in it makes the rename fail, and one that made it but
 * put nothing in it yet finds this version there once it locks (and numbers its own after it).
 * The pending marker (a hard link of the batch's marker file) is made before the rename and
 * removed after the index entry, as under the lock. Costs two inodes (the directory and the
 * version) where the locked protocol costs four.
 *
 * `undefined`, with `stage` and its version left as they were and the key untouched beyond a
 * pending marker that any later writer of the key completes, when the key's directory exists
 * by now or another writer holds the key's pending marker: the caller then publishes under the
 * lock. The version's ID is from `minMs` (the batch's start) on.
 */
export function publishFresh(
  where: KeyPath,
  stage: string,
  version: VersionFile,
  marker: string,
): VersionFile | undefined {
  const pending = path.join(where.folder, pendingName(where.ref));
  try {
    if (!linkEntrySync(marker, pending)) return undefined;
    try {
      renameSync(stage, where.dir);
    } catch (error) {
      const code = errorCode(error);
      if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR') return undefined;
      throw error;
    }
    linkEntrySync(
      path.join(where.dir, version.name),
      path.join(where.folder, indexName(where.ref, version.name)),
    );
    try {
      unlinkSync(pending);
    } catch (error) {
      // A writer that locked the key meanwhile found the marker, completed the index and removed it.
      if (errorCode(error) !== 'ENOENT') throw error;
    }
    return version;
  } catch (error) {
    throw fsError(error, `cannot publish ${where.uri}`, where.uri);
  }
}

/** Run `fn` holding the key's writer lock (see the module comment). */
async function locked<T>(
  where: KeyPath,
  signal: AbortSignal | undefined,
  trace: Trace,
  fn: () => Promise<T>,
): Promise<T> {
  signal?.throwIfAborted();
  let release: () => Promise<void>;
  try {
    release = await lockfile.lock(where.dir, {
      realpath: false,
      lockfilePath: path.join(where.dir, '.lock'),
      retries: LOCK_RETRIES,
      onCompromised: (error) => {
        // Version IDs stay unique (random part); only the order of racing writes may suffer.
        trace(`lock of ${where.uri} compromised: ${String(error)}`);
      },
    });
  } catch (error) {
    throw new StoreError(`cannot lock ${where.uri} for writing`, {
      uri: where.uri,
      cause: error,
    });
  }
  try {
    signal?.throwIfAborted();
    return await fn();
  } finally {
    try {
      await release();
    } catch (error) {
      // The write itself is done (or failed on its own); a lock left behind goes stale.
      trace(`cannot release the lock of ${where.uri}: ${String(error)}`);
    }
  }
}

/** Create an empty file if it does not exist: true when this call created it. */
async function createEmpty(file: string, uri: string): Promise<boolean> {
  try {
    await fs.writeFile(file, '', { flag: 'wx' });
    return true;
  } catch (error) {
    if (errorCode(error) === 'EEXIST') return false;
    throw fsError(error, `cannot write ${uri}`, uri);
  }
}
