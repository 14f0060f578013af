/**
 * The part protocol of a local stage (stage-files.ts has the files): a temp
 * `<final>.uploading` written at each part's offset, fsynced and renamed; a marker
 * `.provcat/uploads/<pid>.<id>` names each upload in progress so that the temps of writers that
 * are gone can be swept (by the next upload) and listed (by GC). Nothing a marker names is
 * removed unless it is contained (`StageFiles.removeTemp`).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import {
  type FileHandle,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
} from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type {
  CompletedPart,
  ListedPart,
  ObjectInfo,
  OpenUpload,
  PartProtocol,
  PartUpload,
  UploadObjectOptions,
} from '../../src/contract/primitives.js';
import { asAbort, ObjectIntegrityError, StoreError } from '../../src/core/errors.js';
import { fsyncDir, isRunning } from '../../src/core/fs-atomic.js';
import {
  debug,
  fsError,
  infoOf,
  MARKERS,
  STALE_UPLOAD_MS,
  UPLOADING,
  writeAt,
  writeSynced,
} from './stage-io.js';

/**
 * What the uploads need of the stage's files (`StageFiles`, stage-files.ts, which creates the
 * uploads: named here, not imported, so the two files do not import each other).
 */
export interface UploadFiles {
  /** The tenant (or `''`): markers go below it. */
  readonly keyPrefix: string;
  /** A key's location URI, for messages. */
  readonly uriOf: (key: string) => string;
  /** The file of a key. */
  pathOf(key: string): string;
  /** The upload temp of `key` when it is contained in the stage, else why not. */
  containedTemp(key: string): Promise<{ file?: string; problem?: string }>;
  /** Remove the upload temp of `key` if it is contained; `false` when there was none. */
  removeTemp(key: string): Promise<boolean>;
  /** The markers folder, proven a real folder below the root; `undefined` when absent. */
  markersFolder(): Promise<string | undefined>;
}

/** An upload's marker, read. */
interface Marker {
  file: string;
  /** The key of the temp it names. */
  key: string;
  time: Date;
  /** Its writer is gone (not running, or the marker is older than STALE_UPLOAD_MS). */
  gone: boolean;
  /**
   * It was written to its end (a line): its writer opens the temp only after that, so a marker
   * cut short names no temp.
   */
  whole: boolean;
}

/** The part protocol of a local stage: a temp file written at offsets, then renamed. */
export class FileUploads implements PartProtocol {
  readonly name = 'local upload';
  readonly maxParts = 1_000_000;
  readonly minPartSize = 1;
  readonly maxPartSize = 5 * 1024 ** 3;
  readonly resumable = false;
  readonly leftover = 'the next upload to the stage removes it';
  /** Open temp files of uploads in progress, by upload reference. */
  private readonly open = new Map<string, { handle: FileHandle; marker: string }>();
  private swept = false;

  constructor(private readonly files: UploadFiles) {}

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
      if (part.signal.aborted) throw asAbort(error, part.signal);
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
    // A key from a plan or a listing: removed only when contained (OutsideStage otherwise).
    await this.files.removeTemp(key);
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
      if (!m.gone || !m.whole) continue;
      const { problem } = await this.files.containedTemp(m.key);
      if (problem !== undefined) {
        debug('not listing the marker %s: it names %j, %s', m.file, m.key, problem);
        continue;
      }
      yield { key: m.key, upload: m.key, initiated: m.time };
    }
  }

  /** The markers below the stage's prefix: which temp each names, and whether its writer is gone. */
  private async markers(): Promise<Array<Marker>> {
    const dir = await this.files.markersFolder();
    if (dir === undefined) return [];
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (error) {
      if ((error as { code?: string }).code === 'ENOENT') return [];
      throw fsError(error, `cannot list ${dir}`, dir);
    }
    const out: Marker[] = [];
    for (const name of names) {
      const m = /^(\d+)\.[0-9a-f]+$/.exec(name);
      if (!m) continue;
      const file = path.join(dir, name);
      try {
        const stats = await lstat(file);
        // A marker is a regular file of the folder: a link is not read through.
        if (!stats.isFile()) {
          debug('ignoring %s: not a regular file', file);
          continue;
        }
        const text = await readFile(file, {
          encoding: 'utf8',
          flag: fsc.O_RDONLY | fsc.O_NOFOLLOW,
        });
        const key = text.trim();
        const old = Date.now() - stats.mtimeMs > STALE_UPLOAD_MS;
        const mine = Number(m[1]) === process.pid && this.open.has(key);
        out.push({
          file,
          key,
          time: stats.mtime,
          gone: !mine && (old || !isRunning(Number(m[1]))),
          whole: text.endsWith('\n'),
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
      if (!m.whole) {
        // Its writer died while writing it, so before it opened its temp: nothing to remove
        // but the marker (an empty or cut key would otherwise keep it for ever).
        debug('removed the unfinished marker of a gone writer: %s', m.file);
        await rm(m.file, { force: true });
        continue;
      }
      try {
        await this.files.removeTemp(m.key);
      } catch (error) {
        if (!(error instanceof ObjectIntegrityError)) throw error;
        // Another writer's marker names a path outside the stage: it is never followed, and
        // this upload goes on (GC does not list it either).
        debug('not sweeping the marker %s: %s', m.file, error.message);
        continue;
      }
      debug('removed the temp of a gone writer: %s', m.key);
      await rm(m.file, { force: true });
    }
  }
}
