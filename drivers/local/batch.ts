/**
 * {@link LocalPutBatch}: the local store's {@link PutBatch}, puts whose durability is batched
 * (the crash argument is in `./layout.ts`, "Batched durability").
 *
 * A put into the store costs about 40 promised file-system calls, 3 of them fsyncs (the temp,
 * the key's directory, the folder's); `cp` makes about 5 synchronous calls per file and one
 * `sync` at the end. A batch makes the store's write protocol cheap the same way:
 *
 * 1. its first put writes a marker naming the batch (`./batch-marker.ts`) and fsyncs it;
 * 2. a put of a key that has no directory yet writes the version under its final name into a
 *    new directory of the batch's stage (`<marker>.stage/`) and renames that directory into the
 *    bucket (`./publish.ts` `publishFresh`: no lock, two inodes per key); any other put writes
 *    a temp with synchronous calls and publishes it under the key's lock by `publishUnsynced` —
 *    the same protocol (pending marker, rename, index entry), no fsync. A put that finds another
 *    writer of the key at work (its directory made meanwhile, its lock taken) falls back to the
 *    next of these, and at the end to the usual publish (waiting, fsynced). Pending markers and
 *    index entries are hard links (`./entry-link.ts`): inode allocation is the dearest call;
 * 3. `close` runs one `sync -f` over the file systems written (Node has no `syncfs`), falling
 *    back to fsyncs of every file and directory written, 16 at a time, then removes the stage
 *    and the marker. The paths for that fallback are kept only until {@link LISTED_MAX} files:
 *    then one `sync -f` checks that it runs here, and if it does, the batch keeps no path, so
 *    its memory does not grow with the files it writes.
 *
 * A source above {@link BATCH_MAX} bytes (or from a file of that size) is put by the store's
 * `_put`, durable on its own: a large file gains nothing from batching, and a recovery reads
 * every version of a dead batch to check it.
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  lstatSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import fs from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import type { ObjectInfo, PutBatch, PutOptions } from '../../src/contract/primitives.js';
import { forEachLimit } from '../../src/core/concurrency.js';
import { StoreError } from '../../src/core/errors.js';
import { hostTag, tempName } from '../../src/core/fs-atomic.js';
import { SYNCFS_MIN_FILES, syncCommand, syncFileSystems } from '../../src/core/sync-fs.js';
import {
  type BatchMarker,
  removeMarker,
  removeStage,
  STAGE_SUFFIX,
  writeMarker,
} from './batch-marker.js';
import { syncDir } from './dir-sync.js';
import { debug, errorCode, fsError, type Trace } from './fs-errors.js';
import { bucketDir, type KeyPath, keyPath, makeKeyDir } from './key-paths.js';
import { nextVersionId, parseVersionFile, type VersionFile, versionFileName } from './layout.js';
import { publishFresh, publishTemp, publishUnsynced } from './publish.js';
import { infoOf } from './versions.js';
import type { TempFile } from './write-temp.js';

/** The largest source a batch writes itself (larger ones go through `_put`, fsynced). */
export const BATCH_MAX = 4 * 1024 * 1024;

/** fsyncs in flight in the fallback of {@link syncWritten}. */
const SYNC_FALLBACK_CONCURRENCY = 16;

/** What a batch needs of its store. */
export interface BatchStore {
  readonly root: string;
  /** Resolves once the store's recovery of dead batches ran (before its first write). */
  ready(): Promise<void>;
  /** The store's own put, durable on its own (for large sources and a contended key). */
  put(key: string, source: Uint8Array | string, options: PutOptions): Promise<ObjectInfo>;
  readonly trace: Trace;
}

/** Files a batch lists for its fsync fallback before it checks that `sync -f` runs here. */
export const LISTED_MAX = 65_536;

/** What a batch has written, for its sync pass. */
export interface Written {
  /** Every version file written (none kept once `syncfs`). */
  files: string[];
  /**
   * Every directory a put changed or created, with its ancestors up to the bucket (none kept
   * once `syncfs`).
   */
  dirs: Set<string>;
  /** One path per file system written (by `st_dev`), for `sync -f`. */
  devices: Map<number, string>;
  /**
   * `sync -f` ran here during the batch, so its pass is that and keeps no list (a batch of
   * millions of files would hold every path): see {@link LISTED_MAX}.
   */
  syncfs?: true;
}

/** The local store's batch of puts below one prefix (see the module comment). */
export class LocalPutBatch implements PutBatch {
  #marker: Promise<string> | undefined;
  #closing: Promise<void> | undefined;
  readonly #start = Date.now();
  readonly #inFlight = new Set<Promise<unknown>>();
  #written: Written = { files: [], dirs: new Set(), devices: new Map() };
  /** Versions written. */
  #count = 0;
  /** Folders made (and their ancestors), so each is made once. */
  readonly #folders = new Set<string>();
  /** The check that `sync -f` runs here, once {@link LISTED_MAX} files are listed. */
  #probe: Promise<void> | undefined;
  readonly #bucketDir: string;
  /** Whether the stage directory (`<marker>.stage/`) was made. */
  #staged = false;

  constructor(
    private readonly store: BatchStore,
    private readonly bucket: string,
    private readonly prefix: string,
    /** Files listed before the check that `sync -f` runs ({@link LISTED_MAX}; less in tests). */
    private readonly listedMax = LISTED_MAX,
  ) {
    if (prefix !== '' && !prefix.endsWith('/')) {
      throw new RangeError(`a batch's prefix is '' or ends in '/', not ${JSON.stringify(prefix)}`);
    }
    this.#bucketDir = bucketDir(store.root, bucket); // a bad bucket name: UriError, now
  }

  put(key: string, source: Uint8Array | string, options: PutOptions = {}): Promise<ObjectInfo> {
    if (this.#closing !== undefined) {
      return Promise.reject(new RangeError(`put of ${key} after the batch was closed`));
    }
    if (!key.startsWith(this.prefix)) {
      return Promise.reject(
        new RangeError(`${key} is outside the batch's prefix ${JSON.stringify(this.prefix)}`),
      );
    }
    const done = this.#put(key, source, options);
    this.#inFlight.add(done);
    const forget = () => this.#inFlight.delete(done);
    done.then(forget, forget);
    return done;
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  /** Paths kept for the fsync fallback of the sync pass (files and directories). */
  get listed(): number {
    return this.#written.files.length + this.#written.dirs.size;
  }

  async #put(key: string, source: Uint8Array | string, options: PutOptions): Promise<ObjectInfo> {
    options.signal?.throwIfAborted();
    await this.store.ready();
    const where = keyPath(this.store.root, this.bucket, key, 'write');
    let bytes: Uint8Array;
    if (typeof source === 'string') {
      let size: number;
      try {
        size = statSync(source).size;
      } catch (error) {
        throw fsError(error, `cannot read the source file ${source}`);
      }
      if (size > BATCH_MAX) return this.store.put(key, source, options);
      try {
        bytes = readFileSync(source);
      } catch (error) {
        throw fsError(error, `cannot read the source file ${source}`);
      }
    } else bytes = source;
    if (bytes.length > BATCH_MAX) return this.store.put(key, bytes, options);
    if (options.size !== undefined && options.size !== bytes.length) {
      throw new StoreError(
        `the source of ${where.uri} gave ${bytes.length} bytes, not the ${options.size} announced`,
        { uri: where.uri },
      );
    }
    this.#marker ??= this.#writeMarker();
    const marker = await this.#marker;
    options.signal?.throwIfAborted();
    const md5 = createHash('md5').update(bytes).digest('hex');
    const fresh = where.hashed.length === 0 && !exists(where.dir);
    this.#makeDirs(where, fresh);
    let temp: TempFile | undefined;
    if (fresh) {
      const staged = this.#stage(marker, where, bytes, md5);
      const published = publishFresh(where, staged.dir, staged.version, marker);
      if (published !== undefined) return this.#done(key, where, published, bytes.length, options);
      // Another writer of the key came first: the staged version becomes a temp of the key.
      temp = this.#unstage(where, staged);
    } else {
      if (where.hashed.length > 0) await makeKeyDir(where);
      temp = { path: path.join(where.dir, tempName()), size: bytes.length, md5 };
      try {
        writeFileSync(temp.path, bytes, { flag: 'wx' });
      } catch (error) {
        throw fsError(error, `cannot write ${where.uri}`, where.uri);
      }
    }
    let published = publishUnsynced(where, temp, this.#start, marker, this.store.trace);
    if (published === undefined) {
      // Another writer holds the key's lock: the usual publish, which waits for it (and fsyncs).
      published = await publishTemp(where, temp, options.signal, this.store.trace);
    }
    return this.#done(key, where, published, bytes.length, options);
  }

  #done(
    key: string,
    where: KeyPath,
    published: VersionFile,
    size: number,
    options: PutOptions,
  ): ObjectInfo {
    this.#count++;
    const written = this.#written;
    if (written.syncfs === undefined) {
      written.files.push(path.join(where.dir, published.name));
      if (written.files.length >= this.listedMax) this.#probe ??= this.#probeSyncfs();
    }
    options.onProgress?.(size);
    return infoOf(key, published);
  }

  /**
   * One `sync -f` of what was written so far: once it ran, the final pass will be one too, and
   * the lists kept for the fsync fallback go (what is written meanwhile is covered by the final
   * pass all the same). Where it cannot run, the lists stay.
   */
  async #probeSyncfs(): Promise<void> {
    const devices = this.#written.devices;
    const ran = await syncFileSystems([...devices.values()]).catch(() => false);
    if (ran) this.#written = { files: [], dirs: new Set(), devices, syncfs: true };
  }

  /**
   * Write a fresh key's first version under its final name into a new directory of the batch's
   * stage (`<marker>.stage/`, outside every bucket), to become the key's directory by a rename.
   */
  #stage(
    marker: string,
    where: KeyPath,
    bytes: Uint8Array,
    md5: string,
  ): { dir: string; version: VersionFile } {
    const root = `${marker}${STAGE_SUFFIX}`;
    try {
      if (!this.#staged) {
        mkdirSync(root, { recursive: true });
        this.#staged = true;
      }
      const dir = path.join(root, tempName());
      mkdirSync(dir);
      const versionId = nextVersionId(undefined, Math.max(Date.now(), this.#start));
      const version = parseVersionFile(
        versionFileName(versionId, bytes.length, md5),
      ) as VersionFile;
      writeFileSync(path.join(dir, version.name), bytes, { flag: 'wx' });
      return { dir, version };
    } catch (error) {
      throw fsError(error, `cannot write ${where.uri}`, where.uri);
    }
  }

  /** Move a staged version into the key's directory as a temp, for the locked publish. */
  #unstage(where: KeyPath, staged: { dir: string; version: VersionFile }): TempFile {
    const temp = {
      path: path.join(where.dir, tempName()),
      size: staged.version.size as number,
      md5: staged.version.md5,
    };
    try {
      try {
        mkdirSync(where.dir);
      } catch (error) {
        if (errorCode(error) !== 'EEXIST') throw error;
      }
      renameSync(path.join(staged.dir, staged.version.name), temp.path);
      rmdirSync(staged.dir);
    } catch (error) {
      throw fsError(error, `cannot write ${where.uri}`, where.uri);
    }
    return temp;
  }

  async #writeMarker(): Promise<string> {
    await fs.mkdir(this.#bucketDir, { recursive: true }).catch((error: unknown) => {
      throw fsError(
        error,
        `cannot create bucket local://${this.bucket}`,
        `local://${this.bucket}/`,
      );
    });
    const marker: BatchMarker = {
      bucket: this.bucket,
      prefix: this.prefix,
      pid: process.pid,
      host: hostname(),
      tag: hostTag(),
      start: this.#start,
    };
    return writeMarker(this.store.root, marker, randomBytes(4).toString('hex'));
  }

  /**
   * Create the key's directories (synchronously; its own only when not `fresh`, see
   * {@link publishFresh}) and note what the sync pass must cover.
   */
  #makeDirs(where: KeyPath, fresh: boolean): void {
    const { dirs, devices, syncfs } = this.#written;
    const folders = this.#folders;
    if (!folders.has(where.folder)) {
      for (let d = where.folder; d.length >= this.#bucketDir.length; d = path.dirname(d)) {
        if (folders.has(d)) break;
        folders.add(d);
        if (syncfs === undefined) dirs.add(d);
      }
      mkdirSync(where.folder, { recursive: true });
      const dev = statSync(where.folder).dev;
      if (!devices.has(dev)) devices.set(dev, where.folder);
    }
    if (syncfs === undefined) dirs.add(where.dir);
    if (fresh) return;
    try {
      mkdirSync(where.dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw fsError(error, `cannot create the folders of ${where.uri}`, where.uri);
      }
    }
  }

  async #close(): Promise<void> {
    await Promise.allSettled([...this.#inFlight]);
    await this.#probe;
    if (this.#marker === undefined) return;
    const marker = await this.#marker;
    await syncWritten(this.#written, this.store.trace);
    if (this.#staged) await removeStage(marker);
    await removeMarker(this.store.root, marker);
    this.store.trace(
      `batch local://${this.bucket}/${this.prefix}: ${this.#count} versions durable`,
    );
  }
}

/**
 * Make everything a batch wrote durable: `sync -f` (`syncfs`) of each file system written, or,
 * for a batch of fewer than {@link SYNCFS_MIN_FILES} files or where that cannot run, an fsync of
 * every file and directory written. Exported for tests
 * (`command: null` takes the fallback).
 */
export async function syncWritten(
  written: Written,
  trace: Trace,
  command: string | null = syncCommand(),
): Promise<void> {
  if (written.syncfs) {
    if (await syncFileSystems([...written.devices.values()], command)) return;
    throw new StoreError(
      `cannot make a batch of puts durable: ${command ?? 'sync'} -f ran earlier in the batch, and cannot now`,
    );
  }
  if (written.files.length === 0 && written.dirs.size === 0) return;
  if (written.files.length >= SYNCFS_MIN_FILES) {
    if (await syncFileSystems([...written.devices.values()], command)) return;
    debug('cannot run %s -f; fsyncing each file', command);
    trace(`${command ?? 'sync'} -f cannot run here; fsyncing each file of the batch instead`);
  }
  await forEachLimit(written.files, SYNC_FALLBACK_CONCURRENCY, async (file) => {
    const handle = await fs.open(file, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }).catch((error: unknown) => {
    throw fsError(error, 'cannot make a batch of puts durable');
  });
  // Deepest first is not needed: each directory's own entries are what its fsync makes durable.
  await forEachLimit(written.dirs, SYNC_FALLBACK_CONCURRENCY, (dir) => syncDir(dir, dir));
}

/** Whether anything is at `p` (a symlink counts). */
function exists(p: string): boolean {
  return lstatSync(p, { throwIfNoEntry: false }) !== undefined;
}
