/**
 * The on-store format of provcat commits, logs and branch records (`provcat.commit/1`): the types,
 * the canonical JSON, the key layout under `.provcat/`, and strict validation on read.
 *
 * Design choices (docs/commit-format.md is the user-facing statement of the same):
 *
 * - One canonical byte form. Objects are written as RFC 8785 (JCS) JSON: member names sorted by
 *   UTF-16 code units, no whitespace, strings escaped as `JSON.stringify` does, UTF-8. The
 *   commit holds only strings, safe integers, `null`, arrays and objects, so JCS number rules
 *   never come into play. A reader re-serializes what it parsed and refuses bytes that are not
 *   in canonical form, so one commit content has exactly one ID.
 * - `files` is sorted by the UTF-8 bytes of the key: the order every object store lists in, so
 *   the files under any folder are one contiguous run (found by binary search).
 * - Validation is strict at the top level (unknown fields are refused: a new field means a new
 *   `format`) and open per file: a file record must carry `key`, `versionId`, `size`, may carry
 *   `etag`, and may carry further fields (such as `sha256`) that readers keep but need not
 *   understand. Readers confirm an optional field is present before answering from it.
 *
 * @module
 */
import { sha256Hex } from '../core/digest.js';
import { StoreError, UriError } from '../core/errors.js';
import { compareUtf8, isMetaKey, META_PREFIX } from '../core/keys.js';
import { segmentProblem } from '../core/uri.js';
import { canonicalJson, type Json, parseCanonical } from '../logs/canonical-json.js';
import { LOG_BASE, logName, MAX_LOG_NUMBER, numberOfLogKey } from '../logs/create-only-log.js';

/** The `format` of a commit object that lists every file itself (read for ever, no longer written). */
export const COMMIT_FORMAT = 'provcat.commit/1';

/**
 * The `format` of the commit objects this version writes: the metadata and the root of a tree of
 * content-addressed pages (src/commits/pages/, docs/commit-format.md).
 */
export const COMMIT_FORMAT_2 = 'provcat.commit/2';

/** Either commit format. */
export type CommitFormat = typeof COMMIT_FORMAT | typeof COMMIT_FORMAT_2;

/** The `format` of branch intent records that list every file (read for ever, no longer written). */
export const BRANCH_FORMAT = 'provcat.branch/1';

/**
 * The `format` of the branch intent records this version writes: the source's commit ID, or the
 * root of its snapshot's page tree, instead of its files (src/commits/branch-record.ts).
 */
export const BRANCH_FORMAT_2 = 'provcat.branch/2';

/** Log entry N is named `10^15 - N` (src/logs/create-only-log.ts). */
export { compareUtf8, isMetaKey, LOG_BASE, logName, META_PREFIX, numberOfLogKey };

/** Largest commit number a log can hold. */
export const MAX_COMMIT_NUMBER = MAX_LOG_NUMBER;

/** One file recorded in a commit. */
export interface CommitFile {
  /** The full key in the bucket (not relative to the committed folder). */
  key: string;
  /** The store's version ID of the file at the commit. */
  versionId: string;
  /** Size in bytes. */
  size: number;
  /** The ETag as the store reported it (quoted on S3), when the store reported one. */
  etag?: string | undefined;
  /** Further per-file fields (for example `sha256`) are kept as read. */
  [field: string]: unknown;
}

/** The JSON body of a commit object, exactly the fields that are hashed. */
export interface CommitBody {
  /** Always {@link COMMIT_FORMAT}. */
  format: typeof COMMIT_FORMAT;
  /** The committed folder as a bucket-relative prefix: `data/`, or `` for the whole bucket. */
  folder: string;
  /** The ID of the previous commit of the same folder, `null` for commit 1. */
  parent: string | null;
  /** The commit's number in its folder's log: 1, 2, ... */
  number: number;
  /** The message; never empty. */
  message: string;
  /** Key-value pairs the committer attached (possibly none). */
  metadata: Record<string, string>;
  /** When the commit was made, as an ISO 8601 UTC timestamp (`Date#toISOString`). */
  time: string;
  /** Every file under the folder at the snapshot, sorted by the UTF-8 bytes of `key`. */
  files: CommitFile[];
}

/** The JSON body of a `provcat.commit/2` object: the metadata and the root of its page tree. */
export interface CommitBody2 extends Omit<CommitBody, 'format' | 'files'> {
  /** Always {@link COMMIT_FORMAT_2}. */
  format: typeof COMMIT_FORMAT_2;
  /** How many files the commit records (at least 1). */
  count: number;
  /** The SHA-256 of the root page (`.provcat/pages/<root>`). */
  root: string;
  /** The root page's height: 0 when it lists files, else one more than its children's. */
  height: number;
}

/**
 * What every commit says of itself, in either format, without its file list: the metadata, the
 * number of files and, for format 2, its page tree's root. `id` and `bucket` are not stored.
 */
export interface CommitHead extends Omit<CommitBody, 'format' | 'files'> {
  format: CommitFormat;
  /** SHA-256 (64 lowercase hex) of the canonical bytes: the commit's name. */
  id: string;
  /** The bucket that holds the commit and its files. */
  bucket: string;
  /** How many files the commit records. */
  count: number;
  /** Format 2: the root page and its height. */
  tree?: { root: string; height: number } | undefined;
}

/**
 * A commit as read whole (`loadCommit`): its metadata plus every file record, whatever its
 * format. `id` and `bucket` are not part of the stored object (the ID is the SHA-256 of the
 * stored bytes; the bucket is where they live).
 */
export interface Commit extends Omit<CommitBody, 'format'> {
  format: CommitFormat;
  /** SHA-256 (64 lowercase hex) of the canonical bytes: the commit's name. */
  id: string;
  /** The bucket that holds the commit and its files. */
  bucket: string;
}

const HEX64 = /^[0-9a-f]{64}$/;

/** True when `id` has the form of a commit ID (64 lowercase hex characters). */
export function isCommitId(id: string): boolean {
  return HEX64.test(id);
}

export { sha256Hex };

// ---- canonical JSON (src/logs/canonical-json.ts) -----------------------------------------

export { canonicalJson, type Json };

/** The canonical UTF-8 bytes of a commit body (either format). */
export function commitBytes(body: CommitBody | CommitBody2): Buffer {
  return Buffer.from(canonicalJson(body), 'utf8');
}

// ---- keys ----------------------------------------------------------------------------------

/** The key of a commit object: `.provcat/commits/<id>.json`. */
export function commitKey(id: string): string {
  return `${META_PREFIX}commits/${id}.json`;
}

/** The log folder of a committed folder: `.provcat/log/<sha256 hex of the folder prefix>/`. */
export function logPrefix(folder: string): string {
  return `${META_PREFIX}log/${sha256Hex(folder)}/`;
}

/** The key of log entry N of a folder. */
export function logKey(folder: string, number: number): string {
  return logPrefix(folder) + logName(number);
}

/** The key of a branch's intent record: `.provcat/branches/<name>.json`. */
export function branchIntentKey(name: string): string {
  return `${META_PREFIX}branches/${name}.json`;
}

/** The key of a branch's completion marker: `.provcat/branches/<name>.done`. */
export function branchDoneKey(name: string): string {
  return `${META_PREFIX}branches/${name}.done`;
}

// ---- validation ----------------------------------------------------------------------------

const COMMON_FIELDS = ['folder', 'format', 'message', 'metadata', 'number', 'parent', 'time'];
const TOP_FIELDS = new Set([...COMMON_FIELDS, 'files']);
const TOP_FIELDS_2 = new Set([...COMMON_FIELDS, 'count', 'height', 'root']);
/** The greatest height of a page tree (a page of height h splits on keys of level > h, at most 32). */
export const MAX_TREE_HEIGHT = 64;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

function bad(id: string, why: string, cause?: unknown): StoreError {
  return new StoreError(`commit ${id} is not a valid commit object: ${why}`, { cause });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Why a folder prefix is not one a commit can record, or `undefined`. */
export function folderProblem(folder: string): string | undefined {
  if (folder === '') return undefined;
  if (!folder.endsWith('/')) return 'a folder prefix ends with /';
  if (isMetaKey(folder)) return `keys under ${META_PREFIX} belong to provcat`;
  for (const seg of folder.slice(0, -1).split('/')) {
    const problem = segmentProblem(seg);
    if (problem) return problem;
  }
  return undefined;
}

/**
 * Parse and validate the bytes of commit `id` (already known to hash to `id`), in either format:
 * a format 1 commit with its `files`, a format 2 commit with its page tree's root (and no
 * `files`: read them with `openCommit`). Throws {@link StoreError} naming the first problem:
 * not UTF-8 JSON, not canonical, a missing, extra or mistyped field, files out of order or
 * outside the folder, an unknown `format`.
 */
export function parseCommitObject(
  bytes: Uint8Array,
  id: string,
  bucket: string,
): { head: CommitHead; files?: CommitFile[] | undefined } {
  const record = parseCanonical(bytes, {
    fail: (problem, why, cause) =>
      bad(
        id,
        problem === 'not-canonical' ? 'not in canonical form (sorted keys, no whitespace)' : why,
        cause,
      ),
    validate: (value) => checkCommitFields(value, id),
  });
  const { files, count, root, height, ...rest } = record as Record<string, unknown>;
  const head = { ...(rest as Omit<CommitHead, 'id' | 'bucket' | 'count'>), id, bucket };
  if (record.format === COMMIT_FORMAT) {
    const list = files as CommitFile[];
    return { head: { ...head, count: list.length }, files: list };
  }
  return {
    head: {
      ...head,
      count: count as number,
      tree: { root: root as string, height: height as number },
    },
  };
}

/**
 * Parse and validate the bytes of a format 1 commit `id` (already known to hash to `id`); a
 * format 2 commit is refused here ({@link StoreError}: read it with `loadCommit`/`openCommit`).
 */
export function parseCommit(bytes: Uint8Array, id: string, bucket: string): Commit {
  const { head, files } = parseCommitObject(bytes, id, bucket);
  if (!files) throw bad(id, `format ${head.format} lists its files in pages`);
  const { count: _count, tree: _tree, ...rest } = head;
  return { ...rest, files };
}

/** The field checks of {@link parseCommitObject} (everything but the canonical form). */
function checkCommitFields(value: Record<string, unknown>, id: string): void {
  const v2 = value.format === COMMIT_FORMAT_2;
  if (value.format !== COMMIT_FORMAT && !v2) {
    throw bad(
      id,
      `format ${JSON.stringify(value.format)} (this reader knows ${COMMIT_FORMAT} and ${COMMIT_FORMAT_2})`,
    );
  }
  const fields = v2 ? TOP_FIELDS_2 : TOP_FIELDS;
  for (const field of Object.keys(value)) {
    if (!fields.has(field)) throw bad(id, `unknown field ${JSON.stringify(field)}`);
  }
  const { folder, parent, number, message, metadata, time, files } = value;
  if (typeof folder !== 'string') throw bad(id, 'folder is not a string');
  const problem = folderProblem(folder);
  if (problem) throw bad(id, `folder ${JSON.stringify(folder)}: ${problem}`);
  if (parent !== null && (typeof parent !== 'string' || !isCommitId(parent))) {
    throw bad(id, 'parent is neither null nor a commit ID');
  }
  if (typeof number !== 'number' || !Number.isSafeInteger(number) || number < 1) {
    throw bad(id, 'number is not a positive integer');
  }
  if ((number === 1) !== (parent === null)) {
    throw bad(id, 'commit 1 and only commit 1 has no parent');
  }
  if (typeof message !== 'string' || message.trim() === '') throw bad(id, 'empty message');
  if (!isPlainObject(metadata)) throw bad(id, 'metadata is not an object');
  for (const [k, v] of Object.entries(metadata)) {
    if (typeof v !== 'string') throw bad(id, `metadata ${JSON.stringify(k)} is not a string`);
  }
  if (typeof time !== 'string' || !ISO_TIME.test(time) || Number.isNaN(Date.parse(time))) {
    throw bad(id, 'time is not an ISO 8601 UTC timestamp');
  }
  if (v2) {
    const { count, root, height } = value;
    if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 1) {
      throw bad(id, 'count is not a positive integer');
    }
    if (typeof root !== 'string' || !HEX64.test(root)) throw bad(id, 'root is not a SHA-256');
    if (
      typeof height !== 'number' ||
      !Number.isSafeInteger(height) ||
      height < 0 ||
      height > MAX_TREE_HEIGHT
    ) {
      throw bad(id, `height is not an integer from 0 to ${MAX_TREE_HEIGHT}`);
    }
    return;
  }
  if (!Array.isArray(files)) throw bad(id, 'files is not an array');
  checkFileRecords(files, folder, 'files', (why) => bad(id, why));
}

/**
 * Check file records as a commit (`files`, format 1) or a leaf page (format 2) holds them: each an
 * object with a file `key` under `folder` (not under `.provcat/`, not ending `/`), a non-empty
 * `versionId`, a non-negative integer `size`, an optional string `etag`, and keys strictly
 * ascending by UTF-8 bytes. `fail` makes the reader's error from a reason; `name` names the array.
 * `checkSha256` (format 2) also requires a `sha256`, where present, to be 64 lowercase hex.
 */
export function checkFileRecords(
  files: readonly unknown[],
  folder: string,
  name: string,
  fail: (why: string) => Error,
  checkSha256 = false,
): void {
  let previous: string | undefined;
  for (const [i, f] of files.entries()) {
    if (!isPlainObject(f)) throw fail(`${name}[${i}] is not an object`);
    const { key, versionId, size, etag, sha256 } = f;
    if (typeof key !== 'string' || key === '' || !key.startsWith(folder) || key.endsWith('/')) {
      throw fail(`${name}[${i}].key is not a file key under ${JSON.stringify(folder)}`);
    }
    if (isMetaKey(key)) throw fail(`${name}[${i}].key is under ${META_PREFIX}`);
    if (typeof versionId !== 'string' || versionId === '') {
      throw fail(`${name}[${i}].versionId is not a non-empty string`);
    }
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
      throw fail(`${name}[${i}].size is not a non-negative integer`);
    }
    if (etag !== undefined && typeof etag !== 'string') {
      throw fail(`${name}[${i}].etag is not a string`);
    }
    if (
      checkSha256 &&
      sha256 !== undefined &&
      (typeof sha256 !== 'string' || !HEX64.test(sha256))
    ) {
      throw fail(`${name}[${i}].sha256 is not 64 lowercase hex characters`);
    }
    if (previous !== undefined && compareUtf8(previous, key) >= 0) {
      throw fail(`${name} are not sorted by key (or repeat one) at ${JSON.stringify(key)}`);
    }
    previous = key;
  }
}

/** Check a commit ID's form; {@link UriError} otherwise. */
export function checkCommitId(id: string): void {
  if (!isCommitId(id)) {
    throw new UriError(`a commit ID is 64 lowercase hex characters (a SHA-256), not '${id}'`);
  }
}
