/**
 * Where everything lives in a cache root (layout version 1; the tree is drawn in the module
 * comment of src/cache/cache.ts and in docs/cache.md): the paths of blobs, views, states, locks
 * and version metadata, and the checks that keep every path inside the root.
 *
 * Key names are checked before any path is built: every segment is URI-nameable (no `..`, no
 * empty segment, no NUL) and at most 255 bytes, so no key can produce a path outside the root.
 * Nothing here touches the file system.
 *
 * @module
 */
import path from 'node:path';
import envPaths from 'env-paths';
import { sha256Hex } from '../core/digest.js';
import { StoreError, UriError } from '../core/errors.js';
import { tempName } from '../core/fs-atomic.js';
import { segmentProblem } from '../core/uri.js';

/** The folder below the root that holds layout version 1. */
export const LAYOUT = 'v1';

/** The default cache root: `PROVCAT_CACHE_DIR`, else env-paths('provcat').cache. */
export function defaultCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.PROVCAT_CACHE_DIR;
  return path.resolve(
    fromEnv && fromEnv !== '' ? fromEnv : envPaths('provcat', { suffix: '' }).cache,
  );
}

/** sha256 hex of the parts joined by NUL (several per fetched file: blob, view, state paths). */
export function hashOf(...parts: string[]): string {
  return sha256Hex(parts.join('\0'));
}

/**
 * Where a download into `blob` (a {@link CacheLayout.blobPath}) is written until complete: a
 * fresh temp name in the bucket's blob folder, the parent of the blob's shard (see the module
 * comment of src/cache/cache.ts for why every blob temp of a bucket is in one folder).
 */
export function blobTempPath(blob: string): string {
  return `${path.dirname(path.dirname(blob))}${path.sep}${tempName()}`;
}

/** The paths of one cache root. Pure: it builds names, and checks each key segment first. */
export class CacheLayout {
  /** The absolute root directory. */
  readonly root: string;
  /** `<root>/v1`: everything but the verified commit objects. */
  readonly base: string;
  /** The blob folder of each bucket, by scheme (see {@link blobPath}). */
  private readonly blobRoots = new Map<string, Map<string, string>>();

  constructor(root: string) {
    this.root = root;
    this.base = path.join(root, LAYOUT);
  }

  /** Where a verified commit object is kept once read: `commits/<scheme>/<bucket>/<id>.json`. */
  commitPath(scheme: string, bucket: string, id: string): string {
    return path.join(this.root, 'commits', safeName(scheme), safeName(bucket), `${id}.json`);
  }

  /** The blob holding `key` at `identity` (a version ID, or `v:` + a version). */
  blobPath(scheme: string, bucket: string, key: string, identity: string): string {
    const h = hashOf(scheme, bucket, key, identity);
    // Asked once or twice per fetched file: the checked folder of the bucket is kept, and the
    // two hex segments are appended without path.join's normalizing.
    const root = this.blobRoot(scheme, bucket);
    return `${root}${path.sep}${h.slice(0, 2)}${path.sep}${h}`;
  }

  /** The blob folder of a bucket: its `<aa>` shards, and the temps of blobs being downloaded. */
  blobRoot(scheme: string, bucket: string): string {
    let root = this.blobRoots.get(scheme)?.get(bucket);
    if (root === undefined) {
      root = path.join(this.base, 'blobs', safeName(scheme), safeName(bucket));
      const byBucket = this.blobRoots.get(scheme) ?? new Map<string, string>();
      byBucket.set(bucket, root);
      this.blobRoots.set(scheme, byBucket);
    }
    return root;
  }

  /** The directory of a folder fetch of `folderKey` (`''` for the bucket, else `a/b/`). */
  treePath(scheme: string, bucket: string, folderKey: string): string {
    return under(path.join(this.base, 'tree', safeName(scheme), safeName(bucket)), folderKey);
  }

  /** Where a single-file fetch of `key` lives (stable across versions). */
  filePath(scheme: string, bucket: string, key: string): string {
    const h = hashOf(scheme, bucket, key).slice(0, 32);
    return namedIn(path.join(this.base, 'file', safeName(scheme), safeName(bucket), h), key);
  }

  /** Where `key` at `?at=version:versionId` lives (immutable). */
  pinPath(scheme: string, bucket: string, key: string, versionId: string): string {
    const h = hashOf(scheme, bucket, key, versionId).slice(0, 32);
    return namedIn(path.join(this.base, 'pin', safeName(scheme), safeName(bucket), h), key);
  }

  /** A commit's copy of `key` (a file key, or a folder prefix ending `/`, or `` for all). */
  commitTreePath(scheme: string, bucket: string, commitId: string, key: string): string {
    return under(
      path.join(this.base, 'commit', safeName(scheme), safeName(bucket), safeName(commitId)),
      key,
    );
  }

  /** The state file of a view named by `viewId` (a URI string). */
  statePath(viewId: string): string {
    return path.join(this.base, 'state', `${hashOf(viewId)}.json`);
  }

  /** The lock of a view named by `viewId` (see src/cache/view-lock.ts). */
  lockPath(viewId: string): string {
    return path.join(this.base, 'locks', hashOf(viewId));
  }

  /** The metadata file of a pinned version (see src/cache/version-meta.ts). */
  metaPath(scheme: string, bucket: string, key: string, versionId: string): string {
    const h = hashOf(scheme, bucket, key, versionId);
    return path.join(this.base, 'meta', safeName(scheme), safeName(bucket), `${h}.json`);
  }
}

/** `dir` joined with a relative key whose segments are checked first. */
function under(dir: string, relKey: string): string {
  const segments = relKey.split('/').filter((s, i, all) => !(s === '' && i === all.length - 1));
  if (relKey === '') return dir;
  for (const s of segments) checkSegment(s, relKey);
  return path.join(dir, ...segments);
}

/** `dir/<last segment of key>`, the last segment checked. */
function namedIn(dir: string, key: string): string {
  const name = key.slice(key.lastIndexOf('/') + 1);
  checkSegment(name, key);
  return path.join(dir, name);
}

/** Throw unless `segment` is a safe single path component (see src/core/uri.ts). */
function checkSegment(segment: string, key: string): void {
  const problem = segmentProblem(segment);
  if (problem) throw new UriError(`key ${JSON.stringify(key)} cannot be cached: ${problem}`);
  if (Buffer.byteLength(segment) > 255) {
    throw new StoreError(
      `key ${JSON.stringify(key)}: a name over 255 bytes cannot be a local file`,
    );
  }
}

/** A scheme, bucket or ID used as one path component: must be one safe segment. */
function safeName(name: string): string {
  checkSegment(name, name);
  return name;
}
