/**
 * Reading one key's versions from its object directory, the truth about them (`./layout.ts`):
 * one `readdir` answers which versions exist, which is newest and whether it is a delete marker.
 * A version a listing just named is found by its name alone (one direct `lstat`,
 * {@link listedVersion}), as a folder fetch's GETs of many small files want.
 * Readers take no lock: version files are immutable once published and never removed.
 *
 * @module
 */
import { lstatSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { GetOptions, ObjectInfo } from '../../src/contract/primitives.js';
import { NotFound } from '../../src/core/errors.js';
import { errorCode, fsError } from './fs-errors.js';
import type { KeyPath } from './key-paths.js';
import {
  etagOf,
  isVersionId,
  parseVersionFile,
  timeOf,
  type VersionFile,
  versionFileName,
} from './layout.js';

/** The raw names of a key's directory (empty when it does not exist). */
export async function versionNames(dir: string, what: string): Promise<string[]> {
  try {
    return await fs.readdir(dir);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return [];
    throw fsError(error, `cannot read the versions of ${what}`, what);
  }
}

/** Every version of a key, oldest first; empty when the key never existed. */
export async function versionsIn(dir: string, what: string): Promise<VersionFile[]> {
  return sortVersions(await versionNames(dir, what));
}

/** The newest version (maybe a delete marker), or `undefined` when there is none. */
export async function newestVersion(where: KeyPath): Promise<VersionFile | undefined> {
  return newestOf(await versionNames(where.dir, where.uri));
}

/** The current version with bytes; `NotFound` when absent or deleted. */
export async function currentVersion(where: KeyPath): Promise<VersionFile> {
  const v = await newestVersion(where);
  if (v === undefined) throw new NotFound(`${where.uri} not found`, { uri: where.uri });
  if (v.size === null) {
    throw new NotFound(`${where.uri} not found (deleted)`, { uri: where.uri });
  }
  return v;
}

/**
 * The version a listing named (`GetOptions.listed`), found without a `readdir`: its file name
 * follows from its ID, size and ETag (`"<md5>"`, or `"<version ID>"` for a version without an
 * MD5; see `./layout.ts`), and one `lstat` says it is there. `undefined` when the hint does not
 * name a version file, or that file is not there (the caller then reads the directory).
 */
export function listedVersion(
  where: KeyPath,
  listed: NonNullable<GetOptions['listed']>,
): VersionFile | undefined {
  const { versionId, size, etag } = listed;
  if (versionId === undefined || etag === undefined || !isVersionId(versionId)) return undefined;
  const tag = etag.slice(1, -1);
  const md5 = tag === versionId ? undefined : MD5.test(tag) ? tag : null;
  if (md5 === null || !etag.startsWith('"') || !etag.endsWith('"')) return undefined;
  const v = parseVersionFile(versionFileName(versionId, size, md5));
  if (v === undefined || v.size === null) return undefined;
  try {
    return lstatSync(path.join(where.dir, v.name), { throwIfNoEntry: false })?.isFile()
      ? v
      : undefined;
  } catch {
    // ENOTDIR, EACCES…: the readdir the caller falls back to reports the cause.
    return undefined;
  }
}

const MD5 = /^[0-9a-f]{32}$/;

/** One version with bytes; `NotFound` for an unknown ID or a delete marker. */
export async function versionById(where: KeyPath, versionId: string): Promise<VersionFile> {
  const uri = `${where.uri}?at=version:${encodeURIComponent(versionId)}`;
  const v = isVersionId(versionId)
    ? (await versionsIn(where.dir, where.uri)).find((x) => x.versionId === versionId)
    : undefined;
  if (v === undefined) throw new NotFound(`${uri} not found`, { uri });
  if (v.size === null) throw new NotFound(`${uri} is a delete marker`, { uri });
  return v;
}

/** Oldest first: version IDs are fixed width, so their text order is their time order. */
export function byVersionId(a: VersionFile, b: VersionFile): number {
  return a.versionId < b.versionId ? -1 : 1;
}

/** The versions among directory entry names, oldest first. */
export function sortVersions(names: string[]): VersionFile[] {
  const out: VersionFile[] = [];
  for (const name of names) {
    const v = parseVersionFile(name);
    if (v !== undefined) out.push(v);
  }
  return out.sort(byVersionId);
}

/** The newest version among directory entry names (the largest version ID). */
export function newestOf(names: string[]): VersionFile | undefined {
  let best: VersionFile | undefined;
  for (const name of names) {
    const v = parseVersionFile(name);
    if (v !== undefined && (best === undefined || v.versionId > best.versionId)) best = v;
  }
  return best;
}

/** What `_head` and listings report of a version with bytes. */
export function infoOf(key: string, v: VersionFile): ObjectInfo {
  return {
    key,
    size: v.size as number,
    version: v.versionId,
    versionId: v.versionId,
    etag: etagOf(v),
    lastModified: timeOf(v),
  };
}
