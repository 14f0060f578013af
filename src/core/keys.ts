/**
 * What every driver, the cache and the commit format agree on about keys: the order object
 * stores list them in, the folder of a bucket that belongs to provcat, and the one rule for
 * which keys a folder may hold ({@link checkFolderKeys}).
 *
 * **Which keys a folder may hold.** A folder is something a user fetches into a real directory
 * and reads back by URI, so fetch, commit and push apply one rule to its set of keys:
 *
 * 1. every key can be named by a URI (no empty segment — `a//b`, or a leading `/` at a bucket
 *    root —, no `.` or `..` segment, no control character): `UriError`;
 * 2. when writing, every key is one the store holds exactly (the driver's
 *    `capabilities.keyProblem`: Azure turns a backslash into `/`): `UriError`;
 * 3. no two keys are one file on a case-insensitive or normalizing disk (`Dir/a` and `dir/a`;
 *    NFC `café` and NFD `café`), and no key is both a file and a folder (`a` and `a/b`):
 *    `StoreError`.
 *
 * Fetch refuses such a folder (rather than fetch it short), commit refuses it before writing
 * anything (a commit no fetch could read back is no pin), and push refuses a local folder that
 * would make one, before anything is sent.
 *
 * @module
 */
import { StoreError, UriError } from './errors.js';
import { keyNameProblem, type Uri } from './uri.js';

/** The top-level folder of the bucket where provcat keeps its objects. */
export const META_PREFIX = '.provcat/';

/** True when a key lies in the bucket's `.provcat/` folder. */
export function isMetaKey(key: string): boolean {
  return key === META_PREFIX.slice(0, -1) || key.startsWith(META_PREFIX);
}

/**
 * Compare strings in the order of their UTF-8 bytes (code point order), as S3 sorts keys. This
 * differs from JavaScript's UTF-16 order only where a surrogate meets a unit in U+E000..U+FFFF.
 */
export function compareUtf8(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      // Surrogates (U+10000 and up) sort after every BMP unit: move them above U+FFFF.
      x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
      y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the whole ASCII range
const ASCII = /^[\u0000-\u007f]*$/;

/**
 * Refuse (StoreError) a set of relative names that cannot be one faithful directory: names that
 * one disk would store as one (`Dir/a` vs `dir/a`, or two Unicode spellings of one name), and a
 * name that is both a file and a folder (`a` and `a/b`). Rule 3 of {@link checkFolderKeys}.
 */
export function checkDiskNames(rels: readonly string[], where: Uri): void {
  const folded = new Map<string, string>();
  const files = new Set(rels);
  for (const rel of rels) {
    // ASCII has one spelling: only other names need Unicode normalization.
    const f = (ASCII.test(rel) ? rel : rel.normalize('NFC')).toLowerCase();
    const other = folded.get(f);
    if (other !== undefined && other !== rel) {
      throw new StoreError(
        `${where}: '${other}' and '${rel}' would be one file on a case-insensitive disk`,
        { uri: where.toString() },
      );
    }
    folded.set(f, rel);
    for (let i = rel.indexOf('/'); i >= 0; i = rel.indexOf('/', i + 1)) {
      const dir = rel.slice(0, i);
      if (files.has(dir)) {
        throw new StoreError(
          `${where}: '${dir}' is both a file and a folder; one disk cannot hold both`,
          { uri: where.toString() },
        );
      }
    }
  }
}

/** What {@link checkFolderKeys} checks besides URI names. */
export interface FolderKeyRules {
  /**
   * The store's `capabilities.keyProblem` (rule 2), when the keys are about to be written:
   * why the store cannot hold a key exactly, or `undefined`.
   */
  keyProblem?: ((key: string) => string | undefined) | undefined;
  /** Check rule 3 (names one disk would merge, a name both file and folder). Default true. */
  disk?: boolean | undefined;
}

/**
 * The one rule for which keys a folder may hold (see the module comment), on `rels`, names
 * relative to `folder`: `UriError` for a key no URI can name or (with `keyProblem`) one the store
 * cannot hold exactly, `StoreError` for names one disk would merge or a name both a file and a
 * folder. Makes no I/O.
 */
export function checkFolderKeys(
  folder: Uri,
  rels: readonly string[],
  rules: FolderKeyRules = {},
): void {
  const prefix = folder.prefix;
  for (const rel of rels) {
    const key = prefix + rel;
    const problem = keyNameProblem(key);
    if (problem !== undefined) {
      throw new UriError(
        `${folder}: ${JSON.stringify(rel)} is a name no URI can name (${problem})`,
        {
          uri: folder.toString(),
        },
      );
    }
    const unstorable = rules.keyProblem?.(key);
    if (unstorable !== undefined) {
      throw new UriError(
        `${folder}: ${JSON.stringify(rel)} is a name the store cannot hold exactly (${unstorable})`,
        { uri: folder.toString() },
      );
    }
  }
  if (rules.disk !== false) checkDiskNames(rels, folder);
}
