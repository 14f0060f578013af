/**
 * `stat`, `list` and `walk` at `?at=`: a version's metadata (cached after the first read, so it
 * works offline) and a commit's manifest. Loaded by src/folders/listing.ts only for a pinned URI.
 *
 * @module
 */

import type { VersionMeta } from '../cache/cache.js';
import { statedMd5 } from '../cache/content-digest.js';
import type { CachedStoreContext } from '../cache/context.js';
import type { CommitFile } from '../commits/format.js';
import { commitCovers, fileAt, filesUnder, loadCommit } from '../commits/read.js';
import type { Entry } from '../contract/entry.js';
import type { CallOptions } from '../contract/store-context.js';
import { NotFound } from '../core/errors.js';
import { compareUtf8 } from '../core/keys.js';
import { Uri } from '../core/uri.js';
import { folderEntry } from './entries.js';

/** `stat` at `?at=version:` (from cached metadata when there is some) or `?at=commit:`. */
export async function statPinned(
  ctx: CachedStoreContext,
  u: Uri,
  options: CallOptions,
): Promise<Entry> {
  const { bucket, key } = ctx.locate(u);
  const at = u.at as NonNullable<Uri['at']>;
  if (at.kind === 'version') {
    const meta = await versionMeta(ctx, u, bucket, key, at.id, options);
    return {
      uri: u,
      kind: 'file',
      size: meta.size,
      version: at.id,
      versionId: at.id,
      etag: meta.etag,
    };
  }
  const commit = await loadCommit(ctx, bucket, at.id, options);
  if (!commitCovers(commit, u.isFolder ? u : u.asFolder()) && !commitCovers(commit, u)) {
    throw new NotFound(`${u}: commit ${at.id} does not cover this path`, { uri: u.toString() });
  }
  if (!u.isFolder) {
    const f = fileAt(commit, key);
    if (f) return commitFileEntry(ctx, u, f, options);
  }
  const folder = u.asFolder();
  if (folder.prefix === commit.folder || filesUnder(commit, folder).length > 0) {
    return folderEntry(folder);
  }
  throw new NotFound(`no file or folder at ${u} in commit ${at.id}`, { uri: u.toString() });
}

/** The entry of a file recorded in a commit; a field the manifest lacks comes from the store. */
async function commitFileEntry(
  ctx: CachedStoreContext,
  u: Uri,
  f: CommitFile,
  options: CallOptions,
): Promise<Entry> {
  let size = f.size;
  let etag = f.etag;
  if (typeof size !== 'number') {
    const meta = await versionMeta(ctx, u, u.bucket, f.key, f.versionId, options);
    size = meta.size;
    etag = etag ?? meta.etag;
  }
  const sha256 = typeof f.sha256 === 'string' ? f.sha256 : undefined;
  const md5 = statedMd5({ etag });
  const entry: Entry = {
    uri: u,
    kind: 'file',
    size,
    version: f.versionId,
    versionId: f.versionId,
  };
  return { ...entry, etag, md5, sha256 };
}

/** Size and ETag of one version: from the cache, else one `_headVersion` (then cached). */
async function versionMeta(
  ctx: CachedStoreContext,
  u: Uri,
  bucket: string,
  key: string,
  versionId: string,
  options: CallOptions,
): Promise<VersionMeta> {
  const cached = await ctx.cache.readVersionMeta(ctx.scheme, bucket, key, versionId);
  if (cached) return cached;
  ctx.online(u, 'stat');
  const info = await ctx._headVersion(bucket, key, versionId, options);
  const meta = { key, versionId, size: info.size, etag: info.etag };
  await ctx.cache.writeVersionMeta(ctx.scheme, bucket, meta);
  return meta;
}

/** `list` at `?at=commit:`, answered from the commit's manifest. */
export async function listPinned(
  ctx: CachedStoreContext,
  u: Uri,
  options: CallOptions,
): Promise<Entry[]> {
  const at = u.at as NonNullable<Uri['at']>;
  if (at.kind !== 'commit')
    throw new NotFound(`${u} is a file, not a folder`, { uri: u.toString() });
  const folder = u.asFolder();
  const commit = await loadCommit(ctx, folder.bucket, at.id, options);
  const files = filesUnder(commit, folder);
  if (files.length === 0 && folder.prefix !== commit.folder) {
    throw new NotFound(`no folder at ${folder} in commit ${at.id}`, { uri: folder.toString() });
  }
  const out: Entry[] = [];
  const seen = new Set<string>();
  for (const f of files) {
    const rest = f.key.slice(folder.prefix.length);
    const slash = rest.indexOf('/');
    if (slash < 0) {
      out.push(
        await commitFileEntry(ctx, Uri.fromKey(ctx.scheme, folder.bucket, f.key, at), f, options),
      );
    } else {
      const sub = `${folder.prefix}${rest.slice(0, slash + 1)}`;
      if (seen.has(sub)) continue;
      seen.add(sub);
      out.push(folderEntry(Uri.fromKey(ctx.scheme, folder.bucket, sub, at)));
    }
  }
  out.sort((a, b) => compareUtf8(a.uri.key, b.uri.key));
  return out;
}

/** Every file below a folder at `?at=commit:`, from the manifest. */
export async function listPinnedFiles(
  ctx: CachedStoreContext,
  u: Uri,
  options: CallOptions,
): Promise<Entry[]> {
  const at = u.at as NonNullable<Uri['at']>;
  const commit = await loadCommit(ctx, u.bucket, at.id, options);
  const files = filesUnder(commit, u);
  if (files.length === 0 && u.prefix !== commit.folder) {
    throw new NotFound(`no folder at ${u} in commit ${at.id}`, { uri: u.toString() });
  }
  return Promise.all(
    files.map((f) =>
      commitFileEntry(ctx, Uri.fromKey(ctx.scheme, u.bucket, f.key, at), f, options),
    ),
  );
}
