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
    const f = foldName(rel);
    const other = folded.get(f);
    if (other !== undefined && other !== rel) throw caseClash(where, other, rel);
    folded.set(f, rel);
    for (let i = rel.indexOf('/'); i >= 0; i = rel.indexOf('/', i + 1)) {
      const dir = rel.slice(0, i);
      if (files.has(dir)) throw fileAndFolder(where, dir);
    }
  }
}

/** The name one case-insensitive, normalizing disk stores `rel` as (rule 3). */
function foldName(rel: string): string {
  // ASCII has one spelling: only other names need Unicode normalization.
  return (ASCII.test(rel) ? rel : rel.normalize('NFC')).toLowerCase();
}

function caseClash(where: Uri, other: string, rel: string): StoreError {
  const spellings = other.normalize('NFC') === rel.normalize('NFC');
  const why = spellings
    ? `'${other}' and '${rel}' (${escaped(other)} and ${escaped(rel)}) are one name in two ` +
      'Unicode spellings, which a normalizing disk (macOS) stores as one file'
    : `'${other}' and '${rel}' would be one file on a case-insensitive disk`;
  return new StoreError(`${where}: ${why}`, { uri: where.toString() });
}

/** `s` as a JSON string with every non-ASCII unit escaped, so two spellings look different. */
function escaped(s: string): string {
  return JSON.stringify(s).replace(
    /[\u0080-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

function fileAndFolder(where: Uri, dir: string): StoreError {
  return new StoreError(
    `${where}: '${dir}' is both a file and a folder; one disk cannot hold both`,
    {
      uri: where.toString(),
    },
  );
}

/** Why no URI can name `rel` in `folder`, or the store cannot hold it exactly (rules 1 and 2). */
function keyNameError(folder: Uri, rel: string, rules: FolderKeyRules): UriError | undefined {
  const key = folder.prefix + rel;
  const problem = keyNameProblem(key);
  if (problem !== undefined) {
    return new UriError(
      `${folder}: ${JSON.stringify(rel)} is a name no URI can name (${problem})`,
      {
        uri: folder.toString(),
      },
    );
  }
  const unstorable = rules.keyProblem?.(key);
  if (unstorable !== undefined) {
    return new UriError(
      `${folder}: ${JSON.stringify(rel)} is a name the store cannot hold exactly (${unstorable})`,
      { uri: folder.toString() },
    );
  }
  return undefined;
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
  /**
   * Check rule 1 (names no URI can name) in {@link FolderKeyStream}. Default true; false for
   * names already checked, or that another writer chose (only rule 3 then applies).
   */
  names?: boolean | undefined;
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
  for (const rel of rels) {
    const error = keyNameError(folder, rel, rules);
    if (error) throw error;
  }
  if (rules.disk !== false) checkDiskNames(rels, folder);
}

/** Fingerprints in one chunk of {@link FolderKeyStream} (8 KiB). */
const CHUNK = 1024;

/** What {@link FolderKeyStream.finish} found when it refused nothing. */
export type FolderKeyVerdict = 'ok' | 'recheck';

/** Two 32-bit hashes of one string (FNV-1a and a multiply-rotate), as one 64-bit fingerprint. */
function fingerprint(s: string, out: Uint32Array, at: number): void {
  let h1 = 0x811c9dc5;
  let h2 = 0x9e3779b9 ^ s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = Math.imul(h2 ^ c, 0x85ebca6b);
    h2 = (h2 << 13) | (h2 >>> 19);
  }
  h2 = Math.imul(h2 ^ (h2 >>> 16), 0xc2b2ae35);
  out[at] = h1 >>> 0;
  out[at + 1] = (h2 ^ (h2 >>> 13)) >>> 0;
}

/**
 * {@link checkFolderKeys} on names that arrive one at a time in key order (the UTF-8 byte order
 * of {@link compareUtf8}, as a listing gives them), without keeping the names: a commit of
 * millions of files checks its folder in 8 bytes a name instead of the names themselves.
 *
 * How: rules 1 and 2 look at one name. "Both a file and a folder" needs only the names still
 * open as folders of the current one: in key order every name under `a/` follows `a` in one run,
 * so a stack of the earlier names that are prefixes of the current one (at most one per
 * character of a key) finds each clash. Names one disk would merge are not neighbours in key
 * order (`Dir/a` and `dir/a`), so each folded name is kept as an 8-byte fingerprint only; after
 * the last name the fingerprints are sorted and two equal ones mean "maybe": `finish` then
 * answers `'recheck'` and the caller checks the whole set with {@link checkFolderKeys}, which
 * names the clash exactly (a refusal, or rarely two names whose fingerprints merely agree).
 *
 * Guarantees: for names added in key order, `finish` throws exactly the error (class and
 * message) {@link checkFolderKeys} throws on the same list, or answers `'ok'` where it accepts
 * it, or `'recheck'`. Memory: 8 bytes per name, at most 2 MiB of open chunks, and the stack.
 * `finish` is called once. `add` out of key order is a programming error (`Error`).
 */
export class FolderKeyStream {
  readonly #folder: Uri;
  readonly #rules: FolderKeyRules;
  /** The earlier names that are prefixes of the last one, shortest first. */
  readonly #open: string[] = [];
  /** The fingerprints, in 256 buckets by their top byte, each a list of full chunks and one open. */
  readonly #buckets: Uint32Array[][] = Array.from({ length: 256 }, () => []);
  /** Fingerprints in each bucket's last chunk. */
  readonly #fill = new Int32Array(256).fill(CHUNK);
  readonly #print = new Uint32Array(2);
  #last: string | undefined;
  #nameError: UriError | undefined;
  #diskError: StoreError | undefined;

  /** A check of the names of `folder` (relative to it) under `rules`. */
  constructor(folder: Uri, rules: FolderKeyRules = {}) {
    this.#folder = folder;
    this.#rules = rules;
  }

  /** The next name, relative to the folder, in key order. */
  add(rel: string): void {
    if (this.#last !== undefined && compareUtf8(this.#last, rel) > 0) {
      throw new Error(`FolderKeyStream: ${JSON.stringify(rel)} came out of key order`);
    }
    this.#last = rel;
    if (this.#rules.names !== false) {
      this.#nameError ??= keyNameError(this.#folder, rel, this.#rules);
    }
    if (this.#rules.disk === false) return;
    const open = this.#open;
    while (open.length > 0 && !rel.startsWith(open[open.length - 1] as string)) open.pop();
    if (this.#diskError === undefined) {
      for (const dir of open) {
        if (rel.length > dir.length && rel.charCodeAt(dir.length) === 0x2f) {
          this.#diskError = fileAndFolder(this.#folder, dir);
          break;
        }
      }
    }
    open.push(rel);
    const print = this.#print;
    fingerprint(foldName(rel), print, 0);
    // Chunks of one size, never copied: no grown array's slack or copy at millions of names.
    const b = (print[1] as number) >>> 24;
    const chunks = this.#buckets[b] as Uint32Array[];
    if (this.#fill[b] === CHUNK) {
      chunks.push(new Uint32Array(2 * CHUNK));
      this.#fill[b] = 0;
    }
    const at = this.#fill[b] as number;
    (chunks[chunks.length - 1] as Uint32Array).set(print, 2 * at);
    this.#fill[b] = at + 1;
  }

  /**
   * After the last name: throws the refusal of {@link checkFolderKeys}, or answers `'ok'`, or
   * `'recheck'` when two names may fold to one (check the whole list with checkFolderKeys).
   */
  finish(): FolderKeyVerdict {
    if (this.#nameError) throw this.#nameError;
    if (this.#rules.disk === false) return 'ok';
    // Equal fingerprints share a bucket: each bucket is sorted on its own.
    for (let b = 0; b < 256; b++) {
      const chunks = this.#buckets[b] as Uint32Array[];
      if (chunks.length === 0) continue;
      const n = (chunks.length - 1) * CHUNK + (this.#fill[b] as number);
      const prints = new BigUint64Array(n);
      const words = new Uint32Array(prints.buffer);
      chunks.forEach((chunk, i) => {
        words.set(
          i < chunks.length - 1 ? chunk : chunk.subarray(0, 2 * (n - i * CHUNK)),
          2 * i * CHUNK,
        );
      });
      chunks.length = 0;
      prints.sort();
      for (let i = 1; i < n; i++) {
        if (prints[i - 1] === prints[i]) return 'recheck';
      }
    }
    if (this.#diskError) throw this.#diskError;
    return 'ok';
  }
}
