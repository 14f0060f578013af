/**
 * The fault suite's eyes: what is on disk (temps, partial files, a fetched tree) and what is in
 * the store (read back directly, never through a proxy or a cache).
 *
 * Every byte string the suite writes is registered in {@link Contents}, so any file found at rest
 * in a cache, a store or a stage can be judged without knowing which key it belongs to: it must
 * be the whole of something written. A file of a size nothing written has is partial; one of a
 * right size with other bytes is corrupt.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { Dirent } from 'node:fs';
import { lstat, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { NotFound } from '../core/errors.js';
import { Uri } from '../core/uri.js';
import type { ObjectStore } from '../store/object-store.js';

/** SHA-256 hex of bytes. */
export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * Names of the temps provcat writes while it works: `.tmp-*` (the cache, the local store, `cat -o`),
 * `*.uploading` (a local stage), `*.partial`. A finished operation leaves none of its own.
 */
export const TEMP_NAME = /^\.tmp-|\.uploading$|\.partial$/;

/**
 * The marker of an upload in progress to a local stage (`.provcat/uploads/<pid>.<id>`, naming
 * its `.uploading` temp; drivers/local/stage-files.ts): a temp too, not an object.
 */
const UPLOAD_MARKER = /^\d+\.[0-9a-f]+$/;

/** True for a temp: by its name, or an upload marker by its folder. */
export function isTemp(name: string, parent: string): boolean {
  return (
    TEMP_NAME.test(name) ||
    (UPLOAD_MARKER.test(name) &&
      path.basename(parent) === 'uploads' &&
      path.basename(path.dirname(parent)) === '.provcat')
  );
}

/** Every temp below `dir` (files or folders), and every lock left in a `locks` folder. */
export async function tempsIn(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const { full, name, parent, isDir } of await entries(dir)) {
    if (
      isTemp(name, parent) ||
      (isDir && name.endsWith('.lock') && path.basename(parent) === 'locks')
    ) {
      found.push(full);
    }
  }
  return found;
}

interface DirEntry {
  full: string;
  name: string;
  parent: string;
  isDir: boolean;
  isFile: boolean;
}

/** Everything below `dir`, never following a symlink; nothing when it does not exist. */
async function entries(dir: string): Promise<DirEntry[]> {
  let list: Dirent[];
  try {
    list = await readdir(dir, { recursive: true, withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  return list.map((e) => ({
    full: path.join(e.parentPath, e.name),
    name: e.name,
    parent: e.parentPath,
    isDir: e.isDirectory(),
    isFile: e.isFile(),
  }));
}

/** The regular files below `dir` that are not temps, by path relative to it (with `/`), with their SHA-256. */
export async function treeOf(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const e of await entries(dir)) {
    if (!e.isFile || isTemp(e.name, e.parent)) continue;
    out.set(path.relative(dir, e.full).split(path.sep).join('/'), sha256(await readFile(e.full)));
  }
  return out;
}

/** How a tree differs from the one expected: paths missing, extra, or with other bytes. */
export function treeDiff(got: Map<string, string>, want: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [rel, sha] of want) {
    const g = got.get(rel);
    if (g === undefined) out.push(`missing ${rel}`);
    else if (g !== sha) out.push(`wrong bytes in ${rel}`);
  }
  for (const rel of got.keys()) if (!want.has(rel)) out.push(`extra ${rel}`);
  return out;
}

/** Every byte string the suite wrote: SHA-256 → size. */
export class Contents {
  private readonly bySha = new Map<string, number>();
  private readonly sizes = new Set<number>();

  /** Register bytes as written; returns their SHA-256. */
  add(bytes: Uint8Array): string {
    const sha = sha256(bytes);
    this.bySha.set(sha, bytes.length);
    this.sizes.add(bytes.length);
    return sha;
  }

  /** `whole` (the bytes of something written), `partial` (a size nothing written has) or `corrupt`. */
  judge(bytes: Uint8Array): 'whole' | 'partial' | 'corrupt' {
    if (this.bySha.has(sha256(bytes))) return 'whole';
    return this.sizes.has(bytes.length) ? 'corrupt' : 'partial';
  }
}

/** Files at rest that are not the whole of anything written, below `dirs`, temps and JSON state aside. */
export interface AtRest {
  partial: string[];
  corrupt: string[];
}

/**
 * Judge every regular file below `dirs` (temps aside) with `contents`, hard links of one file
 * once. `memo` remembers files
 * already judged whole by device, inode, size and mtime, so a cache's read-only blobs and their
 * hard links are read once per run.
 */
export async function judgeFiles(
  dirs: string[],
  contents: Contents,
  memo: Set<string> = new Set(),
): Promise<AtRest> {
  const out: AtRest = { partial: [], corrupt: [] };
  const bad = new Set<string>();
  for (const dir of dirs) {
    for (const e of await entries(dir)) {
      if (!e.isFile || isTemp(e.name, e.parent)) continue;
      const st = await lstat(e.full);
      const id = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
      // A file and its hard links are one file.
      if (memo.has(id) || bad.has(id)) continue;
      const verdict = contents.judge(await readFile(e.full));
      if (verdict === 'whole') memo.add(id);
      else {
        bad.add(id);
        out[verdict].push(e.full);
      }
    }
  }
  return out;
}

/** The folders of a cache root that hold fetched bytes (docs/cache.md, layout version 1). */
export function cacheDataDirs(root: string): string[] {
  return ['blobs', 'tree', 'file', 'pin', 'commit'].map((d) => path.join(root, 'v1', d));
}

/** The current bytes of `uri`, read directly with the store's `_get` (no cache); `undefined` when absent. */
export async function readObject(store: ObjectStore, uri: string): Promise<Buffer | undefined> {
  const { bucket, key } = store.locate(Uri.parse(uri));
  try {
    const res = await store._get(bucket, key);
    const chunks: Buffer[] = [];
    for await (const chunk of res.body) chunks.push(Buffer.from(chunk as Uint8Array));
    return Buffer.concat(chunks);
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
}

/** True when the object `key` of `bucket` exists (a `_head`), for markers no URI may name. */
export async function exists(store: ObjectStore, bucket: string, key: string): Promise<boolean> {
  try {
    await store._head(bucket, key);
    return true;
  } catch (error) {
    if (error instanceof NotFound) return false;
    throw error;
  }
}
