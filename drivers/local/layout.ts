/**
 * The on-disk layout of the local store: how keys, folders and versions become file names.
 *
 * ```
 * <root>/<bucket>/                     a bucket: a folder directory
 *   d.<seg>/                           folder `seg/` (holds keys below it, same layout)
 *   o.<seg>/                           object `seg` (holds its versions)
 *     <ticks>-<rand>.<size>.<md5>      one version with bytes (an immutable file)
 *     <ticks>-<rand>.x                 a delete marker (an empty file)
 *     .lock/                           the per-key writer lock (proper-lockfile), while held
 *     .tmp-<pid>-<rand>                a write in progress (ignored by readers)
 *   dh.<sha256>/ and oh.<sha256>/      the same for a segment whose name would be too long;
 *     .name                              the segment itself, UTF-8
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
 * - A segment whose encoded name exceeds {@link MAX_DIRECT_NAME} characters is named by its
 *   SHA-256 and keeps its text in `.name`, so a 1,024-byte key works on a 255-byte name limit.
 * - Everything a listing needs about a version (its ID, time, size, ETag, whether it is a delete
 *   marker) is in the version's file name: one `readdir` per key answers a listing, with no
 *   `stat` and no JSON parse.
 * - A version ID is `<ticks>-<rand>`: 17 decimal digits of microseconds since the epoch, taken
 *   under the key's writer lock as `max(now, newest + 1)`, so a write that starts after another
 *   finished always gets a larger ID, even within one millisecond and across processes; then
 *   8 random hex digits. IDs are fixed width, so their string order is their time order and the
 *   newest version of a key is simply the largest file name.
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';

/** The longest entry name written as is; longer ones are hashed. Well under 255 bytes. */
export const MAX_DIRECT_NAME = 200;

/** The longest key the local store holds, in UTF-8 bytes (S3's limit too). */
export const MAX_KEY_BYTES = 1024;

/** The file inside a hashed entry directory that holds the segment's text. */
export const NAME_FILE = '.name';

/** Whether an entry directory is an object (holds versions) or a folder (holds entries). */
export type EntryKind = 'object' | 'folder';

const TAG: Record<EntryKind, string> = { object: 'o', folder: 'd' };
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

/** The directory entry name of a segment as an object or a folder, and whether it is hashed. */
export function entryName(kind: EntryKind, segment: string): { name: string; hashed: boolean } {
  const direct = `${TAG[kind]}.${encodeName(segment)}`;
  if (direct.length <= MAX_DIRECT_NAME) return { name: direct, hashed: false };
  const digest = createHash('sha256').update(segment, 'utf8').digest('hex');
  return { name: `${TAG[kind]}h.${digest}`, hashed: true };
}

/** What a directory entry name says: its kind and its segment (unless hashed: read `.name`). */
export type ParsedEntry =
  | { kind: EntryKind; hashed: false; segment: string }
  | { kind: EntryKind; hashed: true };

/** Parse a directory entry name; `undefined` for anything this layout does not write. */
export function parseEntryName(name: string): ParsedEntry | undefined {
  const m = /^([od])(h?)\.(.*)$/s.exec(name);
  if (!m) return undefined;
  const kind: EntryKind = m[1] === 'o' ? 'object' : 'folder';
  const rest = m[3] as string;
  if (m[2] === 'h') return /^[0-9a-f]{64}$/.test(rest) ? { kind, hashed: true } : undefined;
  const segment = decodeName(rest);
  // Only accept the canonical spelling, so one segment never has two directories.
  if (segment === undefined || encodeName(segment) !== rest) return undefined;
  return { kind, hashed: false, segment };
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
  /** MD5 of the bytes, hex; `undefined` for a delete marker. */
  md5: string | undefined;
}

const TICK_DIGITS = 17;
const VERSION_ID = /^\d{17}-[0-9a-f]{8}$/;
const VERSION_FILE = /^(\d{17})-([0-9a-f]{8})\.(?:(0|[1-9]\d{0,15})\.([0-9a-f]{32})|x)$/;

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

/** The file name of a version with bytes (`md5` given) or of a delete marker (`size` null). */
export function versionFileName(versionId: string, size: number | null, md5?: string): string {
  return size === null ? `${versionId}.x` : `${versionId}.${size}.${md5}`;
}

/**
 * A new version ID for a key whose newest version is `newest` (see the module comment). Must be
 * called under the key's writer lock for the ordering guarantee to hold across processes.
 */
export function nextVersionId(newest: VersionFile | undefined, nowMs = Date.now()): string {
  const ticks = Math.max(nowMs * 1000, newest === undefined ? 0 : newest.ticks + 1);
  return `${String(ticks).padStart(TICK_DIGITS, '0')}-${randomBytes(4).toString('hex')}`;
}

/** The modification time a version ID records. */
export function timeOf(version: VersionFile): Date {
  return new Date(Math.floor(version.ticks / 1000));
}
