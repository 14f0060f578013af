/**
 * The storage of a local managed stage: plain files under a root directory, one immutable file
 * per object (`<root>/[tenant/]ab/ab12…`), so any tool can read them and a location is a
 * `file:///` URI. Not the `local://` store: a managed object needs no versions, and publishing
 * it is one rename.
 *
 * **Uploads** (the part protocol): a temp `<final>.uploading` beside the final path (same
 * directory, so the rename is atomic), written at each part's offset, fsynced, renamed to the
 * final name, and the directory fsynced. Until the rename the temp belongs to the upload: a
 * failure or cancellation removes it; after it nothing removes the object. A writer killed before
 * the rename leaves its temp and a marker `.provcat/uploads/<pid>.<id>` naming it; the next
 * upload to the stage removes the temps of writers that are gone (their pid is not running, or
 * the marker is older than {@link STALE_UPLOAD_MS}), and GC lists them as open uploads.
 *
 * **Containment is checked on the real path** (issue: a symlink inside the stage, `ab -> /etc`,
 * must not let a location reach outside): every path is resolved with `realpath` and must be the
 * root's real path plus the key, with no symlink component; files are opened with `O_NOFOLLOW`.
 * Anything else is `ObjectIntegrityError('OutsideStage')`.
 *
 * Listings walk the directory tree without following links, in UTF-8 byte order of keys; the
 * temps are not objects. A file's version is its inode and modification time.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import {
  type FileHandle,
  link,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  realpath,
  rename,
  rm,
  unlink,
} from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { debuglog } from 'node:util';
import type {
  CompletedPart,
  CreateMode,
  GetResult,
  ListedPart,
  ObjectInfo,
  OpenUpload,
  PartProtocol,
  PartUpload,
  SignalOptions,
  UploadObjectOptions,
} from '../../src/driver.js';
import {
  Exists,
  NotFound,
  NotSupported,
  ObjectIntegrityError,
  PermissionDenied,
  PreconditionFailed,
  StoreError,
} from '../../src/errors.js';
import { fsyncDir, isRunning, tempPathFor } from '../../src/fs-atomic.js';
import { compareUtf8 } from '../../src/keys.js';
import type { StageBackend } from '../../src/lake/backend.js';

const debug = debuglog('provcat:lake');

/** The suffix of an upload's temp file. */
export const UPLOADING = '.uploading';
/** Where upload markers live, below the stage's key prefix. */
const MARKERS = '.provcat/uploads';
/** A marker older than this names a writer that is gone, whatever its pid says: one week. */
export const STALE_UPLOAD_MS = 7 * 24 * 60 * 60 * 1000;

/** Map a file-system error: ENOENT/ENOTDIR NotFound, EACCES/EPERM PermissionDenied, else StoreError. */
function fsError(error: unknown, message: string, uri: string): Error {
  const code = (error as { code?: string }).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') {
    return new NotFound(`${message}: no such file`, { uri, cause: error });
  }
  if (code === 'EACCES' || code === 'EPERM') {
    return new PermissionDenied(`${message}: ${code}`, { uri, cause: error });
  }
  if (code === 'ELOOP') {
    return new ObjectIntegrityError('OutsideStage', `${uri} is outside the stage: a symlink`, {
      uri,
      cause: error,
    });
  }
  return new StoreError(`${message}: ${code ?? String(error)}`, { uri, cause: error });
}

/** What a listing or HEAD reports of a file: its version is its inode and mtime. */
function infoOf(
  key: string,
  stats: { size: number; ino: number; mtimeMs: number; mtime: Date },
): ObjectInfo {
  return {
    key,
    size: stats.size,
    version: `${stats.ino}-${stats.mtimeMs}`,
    lastModified: stats.mtime,
  };
}

/** The plain files of a local stage, as a {@link StageBackend} (see the module comment). */
export class StageFiles implements StageBackend {
  /** Uploads: temp files written at offsets (see the module comment). */
  readonly parts: PartProtocol;
  private realRoot: Promise<string> | undefined;

  /**
   * @param root the stage's root directory (absolute, normalized)
   * @param keyPrefix the tenant (or `''`): markers go below it
   * @param uriOf a key's location URI, for messages
   */
  constructor(
    readonly root: string,
    readonly keyPrefix: string,
    readonly uriOf: (key: string) => string,
  ) {
    this.parts = new FileUploads(this);
  }

  /** The path of a key (no I/O, no checks). */
  pathOf(key: string): string {
    return path.join(this.root, ...key.split('/'));
  }

  /**
   * The path of an existing key, proven inside the root: its real path must be the root's real
   * path plus the key (no symlink anywhere below the root).
   */
  private async inside(key: string): Promise<string> {
    const file = this.pathOf(key);
    const uri = this.uriOf(key);
    this.realRoot ??= realpath(this.root).catch((error: unknown) => {
      this.realRoot = undefined;
      throw fsError(error, `stage root ${this.root}`, uri);
    });
    const root = await this.realRoot;
    let real: string;
    try {
      real = await realpath(file);
    } catch (error) {
      throw fsError(error, `cannot open ${uri}`, uri);
    }
    if (real !== path.join(root, ...key.split('/'))) {
      throw new ObjectIntegrityError(
        'OutsideStage',
        `${uri} is outside the stage: its path goes through a symlink (to ${real})`,
        { uri },
      );
    }
    return file;
  }

  private async openInside(key: string): Promise<FileHandle> {
    const file = await this.inside(key);
    try {
      return await open(file, fsc.O_RDONLY | fsc.O_NOFOLLOW);
    } catch (error) {
      throw fsError(error, `cannot open ${this.uriOf(key)}`, this.uriOf(key));
    }
  }

  async head(key: string): Promise<ObjectInfo> {
    const file = await this.inside(key);
    try {
      const stats = await lstat(file);
      if (!stats.isFile()) throw new NotFound(`${this.uriOf(key)} is not a file`);
      return infoOf(key, stats);
    } catch (error) {
      throw error instanceof NotFound ? error : fsError(error, `stat ${key}`, this.uriOf(key));
    }
  }

  /**
   * The file, or `[start, end)` of it as S3 answers a range: a start at or past the end is a
   * StoreError (416); an end past the file is clamped, and `contentRange`/`contentLength` say
   * what is sent.
   */
  async get(
    key: string,
    options: SignalOptions & { range?: { start: number; end: number } | undefined } = {},
  ): Promise<GetResult> {
    const handle = await this.openInside(key);
    try {
      const stats = await handle.stat();
      const info = infoOf(key, stats);
      const range = options.range;
      if (range === undefined) {
        const body = handle.createReadStream({ signal: options.signal });
        return { body, info, contentLength: stats.size };
      }
      if (range.start >= stats.size) {
        throw new StoreError(`${this.uriOf(key)}: range starts past the end`, {
          uri: this.uriOf(key),
          status: 416,
        });
      }
      const end = Math.min(range.end, stats.size);
      const body = handle.createReadStream({
        start: range.start,
        end: end - 1,
        signal: options.signal,
      });
      return {
        body,
        info,
        contentLength: end - range.start,
        contentRange: `bytes ${range.start}-${end - 1}/${stats.size}`,
      };
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /** A file has one version: the current one is the oldest. */
  getOldest(key: string, options: SignalOptions = {}): Promise<GetResult> {
    return this.get(key, options);
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    const start = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
    yield* this.walk(start === '' ? [] : start.split('/'));
  }

  /** Every regular file below the directory of `segments`, in UTF-8 byte order of keys. */
  private async *walk(segments: string[]): AsyncIterable<ObjectInfo> {
    const dir = path.join(this.root, ...segments);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      throw fsError(error, `cannot list ${dir}`, this.uriOf(segments.join('/')));
    }
    // A directory sorts as its name plus '/', so keys come out in byte order.
    const children = await Promise.all(
      names
        .filter((n) => !n.endsWith(UPLOADING) && !n.startsWith('.tmp-'))
        .map(async (name) => ({ name, stats: await lstat(path.join(dir, name)) })),
    );
    const sorted = children
      .filter((c) => c.stats.isFile() || c.stats.isDirectory())
      .map((c) => ({ ...c, sort: c.stats.isDirectory() ? `${c.name}/` : c.name }))
      .sort((a, b) => compareUtf8(a.sort, b.sort));
    for (const child of sorted) {
      const key = [...segments, child.name];
      if (child.stats.isDirectory()) yield* this.walk(key);
      else yield infoOf(key.join('/'), child.stats);
    }
  }

  async put(key: string, bytes: Uint8Array): Promise<ObjectInfo> {
    const file = this.pathOf(key);
    const uri = this.uriOf(key);
    try {
      await mkdir(path.dirname(file), { recursive: true });
      const temp = tempPathFor(file);
      await writeSynced(temp, bytes);
      await rename(temp, file);
      await fsyncDir(path.dirname(file));
      return infoOf(key, await lstat(file));
    } catch (error) {
      throw fsError(error, `cannot write ${uri}`, uri);
    }
  }

  /** Only if absent: the bytes go to a temp, then `link` (which fails if the name exists). */
  async create(key: string, bytes: Uint8Array): Promise<ObjectInfo> {
    const file = this.pathOf(key);
    const uri = this.uriOf(key);
    const temp = tempPathFor(file);
    try {
      await mkdir(path.dirname(file), { recursive: true });
      await writeSynced(temp, bytes);
      try {
        await link(temp, file);
      } catch (error) {
        if ((error as { code?: string }).code === 'EEXIST') {
          throw new Exists(`${uri} already exists`, { uri, cause: error });
        }
        throw error;
      }
      await fsyncDir(path.dirname(file));
      return infoOf(key, await lstat(file));
    } catch (error) {
      if (error instanceof Exists) throw error;
      throw fsError(error, `cannot create ${uri}`, uri);
    } finally {
      await rm(temp, { force: true });
    }
  }

  async createMode(): Promise<CreateMode> {
    return 'atomic';
  }

  async delete(key: string): Promise<void> {
    const file = await this.inside(key);
    try {
      await unlink(file);
      await fsyncDir(path.dirname(file));
    } catch (error) {
      throw fsError(error, `cannot delete ${this.uriOf(key)}`, this.uriOf(key));
    }
  }

  /** Delete if the file's inode and mtime are still `version` (checked just before the unlink). */
  async deleteIf(key: string, version: string): Promise<void> {
    const now = await this.head(key);
    if (now.version !== version) {
      throw new PreconditionFailed(`${this.uriOf(key)} changed: ${now.version}, not ${version}`, {
        uri: this.uriOf(key),
      });
    }
    await this.delete(key);
  }

  async presign(key: string): Promise<string> {
    throw new NotSupported(
      `presigned URLs need a stage on an object store; a local stage has none (${this.uriOf(key)})`,
    );
  }

  async close(): Promise<void> {}
}
/** The part protocol of a local stage: a temp file written at offsets, then renamed. */
class FileUploads implements PartProtocol {
  readonly name = 'local upload';
  readonly maxParts = 1_000_000;
  readonly minPartSize = 1;
  readonly maxPartSize = 5 * 1024 ** 3;
  readonly resumable = false;
  readonly leftover = 'the next upload to the stage removes it';
  /** Open temp files of uploads in progress, by upload reference. */
  private readonly open = new Map<string, { handle: FileHandle; marker: string }>();
  private swept = false;

  constructor(private readonly files: StageFiles) {}

  private pathOf(key: string): string {
    return this.files.pathOf(key);
  }

  private uriOf(key: string): string {
    return this.files.uriOf(key);
  }

  /** Start an upload: open `<final>.uploading` (exclusive) and leave a marker naming it. */
  async create(key: string): Promise<string> {
    const file = this.pathOf(key);
    const temp = `${file}${UPLOADING}`;
    const uri = this.uriOf(key);
    await this.sweep();
    const marker = this.pathOf(
      [this.files.keyPrefix, MARKERS, `${process.pid}.${randomBytes(6).toString('hex')}`]
        .filter((s) => s !== '')
        .join('/'),
    );
    try {
      await mkdir(path.dirname(marker), { recursive: true });
      await writeSynced(marker, Buffer.from(`${key}\n`));
      await mkdir(path.dirname(file), { recursive: true });
      const handle = await open(temp, 'wx', 0o644);
      this.open.set(key, { handle, marker });
    } catch (error) {
      await rm(marker, { force: true });
      throw fsError(error, `cannot start the upload of ${uri}`, uri);
    }
    return key;
  }

  async putPart(key: string, upload: string, part: PartUpload): Promise<string> {
    const entry = this.open.get(upload);
    const uri = this.uriOf(key);
    if (entry === undefined) throw new StoreError(`no upload in progress for ${uri}`, { uri });
    part.signal.throwIfAborted();
    try {
      if (part.body instanceof Uint8Array) {
        await writeAt(entry.handle, part.body, part.offset);
      } else {
        let position = part.offset;
        for await (const chunk of part.body as Readable) {
          part.signal.throwIfAborted();
          await writeAt(entry.handle, chunk as Uint8Array, position);
          position += (chunk as Uint8Array).length;
        }
      }
    } catch (error) {
      if (part.signal.aborted) throw error;
      throw error instanceof Error && 'syscall' in error
        ? fsError(error, `cannot write ${uri}`, uri)
        : error;
    }
    return '';
  }

  async listParts(): Promise<Map<number, ListedPart> | 'gone'> {
    return 'gone';
  }

  /** fsync the temp, rename it to the final name, fsync the directory: published. */
  async complete(
    key: string,
    upload: string,
    _parts: readonly CompletedPart[],
    options: UploadObjectOptions & { size: number },
  ): Promise<ObjectInfo> {
    const entry = this.open.get(upload);
    const uri = this.uriOf(key);
    if (entry === undefined) throw new StoreError(`no upload in progress for ${uri}`, { uri });
    const file = this.pathOf(key);
    try {
      await entry.handle.truncate(options.size);
      await entry.handle.sync();
      await entry.handle.close();
      this.open.delete(upload);
      await rename(`${file}${UPLOADING}`, file);
    } catch (error) {
      throw fsError(error, `cannot publish ${uri}`, uri);
    }
    // Published: nothing removes it from here on.
    await rm(entry.marker, { force: true });
    try {
      await fsyncDir(path.dirname(file));
    } catch (cause) {
      throw new StoreError(`uploaded ${uri} but could not fsync its directory`, { uri, cause });
    }
    return infoOf(key, await lstat(file));
  }

  /**
   * Discard an upload: its temp, and its marker. An upload of this process is closed first; one
   * of a writer that is gone (listed by {@link listUploads}, aborted by garbage collection) has
   * its markers removed too, so it is not listed again.
   */
  async abort(key: string, upload: string): Promise<void> {
    const entry = this.open.get(upload);
    this.open.delete(upload);
    await entry?.handle.close().catch(() => undefined);
    await rm(`${this.pathOf(key)}${UPLOADING}`, { force: true });
    if (entry) {
      await rm(entry.marker, { force: true });
      return;
    }
    for (const m of await this.markers()) {
      if (m.gone && m.key === key) await rm(m.file, { force: true });
    }
  }

  /** The uploads whose writer is gone (their markers), oldest first. */
  async *listUploads(): AsyncIterable<OpenUpload> {
    for (const m of await this.markers()) {
      if (m.gone) yield { key: m.key, upload: m.key, initiated: m.time };
    }
  }

  /** The markers below the stage's prefix: which temp each names, and whether its writer is gone. */
  private async markers(): Promise<
    Array<{ file: string; key: string; time: Date; gone: boolean }>
  > {
    const dir = this.pathOf([this.files.keyPrefix, MARKERS].filter((s) => s !== '').join('/'));
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (error) {
      if ((error as { code?: string }).code === 'ENOENT') return [];
      throw fsError(error, `cannot list ${dir}`, dir);
    }
    const out: Array<{ file: string; key: string; time: Date; gone: boolean }> = [];
    for (const name of names) {
      const m = /^(\d+)\.[0-9a-f]+$/.exec(name);
      if (!m) continue;
      const file = path.join(dir, name);
      try {
        const [text, stats] = await Promise.all([readFile(file, 'utf8'), lstat(file)]);
        const key = text.trim();
        const old = Date.now() - stats.mtimeMs > STALE_UPLOAD_MS;
        const mine = Number(m[1]) === process.pid && this.open.has(key);
        out.push({
          file,
          key,
          time: stats.mtime,
          gone: !mine && (old || !isRunning(Number(m[1]))),
        });
      } catch (error) {
        if ((error as { code?: string }).code !== 'ENOENT') throw error;
      }
    }
    return out.sort((a, b) => a.time.getTime() - b.time.getTime());
  }

  /** Remove the temps (and markers) of writers that are gone; once per process and stage. */
  private async sweep(): Promise<void> {
    if (this.swept) return;
    this.swept = true;
    for (const m of await this.markers()) {
      if (!m.gone) continue;
      debug('removing the temp of a gone writer: %s', m.key);
      await rm(`${this.pathOf(m.key)}${UPLOADING}`, { force: true });
      await rm(m.file, { force: true });
    }
  }
}

async function writeAt(handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

async function writeSynced(file: string, bytes: Uint8Array): Promise<void> {
  const handle = await open(file, 'wx', 0o644);
  try {
    await writeAt(handle, bytes, 0);
    await handle.sync();
  } finally {
    await handle.close();
  }
}
