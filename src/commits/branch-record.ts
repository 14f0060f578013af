/**
 * The intent record of a branch, `.provcat/branches/<name>.json`: what the branch copies, written
 * (only if absent) before the first copy, so that a rerun completes exactly that.
 *
 * - `provcat.branch/2` (written): the source and where its files are named — a commit's ID (its
 *   file records, in its pages or its one object), or for a live folder the root of a page tree
 *   of its snapshot, written under `.provcat/pages/` before the record. The record is small
 *   whatever the number of files, and the copy walks the pages.
 * - `provcat.branch/1` (read and resumed for ever, no longer written): the same with every file
 *   listed in the record (`files`), which grows with the source.
 *
 * docs/commit-format.md ("Branches") is the user-facing statement of both.
 *
 * @module
 */
import { StoreError } from '../core/errors.js';
import { parseCanonical } from '../logs/canonical-json.js';
import {
  BRANCH_FORMAT,
  BRANCH_FORMAT_2,
  type CommitFile,
  canonicalJson,
  isCommitId,
  MAX_TREE_HEIGHT,
} from './format.js';

/** What a branch copies from: a commit (of `folder` or a folder above it) or a live folder. */
export interface BranchSource {
  /** The commit ID, or `null` for a snapshot of the live folder. */
  commit: string | null;
  /** The source folder prefix; file keys are copied relative to it. */
  folder: string;
}

/** The root of the page tree of a live folder's snapshot (a `provcat.branch/2` record's `tree`). */
export interface BranchTree {
  /** How many files the tree holds (at least 1). */
  count: number;
  /** The root page's height. */
  height: number;
  /** The SHA-256 of the root page (`.provcat/pages/<root>`). */
  root: string;
}

/** A `provcat.branch/1` record: the source files listed in the record. */
export interface BranchIntent1 {
  format: typeof BRANCH_FORMAT;
  /** The branch's folder prefix (`name/`). */
  branch: string;
  source: BranchSource;
  time: string;
  /** The source files, exactly as copied (full source keys, their versions). */
  files: CommitFile[];
}

/** A `provcat.branch/2` record: the source files named by a commit or by a page tree. */
export interface BranchIntent2 {
  format: typeof BRANCH_FORMAT_2;
  /** The branch's folder prefix (`name/`). */
  branch: string;
  source: BranchSource;
  time: string;
  /** Present exactly when `source.commit` is `null`: the snapshot's page tree. */
  tree?: BranchTree | undefined;
}

/** Either record. */
export type BranchIntent = BranchIntent1 | BranchIntent2;

const HEX64 = /^[0-9a-f]{64}$/;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function onlyFields(v: Record<string, unknown>, fields: readonly string[]): boolean {
  return Object.keys(v).every((f) => fields.includes(f));
}

/** The canonical bytes of a record (format 2 is always written so; format 1 was too). */
export function branchRecordBytes(intent: BranchIntent): Buffer {
  return Buffer.from(canonicalJson(intent), 'utf8');
}

/**
 * Parse the record at `key`, either format. Format 2 is checked strictly: canonical JSON, only
 * its fields, a commit ID or a tree (never both, never neither), a 64-hex root, a height of 0
 * to 64 and a positive count. Format 1 as it always was (each file a key under the source
 * folder, a version ID and a size). {@link StoreError} otherwise.
 */
export function parseBranchRecord(bytes: Buffer, key: string): BranchIntent {
  const bad = (why: string, cause?: unknown) =>
    new StoreError(`branch record ${key} is not a valid branch record: ${why}`, { cause });
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (cause) {
    throw new StoreError(`branch record ${key} is not JSON`, { cause });
  }
  if (isObject(value) && value.format === BRANCH_FORMAT_2) {
    return parseCanonical(bytes, {
      fail: (_problem, why, cause) => bad(why, cause),
      validate: (v) => checkRecord2(v, bad),
    }) as unknown as BranchIntent2;
  }
  const v1 = value as BranchIntent1;
  const ok =
    isObject(value) &&
    v1.format === BRANCH_FORMAT &&
    typeof v1.branch === 'string' &&
    typeof v1.source?.folder === 'string' &&
    (v1.source.commit === null || isCommitId(String(v1.source.commit))) &&
    Array.isArray(v1.files) &&
    v1.files.every(
      (f) =>
        typeof f?.key === 'string' &&
        f.key.startsWith(v1.source.folder) &&
        typeof f.versionId === 'string' &&
        Number.isSafeInteger(f.size),
    );
  if (!ok) {
    throw new StoreError(
      `branch record ${key} is not a valid ${BRANCH_FORMAT} or ${BRANCH_FORMAT_2} object`,
    );
  }
  return v1;
}

function checkRecord2(v: Record<string, unknown>, bad: (why: string) => StoreError): void {
  if (!onlyFields(v, ['branch', 'format', 'source', 'time', 'tree'])) throw bad('unknown field');
  const { branch, source, time, tree } = v;
  if (typeof branch !== 'string' || !branch.endsWith('/')) throw bad('branch is no folder');
  if (typeof time !== 'string') throw bad('time is not a string');
  if (!isObject(source) || !onlyFields(source, ['commit', 'folder'])) throw bad('bad source');
  const { commit, folder } = source;
  if (typeof folder !== 'string') throw bad('source.folder is not a string');
  if (commit !== null && (typeof commit !== 'string' || !isCommitId(commit))) {
    throw bad('source.commit is neither null nor a commit ID');
  }
  if ((commit === null) !== (tree !== undefined)) {
    throw bad('a record names its files by a commit or by a tree, exactly one of them');
  }
  if (tree === undefined) return;
  if (!isObject(tree) || !onlyFields(tree, ['count', 'height', 'root'])) throw bad('bad tree');
  const { count, height, root } = tree;
  if (typeof root !== 'string' || !HEX64.test(root)) throw bad('tree.root is not a SHA-256');
  if (typeof height !== 'number' || !Number.isSafeInteger(height) || height < 0) {
    throw bad('tree.height is not a non-negative integer');
  }
  if (height > MAX_TREE_HEIGHT) throw bad(`tree.height is above ${MAX_TREE_HEIGHT}`);
  if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 1) {
    throw bad('tree.count is not a positive integer');
  }
}
