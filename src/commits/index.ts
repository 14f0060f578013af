/**
 * Versions of folders: commit, log, pin and branch, built only on the driver primitives of the
 * store passed in, and the on-store format they share (docs/commit-format.md).
 *
 * `ObjectStore.pin/commit/log/branch` delegate here; reads at `?at=commit:` use
 * {@link openCommit} (a {@link CommitTree} over either format) and {@link commitCovers}.
 *
 * @module
 */
export { type BranchOptions, branchFrom } from './branch.js';
export { COMMIT_ATTEMPTS, type CommitOptions, commitFolder } from './commit.js';
export {
  BRANCH_FORMAT,
  BRANCH_FORMAT_2,
  COMMIT_FORMAT,
  COMMIT_FORMAT_2,
  type Commit,
  type CommitBody,
  type CommitBody2,
  type CommitFile,
  type CommitFormat,
  type CommitHead,
  canonicalJson,
  commitBytes,
  commitKey,
  compareUtf8,
  isCommitId,
  logKey,
  logPrefix,
  META_PREFIX,
  parseCommit,
  parseCommitObject,
  sha256Hex,
} from './format.js';
export {
  type LogEntry,
  type LogOptions,
  type LogPointer,
  logFolder,
  newestEntry,
  readLog,
} from './log.js';
export { diffTrees, type TreeChange } from './pages/diff-trees.js';
export { PAGE_FORMAT, type Page, type PageRef, pageKey } from './pages/page-format.js';
export { CommitTree } from './pages/tree.js';
export { type PinOptions, pinUri } from './pin.js';
export {
  cacheCommit,
  commitCovers,
  fileAt,
  filesUnder,
  type LoadCommitOptions,
  loadCommit,
  MAX_COMMIT_BYTES,
  materialize,
  openCommit,
} from './read.js';
export { SNAPSHOT_ATTEMPTS, type SnapshotOptions, snapshotFolder } from './snapshot.js';
