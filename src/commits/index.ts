/**
 * Versions of folders: commit, log, pin and branch, built only on the driver primitives of the
 * store passed in, and the on-store format they share (docs/commit-format.md).
 *
 * `ObjectStore.pin/commit/log/branch` delegate here; reads at `?at=commit:` use
 * {@link loadCommit}, {@link commitCovers} and {@link filesUnder}.
 *
 * @module
 */
export { type BranchOptions, branchFrom } from './branch.js';
export { COMMIT_ATTEMPTS, type CommitOptions, commitFolder } from './commit.js';
export {
  BRANCH_FORMAT,
  COMMIT_FORMAT,
  type Commit,
  type CommitBody,
  type CommitFile,
  canonicalJson,
  commitBytes,
  commitKey,
  compareUtf8,
  isCommitId,
  logKey,
  logPrefix,
  META_PREFIX,
  parseCommit,
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
export { type PinOptions, pinUri } from './pin.js';
export {
  cacheCommit,
  commitCovers,
  fileAt,
  filesUnder,
  type LoadCommitOptions,
  loadCommit,
  MAX_COMMIT_BYTES,
} from './read.js';
export { SNAPSHOT_ATTEMPTS, type SnapshotOptions, snapshotFolder } from './snapshot.js';
