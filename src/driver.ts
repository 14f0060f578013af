/**
 * The data types of the driver primitives: what a driver hands the {@link ObjectStore} base.
 *
 * A driver is a thin translation of SDK calls into these shapes plus one error-mapping
 * function. Every rule that is not "one SDK call" (folders, walking, caching, offline mode,
 * commits, integrity) lives once in the base class.
 *
 * @module
 */
import type { Readable } from 'node:stream';
import type { BodySink } from './net/http1-download.js';

/** One object as a listing or a HEAD reports it. */
export interface ObjectInfo {
  /** The full key in the bucket. */
  key: string;
  /** Size in bytes. */
  size: number;
  /**
   * What changes when the bytes change: the ETag on S3 and Azure, the generation on GCS, the
   * version ID on the local store. The cache keys files by it.
   */
  version: string;
  /** The store's version ID, when the bucket keeps versions and the call reports it. */
  versionId?: string | undefined;
  /** The ETag (quoted as the store gives it), when known. */
  etag?: string | undefined;
  /** Last modification time, when known. */
  lastModified?: Date | undefined;
}

/** One page of a listing: the folder prefixes (each ending in the delimiter) and the objects. */
export interface ListPage {
  prefixes: string[];
  objects: ObjectInfo[];
}

/** Options of `_pages`. */
export interface PagesOptions {
  /** `/` for one level; omit for a flat listing of everything under the prefix. */
  delimiter?: string | undefined;
  /** Most entries per page (the driver may return fewer). */
  limit?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** A half-open byte range `[start, end)`. */
export interface ByteRange {
  start: number;
  end: number;
}

/** Options of `_get` and `_getVersion`. */
export interface GetOptions {
  /** Read only `[start, end)`. The driver sends one ranged request. */
  range?: ByteRange | undefined;
  signal?: AbortSignal | undefined;
  /**
   * A hint for small objects whose size the caller knows (a folder fetch's listing): a body of
   * at most this many bytes may come back whole, as {@link GetResult.bytes}, instead of as a
   * stream. A longer body (the object changed since) is streamed as usual. Drivers may ignore it.
   */
  wholeUpTo?: number | undefined;
}

/** What `_get` returns: the body as a stream, and what the store said about it. */
export interface GetResult {
  /** The bytes (the whole object, or the range). The caller must consume or destroy it. */
  body: Readable;
  /** The object the bytes belong to: its full size and the version of these bytes. */
  info: ObjectInfo;
  /** The Content-Length the store declared for `body`. */
  contentLength: number;
  /** For a ranged read: the `Content-Range` header exactly as the store sent it. */
  contentRange?: string | undefined;
  /**
   * Set by drivers that read the body into reused buffers (src/net/http1-download.ts): deliver
   * the body to `sink` without a stream and without an allocation per read. A chunk is valid
   * only until its `data` call resolves. Use either this or `body`, never both; `body` stays
   * valid for consumers that need a stream (it copies).
   */
  pipeTo?: ((sink: BodySink) => Promise<void>) | undefined;
  /**
   * Set by drivers whose bytes already are a local file (the local store), for a read of the
   * whole object: the caller may copy `path` itself (the kernel's copy, `fs.copyFile`) instead
   * of reading `body`, and then leaves `body` alone (the driver opens nothing until `body` is
   * first read). See {@link FileBody} for what the driver promises about the file.
   */
  file?: FileBody | undefined;
  /**
   * Set when the driver read the whole body into memory (see {@link GetOptions.wholeUpTo}):
   * exactly `contentLength` bytes, the caller's to keep. `body` then streams the same bytes.
   */
  bytes?: Buffer | undefined;
  /**
   * May come with `bytes`: a caller that used `bytes` (wrote them out) calls it to give their
   * memory back to the driver for later reads, and never reads `bytes` afterwards. Optional to
   * call (memory never given back is garbage-collected) and idempotent. A caller that reads
   * `body` instead must not call it.
   */
  release?: (() => void) | undefined;
}

/**
 * The bytes of a GET as a local file ({@link GetResult.file}). The file belongs to the driver:
 * the caller only reads (copies) it, and never writes, renames, links or keeps the path (a hard
 * link would let an edit of the caller's file change the driver's). The driver sets it only for a file that no one
 * changes while it may be read (an immutable version file): a copy from a file that shrank
 * meanwhile may never end (libuv's copy loop retries a short source for ever). `size` is what
 * the driver knows the file holds; a caller still checks the size of its copy.
 */
export interface FileBody {
  /** Absolute path of the file. */
  path: string;
  /** Its size in bytes (the object's size). */
  size: number;
}

/** One entry of `_history`: a version of a key, or a delete marker (`size === null`). */
export interface VersionRecord {
  key: string;
  versionId: string;
  /** Size in bytes; `null` for a delete marker. */
  size: number | null;
  /** True for the current (latest) version of the key. */
  current: boolean;
  etag?: string | undefined;
  lastModified?: Date | undefined;
}

/** What `_put` writes from: a local file path, a Node stream, or bytes in memory. */
export type PutSource = string | Readable | Uint8Array;

/** Options of `_put`. */
export interface PutOptions {
  /** The source size in bytes, when known (lets a driver choose single-part or multipart). */
  size?: number | undefined;
  contentType?: string | undefined;
  signal?: AbortSignal | undefined;
  /** Called with the cumulative number of bytes sent. */
  onProgress?: ((bytes: number) => void) | undefined;
}

/** Options shared by calls that take only a signal. */
export interface SignalOptions {
  signal?: AbortSignal | undefined;
}

/**
 * How a driver's `_create` keeps "only if absent" on a given bucket:
 * - `atomic`: the store's own conditional write (S3 `If-None-Match: *`, a local `link`).
 * - `oldest-version-wins`: the store ignores the condition but keeps versions; the caller writes,
 *   lists the key's versions, and the oldest version is the winner (see docs/commit-format.md).
 * - `none`: neither; commits fail closed with a StoreError.
 */
export type CreateMode = 'atomic' | 'oldest-version-wins' | 'none';

/** What a driver can do, for the base class and for the conformance suite. */
export interface Capabilities {
  /** The version primitives work (on buckets that keep versions). */
  versions: boolean;
  /** `_get` honours byte ranges. */
  ranges: boolean;
  /**
   * Every bucket keeps versions, whatever `makeBucket` was asked (the local store); unset when
   * that depends on the bucket.
   */
  versionsAlways?: boolean | undefined;
}
