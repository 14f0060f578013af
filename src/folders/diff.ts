/**
 * {@link diffFolders}: which files were added, removed or changed between two versions of a
 * folder (or two folders) — each side a folder at a commit, or a folder now.
 *
 * Each side is what `walk` gives: at `?at=commit:` the commit's files (no store call beyond
 * reading the commit and its pages, which the cache keeps, so two cached commits diff offline),
 * now one flat listing. Files are matched by their path relative to their side's folder. Two
 * sides at commits of the same folder are compared by page hash (src/commits/pages/diff-trees.ts):
 * only pages that differ are read, so the cost follows the change, not the folder.
 *
 * **Changed means "not provably the same bytes"**, by the one rule `commit` also uses for its
 * "no change since commit N" check ({@link sameBytes} in src/contract/entry.ts), so `diff` against now
 * is empty exactly when a commit would find nothing to record: the same key at the same version
 * ID, version or ETag, or equal digests the stores state (a recorded SHA-256, the MD5 of a plain
 * ETag, Azure's `Content-MD5` or GCS's `md5Hash`, a multipart ETag) and sizes. Where a side now
 * and a side at a commit share no such field (Azure: no version IDs in a listing, no ETags in a
 * commit), one version listing of the folder gives the side now its version IDs. So a file
 * rewritten with identical bytes, or copied to another folder, is not a change where a digest
 * shows it; the same bytes uploaded with different part sizes, or on a store whose ETags prove
 * nothing, are. This never hides a change; it may report one of identical bytes, never the
 * reverse.
 *
 * @module
 */

import { statedMd5 } from '../cache/content-digest.js';
import type { CachedStoreContext } from '../cache/context.js';
import type { CommitFile } from '../commits/format.js';
import { diffTrees } from '../commits/pages/diff-trees.js';
import type { CommitTree } from '../commits/pages/tree.js';
import { commitCovers, openCommit } from '../commits/read.js';
import { type Entry, type FileFacts, sameBytes } from '../contract/entry.js';
import { NotFound, UriError } from '../core/errors.js';
import { compareUtf8 } from '../core/keys.js';
import { toUri, type Uri } from '../core/uri.js';
import { walkFolder } from './listing.js';

/** A file on one side of a diff. */
export interface DiffFile {
  /** The path relative to the side's folder. */
  path: string;
  size: number;
  /** As `stat` reports it: the version ID at a commit; now, the store's version (S3: the ETag). */
  version: string | null;
}

/** A file on both sides, with different bytes (see the module comment). */
export interface DiffChange {
  path: string;
  from: { size: number; version: string | null };
  to: { size: number; version: string | null };
}

/** What {@link diffFolders} found, each list in path order (UTF-8 bytes). */
export interface DiffResult {
  /** The two sides, as folders (with `?at=commit:` for a side at a commit). */
  from: Uri;
  to: Uri;
  /** Files in `to` only. */
  added: DiffFile[];
  /** Files in `from` only. */
  removed: DiffFile[];
  /** Files in both whose bytes differ (or cannot be shown equal). */
  changed: DiffChange[];
}

/** Options of {@link diffFolders}. */
export interface DiffOptions {
  signal?: AbortSignal | undefined;
}

const COMMIT_ID = /^[0-9a-f]{64}$/;

/** A side of a diff as a folder URI; `UriError` for a version pin (a file, not a folder). */
function sideOf(uri: Uri): Uri {
  if (uri.at?.kind === 'version') {
    throw new UriError(`diff compares folders; ?at=version: names one file: ${uri}`, {
      uri: uri.toString(),
    });
  }
  return uri.asFolder();
}

/** What {@link sameBytes} compares of an entry. */
function factsOf(e: Entry): FileFacts {
  const { size, version, versionId, etag, md5, sha256 } = e;
  return { key: e.uri.key, size, version, versionId, etag, md5, sha256 };
}

/**
 * The files of a side now (`now`, by path) whose listing gave no version ID where the commit on
 * the other side recorded one, and no ETag on both sides decides (Azure: List Blobs names no
 * versions and Azure commits record no ETag), of the same size and not shown the same, get their current version ID from one version listing of the
 * folder (`_history`), so {@link sameBytes} compares version IDs, as `commit` does. A version ID
 * never comes back once replaced, so the current one equal to the commit's means the file was
 * not written since. Nothing to add: no request.
 */
async function addVersionIds(
  store: CachedStoreContext,
  folder: Uri,
  now: Map<string, Entry>,
  committed: ReadonlyMap<string, Entry>,
  signal: AbortSignal | undefined,
): Promise<void> {
  const open = new Map<string, string>(); // key → path
  for (const [path, e] of now) {
    const c = committed.get(path);
    if (c === undefined || c.versionId === undefined || e.versionId !== undefined) continue;
    // Two ETags of one key decide (S3 commits record the ETag): no version listing for them.
    if (c.etag !== undefined && e.etag !== undefined) continue;
    if (c.size === e.size && !sameBytes(factsOf(e), factsOf(c))) open.set(e.uri.key, path);
  }
  if (open.size === 0) return;
  const { bucket } = store.locate(folder);
  for await (const record of store._history(bucket, folder.prefix, { signal })) {
    const path = open.get(record.key);
    const e = path === undefined ? undefined : now.get(path);
    if (e === undefined || !record.current || record.size !== e.size) continue;
    now.set(path as string, { ...e, versionId: record.versionId });
  }
}

function fileOf(path: string, e: Entry): DiffFile {
  return { path, size: e.size ?? 0, version: e.version };
}

/**
 * Compare folder `a` with `b`: `b` is a URI, or a commit ID (`a`'s folder at that commit), and
 * defaults to `a`'s folder now. A side is a folder now (no `?at=`) or a folder at a commit (the
 * committed folder or one below it). Both must be of this store's scheme. `NotFound` for a
 * folder a commit does not hold; `UriError` for `?at=version:`; offline, a side that is not a
 * commit raises `OfflineMiss` (a commit side answers from the cache once it was read).
 */
export async function diffFolders(
  store: CachedStoreContext,
  a: Uri | string,
  b?: Uri | string,
  options: DiffOptions = {},
): Promise<DiffResult> {
  const from = sideOf(toUri(a));
  let to: Uri;
  if (b === undefined) to = from.withAt(undefined);
  else if (typeof b === 'string' && COMMIT_ID.test(b)) to = from.withAt({ kind: 'commit', id: b });
  else to = sideOf(toUri(b));
  if (
    from.at?.kind === 'commit' &&
    to.at?.kind === 'commit' &&
    from.bucket === to.bucket &&
    from.prefix === to.prefix
  ) {
    return diffCommits(store, from, to, options);
  }
  const [left, right] = await Promise.all([
    walkFolder(store, from, { signal: options.signal }),
    walkFolder(store, to, { signal: options.signal }),
  ]);
  const byPath = (folder: Uri, entries: Entry[]) =>
    new Map(entries.map((e) => [folder.relative(e.uri) ?? e.uri.key, e] as const));
  const l = byPath(from, left);
  const r = byPath(to, right);
  const { signal } = options;
  if (from.at === undefined && to.at !== undefined) await addVersionIds(store, from, l, r, signal);
  if (to.at === undefined && from.at !== undefined) await addVersionIds(store, to, r, l, signal);
  const added: DiffFile[] = [];
  const removed: DiffFile[] = [];
  const changed: DiffChange[] = [];
  for (const [path, x] of l) {
    const y = r.get(path);
    if (y === undefined) removed.push(fileOf(path, x));
    else if (!sameBytes(factsOf(x), factsOf(y))) {
      changed.push({
        path,
        from: { size: x.size ?? 0, version: x.version },
        to: { size: y.size ?? 0, version: y.version },
      });
    }
  }
  for (const [path, y] of r) if (!l.has(path)) added.push(fileOf(path, y));
  const order = (p: { path: string }, q: { path: string }) => compareUtf8(p.path, q.path);
  return {
    from,
    to,
    added: added.sort(order),
    removed: removed.sort(order),
    changed: changed.sort(order),
  };
}

/** What {@link sameBytes} compares of a commit's file record (as `stat` at the commit gives it). */
function recordFacts(f: CommitFile): FileFacts {
  const sha256 = typeof f.sha256 === 'string' ? f.sha256 : undefined;
  const md5 = statedMd5({ etag: f.etag });
  return {
    key: f.key,
    size: f.size,
    version: f.versionId,
    versionId: f.versionId,
    etag: f.etag,
    md5,
    sha256,
  };
}

/** Open the commit of a side and check it holds the side's folder (`NotFound` otherwise). */
async function openSide(
  store: CachedStoreContext,
  side: Uri,
  signal: AbortSignal | undefined,
): Promise<CommitTree> {
  const at = side.at as NonNullable<Uri['at']>;
  const { bucket } = store.locate(side);
  const tree = await openCommit(store, bucket, at.id, { signal });
  const held =
    commitCovers(tree.head, side) &&
    (side.prefix === tree.head.folder || (await tree.hasUnder(side.prefix)));
  if (!held) {
    throw new NotFound(`no folder at ${side} in commit ${at.id}`, { uri: side.toString() });
  }
  return tree;
}

/** {@link diffFolders} of two sides at commits of the same folder: by page hash. */
async function diffCommits(
  store: CachedStoreContext,
  from: Uri,
  to: Uri,
  options: DiffOptions,
): Promise<DiffResult> {
  const [a, b] = await Promise.all([
    openSide(store, from, options.signal),
    openSide(store, to, options.signal),
  ]);
  const added: DiffFile[] = [];
  const removed: DiffFile[] = [];
  const changed: DiffChange[] = [];
  const prefix = from.prefix;
  const fileOfRecord = (f: CommitFile): DiffFile => ({
    path: f.key.slice(prefix.length),
    size: f.size,
    version: f.versionId,
  });
  for await (const change of diffTrees(a, b, prefix)) {
    if (change.a && change.b) {
      if (sameBytes(recordFacts(change.a), recordFacts(change.b))) continue;
      changed.push({
        path: change.key.slice(prefix.length),
        from: { size: change.a.size, version: change.a.versionId },
        to: { size: change.b.size, version: change.b.versionId },
      });
    } else if (change.a) removed.push(fileOfRecord(change.a));
    else if (change.b) added.push(fileOfRecord(change.b));
  }
  return { from, to, added, removed, changed };
}
