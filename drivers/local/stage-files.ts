/**
 * The storage of a local managed stage: plain files under a root directory, one immutable file
 * per object (`<root>/[tenant/]ab/ab12…`), so any tool can read them and a location is a
 * `file:///` URI. Not the `local://` store: a managed object needs no versions, and publishing
 * it is one rename.
 *
 * **Uploads** (the part protocol, stage-uploads.ts): a temp `<final>.uploading` beside the final path (same
 * directory, so the rename is atomic), written at each part's offset, fsynced, renamed to the
 * final name, and the directory fsynced. Until the rename the temp belongs to the upload: a
 * failure or cancellation removes it; after it nothing removes the object. A writer killed before
 * the rename leaves its temp and a marker `.provcat/uploads/<pid>.<id>` naming it; the next
 * upload to the stage removes the temps of writers that are gone (their pid is not running, or
 * the marker is older than {@link STALE_UPLOAD_MS}), and GC lists them as open uploads; a marker
 * its writer was killed while writing (no whole line) names no temp yet, and just goes.
 *
 * **Containment is checked on the real path** (issue: a symlink inside the stage, `ab -> /etc`,
 * must not let a location reach outside): every path is resolved with `realpath` and must be the
 * root's real path plus the key, with no symlink component; files are opened with `O_NOFOLLOW`.
 * Anything else is `ObjectIntegrityError('OutsideStage')`. The same holds for every path taken
 * from a marker or a plan before anything is removed ({@link StageFiles.removeTemp}): a marker
 * is a file anyone who can write the stage can write, so its key must be a key of this stage
 * (every segment valid, no `..`; inside the tenant; no `.provcat` folder) whose folders are real
 * folders below the root, and the temp a regular file. A marker naming anything else is never
 * followed: the sweep leaves it (and what it names) alone, GC does not list it, and aborting it
 * is `OutsideStage`. The markers folder itself must be a real folder of the stage.
 *
 * Listings walk the directory tree without following links, in UTF-8 byte order of keys; the
 * temps are not objects. A file's version is its inode and modification time.
 *
 * @module
 */
import { constants as fsc } from 'node:fs';
import {
  type FileHandle,
  link,
  lstat,
  mkdir,
  open,
  readdir,
  realpath,
  rename,
  rm,
  unlink,
} from 'node:fs/promises';
import path from 'node:path';
import type {
  CreateMode,
  GetResult,
  ObjectInfo,
  PartProtocol,
  SignalOptions,
} from '../../src/contract/primitives.js';
import {
  Exists,
  NotFound,
  NotSupported,
  ObjectIntegrityError,
  PreconditionFailed,
  StoreError,
} from '../../src/core/errors.js';
import { fsyncDir, tempPathFor } from '../../src/core/fs-atomic.js';
import { compareUtf8 } from '../../src/core/keys.js';
import type { StageBackend } from '../../src/lake/backend.js';

import { fsError, infoOf, keyProblemOf, MARKERS, UPLOADING, writeSynced } from './stage-io.js';
import { FileUploads } from './stage-uploads.js';

export { STALE_UPLOAD_MS, UPLOADING } from './stage-io.js';

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
    const problem = keyProblemOf(key);
    if (problem !== undefined) {
      throw new ObjectIntegrityError('OutsideStage', `${uri} is outside the stage: ${problem}`, {
        uri,
      });
    }
    const root = await this.rootReal(uri);
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

  /** The root's real path (resolved once). */
  private rootReal(uri: string): Promise<string> {
    this.realRoot ??= realpath(this.root).catch((error: unknown) => {
      this.realRoot = undefined;
      throw fsError(error, `stage root ${this.root}`, uri);
    });
    return this.realRoot;
  }

  /**
   * Why `key` (a full key, as a marker or a plan names it) cannot name an upload temp of this
   * stage, or `undefined`: every segment valid (no `..`, no empty one), inside the tenant, and no
   * `.provcat` folder on the way. No I/O.
   */
  tempKeyProblem(key: string): string | undefined {
    const problem = keyProblemOf(key);
    if (problem !== undefined) return problem;
    const rel = this.keyPrefix === '' ? key : key.slice(this.keyPrefix.length + 1);
    if (this.keyPrefix !== '' && !key.startsWith(`${this.keyPrefix}/`)) {
      return `not inside the tenant ${this.keyPrefix}/`;
    }
    if (rel.split('/').includes('.provcat')) return 'in a reserved .provcat folder';
    return undefined;
  }

  /**
   * The path of the upload temp of `key` (`<key>.uploading`) when it is contained — a valid key
   * of this stage ({@link tempKeyProblem}) whose folder's real path is the root's real path plus
   * the key's folders (no symlink on the way) — else why not. A folder that does not exist holds
   * no temp: `{ file: undefined }`.
   */
  async containedTemp(key: string): Promise<{ file?: string; problem?: string }> {
    const problem = this.tempKeyProblem(key);
    if (problem !== undefined) return { problem };
    const segments = key.split('/');
    const folder = path.join(this.root, ...segments.slice(0, -1));
    let real: string;
    try {
      real = await realpath(folder);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return {};
      throw fsError(error, `cannot resolve ${folder}`, this.uriOf(key));
    }
    const root = await this.rootReal(this.uriOf(key));
    if (real !== path.join(root, ...segments.slice(0, -1))) {
      return { problem: `its folder goes through a symlink (to ${real})` };
    }
    return { file: path.join(folder, `${segments.at(-1) as string}${UPLOADING}`) };
  }

  /**
   * Remove the upload temp of `key` if it is contained ({@link containedTemp}) and a regular
   * file; `false` when there was none. Anything else is `ObjectIntegrityError('OutsideStage')`,
   * and nothing is removed.
   */
  async removeTemp(key: string): Promise<boolean> {
    const uri = this.uriOf(key);
    const { file, problem } = await this.containedTemp(key);
    if (problem !== undefined) {
      throw new ObjectIntegrityError(
        'OutsideStage',
        `the upload temp of ${uri} is outside the stage: ${problem}; nothing removed`,
        { uri },
      );
    }
    if (file === undefined) return false;
    let stats: Awaited<ReturnType<typeof lstat>>;
    try {
      stats = await lstat(file);
    } catch (error) {
      if ((error as { code?: string }).code === 'ENOENT') return false;
      throw fsError(error, `cannot stat ${file}`, uri);
    }
    if (!stats.isFile()) {
      throw new ObjectIntegrityError(
        'OutsideStage',
        `the upload temp of ${uri} is not a regular file (a symlink, a folder or a device); nothing removed`,
        { uri },
      );
    }
    try {
      await unlink(file);
    } catch (error) {
      if ((error as { code?: string }).code === 'ENOENT') return false;
      throw fsError(error, `cannot remove ${file}`, uri);
    }
    return true;
  }

  /**
   * The markers folder of the stage, proven a real folder below the root (`undefined` when it
   * does not exist); `OutsideStage` when it goes through a symlink.
   */
  async markersFolder(): Promise<string | undefined> {
    const rel = [this.keyPrefix, MARKERS].filter((s) => s !== '').join('/');
    const dir = this.pathOf(rel);
    let real: string;
    try {
      real = await realpath(dir);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
      throw fsError(error, `cannot resolve ${dir}`, this.uriOf(rel));
    }
    const root = await this.rootReal(this.uriOf(rel));
    if (real !== path.join(root, ...rel.split('/'))) {
      throw new ObjectIntegrityError(
        'OutsideStage',
        `the upload markers folder ${dir} goes through a symlink (to ${real}): remove the link`,
        { uri: this.uriOf(rel) },
      );
    }
    return dir;
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
