/**
 * {@link PushedDigests}: the SHA-256 a push knows of each file it left in the store folder, tied
 * to the exact version it knows it for, so that `commit --from` (src/folders/commit-from.ts) can
 * record it in the commit's file records (`sha256`, docs/commit-format.md).
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
 * Kept compact, since a push may leave millions of files: the key below the folder (the push's
 * own string, shared with its list of local paths) to a slot, and per slot the version ID, the
 * size and the 32 digest bytes in a shared buffer (about 100 bytes a file besides the key).
 *
 * @module
 */
import type { ObjectInfo } from '../contract/primitives.js';

/** Slots per digest chunk (32 bytes each: 128 KiB a chunk). */
const CHUNK_SLOTS = 4096;

/** What a push tells its digest sink: each file's version and SHA-256 (see the module comment). */
export interface DigestSink {
  /**
   * The object `info` (its `versionId`, else its `etag`, and `size`) holds bytes whose SHA-256
   * is `sha256`; `rel` is its key below the pushed folder. Ignored without a version ID or ETag,
   * or without a valid digest.
   */
  learn(rel: string, info: ObjectInfo, sha256: string | undefined): void;
}

/** The digests a push learnt, looked up by a commit's file records. */
export class PushedDigests implements DigestSink {
  private readonly slots = new Map<string, number>();
  private readonly versions: string[] = [];
  private readonly sizes: number[] = [];
  private readonly chunks: Buffer[] = [];

  /** @param prefix the pushed folder's prefix (`data/`; `` for a bucket), which records' keys start with */
  constructor(readonly prefix: string) {}

  /** How many files have a digest. */
  get size(): number {
    return this.slots.size;
  }

  /** See {@link DigestSink.learn}. A later call for the same `rel` replaces the earlier one. */
  learn(rel: string, info: ObjectInfo, sha256: string | undefined): void {
    // An ETag stands for the version as `\0<etag>` (no version ID starts with NUL).
    const versionId =
      info.versionId !== undefined && info.versionId !== ''
        ? info.versionId
        : info.etag !== undefined && info.etag !== ''
          ? `\0${info.etag}`
          : undefined;
    if (versionId === undefined || sha256?.length !== 64) return;
    if (info.key !== this.prefix + rel) return;
    let slot = this.slots.get(rel);
    if (slot === undefined) {
      slot = this.versions.length;
      this.slots.set(rel, slot);
      this.versions.push(versionId);
      this.sizes.push(info.size);
    } else {
      this.versions[slot] = versionId;
      this.sizes[slot] = info.size;
    }
    const chunk = Math.floor(slot / CHUNK_SLOTS);
    while (this.chunks.length <= chunk) this.chunks.push(Buffer.alloc(CHUNK_SLOTS * 32));
    // Hex decoding stops at the first character that is not hex: 32 bytes, or no digest (the
    // slot then matches no version).
    if ((this.chunks[chunk] as Buffer).write(sha256, (slot % CHUNK_SLOTS) * 32, 32, 'hex') !== 32) {
      this.versions[slot] = '';
    }
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
    const slot = this.slots.get(record.key.slice(this.prefix.length));
    if (slot === undefined || this.sizes[slot] !== record.size) return undefined;
    const v = this.versions[slot] as string;
    const same =
      v === record.versionId ||
      (v.charCodeAt(0) === 0 &&
        record.etag !== undefined &&
        v.length === record.etag.length + 1 &&
        v.endsWith(record.etag));
    if (!same) return undefined;
    const at = (slot % CHUNK_SLOTS) * 32;
    return (this.chunks[Math.floor(slot / CHUNK_SLOTS)] as Buffer).toString('hex', at, at + 32);
  }
}
