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

/** The `format` of every commit object this version writes and reads. */
export const COMMIT_FORMAT = 'provcat.commit/1';

/** The `format` of branch intent records. */
export const BRANCH_FORMAT = 'provcat.branch/1';

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

/**
 * A commit as read: its body plus where it was read from. `id` and `bucket` are not part of the
 * stored object (the ID is the SHA-256 of the stored bytes; the bucket is where they live).
 */
export interface Commit extends CommitBody {
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

/** The canonical UTF-8 bytes of a commit body. */
export function commitBytes(body: CommitBody): Buffer {
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

const TOP_FIELDS = new Set([
  'files',
  'folder',
  'format',
  'message',
  'metadata',
  'number',
  'parent',
  'time',
]);
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

function bad(id: string, why: string, cause?: unknown): StoreError {
  return new StoreError(`commit ${id} is not a valid ${COMMIT_FORMAT} object: ${why}`, { cause });
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
 * Parse and validate the bytes of commit `id` (already known to hash to `id`). Throws
 * {@link StoreError} naming the first problem: not UTF-8 JSON, not canonical, a missing, extra or
 * mistyped field, files out of order or outside the folder, an unknown `format`.
 */
export function parseCommit(bytes: Uint8Array, id: string, bucket: string): Commit {
  const record = parseCanonical(bytes, {
    fail: (problem, why, cause) =>
      bad(
        id,
        problem === 'not-canonical' ? 'not in canonical form (sorted keys, no whitespace)' : why,
        cause,
      ),
    validate: (value) => checkCommitFields(value, id),
  });
  return { ...(record as unknown as CommitBody), id, bucket };
}

/** The field checks of {@link parseCommit} (everything but the canonical form). */
function checkCommitFields(value: Record<string, unknown>, id: string): void {
  if (value.format !== COMMIT_FORMAT) {
    throw bad(id, `format ${JSON.stringify(value.format)} (this reader knows ${COMMIT_FORMAT})`);
  }
  for (const field of Object.keys(value)) {
    if (!TOP_FIELDS.has(field)) throw bad(id, `unknown field ${JSON.stringify(field)}`);
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
  if (!Array.isArray(files)) throw bad(id, 'files is not an array');
  let previous: string | undefined;
  for (const [i, f] of files.entries()) {
    if (!isPlainObject(f)) throw bad(id, `files[${i}] is not an object`);
    const { key, versionId, size, etag } = f;
    if (typeof key !== 'string' || key === '' || !key.startsWith(folder) || key.endsWith('/')) {
      throw bad(id, `files[${i}].key is not a file key under ${JSON.stringify(folder)}`);
    }
    if (isMetaKey(key)) throw bad(id, `files[${i}].key is under ${META_PREFIX}`);
    if (typeof versionId !== 'string' || versionId === '') {
      throw bad(id, `files[${i}].versionId is not a non-empty string`);
    }
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
      throw bad(id, `files[${i}].size is not a non-negative integer`);
    }
    if (etag !== undefined && typeof etag !== 'string') {
      throw bad(id, `files[${i}].etag is not a string`);
    }
    if (previous !== undefined && compareUtf8(previous, key) >= 0) {
      throw bad(id, `files are not sorted by key (or repeat one) at ${JSON.stringify(key)}`);
    }
    previous = key;
  }
}

/** The stored body of a commit (drops `id` and `bucket`). */
export function bodyOf(commit: Commit): CommitBody {
  const { id: _id, bucket: _bucket, ...body } = commit;
  return body;
}

/** Check a commit ID's form; {@link UriError} otherwise. */
export function checkCommitId(id: string): void {
  if (!isCommitId(id)) {
    throw new UriError(`a commit ID is 64 lowercase hex characters (a SHA-256), not '${id}'`);
  }
}
