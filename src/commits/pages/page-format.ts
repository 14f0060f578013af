/**
 * The pages of a `provcat.commit/2` commit (`provcat.page/1`): their canonical bytes, their key
 * (`.provcat/pages/<sha256>`), the content-defined boundary rule, and strict validation on read.
 *
 * A page is either a leaf (`height` 0), listing file records, or an inner page (`height` h ≥ 1),
 * listing child pages of height h − 1 by hash, with the first and last key and the number of
 * files below each. Entries are in the UTF-8 byte order of keys. A page is named by the SHA-256 of
 * its canonical bytes, so a commit's ID verifies every page and every file record transitively.
 *
 * Boundaries depend only on keys: the *level* of a key is the number of leading zero bytes of
 * SHA-256(key). A page of height h ends after an entry whose (last) key has a level above h, or
 * when it holds {@link MAX_PAGE_ENTRIES} entries (or {@link MAX_LEAF_BYTES} of records). About one
 * key in 256 ends a leaf and one in 65,536 an inner page of height 1, so pages hold about 256
 * entries, and a file added or removed changes its leaf and the pages above it only.
 *
 * @module
 */
import * as crypto from 'node:crypto';
import { StoreError } from '../../core/errors.js';
import { compareUtf8, META_PREFIX } from '../../core/keys.js';
import { canonicalJson, parseCanonical } from '../../logs/canonical-json.js';
import { type CommitFile, checkFileRecords, MAX_TREE_HEIGHT } from '../format.js';

/** The `format` of every page. */
export const PAGE_FORMAT = 'provcat.page/1';

/** Most entries in one page (a boundary is forced there). */
export const MAX_PAGE_ENTRIES = 4096;

/** Most bytes of serialized file records in one leaf (a boundary is forced past it). */
export const MAX_LEAF_BYTES = 2 * 1024 * 1024;

/** The largest page a reader accepts (records of at most 4096 keys of 1,024 bytes and more). */
export const MAX_PAGE_BYTES = 16 * 1024 * 1024;

/** A child page as an inner page names it. */
export interface PageRef {
  /** SHA-256 of the child page's bytes. */
  page: string;
  /** The first and the last file key below the child. */
  first: string;
  last: string;
  /** How many files lie below the child. */
  count: number;
}

/** A leaf page: file records. */
export interface LeafPage {
  format: typeof PAGE_FORMAT;
  height: 0;
  files: CommitFile[];
}

/** An inner page: child pages. */
export interface InnerPage {
  format: typeof PAGE_FORMAT;
  height: number;
  pages: PageRef[];
}

/** Either kind of page. */
export type Page = LeafPage | InnerPage;

/** True for a leaf page. */
export function isLeaf(page: Page): page is LeafPage {
  return page.height === 0;
}

/** The key of a page: `.provcat/pages/<sha256>`. */
export function pageKey(hash: string): string {
  return `${META_PREFIX}pages/${hash}`;
}

/** The canonical bytes of a page. */
export function pageBytes(page: Page): Buffer {
  return Buffer.from(canonicalJson(page), 'utf8');
}

/** The fields {@link recordJson} writes without the general canonical writer. */
const PLAIN_FIELDS = new Set(['etag', 'key', 'sha256', 'size', 'versionId']);

/**
 * The canonical JSON of one file record, exactly `canonicalJson(file)`: written field by field
 * (in the canonical order etag, key, sha256, size, versionId) when the record holds only those
 * fields with string values and a safe-integer size, else by the general writer. A commit
 * serializes every record once, so this is on the path of every file.
 */
export function recordJson(file: CommitFile): string {
  for (const field in file) if (!PLAIN_FIELDS.has(field)) return canonicalJson(file);
  const { etag, key, sha256, size, versionId } = file;
  if (
    typeof key !== 'string' ||
    typeof versionId !== 'string' ||
    !Number.isSafeInteger(size) ||
    (etag !== undefined && typeof etag !== 'string') ||
    (sha256 !== undefined && typeof sha256 !== 'string')
  ) {
    return canonicalJson(file);
  }
  let out = '{';
  if (etag !== undefined) out += `"etag":${JSON.stringify(etag)},`;
  out += `"key":${JSON.stringify(key)},`;
  if (sha256 !== undefined) out += `"sha256":${JSON.stringify(sha256)},`;
  return `${out}"size":${size},"versionId":${JSON.stringify(versionId)}}`;
}

const LEAF_TAIL = `],"format":${JSON.stringify(PAGE_FORMAT)},"height":0}`;

/**
 * The canonical bytes of the leaf page of these records, each given as its {@link recordJson}:
 * exactly `pageBytes({ format, height: 0, files })`, without serializing the records again.
 */
export function leafBytes(records: readonly string[]): Buffer {
  return Buffer.from(`{"files":[${records.join(',')}${LEAF_TAIL}`, 'utf8');
}

/**
 * SHA-256 of a key's UTF-8 bytes: the one-shot `crypto.hash` where Node has it (20.12 and later;
 * a third of a `createHash` chain's cost, which a commit pays once a file), else the chain.
 */
const keyDigest: (key: string) => Buffer =
  typeof crypto.hash === 'function'
    ? (key) => crypto.hash('sha256', key, 'buffer')
    : (key) => crypto.createHash('sha256').update(key, 'utf8').digest();

/** The level of a key: how many leading zero bytes SHA-256(UTF-8 key) has (0 to 32). */
export function keyLevel(key: string): number {
  const digest = keyDigest(key);
  let n = 0;
  while (n < digest.length && digest[n] === 0) n++;
  return n;
}

const HEX64 = /^[0-9a-f]{64}$/;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Parse and validate page `hash` (its bytes already known to hash to `hash`) of a commit of
 * `folder`: canonical, `provcat.page/1`, of the `height` its parent says, non-empty, entries in
 * key order, every key under `folder`. `where` names the page in errors ({@link StoreError}).
 */
export function parsePage(bytes: Uint8Array, height: number, folder: string, where: string): Page {
  const bad = (why: string, cause?: unknown) =>
    new StoreError(`page ${where} is not a valid ${PAGE_FORMAT} object: ${why}`, { cause });
  const record = parseCanonical(bytes, {
    fail: (_problem, why, cause) => bad(why, cause),
    validate: (value) => checkPage(value, height, folder, bad),
  });
  return record as unknown as Page;
}

function checkPage(
  value: Record<string, unknown>,
  height: number,
  folder: string,
  bad: (why: string) => StoreError,
): void {
  if (value.format !== PAGE_FORMAT) throw bad(`format ${JSON.stringify(value.format)}`);
  if (value.height !== height || height < 0 || height > MAX_TREE_HEIGHT) {
    throw bad(`height ${JSON.stringify(value.height)}, its parent says ${height}`);
  }
  const list = height === 0 ? 'files' : 'pages';
  for (const field of Object.keys(value)) {
    if (field !== 'format' && field !== 'height' && field !== list) {
      throw bad(`unknown field ${JSON.stringify(field)}`);
    }
  }
  const entries = value[list];
  if (!Array.isArray(entries) || entries.length === 0)
    throw bad(`${list} is not a non-empty array`);
  if (entries.length > MAX_PAGE_ENTRIES) throw bad(`more than ${MAX_PAGE_ENTRIES} entries`);
  if (height === 0) {
    checkFileRecords(entries, folder, 'files', bad, true);
    return;
  }
  let previous: string | undefined;
  for (const [i, ref] of entries.entries()) {
    if (!isObject(ref)) throw bad(`pages[${i}] is not an object`);
    const { page, first, last, count } = ref;
    for (const field of Object.keys(ref)) {
      if (!['count', 'first', 'last', 'page'].includes(field)) {
        throw bad(`pages[${i}] has an unknown field ${JSON.stringify(field)}`);
      }
    }
    if (typeof page !== 'string' || !HEX64.test(page)) throw bad(`pages[${i}].page is no SHA-256`);
    if (typeof first !== 'string' || typeof last !== 'string') {
      throw bad(`pages[${i}] lacks its first and last key`);
    }
    if (!first.startsWith(folder) || compareUtf8(first, last) > 0) {
      throw bad(`pages[${i}] has keys out of order or outside ${JSON.stringify(folder)}`);
    }
    if (previous !== undefined && compareUtf8(previous, first) >= 0) {
      throw bad(`pages are not sorted by key at pages[${i}]`);
    }
    if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 1) {
      throw bad(`pages[${i}].count is not a positive integer`);
    }
    previous = last;
  }
}
