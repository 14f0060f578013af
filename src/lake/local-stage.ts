/**
 * {@link LocalStage}: managed objects as plain files under a root directory.
 *
 * Locations are `file:///abs/root/[tenant/]ab/abcdef…`. This stage does not go through the
 * `local://` driver: a managed object is one immutable file, and publishing it is one rename.
 *
 * Upload writes `<final>.uploading` beside the final path (same directory, so the rename is
 * atomic), hashing while it writes, fsyncs the file, renames it to the final name and fsyncs the
 * directory. Until the rename the temp file belongs to the upload: a failure or cancellation
 * removes it. After the rename the object is published and nothing removes it — a cancellation
 * that arrives then is ignored and the location is returned.
 *
 * Reads (stage-base.ts) open the file first (so a missing object is `NotFound` from `open`, not a
 * stream error), then stream it through the verifying wrappers of verify.ts: a whole read asks
 * the file for one byte more than declared (the probe), a range read seeks once.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { debuglog } from 'node:util';
import { raceAbort } from '../concurrency.js';
import { StoreError } from '../errors.js';
import { fsyncDir } from '../fs-atomic.js';
import type { LocalStageDescriptor } from './descriptor.js';
import { abortError, StageConfigError } from './errors.js';
import { containFile, fileUri, newObjectKey, splitKey } from './keys.js';
import {
  checkContentType,
  checkDataLocation,
  type DataLocation,
  DEFAULT_CONTENT_TYPE,
} from './location.js';
import type { PresignedUrl } from './presign.js';
import { fsError, openFile, openSource } from './source.js';
import {
  checkPartsInFlight,
  type ManagedStage,
  type UploadOptions,
  type UploadSource,
} from './stage.js';
import { StageBase } from './stage-base.js';

const debug = debuglog('provcat:lake');

/** Bytes read and written per step of a local upload. */
const CHUNK = 1024 * 1024;

/** A managed stage on the local file system. Build it with `stageFromDescriptor`. */
export class LocalStage extends StageBase implements ManagedStage {
  readonly kind = 'local' as const;
  /** Segments of the directory objects live in: root, then tenant. */
  private readonly base: readonly string[];

  constructor(readonly descriptor: LocalStageDescriptor) {
    super();
    this.base = [
      ...splitKey(descriptor.root.slice(1)),
      ...(descriptor.tenant ? [descriptor.tenant] : []),
    ];
  }

  /** The directory objects are written below (root, or root/tenant). */
  get directory(): string {
    return `/${this.base.join('/')}`;
  }

  contain(uri: string): string {
    return containFile(uri, this.base);
  }

  /** The file of a location inside this stage (containment checked, no I/O). */
  pathOf(uri: string): string {
    return path.join(this.directory, ...this.contain(uri).split('/'));
  }

  async upload(source: UploadSource, options: UploadOptions = {}): Promise<DataLocation> {
    const contentType = checkContentType(options.contentType ?? DEFAULT_CONTENT_TYPE);
    checkPartsInFlight(options.partsInFlight);
    const { signal, onProgress } = options;
    if (signal?.aborted) throw abortError(signal);
    const key = newObjectKey();
    const uri = fileUri([...this.base, ...key.split('/')]);
    const finalPath = path.join(this.directory, ...key.split('/'));
    const temp = `${finalPath}.uploading`;
    const input = await openSource(source);
    const hash = createHash('sha256');
    let size = 0;
    try {
      await mkdir(path.dirname(finalPath), { recursive: true });
      const handle = await open(temp, 'wx', 0o644);
      try {
        const chunk = Buffer.allocUnsafe(CHUNK);
        for (;;) {
          const n = await raceAbort(input.fill(chunk, CHUNK), signal);
          if (n === 0) break;
          const bytes = chunk.subarray(0, n);
          hash.update(bytes);
          let written = 0;
          while (written < n) {
            const r = await handle.write(bytes, written, n - written);
            written += r.bytesWritten;
          }
          size += n;
          onProgress?.({ operation: 'upload', uri, bytes: size, totalBytes: input.size });
          if (n < CHUNK) break;
        }
        await handle.sync();
      } finally {
        await handle.close();
      }
      if (signal?.aborted) throw abortError(signal);
      await rename(temp, finalPath);
    } catch (error) {
      // Unpublished: the temp file is ours to remove. `force` covers a temp never created.
      await rm(temp, { force: true });
      debug('local upload to %s failed, temp removed: %s', uri, String(error));
      if (signal?.aborted) throw abortError(signal);
      // A file-system call failed (it names its syscall): map it; stream errors pass through.
      if (error instanceof Error && 'syscall' in error) {
        throw fsError(error, `upload to ${uri} failed`, uri);
      }
      throw error;
    } finally {
      await input.close();
    }
    // Published. A failure to make the rename durable is reported, but the object stays.
    try {
      await fsyncDir(path.dirname(finalPath));
    } catch (cause) {
      throw new StoreError(`uploaded ${uri} but could not fsync its directory`, { uri, cause });
    }
    return Object.freeze({ uri, contentType, sizeBytes: size, sha256: hash.digest('hex') });
  }

  protected resolve(uri: string): string {
    return this.pathOf(uri);
  }

  protected async readWhole(file: string, location: DataLocation): Promise<Readable> {
    const handle = await openFile(file);
    // `end` is inclusive: ask for sizeBytes + 1 bytes, so a long file shows its extra byte.
    return handle.createReadStream({ start: 0, end: location.sizeBytes });
  }

  protected async readRange(
    file: string,
    _location: DataLocation,
    start: number,
    end: number,
  ): Promise<Readable> {
    const handle = await openFile(file);
    return handle.createReadStream({ start, end: end - 1 });
  }

  async presign(location: DataLocation): Promise<PresignedUrl> {
    const loc = checkDataLocation(location);
    this.contain(loc.uri);
    throw new StageConfigError('presigned URLs need an S3 stage; a local stage has none', {
      uri: loc.uri,
    });
  }
}
