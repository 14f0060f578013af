/**
 * The on-disk layout of the local store: how keys, folders and versions become file names.
 *
 * ```
 * <root>/.batches/<tag>-<pid>-<ms>-<rand>.batch   a batch of puts at work, or dead (see below)
 * <root>/.batches/<...>.batch.stage/  its stage: fresh keys' directories before their rename
 * <root>/<bucket>/                     a bucket: a folder directory
 *   d.<seg>/                           folder `seg/` (a folder directory: same layout inside)
 *   o.<seg>/                           object `seg`: the truth about its versions
 *     <ticks>-<rand>.<size>.<md5>      one version with bytes (an immutable file)
 *     <ticks>-<rand>.<size>            one version with bytes copied by the kernel (no MD5)
 *     <ticks>-<rand>.x                 a delete marker (an empty file)
 *     .lock/                           the per-key writer lock (proper-lockfile), while held
 *     .tmp-<pid>-<host>-<rand>         a write in progress (ignored by readers; src/core/fs-atomic.ts)
 *   v.<seg>.<version file name>        listing index: one entry per version of `seg`
 *   p.<seg>                            "a write to `seg` is in progress (or crashed)"
 *   dh.<sha256>/, oh.<sha256>/,        the same for a segment whose escaped name is longer than
 *   vh.<sha256>.<...>, ph.<sha256>       {@link MAX_TOKEN}; `dh.`/`oh.` hold `.name`, the segment
 * ```
 *
 * Why this shape:
 * - A folder and an object of the same name (`a` and `a/b`, as S3 allows) live side by side as
 *   `o.a/` and `d.a/`, so neither shadows the other.
 * - Segment names are escaped so that no key can produce a path outside its bucket (no `/`, no
 *   `.`/`..`, no NUL) and so that keys stay distinct on case-insensitive, Unicode-normalizing
 *   disks (macOS): `[a-z0-9._-]` stay as they are, an uppercase letter becomes `^` plus the
 *   lowercase letter, every other byte (and a trailing `.`) becomes `%XX`. Case-folding the result
 *   never merges two encodings, and no non-ASCII byte ever reaches the file system.
 * - A segment whose escaped form is longer than {@link MAX_TOKEN} characters is named by its
 *   SHA-256, so a 1,024-byte key works under a 255-byte file-name limit.
 * - Everything about a version (ID, time, size, MD5, delete marker) is in its file name, so
 *   nothing is ever parsed from file contents. The version's ETag is the MD5 of its bytes
 *   (`"<32 hex>"`) for a write streamed through provcat, and its version ID (`"<ticks>-<rand>"`,
 *   never mistaken for an MD5) for a large file the kernel copied (see `./file-copy.ts`).
 * - Listing speed: the object directory is the truth, and one `readdir` of it answers `_head`
 *   and `_get` (a `_get` told the listed version opens that file by name: `./versions.ts`
 *   `listedVersion`). But a listing of 10,000 keys cannot afford 10,000 `readdir`s, so every folder
 *   directory also holds an index entry per version of each key in it (`v.<seg>.<version>`):
 *   one `readdir` of the folder answers a listing or a history of everything in it. Only the
 *   names of index entries and pending markers count: each is a hard link (of the version it
 *   names; of a batch's marker) where the file system allows, else an empty file
 *   (`./entry-link.ts`), so that it costs a directory entry, not an inode. A writer,
 *   under the key's lock, creates `p.<seg>` first, then publishes the version in `o.<seg>/`, then
 *   its index entry, then removes `p.<seg>`. A reader that sees `p.<seg>` (or no index entry for
 *   an existing `o.<seg>/`) reads `o.<seg>/` itself, so the index is never trusted while it may
 *   lag; a writer that finds a `p.<seg>` left by a crash first completes the index from
 *   `o.<seg>/`. Versions and index entries are never removed, so a `readdir` racing a write can
 *   only miss the newest, still in-flight version.
 * - A version ID is `<ticks>-<rand>`: 17 decimal digits of microseconds since the epoch, taken
 *   under the key's writer lock as `max(now, newest + 1)`, so a write that starts after another
 *   finished always gets a larger ID, even within one millisecond and across processes; then
 *   8 random hex digits. IDs are fixed width, so their string order is their time order and the
 *   newest version of a key is simply the largest.
 *
 * Batched durability (`./batch.ts`, `./batch-marker.ts`): a batch of puts writes each version
 * with the protocol above but no fsync (a key without a directory yet gets it whole, version
 * inside, by the rename of a directory from the batch's stage in `.batches/`: `./publish.ts`
 * `publishFresh`), under a marker in `<root>/.batches/` that is fsynced
 * before the first version and removed after one sync pass (`sync -f`) at the end. Why a file
 * written without fsync, checked against its name on recovery, is never served torn:
 * - A version's name states its size and MD5, fixed before the file gets that name by `rename`
 *   of a complete temp. A crash of the process alone (SIGKILL) loses nothing the kernel
 *   already has: every published version is whole, and the pending marker repairs the index as
 *   without a batch.
 * - A power loss (or a kernel crash) can persist any subset of the batch's unsynced changes:
 *   a name without its data (a file of zeros or short), a version without its index entry or
 *   the reverse, a directory without its parent's entry. It happens only while the batch's
 *   marker exists (it is removed after the sync pass), and the marker was durable before any of
 *   those changes were made.
 * - Every power loss is followed by a boot, and a marker of an earlier boot is dead. Every store
 *   instance, before its first read or write, recovers dead markers: under one, each version of
 *   the batch's prefix whose ID is from the batch's start on (a batch's IDs are never earlier)
 *   and whose file's size or MD5 differs from its name is removed, and the folder's index is
 *   made to match its versions; the repairs are fsynced before the marker goes. So no read
 *   through the store can see a torn version: a torn file exists only under a dead marker,
 *   and no instance reads before it recovered. A batch version carries an MD5 always (batches
 *   write only sources up to 4 MiB, hashed as they are written).
 * - What recovery removes is exactly what was not durable, so it is the "absent" of "whole or
 *   absent": the key's earlier version is current again. A marker of a dead process of this
 *   boot is recovered too (a check that finds everything whole); a PID reused by another
 *   process only delays that, never a power loss's repair (the tag changed with the boot).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { sha256Hex } from '../../src/core/digest.js';

/**
 * The longest escaped segment used as is in entry names; longer ones are hashed. An index entry
 * adds at most 81 characters, so every name stays under 255 bytes.
 */
export const MAX_TOKEN = 160;

/** The longest key the local store holds, in UTF-8 bytes (S3's limit too). */
export const MAX_KEY_BYTES = 1024;

/** The file inside a hashed object or folder directory that holds the segment's text. */
export const NAME_FILE = '.name';

const HEX = '0123456789ABCDEF';

function isPlain(b: number): boolean {
  return (
    (b >= 0x61 && b <= 0x7a) || // a-z
    (b >= 0x30 && b <= 0x39) || // 0-9
    b === 0x2e || // .
    b === 0x5f || // _
    b === 0x2d // -
  );
}

/**
 * Escape one key segment into a file-name part (see the module comment). Total and injective on
 * well-formed strings; {@link decodeName} inverts it.
 */
export function encodeName(segment: string): string {
  const bytes = Buffer.from(segment, 'utf8');
  let out = '';
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i] as number;
    const last = i === bytes.length - 1;
    if (b >= 0x41 && b <= 0x5a) out += `^${String.fromCharCode(b + 0x20)}`;
    else if (isPlain(b) && !(last && b === 0x2e)) out += String.fromCharCode(b);
    else out += `%${HEX[b >> 4]}${HEX[b & 15]}`;
  }
  return out;
}

/** Inverse of {@link encodeName}; `undefined` for a name this module did not write. */
export function decodeName(name: string): string | undefined {
  const bytes: number[] = [];
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c === 0x5e) {
      const n = name.charCodeAt(i + 1);
      if (!(n >= 0x61 && n <= 0x7a)) return undefined;
      bytes.push(n - 0x20);
      i++;
    } else if (c === 0x25) {
      const hex = name.slice(i + 1, i + 3);
      if (!/^[0-9A-F]{2}$/.test(hex)) return undefined;
      bytes.push(Number.parseInt(hex, 16));
      i += 2;
    } else if (isPlain(c)) bytes.push(c);
    else return undefined;
  }
  // Not UTF-8 (a name some other program put there) does not survive the round trip: the
  // caller skips such an entry and logs it.
  const buf = Buffer.from(bytes);
  const text = buf.toString('utf8');
  return Buffer.from(text, 'utf8').equals(buf) ? text : undefined;
}

/**
 * How a segment appears in entry names: `ref` is the common part of its `o`, `d`, `v` and `p`
 * entries (`.<escaped>` or `h.<sha256>`), the key of the index maps a folder scan builds.
 */
export interface SegmentRef {
  ref: string;
  hashed: boolean;
}

/** The {@link SegmentRef} of a segment. */
export function refOf(segment: string): SegmentRef {
  const token = encodeName(segment);
  if (token.length <= MAX_TOKEN) return { ref: `.${token}`, hashed: false };
  return { ref: `h.${sha256Hex(segment)}`, hashed: true };
}

/** The object directory of a segment. */
export function objectDirName(ref: SegmentRef): string {
  return `o${ref.ref}`;
}

/** The folder directory of a segment. */
export function folderDirName(ref: SegmentRef): string {
  return `d${ref.ref}`;
}

/** The pending marker of a segment (see the module comment). */
export function pendingName(ref: SegmentRef): string {
  return `p${ref.ref}`;
}

/** The index entry of one version (named by its version file name) of a segment. */
export function indexName(ref: SegmentRef, versionFile: string): string {
  return `v${ref.ref}.${versionFile}`;
}

/** What a folder directory entry is. */
export type FolderEntry =
  | {
      /** `o`: object directory, `d`: folder directory, `p`: pending marker. */
      tag: 'o' | 'd' | 'p';
      ref: string;
      /** The segment, unless hashed (then read `.name` in the `o`/`d` directory). */
      segment: string | undefined;
    }
  | { tag: 'v'; ref: string; version: VersionFile };

const INDEX_ENTRY =
  /^v(\.[^/]+|h\.[0-9a-f]{64})\.((\d{17})-[0-9a-f]{8})\.(?:(0|[1-9]\d{0,15})(?:\.([0-9a-f]{32}))?|x)$/;
const PLAIN_TOKEN = /^[a-z0-9._-]*[a-z0-9_-]$/;

/** Parse a folder directory entry; `undefined` for anything this layout does not write. */
export function parseFolderEntry(name: string): FolderEntry | undefined {
  if (name.startsWith('v')) {
    // The ref is not validated here (it would cost a decode per version): a scan uses an index
    // entry only for the ref of a valid `o` entry.
    const m = INDEX_ENTRY.exec(name);
    if (m === null) return undefined;
    const ref = m[1] as string;
    const version: VersionFile = {
      name: name.slice(ref.length + 2),
      versionId: m[2] as string,
      ticks: Number(m[3]),
      size: m[4] === undefined ? null : Number(m[4]),
      md5: m[5],
    };
    return { tag: 'v', ref, version };
  }
  const tag = name[0];
  if (tag !== 'o' && tag !== 'd' && tag !== 'p') return undefined;
  const ref = name.slice(1);
  if (ref.startsWith('h.')) return validRef(ref) ? { tag, ref, segment: undefined } : undefined;
  const segment = ref.startsWith('.') ? canonical(ref.slice(1)) : undefined;
  return segment === undefined ? undefined : { tag, ref, segment };
}

function validRef(ref: string): boolean {
  if (ref.startsWith('h.')) return /^h\.[0-9a-f]{64}$/.test(ref);
  return ref.startsWith('.') && canonical(ref.slice(1)) !== undefined;
}

/** The segment an escaped token names, only when the token is its canonical spelling. */
function canonical(token: string): string | undefined {
  if (token.length <= MAX_TOKEN && PLAIN_TOKEN.test(token)) return token; // the common case
  const segment = decodeName(token);
  if (segment === undefined || segment === '' || encodeName(segment) !== token) return undefined;
  return token.length <= MAX_TOKEN ? segment : undefined;
}

// ---- versions ------------------------------------------------------------------------------

/** One version of a key as its file name describes it. */
export interface VersionFile {
  /** The file name inside the object directory. */
  name: string;
  /** `<ticks>-<rand>`. */
  versionId: string;
  /** Microseconds since the epoch (see the module comment). */
  ticks: number;
  /** Size in bytes; `null` for a delete marker. */
  size: number | null;
  /**
   * The MD5 of the bytes, 32 hex digits; `undefined` for a delete marker and for a version the
   * kernel copied (see `./file-copy.ts`).
   */
  md5: string | undefined;
}

const TICK_DIGITS = 17;
const VERSION_ID = /^\d{17}-[0-9a-f]{8}$/;
const VERSION_FILE = /^(\d{17})-([0-9a-f]{8})\.(?:(0|[1-9]\d{0,15})(?:\.([0-9a-f]{32}))?|x)$/;

/** True when `id` has the shape of a local version ID (it may still not exist). */
export function isVersionId(id: string): boolean {
  return VERSION_ID.test(id);
}

/** Parse a version file name; `undefined` for temp files, the lock and foreign files. */
export function parseVersionFile(name: string): VersionFile | undefined {
  const m = VERSION_FILE.exec(name);
  if (!m) return undefined;
  const ticks = Number(m[1]);
  const versionId = `${m[1]}-${m[2]}`;
  if (m[3] === undefined) return { name, versionId, ticks, size: null, md5: undefined };
  return { name, versionId, ticks, size: Number(m[3]), md5: m[4] };
}

/**
 * The file name of a version with bytes (with its MD5 when it has one) or of a delete marker
 * (`size` null).
 */
export function versionFileName(versionId: string, size: number | null, md5?: string): string {
  if (size === null) return `${versionId}.x`;
  return md5 === undefined ? `${versionId}.${size}` : `${versionId}.${size}.${md5}`;
}

/**
 * The ETag of a version: `"<md5 hex>"` (S3's form for a single-part upload, so a tool that
 * checks an ETag against an MD5 may), or for a version without an MD5 its version ID
 * (`"<ticks>-<rand>"`: with its `-` it reads like S3's multipart ETags, which no MD5 check
 * takes for one); `undefined` for a delete marker.
 */
export function etagOf(version: VersionFile): string | undefined {
  if (version.size === null) return undefined;
  return `"${version.md5 ?? version.versionId}"`;
}

/**
 * A new version ID for a key whose newest version is `newest` (see the module comment). Must be
 * called under the key's writer lock for the ordering guarantee to hold across processes.
 */
export function nextVersionId(newest: VersionFile | undefined, nowMs = Date.now()): string {
  const ticks = Math.max(nowMs * 1000, newest === undefined ? 0 : newest.ticks + 1);
  return `${String(ticks).padStart(TICK_DIGITS, '0')}-${randomHex8()}`;
}

/** Random bytes drawn 4 at a time for version IDs: one `randomBytes` call costs ~16 µs. */
let randomPool = Buffer.alloc(0);
let randomAt = 0;

/** 8 random hex digits, from a pool refilled 4 KiB at a time. */
function randomHex8(): string {
  if (randomAt + 4 > randomPool.length) {
    randomPool = randomBytes(4096);
    randomAt = 0;
  }
  randomAt += 4;
  return randomPool.toString('hex', randomAt - 4, randomAt);
}

/** The modification time a version ID records. */
export function timeOf(version: VersionFile): Date {
  return new Date(Math.floor(version.ticks / 1000));
}
