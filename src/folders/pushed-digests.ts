/**
 * {@link PushedDigests}: the SHA-256 a push knows of each file it left in the store folder, tied
 * to the exact version it knows it for, so that `commit --from` (src/folders/commit-from.ts) can
 * record it in the commit's file records (`sha256`, docs/commit-format.md), and which keys the
 * local folder held (the commit's `extra` are the others).
 *
 * A digest is learnt only for one version of one key: the version a put returned, or the
 * version of the listing (or HEAD) entry that proved the object already held the file's bytes.
 * The commit lists the folder afterwards; a record gets the digest only when its version ID and
 * size are the ones learnt, so a file another writer replaced between the push and the
 * commit's snapshot is recorded without one — never with the digest of other bytes. Where the
 * entry has no version ID (an S3 ListObjectsV2 listing), its ETag stands for it: the same key
 * with the same ETag and size is one state of its bytes (rule 2 of `sameBytes`,
 * src/contract/entry.ts — every store's ETag changes when the object is written again, except
 * where it is a digest of the bytes, which proves the same bytes anyway).
 *
 * **Kept in a file, in key order, not in memory**, since a push may leave millions of files:
 * the push tells each local file once, in key order ({@link DigestSink.file}), and the commit
 * asks for each of its records in key order ({@link PushedDigests.sha256Of}), so one pass over
 * the file answers a pass over the records. A record asked out of that order (a listing in
 * another order) starts the file again: slower, never wrong.
 *
 * @module
 */
import { rm } from 'node:fs/promises';
import type { ObjectInfo } from '../contract/primitives.js';
import { compareUtf8 } from '../core/keys.js';
import { field, LineCursor, LineWriter, unfield } from './line-files.js';

/** What a push tells its digest sink: each local file, in key order, with what it knows of it. */
export interface DigestSink {
  /**
   * The local file `rel` (its key below the pushed folder; next in key order) is in the folder;
   * the object `info` (its `versionId`, else its `etag`, and `size`) holds bytes whose SHA-256
   * is `sha256`, when both are given. No digest is kept without a version ID or ETag, or for
   * one that is not 64 hex digits.
   */
  file(rel: string, info?: ObjectInfo, sha256?: string): Promise<void> | undefined;
}

/** The version a digest was learnt for: the version ID, else `\0` and the ETag. */
function versionTag(info: ObjectInfo): string | undefined {
  if (info.versionId !== undefined && info.versionId !== '') return info.versionId;
  if (info.etag !== undefined && info.etag !== '') return `\0${info.etag}`;
  return undefined;
}

const SHA256 = /^[0-9a-f]{64}$/;

/** One line, read: `[rel]`, or `[rel, versionTag, size, sha256]` (tab-separated fields). */
type Line = [string] | [string, string, number, string];

/** The digests a push learnt, written as it goes and looked up by a commit's file records. */
export class PushedDigests implements DigestSink {
  private writer: LineWriter | undefined;
  private cursor: LineCursor | undefined;
  private head: Line | undefined;
  private lastAsked: string | undefined;

  private constructor(
    /** The pushed folder's prefix (`data/`; `` for a bucket), which records' keys start with. */
    readonly prefix: string,
    private readonly path: string,
  ) {}

  /** An empty set of digests of the folder `prefix`, kept in the new file `file`. */
  static async create(prefix: string, file: string): Promise<PushedDigests> {
    const digests = new PushedDigests(prefix, file);
    digests.writer = await LineWriter.create(file);
    return digests;
  }

  /** See {@link DigestSink.file}. */
  file(rel: string, info?: ObjectInfo, sha256?: string): Promise<void> | undefined {
    if (this.writer === undefined) throw new Error('PushedDigests: told a file after the push');
    const tag = info === undefined ? undefined : versionTag(info);
    const known =
      info !== undefined &&
      tag !== undefined &&
      sha256 !== undefined &&
      SHA256.test(sha256) &&
      info.key === this.prefix + rel;
    return this.writer.add(
      known ? `${field(rel)}\t${field(tag)}\t${info.size}\t${sha256}` : field(rel),
    );
  }

  /** The push is over: what it told can be read. */
  async seal(): Promise<void> {
    await this.writer?.close();
    this.writer = undefined;
  }

  /** A pass over the commit's records begins (see `KnownDigests.begin`). */
  begin(): void {
    this.cursor?.close();
    this.cursor = undefined;
    this.head = undefined;
    this.lastAsked = undefined;
  }

  /** The line of `rel`, or `undefined` when the local folder had no such file. */
  private lineOf(rel: string): Line | undefined {
    if (this.writer !== undefined) throw new Error('PushedDigests: asked before the push ended');
    if (this.lastAsked !== undefined && compareUtf8(this.lastAsked, rel) > 0) this.begin();
    this.lastAsked = rel;
    this.cursor ??= new LineCursor(this.path);
    for (;;) {
      if (this.head === undefined) {
        const text = this.cursor.next();
        if (text === undefined) return undefined;
        const f = text.split('\t');
        const name = unfield(f[0] as string) as string;
        this.head =
          f.length === 4
            ? [name, unfield(f[1] as string) as string, Number(f[2]), f[3] as string]
            : [name];
      }
      const c = compareUtf8(this.head[0], rel);
      if (c > 0) return undefined;
      if (c === 0) return this.head;
      this.head = undefined;
    }
  }

  /** Whether the record's key (below the folder) was a file of the local folder. */
  hasFile(key: string): boolean {
    return key.startsWith(this.prefix) && this.lineOf(key.slice(this.prefix.length)) !== undefined;
  }

  /**
   * The SHA-256 (64 lowercase hex) learnt for exactly this version of this key — the same
   * `key`, `versionId` (or, learnt from an entry without one, `etag`) and `size` — or `undefined`.
   */
  sha256Of(record: {
    key: string;
    versionId: string;
    size: number;
    etag?: string | undefined;
  }): string | undefined {
    if (!record.key.startsWith(this.prefix)) return undefined;
    const line = this.lineOf(record.key.slice(this.prefix.length));
    if (line === undefined || line.length === 1 || line[2] !== record.size) return undefined;
    const v = line[1];
    const same =
      v === record.versionId ||
      (v.charCodeAt(0) === 0 && record.etag !== undefined && v.slice(1) === record.etag);
    return same ? line[3] : undefined;
  }

  /** Remove the file. */
  async dispose(): Promise<void> {
    this.begin();
    await this.writer?.close().catch(() => undefined);
    this.writer = undefined;
    await rm(this.path, { force: true });
  }
}
