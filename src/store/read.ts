/**
 * Reading one file in one call: the logic behind `ObjectStore.read`, `readText`, `openRead` and
 * `exists`, written once for every driver on top of the cache.
 *
 * - A whole read is a fetch ({@link fetchUri}): the bytes come from the cache, verified there
 *   (size, and the digest the store states or a commit records) before they were cached; a
 *   version already fetched is read from the cache with no transfer; a pinned URI once fetched
 *   is served offline with no store call.
 * - A range of a pinned file that the cache holds is read from the cached copy. One that it does
 *   not hold is ONE ranged request for exactly that range (nothing else is downloaded or cached),
 *   with the managed objects' strict checks: the range is checked against the file's size before
 *   any byte is asked for (`InvalidRange`: not integers, reversed, empty, outside the file), and
 *   the answer must declare exactly the `Content-Range` and `Content-Length` asked for
 *   (`ObjectIntegrityError('RangeMismatch')`: a server or proxy that ignored `Range`), and
 *   deliver exactly that many bytes (`PrematureEof`/`TooLong`). The file's size comes from what
 *   the cache recorded of the version, else the commit, else one HEAD of the version.
 * - A range without a pin: online, one HEAD (the size and the current version), then the range
 *   from the cache when it holds that version, else one ranged GET, checked the same way;
 *   offline, the cached copy.
 *
 * @module
 */
import { createReadStream } from 'node:fs';
import { open, readFile, stat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import type { CachedStoreContext } from '../cache/context.js';
import { blobIdentity, fetchUri } from '../cache/fetch.js';
import { commitCovers, openCommit } from '../commits/read.js';
import type { ByteRange, GetResult, ObjectInfo } from '../contract/primitives.js';
import { NotFound, ObjectIntegrityError, OfflineMiss, UriError } from '../core/errors.js';
import type { Uri } from '../core/uri.js';
import { InvalidRange } from '../lake/errors.js';
import { capRange } from '../lake/verify.js';

/** Options of `ObjectStore.read` and `ObjectStore.openRead`. */
export interface ReadOptions {
  /** Only the bytes `[start, end)` of the file (half-open; `end` at most the file's size). */
  range?: ByteRange | undefined;
  signal?: AbortSignal | undefined;
}

/** Options of `ObjectStore.readText`: those of {@link ReadOptions} and the text's encoding. */
export interface ReadTextOptions extends ReadOptions {
  /** How the bytes are decoded (a Node `BufferEncoding`). Default `utf8`. */
  encoding?: BufferEncoding | undefined;
}

/** `UriError` unless `u` names one file (not a folder, not a bucket). */
function checkFileUri(u: Uri, what: string): void {
  if (u.isFolder) {
    throw new UriError(`${what} reads one file; ${u} is a folder (fetch it instead)`, {
      uri: u.toString(),
    });
  }
}

/**
 * `InvalidRange` unless `range` is integers with `0 <= start < end <= size` (`size` unknown:
 * the upper bound is left to the answer's `Content-Range`). Makes no I/O.
 */
export function checkReadRange(range: ByteRange, size: number | undefined, uri: string): void {
  const { start, end } = range;
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end)) {
    throw new InvalidRange(`range bounds must be integers, not ${start}..${end}`, { uri });
  }
  if (end < start) throw new InvalidRange(`range ${start}..${end} is reversed`, { uri });
  if (end === start) throw new InvalidRange(`range ${start}..${end} is empty`, { uri });
  if (start < 0 || (size !== undefined && end > size)) {
    throw new InvalidRange(`range ${start}..${end} is outside the file's 0..${size ?? '?'}`, {
      uri,
    });
  }
}

/**
 * The store as the cache alone: offline (every fetch answers from the cache or raises
 * `OfflineMiss`), whatever the store's own mode. Used to ask "is this pin cached?" with no
 * store call.
 */
function cacheOnly(store: CachedStoreContext): CachedStoreContext {
  return new Proxy(store, {
    get(target, name) {
      if (name === 'offline') return true;
      if (name === 'online') {
        return (u: Uri, what: string) => {
          throw new OfflineMiss(`${what} of ${u}: not in the cache`, { uri: u.toString() });
        };
      }
      const value = Reflect.get(target, name, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** The cached copy of one file (fetched into the cache first unless it is there). */
async function wholeFile(
  store: CachedStoreContext,
  u: Uri,
  signal: AbortSignal | undefined,
): Promise<string> {
  const r = await fetchUri(store, u, { signal });
  // A URI without a trailing '/' that names a folder is fetched as the folder by `fetch`.
  if ((await stat(r.path)).isDirectory()) {
    throw new UriError(`${u} is a folder, not a file: read takes one file`, {
      uri: u.toString(),
    });
  }
  return r.path;
}

/**
 * The cached copy of a pinned file when the cache holds it intact (no store call), else
 * `undefined`.
 */
async function cachedPin(
  store: CachedStoreContext,
  u: Uri,
  signal: AbortSignal | undefined,
): Promise<string | undefined> {
  try {
    return (await fetchUri(cacheOnly(store), u, { signal })).path;
  } catch (error) {
    if (error instanceof OfflineMiss) return undefined;
    throw error;
  }
}

/** A range of a local (cached) file, checked against the file's size. */
async function rangeOfFile(path: string, range: ByteRange, uri: string): Promise<Buffer> {
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    checkReadRange(range, size, uri);
    const out = Buffer.alloc(range.end - range.start);
    let done = 0;
    while (done < out.length) {
      const { bytesRead } = await handle.read(out, done, out.length - done, range.start + done);
      if (bytesRead === 0) {
        throw new ObjectIntegrityError(
          'PrematureEof',
          `${uri}: the cached copy ended after ${range.start + done} bytes`,
          { uri },
        );
      }
      done += bytesRead;
    }
    return out;
  } finally {
    await handle.close();
  }
}

/** What is known of the file a ranged request reads: its size, version, and the ETag to expect. */
interface Target {
  bucket: string;
  key: string;
  size: number;
  versionId: string | undefined;
  etag: string | undefined;
  /** Without a pin: what the HEAD said of the current object. */
  current?: ObjectInfo | undefined;
}

/** The file a pinned or current URI names, for a ranged request (no bytes read). */
async function targetOf(
  store: CachedStoreContext,
  u: Uri,
  signal: AbortSignal | undefined,
): Promise<Target> {
  const { bucket, key } = store.locate(u);
  if (u.at?.kind === 'commit') {
    // The commit object and the pages on the key's path only: a read of one file of a
    // 1,000,000-file commit reads O(log N) pages, never the whole manifest.
    const tree = await openCommit(store, bucket, u.at.id, { signal });
    const f = commitCovers(tree.head, u) ? await tree.fileAt(key) : undefined;
    if (!f) throw new NotFound(`no file ${u} in commit ${u.at.id}`, { uri: u.toString() });
    return { bucket, key, size: f.size, versionId: f.versionId, etag: f.etag };
  }
  if (u.at?.kind === 'version') {
    const versionId = u.at.id;
    const meta = await store.cache.readVersionMeta(store.scheme, bucket, key, versionId);
    if (meta) return { bucket, key, size: meta.size, versionId, etag: meta.etag };
    store.online(u, 'read');
    const info = await store._headVersion(bucket, key, versionId, { signal });
    return { bucket, key, size: info.size, versionId, etag: info.etag };
  }
  store.online(u, 'read');
  const info = await store._head(bucket, key, { signal });
  return { bucket, key, size: info.size, versionId: undefined, etag: info.etag, current: info };
}

/**
 * The cached blob of the current version a HEAD named, when the cache holds it intact (the
 * checks a fetch makes before it reuses a blob), else `undefined`. No store call.
 */
async function cachedCurrent(store: CachedStoreContext, t: Target): Promise<string | undefined> {
  const info = t.current;
  if (info === undefined) return undefined;
  const ids = new Set([blobIdentity(info), `v:${info.version}`]);
  for (const id of ids) {
    const blob = store.cache.blobPath(store.scheme, t.bucket, t.key, id);
    if (await store.cache.checkedBlob(blob, info.size, undefined, undefined)) return blob;
  }
  return undefined;
}

/**
 * One ranged request for exactly `range` of `u`, checked: the range against the size first, then
 * the answer's `Content-Range`, `Content-Length` and ETag; the stream delivers exactly the range.
 */
async function rangedRequest(
  store: CachedStoreContext,
  u: Uri,
  range: ByteRange,
  signal: AbortSignal | undefined,
): Promise<Readable> {
  const where = u.toString();
  checkReadRange(range, undefined, where);
  if (store.offline) {
    throw new OfflineMiss(`offline, and ${where} is not in the cache (read it once online)`, {
      uri: where,
    });
  }
  const t = await targetOf(store, u, signal);
  checkReadRange(range, t.size, where);
  // The current version already cached (a fetch or read brought it): the range comes from there.
  const blob = await cachedCurrent(store, t);
  if (blob !== undefined) {
    const body = createReadStream(blob, { start: range.start, end: range.end - 1, signal });
    return capRange(body, { uri: where, expected: range.end - range.start, signal });
  }
  store.online(u, 'read');
  const options = { range, signal };
  const res: GetResult =
    t.versionId === undefined
      ? await store._get(t.bucket, t.key, options)
      : await store._getVersion(t.bucket, t.key, t.versionId, options);
  const want = `bytes ${range.start}-${range.end - 1}/${t.size}`;
  const count = range.end - range.start;
  if (res.contentRange !== want || res.contentLength !== count) {
    res.body.destroy();
    throw new ObjectIntegrityError(
      'RangeMismatch',
      `asked ${where} for ${want} (${count} bytes); the response declared Content-Range ${
        res.contentRange === undefined ? '(none)' : JSON.stringify(res.contentRange)
      } and Content-Length ${res.contentLength}`,
      { uri: where },
    );
  }
  const etag = res.info.etag;
  if (t.versionId !== undefined && t.etag !== undefined && etag !== undefined && etag !== t.etag) {
    res.body.destroy();
    throw new ObjectIntegrityError(
      'DigestMismatch',
      `${where}: the store answered with ETag ${etag}; the version was recorded with ETag ${t.etag}`,
      { uri: where },
    );
  }
  return capRange(res.body, { uri: where, expected: count, signal });
}

/** Every byte of a stream, in one buffer. */
async function collect(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body as AsyncIterable<Buffer>) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/** Where a range of `u` comes from: a cached copy (a pin, or offline), else a ranged request. */
async function rangeSource(
  store: CachedStoreContext,
  u: Uri,
  signal: AbortSignal | undefined,
): Promise<string | undefined> {
  if (u.at !== undefined) return cachedPin(store, u, signal);
  return store.offline ? wholeFile(store, u, signal) : undefined;
}

/** See `ObjectStore.read`. */
export async function readUri(
  store: CachedStoreContext,
  u: Uri,
  options: ReadOptions = {},
): Promise<Buffer> {
  checkFileUri(u, 'read');
  const { range, signal } = options;
  if (range === undefined) return readFile(await wholeFile(store, u, signal), { signal });
  checkReadRange(range, undefined, u.toString());
  const cached = await rangeSource(store, u, signal);
  if (cached !== undefined) return rangeOfFile(cached, range, u.toString());
  return collect(await rangedRequest(store, u, range, signal));
}

/** See `ObjectStore.openRead`. */
export async function openReadUri(
  store: CachedStoreContext,
  u: Uri,
  options: ReadOptions = {},
): Promise<Readable> {
  checkFileUri(u, 'openRead');
  const { range, signal } = options;
  if (range === undefined) return createReadStream(await wholeFile(store, u, signal), { signal });
  checkReadRange(range, undefined, u.toString());
  const cached = await rangeSource(store, u, signal);
  if (cached === undefined) return rangedRequest(store, u, range, signal);
  const { size } = await stat(cached);
  checkReadRange(range, size, u.toString());
  const body = createReadStream(cached, { start: range.start, end: range.end - 1, signal });
  return capRange(body, { uri: u.toString(), expected: range.end - range.start, signal });
}
