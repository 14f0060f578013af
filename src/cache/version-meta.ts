/**
 * The metadata of pinned versions (size, ETag, SHA-256), kept in the cache so that `stat` at a
 * version works offline and a pinned blob can be checked against what its GET reported. One
 * JSON file per version below `meta/`, written atomically, read without following a link.
 *
 * @module
 */
import { constants as fsc } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { writeFileAtomic } from '../core/fs-atomic.js';
import type { CacheLayout } from './cache-layout.js';
import type { SafeDirs } from './safe-dirs.js';

/** The metadata of one pinned version, kept for offline `stat` and to check its blob. */
export interface VersionMeta {
  key: string;
  versionId: string;
  size: number;
  etag?: string | undefined;
  /** The SHA-256 recorded with the object, when its GET reported one. */
  sha256?: string | undefined;
  /** The CRC32C its GET reported (`ObjectInfo.crc32c`), checked where no MD5 or SHA-256 is. */
  crc32c?: string | undefined;
  /** Its GET said the ETag is not the bytes' MD5 (`GetResult.etagNotMd5`). */
  etagNotMd5?: boolean | undefined;
}

/** Remember what a pinned version is (size, etag), so `stat` at it works offline. */
export async function writeVersionMeta(
  layout: CacheLayout,
  dirs: SafeDirs,
  scheme: string,
  bucket: string,
  meta: VersionMeta,
): Promise<void> {
  const file = layout.metaPath(scheme, bucket, meta.key, meta.versionId);
  dirs.makeDir(path.dirname(file));
  await writeFileAtomic(file, JSON.stringify(meta));
}

/** The version whose metadata {@link readVersionMeta} reads. */
export interface VersionRef {
  scheme: string;
  bucket: string;
  key: string;
  versionId: string;
}

/** What {@link writeVersionMeta} recorded for the version, or `undefined`. */
export async function readVersionMeta(
  layout: CacheLayout,
  dirs: SafeDirs,
  { scheme, bucket, key, versionId }: VersionRef,
): Promise<VersionMeta | undefined> {
  const file = layout.metaPath(scheme, bucket, key, versionId);
  if (!dirs.isRealDir(path.dirname(file))) return undefined;
  try {
    const text = await readFile(file, { encoding: 'utf8', flag: fsc.O_RDONLY | fsc.O_NOFOLLOW });
    const meta = JSON.parse(text) as VersionMeta;
    return meta.key === key && meta.versionId === versionId ? meta : undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP') return undefined;
    throw error;
  }
}
