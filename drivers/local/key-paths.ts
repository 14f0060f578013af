/**
 * Where the local store keeps a bucket, a key and a listing's start on disk (the layout is in
 * `./layout.ts`), and the checks that keep every path inside the root: a bucket name a URI cannot
 * hold, a key the store cannot hold and a path that would leave the root are refused before any
 * file is touched.
 *
 * @module
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { NotFound, UriError } from '../../src/core/errors.js';
import { tempName } from '../../src/core/fs-atomic.js';
import { segmentProblem, Uri, uriText } from '../../src/core/uri.js';
import { missingBucket } from '../../src/driver-kit/bucket-state.js';
import { errorCode, fsError } from './fs-errors.js';
import {
  folderDirName,
  MAX_KEY_BYTES,
  NAME_FILE,
  objectDirName,
  refOf,
  type SegmentRef,
} from './layout.js';

/** Where a key lives on disk. */
export interface KeyPath {
  /** `local://bucket/key`, for messages and errors. */
  uri: string;
  /** The object's directory (holding its versions). */
  dir: string;
  /** The folder directory holding `dir`, its index entries and its pending marker. */
  folder: string;
  /** How the key's last segment is named in `folder`. */
  ref: SegmentRef;
  /** Every directory from the bucket down to `dir` whose name is hashed (needs `.name`). */
  hashed: { dir: string; segment: string }[];
}

/** Where a listing starts: the folder directory, the keys' common prefix, the segment's start. */
export interface ListStart {
  dir: string;
  keyPrefix: string;
  partial: string;
}

/** Bucket directories already checked, by root and bucket name (a write of many keys asks often). */
const bucketDirs = new Map<string, string>();

/** The bucket's directory; `UriError` for a name a URI cannot hold (so none can escape root). */
export function bucketDir(root: string, bucket: string): string {
  const memo = `${root}\0${bucket}`;
  const known = bucketDirs.get(memo);
  if (known !== undefined) return known;
  Uri.fromKey('local', bucket, ''); // validates the bucket name, throws UriError
  const dir = inside(root, path.join(root, bucket));
  if (bucketDirs.size >= 1024) bucketDirs.clear();
  bucketDirs.set(memo, dir);
  return dir;
}

/**
 * Where a key lives. A key the store cannot hold is a `UriError` for a write and a `NotFound`
 * for a read (no such object can exist).
 */
export function keyPath(
  root: string,
  bucket: string,
  key: string,
  mode: 'read' | 'write',
): KeyPath {
  const bucketPath = bucketDir(root, bucket);
  const uri = uriText('local', bucket, key);
  const problem = keyProblem(key);
  if (problem !== undefined) {
    if (mode === 'read') throw new NotFound(`${uri} not found (${problem})`, { uri });
    throw new UriError(`the local store cannot hold key ${JSON.stringify(key)}: ${problem}`, {
      uri,
    });
  }
  const segments = key.split('/');
  const last = segments.pop() as string;
  const hashed: KeyPath['hashed'] = [];
  let folder = bucketPath;
  for (const segment of segments) {
    const ref = refOf(segment);
    folder = path.join(folder, folderDirName(ref));
    if (ref.hashed) hashed.push({ dir: folder, segment });
  }
  const ref = refOf(last);
  // Every name below the bucket starts with `o`/`d` (never `.` or `..`): checked the cheap way.
  const dir = below(bucketPath, path.join(folder, objectDirName(ref)));
  if (ref.hashed) hashed.push({ dir, segment: last });
  return { uri, dir, folder, ref, hashed };
}

/** Where a listing under `prefix` starts, or `undefined` when no key can match it. */
export function listStart(root: string, bucket: string, prefix: string): ListStart | undefined {
  let dir = bucketDir(root, bucket);
  const cut = prefix.lastIndexOf('/');
  const keyPrefix = prefix.slice(0, cut + 1);
  const folders = cut < 0 ? [] : prefix.slice(0, cut).split('/');
  for (const segment of folders) {
    if (segmentProblem(segment) !== undefined) return undefined;
    dir = path.join(dir, folderDirName(refOf(segment)));
  }
  return { dir: inside(root, dir), keyPrefix, partial: prefix.slice(cut + 1) };
}

/** `NotFound` naming the bucket when its directory does not exist (an empty listing's check). */
export async function requireBucket(root: string, bucket: string): Promise<void> {
  const dir = bucketDir(root, bucket);
  try {
    if ((await fs.stat(dir)).isDirectory()) return;
  } catch (error) {
    if (errorCode(error) !== 'ENOENT') throw fsError(error, `cannot list local://${bucket}/`);
    throw missingBucket(`local://${bucket}/`, error);
  }
  throw missingBucket(`local://${bucket}/`);
}

/** Create the key's directory and the `.name` files of hashed directories on the way. */
export async function makeKeyDir(where: KeyPath): Promise<void> {
  try {
    await fs.mkdir(where.dir, { recursive: true });
    for (const { dir, segment } of where.hashed) {
      const file = path.join(dir, NAME_FILE);
      if ((await readNameFile(dir)) === segment) continue;
      const temp = path.join(dir, tempName());
      await fs.writeFile(temp, segment, { flag: 'wx' });
      await fs.rename(temp, file);
    }
  } catch (error) {
    throw fsError(error, `cannot create the folders of ${where.uri}`, where.uri);
  }
}

/** The segment a hashed directory holds, or `undefined` while it has no `.name` yet. */
export async function readNameFile(dir: string): Promise<string | undefined> {
  try {
    return await fs.readFile(path.join(dir, NAME_FILE), 'utf8');
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return undefined;
    throw fsError(error, `cannot read ${path.join(dir, NAME_FILE)}`);
  }
}

/** Defence in depth: `p`, a normalized path, after checking it starts with the `dir` it is below. */
function below(dir: string, p: string): string {
  if (!p.startsWith(dir) || p[dir.length] !== path.sep) {
    throw new UriError(`refusing a path outside the local root: ${p}`);
  }
  return p;
}

/** Defence in depth: `p` itself, after checking it is below the root. */
function inside(root: string, p: string): string {
  const rel = path.relative(root, p);
  if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
    throw new UriError(`refusing a path outside the local root: ${p}`);
  }
  return p;
}

/** Why the local store cannot hold `key`, or `undefined` when it can. */
function keyProblem(key: string): string | undefined {
  if (key === '') return 'empty key';
  if (Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES) return `longer than ${MAX_KEY_BYTES} bytes`;
  for (const segment of key.split('/')) {
    const problem = segmentProblem(segment);
    if (problem !== undefined) return problem;
  }
  return undefined;
}
