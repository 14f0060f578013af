/**
 * The data types of the driver primitives: what a driver hands the {@link ObjectStore} base.
 *
 * A driver is a thin translation of SDK calls into these shapes plus one error-mapping
 * function (src/driver-kit/service-errors.ts). Every rule that is not "one SDK call" (folders, walking,
 * caching, offline mode, commits, integrity, uploads in parts, managed stages, GC) lives once in
 * the core. The whole surface a driver writes:
 *
 * 1. the twelve primitives of {@link ObjectStore} (`_head` ... `_copy`), returning the shapes
 *    below;
 * 2. optionally, {@link PartProtocol}: its store's native way to upload one object in parts (S3
 *    multipart, GCS resumable sessions, Azure staged blocks), for large puts and managed uploads;
 * 3. optionally, the {@link GetResult} fast-read fields (see "Fast reads" on that interface);
 * 4. optionally, {@link PutBatch}: puts of many small objects whose durability is batched (the
 *    local store);
 * 5. its error mapping (one function calling `serviceError`) and its stage descriptor kind
 *    (src/lake/stage-kinds.ts), registered by scheme and kind in src/store/registry.ts.
 *
 * @module
 */
import type { Readable } from 'node:stream';

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
  /**
   * The SHA-256 (64 lowercase hex) recorded with the object by a put that passed
   * {@link PutOptions.sha256}, on drivers with `capabilities.sha256Metadata`; reported by `_head`
   * (and by `_pages` only where the store's listing carries it). A claim of the writer, not
   * checked by the store.
   */
  sha256?: string | undefined;
  /**
   * The MD5 (32 lower-case hex) of the bytes, as the store states it beside the ETag: Azure's
   * `Content-MD5`, GCS's `md5Hash`. A driver whose ETag is itself the MD5 (S3 objects put in one
   * request, the local store) need not repeat it: the core reads a plain `"<32 hex>"` ETag as the
   * MD5 (`statedMd5`, src/cache/content-digest.ts). Never set from a multipart ETag or one the store says is no MD5.
   */
  md5?: string | undefined;
  /**
   * The CRC32C (8 lower-case hex: its four bytes, big-endian) of the bytes, as the store states
   * it: GCS's `crc32c`. The core checks a whole download against it only where the store states
   * no MD5 and no SHA-256 was recorded (a GCS composite object).
   */
  crc32c?: string | undefined;
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
  /**
   * A hint from a caller whose listing just named the object's current version (a folder
   * fetch): its version ID, size and ETag. A driver that can open that version's bytes
   * directly (the local store, whose version files are named by these) may answer with them
   * without first looking up which version is current: the GET then reads the object as the
   * listing saw it. When that version is not found, it answers as without the hint. Drivers
   * may ignore it; `info` always says which version the bytes are.
   */
  listed?: Pick<ObjectInfo, 'versionId' | 'size' | 'etag'> | undefined;
}

/**
 * Receives a body. `data` is called with consecutive chunks, in order, one call at a time (the
 * next call only after the previous one returned or its promise resolved).
 *
 * **A chunk is valid only until its `data` call returns, or its returned promise resolves.**
 * Its memory is then reused for later bytes: copy what must outlive the call.
 */
export interface BodySink {
  /** Handle one chunk (never empty). A throw or rejection fails the transfer with that error. */
  data(chunk: Buffer): void | Promise<void>;
  /**
   * Deliver chunks of at least this many bytes where possible (a chunk is cut short only at a
   * buffer's end or the body's end). Default 0: deliver whatever has arrived whenever the
   * sink is free (a busy sink still gets everything that arrived meanwhile in one chunk).
   */
  readonly batchBytes?: number | undefined;
}

/**
 * What `_get` returns: the body as a stream, and what the store said about it.
 *
 * **Fast reads** (optional; a driver sets none, one or several): `pipeTo` (the body delivered
 * into a sink in reused buffers), `bytes` with `release` (a small body read whole, its memory
 * reusable) and `file` (the bytes are an immutable local file the caller may copy with the
 * kernel). A caller uses at most one of them, or `body`; `body` is always valid and always
 * streams the same bytes. Each is only a faster way to the same bytes: the cache checks sizes
 * (and digests where it has them) the same way whichever it takes, and ignoring them all is
 * always correct.
 */
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
   * True when the store says that `info.etag`, though it may look like a plain MD5 (32 hex), is
   * not the MD5 of these bytes: S3 objects encrypted with SSE-KMS or SSE-C, whose GET response
   * says so in its encryption headers. The cache then checks these bytes against no MD5 (a
   * recorded `sha256` still applies). Unset: an ETag of that shape is the MD5 of the bytes.
   */
  etagNotMd5?: boolean | undefined;
  /**
   * The MD5 (32 lowercase hex) of these bytes as the answer states it besides the ETag: Azure's
   * `Content-MD5` of a Get Blob of the whole blob (Azure records one for a blob written by one Put
   * Blob; its ETags are no content hashes). Set only for a read of the whole object: a range's
   * answer states the whole blob's MD5. The cache checks the bytes against it when nothing else
   * states their digest (src/cache/content-digest.ts).
   */
  contentMd5?: string | undefined;
  /**
   * Fast read: set by drivers that read the body into reused buffers (src/net/http1-download.ts):
   * deliver the body to `sink` without a stream and without an allocation per read. A chunk is valid
   * only until its `data` call resolves. Use either this or `body`, never both; `body` stays
   * valid for consumers that need a stream (it copies).
   */
  pipeTo?: ((sink: BodySink) => Promise<void>) | undefined;
  /**
   * Fast read: set by drivers whose bytes already are a local file (the local store), for a
   * read of the whole object: the caller may copy `path` itself (the kernel's copy,
   * `fs.copyFile`) instead of reading `body`, and then leaves `body` alone (the driver opens
   * nothing until `body` is first read). See {@link FileBody} for what the driver promises.
   */
  file?: FileBody | undefined;
  /**
   * Fast read: set when the driver read the whole body into memory (see {@link GetOptions.wholeUpTo}):
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
  /**
   * The SHA-256 (64 lowercase hex) of the source's bytes, as the caller computed it. A driver with
   * `capabilities.sha256Metadata` records it with the object (S3: `x-amz-meta-sha256`); others
   * ignore it. The store does not check it: the caller vouches for it.
   */
  sha256?: string | undefined;
}

/**
 * Puts of many objects under one prefix whose durability is batched: an optional primitive
 * (`batchPuts(bucket, prefix)` of the store; `undefined` where the driver has none), for a store
 * whose per-object cost is its durability work (the local store: fsyncs, locks, bookkeeping per
 * file). A folder push writes its small files through one batch.
 *
 * The promise, which every driver that has it keeps (the conformance suite checks the visible
 * part of it):
 * - each `put` makes its object visible as `_put` would (readable, listed, a new version) once it
 *   resolves, with the {@link ObjectInfo} it returns;
 * - **a put's object is durable only once {@link close} has resolved.** Before that, after a
 *   crash or a power loss, every object of the batch is whole or absent — never torn, never
 *   another object's bytes; an absent one leaves the key's earlier version current;
 * - a `close` that fails (or never ran) promises nothing more than that; the objects already
 *   visible stay visible unless a crash takes them;
 * - `put` after `close` and keys outside the prefix are refused (`RangeError`).
 *
 * Call `close` once every put has settled, even after a failed put.
 */
export interface PutBatch {
  /**
   * Write one object below the batch's prefix (`key` is the full key) from bytes in memory or a
   * local file path; resolves once it is visible (see the interface for when it is durable).
   */
  put(key: string, source: Uint8Array | string, options?: PutOptions): Promise<ObjectInfo>;
  /**
   * Make every object put so far durable, then end the batch. Idempotent: a second call returns
   * the first call's promise.
   */
  close(): Promise<void>;
}

/** Options shared by calls that take only a signal. */
export interface SignalOptions {
  signal?: AbortSignal | undefined;
}

/** Options of `_history`. */
export interface HistoryOptions extends SignalOptions {
  /**
   * List only keys that sort strictly after this string (UTF-8 byte order), every version of
   * each: S3's `key-marker` without a version ID marker. Honoured only by drivers with
   * `capabilities.startAfter`; the core never passes it to others (they would list everything).
   */
  startAfter?: string | undefined;
}

/** Options of `_deleteIf`: delete only if the object is still this version. */
export interface DeleteIfOptions extends SignalOptions {
  /** The {@link ObjectInfo.version} the object must still have. */
  version: string;
  /**
   * The store's version ID of that object, when it keeps versions: then exactly that version is
   * deleted (its bytes go; no delete marker is left in its place), and a newer one stays.
   */
  versionId?: string | undefined;
}

/** Options of `_presign`. */
export interface PresignPrimitiveOptions {
  /** Seconds the URL stays valid (already checked: 1..3600). */
  expiresIn: number;
}

// ---- uploads in parts ----------------------------------------------------------------------

/** One part as the upload engine hands it to {@link PartProtocol.putPart}. */
export interface PartUpload {
  /** 1-based part number. */
  readonly number: number;
  /** Where the part starts in the object (every part but the last has the part size). */
  readonly offset: number;
  /** Bytes in the part. */
  readonly size: number;
  /**
   * The bytes: in memory, or a stream of exactly `size` bytes (a range of a file, read as the
   * request sends it). A stream can be read once; a protocol whose SDK sends a body again
   * itself (a retry after a reset) must give it {@link restream} instead. Otherwise the engine
   * sends a stream's part again with a fresh stream. Bytes in memory may be retried by the SDK.
   */
  readonly body: Uint8Array | Readable;
  /**
   * A stream of the part's bytes for one request: for bytes in memory a fresh stream of views
   * each call (so that the bytes the socket takes can be counted by the engine's stall
   * watchdog); for a file range `body` itself on the first call and a fresh stream of the range
   * (read from disk again) on each later one, the previous one destroyed. A body factory for an
   * SDK that resends a body itself (Azure's `stageBlock`); optional to use. The part's checks
   * apply to the last stream handed out.
   */
  readonly restream?: (() => Readable) | undefined;
  /** Aborts the part's request (a failure elsewhere, the stall watchdog, the caller). */
  readonly signal: AbortSignal;
}

/** A part the store holds for an open upload, as {@link PartProtocol.listParts} reports it. */
export interface ListedPart {
  /** The store's name for the part: an ETag (S3), a block ID (Azure), `''` (GCS: by offset). */
  token: string;
  size: number;
}

/** A part to complete an upload from, in part-number order. */
export interface CompletedPart {
  number: number;
  token: string;
  size: number;
}

/** An upload left open (for garbage collection: stale ones are aborted). */
export interface OpenUpload {
  key: string;
  /** The protocol's reference to it (what {@link PartProtocol.create} returned). */
  upload: string;
  /** When it was started, when the store says. */
  initiated?: Date | undefined;
}

/** Options of {@link PartProtocol.create} and {@link PartProtocol.complete}. */
export interface UploadObjectOptions extends SignalOptions {
  contentType?: string | undefined;
  /** The object's total size, when known (at `complete` always). */
  size?: number | undefined;
  /** At `create` and `complete`: the SHA-256 to record with the object (see {@link PutOptions.sha256}). */
  sha256?: string | undefined;
}

/**
 * A store's native mechanism for uploading one object in parts, bound to one bucket: S3
 * multipart uploads, GCS resumable sessions, Azure staged blocks, a local temp file written at
 * offsets. The upload engine (src/upload/engine.ts) does everything else once: cutting parts,
 * the in-flight limit, buffers, ordering, retries, the stall watchdog, checkpoints and resumes.
 *
 * Each method is one SDK call or a few, its errors mapped through the driver's one mapping. No
 * object is visible under `key` before {@link complete} returns.
 */
export interface PartProtocol {
  /** What it is, for messages: `multipart upload`, `resumable session`, `block list`. */
  readonly name: string;
  /** Highest part number (10,000 on S3, 50,000 on Azure). */
  readonly maxParts: number;
  /** Smallest part but the last (5 MiB on S3). */
  readonly minPartSize: number;
  /** Largest part (5 GiB on S3). */
  readonly maxPartSize: number;
  /**
   * Parts must be sent one at a time, in order, and bytes the store committed are final (a GCS
   * session). The engine then sends with one part in flight.
   */
  readonly sequential?: boolean | undefined;
  /**
   * What removes an upload left behind (by a crash, or an abort that failed too), for messages:
   * the end of the sentence "the upload remains until …", a clause with its own verb
   * ("an AbortIncompleteMultipartUpload lifecycle rule removes it").
   */
  readonly leftover: string;
  /** Whether an upload interrupted by a crash can be resumed with {@link listParts}. */
  readonly resumable: boolean;
  /**
   * {@link complete} records the SHA-256 it is given with the object (Azure: metadata of Put
   * Block List). `ObjectStore.put` in parts then computes the SHA-256 of what it sends when the
   * caller gave none, so that a fetch can check the object's bytes (an ETag of an object in parts
   * is no content hash).
   */
  readonly digestAtComplete?: boolean | undefined;
  /** Start an upload of `key`; returns the protocol's reference to it (an upload ID, a session URI). */
  create(key: string, options: UploadObjectOptions): Promise<string>;
  /** Send one part; resolves with its token once the store holds it. */
  putPart(key: string, upload: string, part: PartUpload): Promise<string>;
  /**
   * Every part the store holds for the upload (all pages), by part number; `'gone'` when the
   * upload no longer exists (completed, aborted, expired). `partSize` lets an offset-based store
   * say which parts its committed bytes cover.
   */
  listParts(
    key: string,
    upload: string,
    options: SignalOptions & { partSize: number },
  ): Promise<Map<number, ListedPart> | 'gone'>;
  /** Make the object visible from `parts` (1..n, in order); returns what was written. */
  complete(
    key: string,
    upload: string,
    parts: readonly CompletedPart[],
    options: UploadObjectOptions & { size: number },
  ): Promise<ObjectInfo>;
  /** Discard the upload and its parts. An upload already gone is not an error. */
  abort(key: string, upload: string, options?: SignalOptions): Promise<void>;
  /** The uploads left open under `prefix` (every page). */
  listUploads(prefix: string, options?: SignalOptions): AsyncIterable<OpenUpload>;
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
   * `_put` records {@link PutOptions.sha256} with the object (in one request and in parts) and
   * `_head` reports it as {@link ObjectInfo.sha256}. `provcat push` then recognizes an unchanged
   * file whose ETag is no MD5 (a multipart ETag) by one HEAD. Default: false.
   */
  sha256Metadata?: boolean | undefined;
  /**
   * Every bucket keeps versions, whatever `makeBucket` was asked (the local store); unset when
   * that depends on the bucket.
   */
  versionsAlways?: boolean | undefined;
  /**
   * Why the store cannot hold `key` exactly — it would store, list or serve it under another
   * name (Azure turns a backslash into `/`) — or `undefined` when it can. The core refuses such keys
   * in put, push and commit before any request (src/core/keys.ts `checkFolderKeys`), so no object is
   * written under a name other than the one asked for. Default: every key is held exactly.
   */
  keyProblem?: ((key: string) => string | undefined) | undefined;
  /**
   * `_history` honours {@link HistoryOptions.startAfter} with one request (the store starts the
   * listing there; it does not list the keys before and drop them). The core then lists a large
   * folder in key ranges at once (src/folders/parallel-listing.ts); without it, in one sequential
   * listing. Default: false.
   */
  startAfter?: boolean | undefined;
}
