/**
 * Reading a store's tree: `stat`, `list`, `walk` and the flat listing of a folder's files
 * ({@link listFiles}) that fetch, diff and the facade share. Each takes the narrow store context
 * (src/cache/context.ts), never the facade. A URI at `?at=` is answered by
 * src/folders/pinned-listing.ts (loaded only then: docs/performance.md, start-up).
 *
 * @module
 */
import type { CachedStoreContext } from '../cache/context.js';
import type { Entry } from '../contract/entry.js';
import type { ObjectInfo } from '../contract/primitives.js';
import type { CallOptions, StoreContext } from '../contract/store-context.js';
import { NotFound } from '../core/errors.js';
import { compareUtf8, META_PREFIX } from '../core/keys.js';
import { toUri, Uri } from '../core/uri.js';
import { fileEntry, folderEntry } from './entries.js';

/** Options of `ObjectStore.walk`. */
export interface WalkOptions {
  /** Keep only files whose path relative to the folder matches (minimatch, `dot: true`). */
  include?: string | string[] | undefined;
  /** Drop files whose relative path matches. */
  exclude?: string | string[] | undefined;
  signal?: AbortSignal | undefined;
}

/** `ObjectStore.stat`: one file or folder (see its doc). */
export async function statEntry(
  ctx: CachedStoreContext,
  uri: Uri | string,
  options: CallOptions = {},
): Promise<Entry> {
  const u = toUri(uri);
  const { bucket, key } = ctx.locate(u);
  if (u.at) {
    const { statPinned } = await import('./pinned-listing.js');
    return statPinned(ctx, u, options);
  }
  ctx.online(u, 'stat');
  const signal = options.signal;
  if (u.isBucket) {
    await firstPage(ctx, bucket, '', signal);
    return folderEntry(u);
  }
  if (!u.isFolder) {
    try {
      return fileEntry(u, await ctx._head(bucket, key, { signal }));
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
  }
  const page = await firstPage(ctx, bucket, u.prefix, signal);
  if (page.prefixes.length > 0 || page.objects.length > 0) return folderEntry(u.asFolder());
  throw new NotFound(`no file or folder at ${u}`, { uri: u.toString() });
}

/** `ObjectStore.list`: a folder one level deep, in key order (see its doc). */
export async function listFolder(
  ctx: CachedStoreContext,
  uri: Uri | string,
  options: CallOptions = {},
): Promise<Entry[]> {
  const u = toUri(uri);
  const { bucket } = ctx.locate(u);
  if (u.at) {
    const { listPinned } = await import('./pinned-listing.js');
    return listPinned(ctx, u, options);
  }
  ctx.online(u, 'list');
  const folder = u.asFolder();
  const prefix = folder.prefix;
  const out: Entry[] = [];
  let any = false;
  for await (const page of ctx._pages(bucket, prefix, {
    delimiter: '/',
    signal: options.signal,
  })) {
    for (const p of page.prefixes) {
      any = true;
      if (prefix === '' && p === META_PREFIX) continue;
      out.push(folderEntry(Uri.fromKey(ctx.scheme, bucket, p)));
    }
    for (const o of page.objects) {
      any = true;
      if (o.key === prefix || o.key.endsWith('/')) continue;
      out.push(fileEntry(Uri.fromKey(ctx.scheme, bucket, o.key), o));
    }
  }
  if (!any && !u.isBucket) throw new NotFound(`no folder at ${folder}`, { uri: folder.toString() });
  out.sort((a, b) => compareUtf8(a.uri.key, b.uri.key));
  return out;
}

/** `ObjectStore.walk`: every file below a folder, in key order, filtered by globs. */
export async function walkFolder(
  ctx: CachedStoreContext,
  uri: Uri | string,
  options: WalkOptions = {},
): Promise<Entry[]> {
  const u = toUri(uri).asFolder();
  ctx.locate(u);
  let files: Entry[];
  if (u.at) {
    const { listPinnedFiles } = await import('./pinned-listing.js');
    files = await listPinnedFiles(ctx, u, options);
  } else {
    files = await listFiles(ctx, u, options);
  }
  const keep = await globFilter(options);
  return files.filter((e) => keep(u.relative(e.uri) ?? ''));
}

/**
 * Every object below a folder from one flat listing, as file entries (markers left out,
 * unnameable keys refused, the bucket's `.provcat/` left out). `NotFound` for a folder with
 * nothing below it, not even a marker (as `list`), and for a bucket that does not exist.
 */
export async function listFiles(
  ctx: StoreContext,
  folder: Uri,
  options: CallOptions = {},
): Promise<Entry[]> {
  ctx.online(folder, 'walk');
  const { bucket } = ctx.locate(folder);
  const prefix = folder.prefix;
  const out: Entry[] = [];
  let any = false;
  for await (const page of ctx._pages(bucket, prefix, { signal: options.signal })) {
    for (const o of page.objects) {
      any = true;
      if (o.key.endsWith('/')) continue;
      if (prefix === '' && o.key.startsWith(META_PREFIX)) continue;
      out.push(fileEntry(Uri.fromKey(ctx.scheme, bucket, o.key), o));
    }
  }
  if (!any && !folder.isBucket)
    throw new NotFound(`no folder at ${folder}`, { uri: folder.toString() });
  return out;
}

/** The first page of a one-level listing (or an empty one). */
async function firstPage(
  ctx: StoreContext,
  bucket: string,
  prefix: string,
  signal?: AbortSignal,
): Promise<{ prefixes: string[]; objects: ObjectInfo[] }> {
  for await (const page of ctx._pages(bucket, prefix, { delimiter: '/', limit: 2, signal })) {
    // A folder marker alone (`prefix` itself, as consoles and `rclone mkdir` make) counts: the
    // folder exists, empty, as `list` of its parent shows it and `list` of it answers.
    if (page.prefixes.length > 0 || page.objects.length > 0) return page;
  }
  return { prefixes: [], objects: [] };
}

/**
 * A predicate on relative paths from include/exclude globs. minimatch loads only when there are
 * globs: with brace-expansion it is an eighth of the code a CLI process would otherwise compile
 * before its first request.
 */
async function globFilter(options: WalkOptions): Promise<(rel: string) => boolean> {
  const inc = toList(options.include);
  const exc = toList(options.exclude);
  if (inc.length === 0 && exc.length === 0) return () => true;
  const { minimatch } = await import('minimatch');
  return (rel) =>
    (inc.length === 0 || inc.some((g) => minimatch(rel, g, { dot: true }))) &&
    !exc.some((g) => minimatch(rel, g, { dot: true }));
}

function toList(v: string | string[] | undefined): string[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
}
