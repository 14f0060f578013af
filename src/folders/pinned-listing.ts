/**
 * `stat`, `list` and `walk` at `?at=`: a version's metadata (cached after the first read, so it
 * works offline) and a commit's files. Loaded by src/folders/listing.ts only for a pinned URI.
 * A commit is read through its tree (src/commits/pages/tree.ts): `stat` of one file reads the
 * commit object and one page per height; `list` of a folder skips each subfolder's files.
 *
 * @module
 */

import type { VersionMeta } from '../cache/cache.js';
import { statedMd5 } from '../cache/content-digest.js';
import type { CachedStoreContext } from '../cache/context.js';
import type { CommitFile } from '../commits/format.js';
import { prefixEnd } from '../commits/pages/tree.js';
import { commitCovers, openCommit } from '../commits/read.js';
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
  const tree = await openCommit(ctx, bucket, at.id, options);
  const commit = tree.head;
  if (!commitCovers(commit, u.isFolder ? u : u.asFolder()) && !commitCovers(commit, u)) {
    throw new NotFound(`${u}: commit ${at.id} does not cover this path`, { uri: u.toString() });
  }
  if (!u.isFolder) {
    const f = await tree.fileAt(key);
    if (f) return commitFileEntry(ctx, u, f, options);
  }
  const folder = u.asFolder();
  if (
    folder.prefix === commit.folder ||
    (commitCovers(commit, folder) && (await tree.hasUnder(folder.prefix)))
  ) {
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
  const tree = await openCommit(ctx, folder.bucket, at.id, options);
  const covered = commitCovers(tree.head, folder);
  const out: Entry[] = [];
  // One seek per file or subfolder: after a subfolder, the walk resumes past its last key.
  let from: string | undefined = folder.prefix;
  while (covered && from !== undefined) {
    let next: string | undefined;
    for await (const f of tree.files(folder.prefix, from)) {
      const rest = f.key.slice(folder.prefix.length);
      const slash = rest.indexOf('/');
      if (slash < 0) {
        out.push(
          await commitFileEntry(ctx, Uri.fromKey(ctx.scheme, folder.bucket, f.key, at), f, options),
        );
        continue;
      }
      const sub = `${folder.prefix}${rest.slice(0, slash + 1)}`;
      out.push(folderEntry(Uri.fromKey(ctx.scheme, folder.bucket, sub, at)));
      next = prefixEnd(sub);
      break;
    }
    from = next;
  }
  if (out.length === 0 && folder.prefix !== tree.head.folder) {
    throw new NotFound(`no folder at ${folder} in commit ${at.id}`, { uri: folder.toString() });
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
  const tree = await openCommit(ctx, u.bucket, at.id, options);
  const files = commitCovers(tree.head, u) ? await tree.filesUnder(u.prefix) : [];
  if (files.length === 0 && u.prefix !== tree.head.folder) {
    throw new NotFound(`no folder at ${u} in commit ${at.id}`, { uri: u.toString() });
  }
  return Promise.all(
    files.map((f) =>
      commitFileEntry(ctx, Uri.fromKey(ctx.scheme, u.bucket, f.key, at), f, options),
    ),
  );
}
