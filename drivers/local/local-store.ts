/**
 * {@link LocalStore}: the embedded object store behind `local://bucket/key`.
 *
 * Buckets are folders under a root directory; every bucket keeps versions (every write adds a
 * version, a delete adds a delete marker), so pin, commit and branch work on a fresh machine with
 * no server. The on-disk layout is described in `./layout.ts`.
 *
 * Concurrency, across any number of processes sharing the root:
 * - Bytes are written to a temp file inside the key's directory and fsynced *before* anything
 *   else; a version becomes visible only by `rename`, so a reader never sees a partial object.
 * - Publishing (choosing the version ID, renaming, updating the folder's listing index) happens
 *   under a per-key lock directory (proper-lockfile: `mkdir` is atomic; a lock left by a crashed
 *   process goes stale after 10 s). The lock is held for a few metadata calls, never while
 *   bytes are copied. It makes version IDs grow in the order writes finish and makes `_create`
 *   (check "no current object", then publish) atomic: exactly one of several racing creators
 *   wins.
 * - Version files and index entries are immutable once published and never removed, so readers
 *   take no lock: the newest version of a key is the largest version file name.
 * - A writer killed before its rename leaves only a temp file; the next write into the key's
 *   directory removes the temps of writers that are gone (`judgeTemp`, src/core/fs-atomic.ts). A key
 *   that is never written again (a commit object, named by its ID) is covered by its folder: the
 *   first write into a folder directory in a process also sweeps every object directory there
 *   that has no version yet (an `o.` entry without index entries or a pending marker — only a
 *   killed first write leaves one). One `readdir` of the folder per process; the object
 *   directories with versions, where a later write of their key sweeps, are not opened.
 *
 * Large files move at disk speed: a put from a file of 8 MiB or more is copied by the kernel
 * (`./file-copy.ts`; such a version has no MD5, its ETag is its version ID), and a read of a
 * whole version hands the cache the version file itself (`GetResult.file`), which the cache
 * copies with the kernel too. Nothing else streams a large file through JavaScript. Streams,
 * buffers and smaller files are written as before, with the MD5 of the bytes as the ETag.
 *
 * Byte ranges follow S3: a range whose start is at or past the end of the object is refused
 * (`StoreError`, status 416); an end past the object is clamped to its size, and `contentRange`
 * / `contentLength` say what was actually sent (`bytes start-(size-1)/size`), so a caller that
 * checks them (as managed-object reads do) sees the difference.
 *
 * The store keeps no content type. Keys are limited to 1,024 UTF-8 bytes, like S3.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { createReadStream, constants as fsConstants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { addAbortSignal, type Readable } from 'node:stream';
import { debuglog } from 'node:util';
import envPaths from 'env-paths';
import lockfile from 'proper-lockfile';
import type {
  Capabilities,
  GetOptions,
  GetResult,
  ListPage,
  ObjectInfo,
  PagesOptions,
  PutOptions,
  PutSource,
  SignalOptions,
  VersionRecord,
} from '../../src/contract/primitives.js';
import {
  Exists,
  isAbort,
  NotFound,
  ProvcatError,
  StoreError,
  UriError,
} from '../../src/core/errors.js';
import { ABANDONED_TEMP_AGE_MS, judgeTemp, tempName } from '../../src/core/fs-atomic.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { encodeSegment, segmentProblem, Uri } from '../../src/core/uri.js';
import { missingBucket } from '../../src/driver-kit/bucket-state.js';
import { ObjectStore } from '../../src/store/object-store.js';
import type { StoreOptions } from '../../src/store/store.js';
import { copyFromFile } from './file-copy.js';
import {
  etagOf,
  folderDirName,
  indexName,
  isVersionId,
  MAX_KEY_BYTES,
  NAME_FILE,
  nextVersionId,
  objectDirName,
  parseFolderEntry,
  parseVersionFile,
  pendingName,
  refOf,
  type SegmentRef,
  timeOf,
  type VersionFile,
  versionFileName,
} from './layout.js';

const debug = debuglog('provcat:local');

/** Keys whose version directories a listing reads at once. */
const LIST_BATCH = 64;
/** Default (and largest useful) page size of `_pages`, as on S3. */
const DEFAULT_PAGE = 1000;
/** How long a writer waits for a key's lock: longer than the 10 s after which a lock is stale. */
const LOCK_RETRIES = { retries: 80, factor: 1.2, minTimeout: 2, maxTimeout: 250, randomize: true };

/** Options of {@link LocalStore}. */
export interface LocalStoreOptions extends StoreOptions {
  /** The directory holding the buckets. Default: {@link defaultLocalRoot}. */
  root?: string | undefined;
}

/**
 * The default root of the local store: `PROVCAT_LOCAL_ROOT` when set and not empty, else
 * env-paths' data directory for `provcat`. Always absolute.
 */
export function defaultLocalRoot(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.PROVCAT_LOCAL_ROOT;
  return path.resolve(
    fromEnv !== undefined && fromEnv !== '' ? fromEnv : envPaths('provcat', { suffix: '' }).data,
  );
}

/** Where a key lives on disk. */
interface KeyPath {
  /** `local://bucket/key`, for messages and errors. */
  uri: string;
  /** The object's directory (holding its versions). */
  dir: string;
  /** The folder directory holding `dir`, its index entries and its pending marker. */
  folder: string;
  /** How the key's last segment is named in `folder`. */
  ref: SegmentRef;
  /** Every directory from the bucket down to `dir` whose name is hashed (needs `.name`). */
  hashed: { dir: string; segment: string }[];
}

/** A written, fsynced temp file in a key's directory, ready to be published. */
interface TempFile {
  path: string;
  size: number;
  /** The MD5 of the bytes, hex; unset for a file the kernel copied (see `./file-copy.ts`). */
  md5?: string | undefined;
}

/** One object or folder in a folder directory, decoded. */
interface Child {
  kind: 'object' | 'folder';
  segment: string;
  path: string;
  /** The sort key: the segment, plus `/` for a folder (compared in UTF-8 byte order). */
  sort: string;
  /** An object's versions from the folder's index, oldest first; unset when not trusted. */
  versions?: VersionFile[] | undefined;
}

/** What the walk of a listing yields: an object, or (one level) a folder. */
interface WalkItem {
  kind: 'object' | 'folder';
  /** The object's key, or the folder's prefix (ending in `/`). */
  key: string;
  path: string;
  /** An object's versions, oldest first, once known (see `#resolve`). */
  versions?: VersionFile[] | undefined;
  /** For a folder, once known: whether some key below it has a current object. */
  current?: boolean | undefined;
}

/** Folder directories swept of killed first writes in this process (see the module comment). */
const sweptFolders = new Set<string>();

/**
 * The embedded, versioned object store serving `local://` (see the module comment).
 *
 * Guarantees: writes are atomic and durable (fsync of the file and its directory before a call
 * returns); every write keeps the earlier versions; version IDs of a key grow in the order its
 * writes completed, across processes; `_create` has exactly one winner among concurrent callers;
 * listings are in UTF-8 byte order, like S3. Nothing is ever written outside `root`.
 */
export class LocalStore extends ObjectStore {
  readonly scheme = 'local';
  readonly driver = 'local';
  readonly capabilities: Capabilities = { versions: true, ranges: true, versionsAlways: true };
  /** The absolute directory holding the buckets. */
  readonly root: string;

  /** A store over `options.root` (default {@link defaultLocalRoot}). Touches no file. */
  constructor(options: LocalStoreOptions = {}) {
    super(options);
    this.root = path.resolve(options.root ?? defaultLocalRoot());
  }

  /**
   * Create a bucket (and the root) if it does not exist yet. Idempotent. Every local bucket keeps
   * versions, so `versioning` is accepted and ignored.
   */
  override async makeBucket(
    bucket: string,
    _options: { versioning?: boolean } = {},
  ): Promise<void> {
    const dir = this.#bucketDir(bucket);
    try {
      await fs.mkdir(dir, { recursive: true });
    } catch (error) {
      throw fsError(error, `cannot create bucket local://${bucket}`, `local://${bucket}/`);
    }
  }

  // ---- core primitives -------------------------------------------------------------------

  override async _head(bucket: string, key: string, options?: SignalOptions): Promise<ObjectInfo> {
    options?.signal?.throwIfAborted();
    const where = this.#keyPath(bucket, key, 'read');
    return infoOf(key, await this.#current(where));
  }

  override async *_pages(
    bucket: string,
    prefix: string,
    options: PagesOptions = {},
  ): AsyncIterable<ListPage> {
    const { delimiter, signal } = options;
    const limit = options.limit ?? DEFAULT_PAGE;
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`a page limit is a positive integer, not ${limit}`);
    }
    if (delimiter !== undefined && delimiter !== '/') {
      throw new StoreError(`the local store lists with delimiter '/' or none, not '${delimiter}'`);
    }
    const start = this.#listStart(bucket, prefix);
    if (start === undefined) return await this.#requireBucket(bucket);
    const walk = this.#walk(start.dir, start.keyPrefix, start.partial, delimiter === undefined);
    let page: ListPage = { prefixes: [], objects: [] };
    let count = 0;
    let listed = false;
    for await (const run of walk) {
      await this.#resolve(run, signal);
      for (const item of run) {
        if (item.kind === 'folder') {
          if (item.current !== true) continue;
          page.prefixes.push(item.key);
        } else {
          const v = item.versions?.at(-1);
          if (v === undefined || v.size === null) continue;
          page.objects.push(infoOf(item.key, v));
        }
        listed = true;
        if (++count === limit) {
          yield page;
          page = { prefixes: [], objects: [] };
          count = 0;
        }
      }
    }
    if (count > 0) yield page;
    else if (!listed) await this.#requireBucket(bucket);
  }

  /** `NotFound` naming the bucket when its directory does not exist (an empty listing's check). */
  async #requireBucket(bucket: string): Promise<void> {
    const dir = this.#bucketDir(bucket);
    try {
      if ((await fs.stat(dir)).isDirectory()) return;
    } catch (error) {
      if (errorCode(error) !== 'ENOENT') throw fsError(error, `cannot list local://${bucket}/`);
      throw missingBucket(`local://${bucket}/`, error);
    }
    throw missingBucket(`local://${bucket}/`);
  }

  override async _get(bucket: string, key: string, options: GetOptions = {}): Promise<GetResult> {
    options.signal?.throwIfAborted();
    const where = this.#keyPath(bucket, key, 'read');
    return this.#open(key, where, await this.#current(where), options);
  }

  override async _put(
    bucket: string,
    key: string,
    source: PutSource,
    options: PutOptions = {},
  ): Promise<ObjectInfo> {
    options.signal?.throwIfAborted();
    const where = this.#keyPath(bucket, key, 'write');
    await this.#makeKeyDir(where);
    const temp = await this.#writeTemp(where, source, options);
    try {
      const published = await this.#locked(where, options.signal, async () =>
        this.#publish(where, temp),
      );
      this.#trace(`put ${where.uri} ${published.versionId} (${temp.size} bytes)`);
      return infoOf(key, published);
    } catch (error) {
      await this.#removeTemp(temp.path);
      throw error;
    }
  }

  override async _delete(bucket: string, key: string, options?: SignalOptions): Promise<void> {
    options?.signal?.throwIfAborted();
    const where = this.#keyPath(bucket, key, 'read');
    await this.#current(where); // NotFound before taking a lock in a directory that may not exist
    await this.#locked(where, options?.signal, async () => {
      const newest = await this.#newest(where);
      if (newest === undefined || newest.size === null) {
        throw new NotFound(`${where.uri} not found`, { uri: where.uri });
      }
      const marker = await this.#publish(where, undefined);
      this.#trace(`delete ${where.uri}: marker ${marker.versionId}`);
    });
  }

  // ---- version primitives --------------------------------------------------------------

  override async _versionOf(bucket: string, key: string, options?: SignalOptions): Promise<string> {
    return (await this._head(bucket, key, options)).version;
  }

  override async *_history(
    bucket: string,
    prefix: string,
    options: SignalOptions = {},
  ): AsyncIterable<VersionRecord> {
    const start = this.#listStart(bucket, prefix);
    if (start === undefined) return;
    for await (const run of this.#walk(start.dir, start.keyPrefix, start.partial, true)) {
      await this.#resolve(run, options.signal);
      for (const { key, versions = [] } of run) {
        for (let i = versions.length - 1; i >= 0; i--) {
          const v = versions[i] as VersionFile;
          yield {
            key,
            versionId: v.versionId,
            size: v.size,
            current: i === versions.length - 1,
            etag: etagOf(v),
            lastModified: timeOf(v),
          };
        }
      }
    }
  }

  override async _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options?: SignalOptions,
  ): Promise<ObjectInfo> {
    options?.signal?.throwIfAborted();
    const where = this.#keyPath(bucket, key, 'read');
    return infoOf(key, await this.#version(where, versionId));
  }

  override async _getVersion(
    bucket: string,
    key: string,
    versionId: string,
    options: GetOptions = {},
  ): Promise<GetResult> {
    options.signal?.throwIfAborted();
    const where = this.#keyPath(bucket, key, 'read');
    return this.#open(key, where, await this.#version(where, versionId), options);
  }

  override async _create(
    bucket: string,
    key: string,
    body: Uint8Array,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    options.signal?.throwIfAborted();
    const where = this.#keyPath(bucket, key, 'write');
    await this.#makeKeyDir(where);
    const temp = await this.#writeTemp(where, body, { signal: options.signal });
    try {
      const published = await this.#locked(where, options.signal, async () => {
        const newest = await this.#newest(where);
        if (newest !== undefined && newest.size !== null) {
          throw new Exists(`${where.uri} exists (version ${newest.versionId})`, { uri: where.uri });
        }
        return this.#publish(where, temp);
      });
      this.#trace(`create ${where.uri} ${published.versionId}`);
      return infoOf(key, published);
    } catch (error) {
      await this.#removeTemp(temp.path);
      throw error;
    }
  }

  override async _copy(
    bucket: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options: SignalOptions = {},
  ): Promise<ObjectInfo> {
    options.signal?.throwIfAborted();
    const from = this.#keyPath(bucket, key, 'read');
    const source =
      versionId === undefined ? await this.#current(from) : await this.#version(from, versionId);
    const to = this.#keyPath(bucket, toKey, 'write');
    await this.#makeKeyDir(to);
    const sourcePath = path.join(from.dir, source.name);
    const temp = path.join(to.dir, tempName());
    await this.#linkOrCopy(sourcePath, temp, from.uri, to.uri);
    try {
      const published = await this.#locked(to, options.signal, async () =>
        this.#publish(to, { path: temp, size: source.size as number, md5: source.md5 }),
      );
      this.#trace(`copy ${from.uri}@${source.versionId} -> ${to.uri} ${published.versionId}`);
      return infoOf(toKey, published);
    } catch (error) {
      await this.#removeTemp(temp);
      throw error;
    }
  }

  // ---- paths -----------------------------------------------------------------------------

  /** The bucket's directory; `UriError` for a name a URI cannot hold (so none can escape root). */
  #bucketDir(bucket: string): string {
    Uri.fromKey(this.scheme, bucket, ''); // validates the bucket name, throws UriError
    return this.#inside(path.join(this.root, bucket));
  }

  /**
   * Where a key lives. A key the store cannot hold is a `UriError` for a write and a `NotFound`
   * for a read (no such object can exist).
   */
  #keyPath(bucket: string, key: string, mode: 'read' | 'write'): KeyPath {
    const bucketDir = this.#bucketDir(bucket);
    const uri = uriOf(bucket, key);
    const problem = keyProblem(key);
    if (problem !== undefined) {
      if (mode === 'read') throw new NotFound(`${uri} not found (${problem})`, { uri });
      throw new UriError(`the local store cannot hold key ${JSON.stringify(key)}: ${problem}`, {
        uri,
      });
    }
    const segments = key.split('/');
    const last = segments.pop() as string;
    const hashed: KeyPath['hashed'] = [];
    let folder = bucketDir;
    for (const segment of segments) {
      const ref = refOf(segment);
      folder = path.join(folder, folderDirName(ref));
      if (ref.hashed) hashed.push({ dir: folder, segment });
    }
    const ref = refOf(last);
    const dir = this.#inside(path.join(folder, objectDirName(ref)));
    if (ref.hashed) hashed.push({ dir, segment: last });
    return { uri, dir, folder, ref, hashed };
  }

  /** Where a listing under `prefix` starts, or `undefined` when no key can match it. */
  #listStart(
    bucket: string,
    prefix: string,
  ): { dir: string; keyPrefix: string; partial: string } | undefined {
    let dir = this.#bucketDir(bucket);
    const cut = prefix.lastIndexOf('/');
    const keyPrefix = prefix.slice(0, cut + 1);
    const folders = cut < 0 ? [] : prefix.slice(0, cut).split('/');
    for (const segment of folders) {
      if (segmentProblem(segment) !== undefined) return undefined;
      dir = path.join(dir, folderDirName(refOf(segment)));
    }
    return { dir: this.#inside(dir), keyPrefix, partial: prefix.slice(cut + 1) };
  }

  /** Defence in depth: `p` itself, after checking it is below the root. */
  #inside(p: string): string {
    const rel = path.relative(this.root, p);
    if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
      throw new UriError(`refusing a path outside the local root: ${p}`);
    }
    return p;
  }

  /** Create the key's directory and the `.name` files of hashed directories on the way. */
  async #makeKeyDir(where: KeyPath): Promise<void> {
    try {
      await fs.mkdir(where.dir, { recursive: true });
      for (const { dir, segment } of where.hashed) {
        const file = path.join(dir, NAME_FILE);
        if ((await this.#readNameFile(dir)) === segment) continue;
        const temp = path.join(dir, tempName());
        await fs.writeFile(temp, segment, { flag: 'wx' });
        await fs.rename(temp, file);
      }
    } catch (error) {
      throw fsError(error, `cannot create the folders of ${where.uri}`, where.uri);
    }
  }

  /** The segment a hashed directory holds, or `undefined` while it has no `.name` yet. */
  async #readNameFile(dir: string): Promise<string | undefined> {
    try {
      return await fs.readFile(path.join(dir, NAME_FILE), 'utf8');
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return undefined;
      throw fsError(error, `cannot read ${path.join(dir, NAME_FILE)}`);
    }
  }

  // ---- versions --------------------------------------------------------------------------

  /** Every version of a key, oldest first; empty when the key never existed. */
  async #versions(dir: string, what: string): Promise<VersionFile[]> {
    return sortVersions(await this.#versionNames(dir, what));
  }

  /**
   * Remove the temp files of writers that are gone: a process of this machine that no longer
   * runs, or a writer that has not touched its temp for an hour (`judgeTemp`, src/core/fs-atomic.ts).
   */
  async #sweepTemps(dir: string, names: string[]): Promise<void> {
    for (const name of names) {
      const verdict = judgeTemp(name);
      if (verdict === undefined || verdict === 'live') continue;
      const file = path.join(dir, name);
      try {
        if (verdict === 'by-age') {
          const { mtimeMs } = await fs.stat(file);
          if (Date.now() - mtimeMs < ABANDONED_TEMP_AGE_MS) continue;
        }
        await fs.rm(file, { force: true });
        this.#trace(`removed the stale temp file ${file}`);
      } catch (error) {
        // Another writer may have renamed or removed it meanwhile; nothing depends on this.
        if (errorCode(error) !== 'ENOENT') this.#trace(`cannot sweep ${file}: ${String(error)}`);
      }
    }
  }

  /**
   * Once per folder directory and process: remove the temps of gone writers from the object
   * directories of `where.folder` that hold no version (see the module comment). Best effort,
   * like {@link #sweepTemps}: a folder that cannot be read is traced, never an error of the write.
   */
  async #sweepFolder(where: KeyPath): Promise<void> {
    if (sweptFolders.has(where.folder)) return;
    sweptFolders.add(where.folder);
    let names: string[];
    try {
      names = await fs.readdir(where.folder);
    } catch (error) {
      this.#trace(`cannot sweep the folder ${where.folder}: ${String(error)}`);
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
        if (errorCode(error) !== 'ENOENT') this.#trace(`cannot sweep ${dir}: ${String(error)}`);
        continue;
      }
      await this.#sweepTemps(dir, inside);
    }
  }

  /** The newest version (maybe a delete marker), or `undefined` when there is none. */
  async #newest(where: KeyPath): Promise<VersionFile | undefined> {
    return newestOf(await this.#versionNames(where.dir, where.uri));
  }

  /** The current version with bytes; `NotFound` when absent or deleted. */
  async #current(where: KeyPath): Promise<VersionFile> {
    const v = await this.#newest(where);
    if (v === undefined) throw new NotFound(`${where.uri} not found`, { uri: where.uri });
    if (v.size === null) {
      throw new NotFound(`${where.uri} not found (deleted)`, { uri: where.uri });
    }
    return v;
  }

  /** One version with bytes; `NotFound` for an unknown ID or a delete marker. */
  async #version(where: KeyPath, versionId: string): Promise<VersionFile> {
    const uri = `${where.uri}?at=version:${encodeURIComponent(versionId)}`;
    const v = isVersionId(versionId)
      ? (await this.#versions(where.dir, where.uri)).find((x) => x.versionId === versionId)
      : undefined;
    if (v === undefined) throw new NotFound(`${uri} not found`, { uri });
    if (v.size === null) throw new NotFound(`${uri} is a delete marker`, { uri });
    return v;
  }

  /** The raw names of a key's directory (empty when it does not exist). */
  async #versionNames(dir: string, what: string): Promise<string[]> {
    try {
      return await fs.readdir(dir);
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return [];
      throw fsError(error, `cannot read the versions of ${what}`, what);
    }
  }

  // ---- writing ---------------------------------------------------------------------------

  /**
   * Write `source` into a new temp file in the key's directory, fsynced: a large file is copied
   * by the kernel (`./file-copy.ts`, no MD5), anything else streamed and hashed (MD5).
   */
  async #writeTemp(where: KeyPath, source: PutSource, options: PutOptions): Promise<TempFile> {
    const { signal, onProgress } = options;
    const temp = path.join(where.dir, tempName());
    if (typeof source === 'string') {
      let copied: { size: number } | undefined;
      try {
        copied = await copyFromFile(source, temp, { uri: where.uri, signal, onProgress });
      } catch (error) {
        throw fsError(error, `cannot write ${where.uri}`, where.uri);
      }
      if (copied !== undefined) {
        try {
          checkAnnounced(where, copied.size, options.size);
        } catch (error) {
          await this.#removeTemp(temp);
          throw error;
        }
        return { path: temp, ...copied };
      }
    }
    const chunks = await openSource(source, signal);
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(temp, 'wx');
    } catch (error) {
      chunks.destroy?.();
      throw fsError(error, `cannot write ${where.uri}`, where.uri);
    }
    const hash = createHash('md5');
    let size = 0;
    try {
      for await (const chunk of chunks.iterable) {
        signal?.throwIfAborted();
        await writeAll(handle, chunk);
        hash.update(chunk);
        size += chunk.length;
        onProgress?.(size);
      }
      checkAnnounced(where, size, options.size);
      await handle.sync();
    } catch (error) {
      chunks.destroy?.();
      await handle.close();
      await this.#removeTemp(temp);
      throw fsError(error, `cannot write ${where.uri}`, where.uri);
    }
    await handle.close();
    return { path: temp, size, md5: hash.digest('hex') };
  }

  /**
   * Under the key's lock: give the temp file (or, for `undefined`, a new delete marker) the next
   * version ID, make it visible, and index it in the folder (the protocol is in `./layout.ts`).
   */
  async #publish(where: KeyPath, bytes: TempFile | undefined): Promise<VersionFile> {
    const pending = path.join(where.folder, pendingName(where.ref));
    const leftover = !(await createEmpty(pending, where.uri));
    const names = await this.#versionNames(where.dir, where.uri);
    await this.#sweepTemps(where.dir, names);
    await this.#sweepFolder(where);
    const versions = sortVersions(names);
    if (leftover) {
      // A writer died between publishing and indexing: complete the index first.
      this.#trace(`repairing the listing index of ${where.uri}`);
      for (const v of versions) {
        await createEmpty(path.join(where.folder, indexName(where.ref, v.name)), where.uri);
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
    await syncDir(where.dir, where.uri);
    await createEmpty(path.join(where.folder, indexName(where.ref, name)), where.uri);
    await syncDir(where.folder, where.uri);
    try {
      await fs.rm(pending);
    } catch (error) {
      throw fsError(error, `cannot finish writing ${where.uri}`, where.uri);
    }
    return parseVersionFile(name) as VersionFile;
  }

  /** A hard link of an immutable version (or a copy where links do not work) at `temp`. */
  async #linkOrCopy(source: string, temp: string, from: string, to: string): Promise<void> {
    try {
      await fs.link(source, temp);
      return;
    } catch (error) {
      const code = errorCode(error);
      if (code !== 'EXDEV' && code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EMLINK') {
        throw fsError(error, `cannot copy ${from} to ${to}`, to);
      }
      this.#trace(`link ${source} failed (${code}); copying the bytes instead`);
    }
    try {
      await fs.copyFile(source, temp, fsConstants.COPYFILE_EXCL);
      const handle = await fs.open(temp, 'r+');
      try {
        await handle.sync();
      } finally {
        await handle.close();
      }
    } catch (error) {
      await this.#removeTemp(temp);
      throw fsError(error, `cannot copy ${from} to ${to}`, to);
    }
  }

  /** Remove a temp file after a failure; a failure to remove it is logged, not raised. */
  async #removeTemp(temp: string): Promise<void> {
    try {
      await fs.rm(temp, { force: true });
    } catch (error) {
      this.#trace(`cannot remove temp file ${temp}: ${String(error)}`);
    }
  }

  /** Run `fn` holding the key's writer lock (see the module comment). */
  async #locked<T>(
    where: KeyPath,
    signal: AbortSignal | undefined,
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
          this.#trace(`lock of ${where.uri} compromised: ${String(error)}`);
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
        this.#trace(`cannot release the lock of ${where.uri}: ${String(error)}`);
      }
    }
  }

  // ---- reading ---------------------------------------------------------------------------

  /**
   * Read one version: the whole of it as its immutable file (`GetResult.file`) and a stream
   * opened on first use, or a byte range, honoured the way S3 does, as a stream.
   */
  async #open(
    key: string,
    where: KeyPath,
    v: VersionFile,
    options: GetOptions,
  ): Promise<GetResult> {
    const info = infoOf(key, v);
    const size = info.size;
    let range: { start: number; end: number } | undefined;
    if (options.range !== undefined) {
      const { start, end } = options.range;
      if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start) {
        throw new StoreError(`invalid byte range [${start}, ${end}) for ${where.uri}`, {
          uri: where.uri,
          status: 416,
        });
      }
      if (start >= size) {
        throw new StoreError(
          `byte range [${start}, ${end}) starts at or past the end of ${where.uri} (${size} bytes)`,
          { uri: where.uri, status: 416 },
        );
      }
      range = { start, end: Math.min(end, size) };
    }
    const file = path.join(where.dir, v.name);
    if (range === undefined) {
      // The whole version: an immutable file, so the caller may copy it itself (`file`); the
      // stream is opened only when asked for.
      let body: Readable | undefined;
      const signal = options.signal;
      return {
        get body() {
          if (body === undefined) {
            body = createReadStream(file);
            if (signal !== undefined) addAbortSignal(signal, body);
          }
          return body;
        },
        file: { path: file, size },
        info,
        contentLength: size,
      };
    }
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(file, 'r');
    } catch (error) {
      throw fsError(error, `cannot read ${where.uri}`, where.uri);
    }
    const body = handle.createReadStream({ start: range.start, end: range.end - 1 });
    if (options.signal !== undefined) addAbortSignal(options.signal, body);
    return {
      body,
      info,
      contentLength: range.end - range.start,
      contentRange: `bytes ${range.start}-${range.end - 1}/${size}`,
    };
  }

  /**
   * The objects and folders of a folder directory, in listing (byte) order, each object with its
   * versions from the folder's index when the index can be trusted for it (see `./layout.ts`).
   */
  async #scan(dir: string): Promise<Child[]> {
    let names: string[];
    try {
      names = await fs.readdir(dir);
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return [];
      throw fsError(error, `cannot list ${dir}`);
    }
    const entries: { tag: 'o' | 'd'; ref: string; segment: string | undefined; name: string }[] =
      [];
    const index = new Map<string, VersionFile[]>();
    const pending = new Set<string>();
    for (const name of names) {
      const entry = parseFolderEntry(name);
      if (entry === undefined) {
        if (name !== NAME_FILE) this.#trace(`ignoring ${path.join(dir, name)}: not a store entry`);
      } else if (entry.tag === 'v') {
        const list = index.get(entry.ref);
        if (list === undefined) index.set(entry.ref, [entry.version]);
        else list.push(entry.version);
      } else if (entry.tag === 'p') pending.add(entry.ref);
      else entries.push({ tag: entry.tag, ref: entry.ref, segment: entry.segment, name });
    }
    const out: Child[] = [];
    for (const { tag, ref, segment: direct, name } of entries) {
      const child = `${dir}${path.sep}${name}`;
      let segment = direct;
      if (segment === undefined) {
        segment = await this.#readNameFile(child);
        if (segment === undefined || refOf(segment).ref !== ref) {
          this.#trace(`ignoring ${child}: its ${NAME_FILE} is missing or does not match`);
          continue;
        }
      }
      const kind = tag === 'o' ? 'object' : 'folder';
      const sort = kind === 'folder' ? `${segment}/` : segment;
      const indexed = kind === 'object' && !pending.has(ref) ? index.get(ref) : undefined;
      const versions = indexed?.sort((a, b) => (a.versionId < b.versionId ? -1 : 1));
      out.push({ kind, segment, path: child, sort, versions });
    }
    return out.sort((a, b) => compareUtf8(a.sort, b.sort));
  }

  /**
   * Objects (and, unless `recursive`, folders) under `dir` whose segment starts with `partial`,
   * in UTF-8 byte order of their keys, in runs (a folder's children between two subfolders).
   * Depth-first with sorted siblings gives global byte order: every key below folder `x/` shares
   * the prefix `x/`, and no sibling's key sorts between them.
   */
  async *#walk(
    dir: string,
    keyPrefix: string,
    partial: string,
    recursive: boolean,
  ): AsyncGenerator<WalkItem[]> {
    let run: WalkItem[] = [];
    for (const child of await this.#scan(dir)) {
      if (!child.segment.startsWith(partial)) continue;
      const key = keyPrefix + child.segment;
      if (child.kind === 'object') {
        run.push({ kind: 'object', key, path: child.path, versions: child.versions });
      } else if (!recursive) run.push({ kind: 'folder', key: `${key}/`, path: child.path });
      else {
        if (run.length > 0) yield run;
        run = [];
        yield* this.#walk(child.path, `${key}/`, '', true);
      }
    }
    if (run.length > 0) yield run;
  }

  /**
   * Fill in what the folder index did not answer: the versions of objects it cannot vouch for
   * (read from their own directories) and whether folders hold anything current.
   * {@link LIST_BATCH} at a time.
   */
  async #resolve(run: WalkItem[], signal: AbortSignal | undefined): Promise<void> {
    const todo = run.filter((item) => item.kind === 'folder' || item.versions === undefined);
    for (let at = 0; at < todo.length; at += LIST_BATCH) {
      signal?.throwIfAborted();
      await Promise.all(
        todo.slice(at, at + LIST_BATCH).map(async (item) => {
          if (item.kind === 'object') item.versions = await this.#versions(item.path, item.key);
          else item.current = await this.#hasCurrent(item.path);
        }),
      );
    }
    signal?.throwIfAborted();
  }

  /** True when some key below the folder directory `dir` has a current (undeleted) object. */
  async #hasCurrent(dir: string): Promise<boolean> {
    const children = await this.#scan(dir);
    for (const child of children) {
      if (child.kind !== 'object') continue;
      const v = await this.#newestOf(child);
      if (v !== undefined && v.size !== null) return true;
    }
    for (const child of children) {
      if (child.kind === 'folder' && (await this.#hasCurrent(child.path))) return true;
    }
    return false;
  }

  /** The newest version of a scanned object: from the index, or its own directory. */
  async #newestOf(child: Child): Promise<VersionFile | undefined> {
    if (child.versions !== undefined) return child.versions.at(-1);
    return newestOf(await this.#versionNames(child.path, child.path));
  }

  /** Debug log: `NODE_DEBUG=provcat:local`, and the store's logger if one was given. */
  #trace(message: string): void {
    debug('%s', message);
    this.logger(`local: ${message}`);
  }
}

// ---- helpers ---------------------------------------------------------------------------------

/**
 * The one place fs errors become provcat errors: `ENOENT` is `NotFound`, anything else a
 * `StoreError` with the fs error as `cause`. Provcat errors and aborts pass through unchanged.
 */
function fsError(error: unknown, message: string, uri?: string): Error {
  if (error instanceof ProvcatError || isAbort(error)) return error as Error;
  const code = errorCode(error);
  if (code === 'ENOENT') return new NotFound(`${message}: not found`, { uri, cause: error });
  return new StoreError(`${message}: ${code ?? String(error)}`, { uri, cause: error });
}

function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Why the local store cannot hold `key`, or `undefined` when it can. */
function keyProblem(key: string): string | undefined {
  if (key === '') return 'empty key';
  if (Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES) return `longer than ${MAX_KEY_BYTES} bytes`;
  for (const segment of key.split('/')) {
    const problem = segmentProblem(segment);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

function uriOf(bucket: string, key: string): string {
  return `local://${bucket}/${key.split('/').map(encodeSegment).join('/')}`;
}

/**
 * A `StoreError` when a source gave another size than the caller announced (a put from a file
 * announces its size as `stat` saw it; a file that changed since is refused, not stored).
 */
function checkAnnounced(where: KeyPath, size: number, announced: number | undefined): void {
  if (announced !== undefined && announced !== size) {
    throw new StoreError(
      `the source of ${where.uri} gave ${size} bytes, not the ${announced} announced`,
      { uri: where.uri },
    );
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

/** The versions among directory entry names, oldest first. */
function sortVersions(names: string[]): VersionFile[] {
  const out: VersionFile[] = [];
  for (const name of names) {
    const v = parseVersionFile(name);
    if (v !== undefined) out.push(v);
  }
  return out.sort((a, b) => (a.versionId < b.versionId ? -1 : 1));
}

/** The newest version among directory entry names (the largest version ID). */
function newestOf(names: string[]): VersionFile | undefined {
  let best: VersionFile | undefined;
  for (const name of names) {
    const v = parseVersionFile(name);
    if (v !== undefined && (best === undefined || v.versionId > best.versionId)) best = v;
  }
  return best;
}

function infoOf(key: string, v: VersionFile): ObjectInfo {
  return {
    key,
    size: v.size as number,
    version: v.versionId,
    versionId: v.versionId,
    etag: etagOf(v),
    lastModified: timeOf(v),
  };
}

/** The bytes of a put source, as chunks, and how to stop reading them early. */
async function openSource(
  source: PutSource,
  signal: AbortSignal | undefined,
): Promise<{ iterable: AsyncIterable<Uint8Array> | Iterable<Uint8Array>; destroy?: () => void }> {
  if (source instanceof Uint8Array) return { iterable: source.length > 0 ? [source] : [] };
  let stream: Readable;
  if (typeof source === 'string') {
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(source, 'r');
    } catch (error) {
      throw fsError(error, `cannot read the source file ${source}`);
    }
    stream = handle.createReadStream();
  } else stream = source;
  if (signal !== undefined) addAbortSignal(signal, stream);
  return { iterable: bytesOf(stream), destroy: () => stream.destroy() };
}

async function* bytesOf(stream: Readable): AsyncGenerator<Uint8Array> {
  for await (const chunk of stream) {
    if (typeof chunk === 'string') yield Buffer.from(chunk, 'utf8');
    else if (chunk instanceof Uint8Array) yield chunk;
    else throw new TypeError('a put stream must give bytes or strings, not objects');
  }
}

async function writeAll(handle: fs.FileHandle, chunk: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < chunk.length) {
    const { bytesWritten } = await handle.write(chunk, offset, chunk.length - offset);
    offset += bytesWritten;
  }
}

/** fsync a directory so a rename in it survives a crash (where the platform allows it). */
async function syncDir(dir: string, uri: string): Promise<void> {
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
