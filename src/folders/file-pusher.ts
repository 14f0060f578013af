/**
 * {@link FilePusher}: the second pass of a push (src/folders/push.ts) for one file at a time —
 * unchanged by the push index and the listing, or read, hashed, compared and sent — by the rules
 * of push.ts's module comment (which digest proves a file unchanged; every upload one state of
 * its file; small files through the store's batch).
 *
 * Most files of a second push are found unchanged at once ({@link FilePusher.quick}: no read,
 * no request, no promise); the rest go through {@link FilePusher.push}.
 *
 * @module
 */
import path from 'node:path';
import { statedMd5 } from '../cache/content-digest.js';
import type { CachedStoreContext } from '../cache/context.js';
import type { ObjectInfo, PutBatch } from '../contract/primitives.js';
import { contentTypeFor } from '../core/content-type.js';
import { NotFound, SourceChanged } from '../core/errors.js';
import type { UploadSettings } from '../upload/settings.js';
import {
  digestFile,
  digestsOf,
  type FileDigests,
  type FileStamp,
  readWhole,
  readWholeSync,
  STABLE_ATTEMPTS,
  SYNC_READ_MAX,
  sameStamp,
  stampNow,
} from './local-tree.js';
import { ByteBudget, type PushProgress } from './push-bookkeeping.js';
import { digestsAt, type IndexEntry, recordedEntry, wallNs } from './push-index.js';
import type { PlanRecord } from './push-plan.js';

/** Largest file read whole into memory and sent from there (64 MiB). */
export const WHOLE_READ_MAX = 64 * 1024 * 1024;

/** Most bytes of files held in memory at once by one push (128 MiB). */
export const MEMORY_BUDGET = 128 * 1024 * 1024;

/**
 * What a push takes of the store: the store context and its upload settings (a large file goes
 * through the upload engine). `ObjectStore` is one.
 */
export interface PushContext extends CachedStoreContext {
  /** How large objects are put (the threshold decides which files are read whole). */
  readonly uploads: UploadSettings;
}

/** A local file of the plan, with what the push index holds of it as the push goes. */
export class PushItem implements PlanRecord {
  /** The entry of the next push index (at first `old`; see FilePusher). */
  entry: IndexEntry | undefined;
  constructor(
    readonly rel: string,
    readonly local: FileStamp,
    readonly remote: ObjectInfo | undefined,
    /** What the last push index held of the file. */
    readonly old: IndexEntry | undefined,
    private readonly localDir: string,
  ) {
    this.entry = old;
  }

  /** The local path (joined when asked: most files of a push are never opened). */
  get path(): string {
    return path.join(this.localDir, this.rel);
  }
}

/** What pushing one file did: the bytes sent (none: unchanged), and the digest of its object. */
export interface Pushed {
  sent: number | undefined;
  learnt?: { info: ObjectInfo; sha256: string | undefined } | undefined;
}

/** Sends one file at a time; see the module comment. */
export class FilePusher {
  /** Files read and hashed (`PushResult.hashed`). */
  hashed = 0;
  private readonly budget = new ByteBudget(MEMORY_BUDGET);
  private readonly wholeMax: number;
  private readonly recordSha: boolean;
  /** The SHA-256 of every file is needed: to record with its object, or to tell `digests`. */
  private readonly wantSha: boolean;
  constructor(
    private readonly store: PushContext,
    private readonly bucket: string,
    private readonly prefix: string,
    private readonly dryRun: boolean,
    private readonly progress: PushProgress,
    private readonly contentType: string | undefined,
    /** Where small files go when the store batches their durability (see the module comment). */
    private readonly batch: PutBatch | undefined,
    /** The SHA-256 of every file is wanted (to tell a digest sink). */
    wantSha: boolean,
  ) {
    this.wholeMax = Math.min(WHOLE_READ_MAX, store.uploads.multipartThreshold);
    this.recordSha = store.capabilities.sha256Metadata === true;
    this.wantSha = this.recordSha || wantSha;
  }

  /** Push one file: the bytes sent (none when its object already held them), and its digest. */
  async push(file: PushItem, signal: AbortSignal): Promise<Pushed> {
    return file.local.size <= this.wholeMax
      ? this.pushWhole(file, file.remote, signal)
      : this.pushFromDisk(file, file.remote, signal);
  }

  /**
   * A small file whose object states a digest (a SHA-256 record, else an MD5) that the index holds
   * for the file's state when the folder was read: unchanged, found at once, with no read, no
   * request and no promise — most files of a second push. `undefined` sends it to {@link push}.
   */
  quick(file: PushItem): Pushed | undefined {
    const info = file.remote;
    const size = file.local.size;
    if (info === undefined || info.size !== size || size > this.wholeMax) return undefined;
    const sha256 = info.sha256;
    const md5 = statedMd5(info);
    if (sha256 === undefined && md5 === undefined) return undefined;
    const known = this.known(file, file.local, {
      md5: md5 !== undefined,
      sha256: sha256 !== undefined,
    });
    if (known === undefined || !agrees(known, sha256, md5)) return undefined;
    this.progress.file().done(size);
    return { sent: undefined, learnt: { info, sha256: known.sha256 } };
  }

  /**
   * The digests the index holds for the file in the state `stamp`, when they include `want`
   * (and the SHA-256 to record, on a driver that records it).
   */
  private known(
    file: PushItem,
    stamp: FileStamp,
    want: { md5: boolean; sha256: boolean },
  ): FileDigests | undefined {
    const known = digestsAt(file.entry, stamp);
    if (known === undefined) return undefined;
    if (want.md5 && known.md5 === undefined) return undefined;
    if ((want.sha256 || this.wantSha) && known.sha256 === undefined) return undefined;
    return known;
  }

  /**
   * A small file: unchanged by the index's digests of its state when the folder was read (no
   * read), else read whole (one snapshot), hashed, compared and sent from memory.
   */
  private async pushWhole(
    file: PushItem,
    info: ObjectInfo | undefined,
    signal: AbortSignal,
  ): Promise<Pushed> {
    const progress = this.progress.file();
    if (info !== undefined && digestsAt(file.entry, file.local) !== undefined) {
      let short = false;
      let sha256: string | undefined;
      const same = await this.unchanged(
        file,
        info,
        file.local.size,
        async (want) => {
          const known = this.known(file, file.local, want);
          short ||= known === undefined;
          sha256 = known?.sha256;
          return known ?? {};
        },
        signal,
      );
      if (same !== undefined && !short) {
        progress.done(file.local.size);
        return { sent: undefined, learnt: { info: same, sha256 } };
      }
    }
    const held = await this.budget.acquire(file.local.size);
    try {
      const started = wallNs();
      const { value: bytes, stamp } =
        file.local.size <= SYNC_READ_MAX ? readWholeSync(file.path) : await readWhole(file.path);
      this.hashed++;
      // Both digests, so the index serves any store's listing (MD5 ETags, SHA-256 records).
      const digests = digestsOf(bytes, { md5: true, sha256: true });
      file.entry = recordedEntry(file.entry, stamp, digests, started);
      const same = await this.unchanged(file, info, bytes.length, async () => digests, signal);
      if (same !== undefined) {
        progress.done(bytes.length);
        return { sent: undefined, learnt: { info: same, sha256: digests.sha256 } };
      }
      let learnt: Pushed['learnt'];
      if (!this.dryRun) {
        const key = this.prefix + file.rel;
        const putOptions = {
          size: bytes.length,
          contentType: await contentTypeFor(file.rel, this.contentType),
          sha256: this.recordSha ? digests.sha256 : undefined,
          signal,
          onProgress: progress.onProgress,
        };
        const put =
          this.batch !== undefined
            ? await this.batch.put(key, bytes, putOptions)
            : await this.store._put(this.bucket, key, bytes, putOptions);
        if (put.size === bytes.length) learnt = { info: put, sha256: digests.sha256 };
      }
      progress.done(bytes.length);
      return { sent: bytes.length, learnt };
    } finally {
      this.budget.release(held);
    }
  }

  /** A large file: hashed and sent from disk, its state checked before and after. */
  private async pushFromDisk(
    file: PushItem,
    info: ObjectInfo | undefined,
    signal: AbortSignal,
  ): Promise<Pushed> {
    const progress = this.progress.file();
    for (let attempt = 1; attempt <= STABLE_ATTEMPTS; attempt++) {
      progress.undo();
      const before = await stampNow(file.path);
      const digests: FileDigests = {};
      let hashedAt: bigint | undefined;
      const digest = async (want: { md5: boolean; sha256: boolean }) => {
        const known = this.known(file, before, want);
        if (known !== undefined) return Object.assign(digests, known);
        // One pass: the SHA-256 to record comes with the one to compare.
        const more = { md5: want.md5, sha256: want.sha256 || this.wantSha };
        hashedAt = wallNs();
        Object.assign(digests, await digestFile(file.path, more, signal));
        this.hashed++;
        return digests;
      };
      const same = await this.unchanged(file, info, before.size, digest, signal);
      if (!sameStamp(before, await stampNow(file.path))) continue;
      if (hashedAt !== undefined) file.entry = recordedEntry(file.entry, before, digests, hashedAt);
      if (same !== undefined || this.dryRun) {
        progress.done(before.size);
        return same !== undefined
          ? { sent: undefined, learnt: { info: same, sha256: digests.sha256 } }
          : { sent: before.size };
      }
      if (this.wantSha && digests.sha256 === undefined) {
        await digest({ md5: false, sha256: true });
        if (!sameStamp(before, await stampNow(file.path))) continue;
        if (hashedAt !== undefined)
          file.entry = recordedEntry(file.entry, before, digests, hashedAt);
      }
      let put: ObjectInfo;
      try {
        put = await this.store._put(this.bucket, this.prefix + file.rel, file.path, {
          size: before.size,
          contentType: await contentTypeFor(file.rel, this.contentType),
          sha256: digests.sha256,
          signal,
          onProgress: progress.onProgress,
        });
      } catch (error) {
        if (error instanceof SourceChanged) continue;
        throw error;
      }
      // The engine compared the file with its state when it opened it; this compares it with
      // the state that was hashed.
      if (!sameStamp(before, await stampNow(file.path))) continue;
      progress.done(before.size);
      return {
        sent: before.size,
        learnt: put.size === before.size ? { info: put, sha256: digests.sha256 } : undefined,
      };
    }
    throw new SourceChanged(
      `${file.path} kept changing while it was pushed (${STABLE_ATTEMPTS} attempts); ` +
        'the files sent before it stay, and a rerun of the push sends the rest',
    );
  }

  /**
   * The listing's entry (or, when it states no digest, on a driver that records SHA-256s, the
   * HEAD's) when a digest it states proves the object holds the file's bytes, else `undefined`;
   * see the module comment. `digest` hashes the file on demand.
   */
  private async unchanged(
    file: PushItem,
    info: ObjectInfo | undefined,
    size: number,
    digest: (want: { md5: boolean; sha256: boolean }) => Promise<FileDigests>,
    signal: AbortSignal,
  ): Promise<ObjectInfo | undefined> {
    const proved = (same: boolean, by: ObjectInfo) => (same ? by : undefined);
    if (info === undefined || info.size !== size) return undefined;
    const md5 = statedMd5(info);
    if (info.sha256 !== undefined || md5 !== undefined) {
      const want = { md5: md5 !== undefined, sha256: info.sha256 !== undefined };
      return proved(agrees(await digest(want), info.sha256, md5), info);
    }
    if (!this.recordSha) return undefined;
    let head: ObjectInfo;
    try {
      head = await this.store._head(this.bucket, this.prefix + file.rel, { signal });
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
    if (head.size !== size) return undefined;
    const recorded = head.sha256;
    const headMd5 = recorded === undefined ? statedMd5(head) : undefined;
    if (headMd5 !== undefined) {
      return proved((await digest({ md5: true, sha256: false })).md5 === headMd5, head);
    }
    if (recorded === undefined) return undefined;
    return proved((await digest({ md5: false, sha256: true })).sha256 === recorded, head);
  }
}

/**
 * Whether the file's digests equal every digest the object states: its SHA-256 record and its
 * MD5 both, where it states both (a record another client wrote may disagree with the bytes,
 * which the MD5 the service computed does not).
 */
function agrees(file: FileDigests, sha256: string | undefined, md5: string | undefined): boolean {
  return (
    (sha256 === undefined || file.sha256 === sha256) && (md5 === undefined || file.md5 === md5)
  );
}
