/**
 * Small reads and conditional writes on the primitives, shared by commits, logs and branches.
 *
 * - {@link readSmall} reads one small object (a commit, a log entry, a branch record) whole, with
 *   a size cap: these objects are parsed as JSON or compared as text, so they are read into
 *   memory, and the cap keeps a hostile or corrupt object from exhausting it. {@link readWhole}
 *   is the same read of a body already opened (reference-set logs read through a stage).
 * - {@link createOnce} is "create only if absent" in the bucket's create mode (the create-only
 *   log's {@link createOnlyIfAbsent}, deciding oldest-version-wins by version ID). `atomic`
 *   uses the store's conditional write. `oldest-version-wins` (a versioned store that ignores the
 *   condition) writes with `_put`, then lists the key's versions: the oldest version is the one
 *   that counts, for the writer deciding whether it won and for every reader
 *   ({@link readOldest}). The loser's version stays behind as a newer version of the key; no
 *   reader ever takes it, so no delete-version primitive is needed. `none` fails closed.
 *
 * @module
 */
import { debuglog } from 'node:util';
import type { CreateMode, GetResult, VersionRecord } from '../contract/primitives.js';
import type { StoreContext } from '../contract/store-context.js';
import { NotFound, NotSupported, StoreError } from '../core/errors.js';
import { type CreateOnlyTarget, createOnlyIfAbsent, oldestVersions } from './create-only-log.js';

const debug = debuglog('provcat:commits');

/**
 * Read a whole small body, at most `limit` bytes: the error of `tooLarge` (a {@link StoreError}
 * unless the caller has its own) when it is or sends more, a StoreError when it ends short.
 * `where` names it in messages.
 */
export async function readWhole(
  result: GetResult,
  limit: number,
  where: string,
  tooLarge: (message: string) => Error = (message) => new StoreError(message),
): Promise<Buffer> {
  if (result.info.size > limit) {
    result.body.destroy();
    throw tooLarge(`${where} is ${result.info.size} bytes, more than the ${limit} allowed`);
  }
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of result.body) {
      const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
      total += buf.length;
      if (total > limit) throw tooLarge(`${where} sent more than the ${limit} bytes allowed`);
      chunks.push(buf);
    }
  } finally {
    result.body.destroy();
  }
  if (total !== result.info.size) {
    throw new StoreError(`${where}: read ${total} bytes of ${result.info.size}`);
  }
  return Buffer.concat(chunks, total);
}

/** Read a whole small object (the current one, or one version). StoreError above `limit` bytes. */
export async function readSmall(
  store: StoreContext,
  bucket: string,
  key: string,
  options: { versionId?: string | undefined; limit: number; signal?: AbortSignal | undefined },
): Promise<Buffer> {
  const { versionId, limit, signal } = options;
  const result =
    versionId === undefined
      ? await store._get(bucket, key, { signal })
      : await store._getVersion(bucket, key, versionId, { signal });
  return readWhole(result, limit, `${store.scheme}://${bucket}/${key}`);
}

/**
 * The oldest version that is not a delete marker of every key under `prefix` (keys equal to
 * `exactKey` only, when given), in key order (create-only-log.ts {@link oldestVersions}).
 */
export function oldestVersionsIn(
  store: StoreContext,
  bucket: string,
  prefix: string,
  options: { exactKey?: string | undefined; signal?: AbortSignal | undefined } = {},
): Promise<VersionRecord[]> {
  return oldestVersions(
    store._history(bucket, prefix, { signal: options.signal }),
    options.exactKey,
  );
}

/** The bytes of the oldest version of `key`, or `undefined` when the key has none. */
export async function readOldest(
  store: StoreContext,
  bucket: string,
  key: string,
  options: { limit: number; signal?: AbortSignal | undefined },
): Promise<Buffer | undefined> {
  const [oldest] = await oldestVersionsIn(store, bucket, key, {
    exactKey: key,
    signal: options.signal,
  });
  if (!oldest) return undefined;
  return readSmall(store, bucket, key, { ...options, versionId: oldest.versionId });
}

/**
 * The error of a bucket whose store cannot create only-if-absent: {@link NotSupported} (a
 * StoreError; CLI exit 11), raised before anything is written.
 */
export function noCreateError(store: StoreContext, bucket: string, what: string): NotSupported {
  return new NotSupported(
    `${what} refused: ${store.scheme}://${bucket}/ ignores create-only-if-absent ` +
      '(If-None-Match: * or its equivalent), so two concurrent writers could both win and two ' +
      'commits could get one number. On a bucket that keeps versions, the driver can order ' +
      'writers by their oldest version instead (S3: createFallback "oldest-version-wins" or ' +
      'PROVCAT_S3_CREATE_FALLBACK=oldest-version-wins); see docs/commit-format.md#create-modes',
  );
}

/**
 * Create `key` with `body` only if absent, in the bucket's create mode (create-only-log.ts
 * {@link createOnlyIfAbsent}). Returns `true` when this call's write is the one that counts,
 * `false` when another write got there first; in `oldest-version-wins` the write whose version
 * is the key's oldest counts. Throws {@link NotSupported} for mode `none`.
 */
export function createOnce(
  store: StoreContext,
  bucket: string,
  key: string,
  body: Uint8Array,
  mode: CreateMode,
  signal?: AbortSignal,
): Promise<boolean> {
  return createOnlyIfAbsent(objectStoreTarget(store, bucket), mode, key, body, signal);
}

/** An object store bucket as a create-only log's storage: a win is decided by version ID. */
function objectStoreTarget(store: StoreContext, bucket: string): CreateOnlyTarget {
  return {
    create: (key, bytes, signal) => store._create(bucket, key, bytes, { signal }),
    put: (key, bytes, signal) => store._put(bucket, key, bytes, { size: bytes.byteLength, signal }),
    async oldestWins(key, _bytes, written, signal) {
      if (!written.versionId) {
        throw new StoreError(
          `${store.driver} wrote ${key} without a version ID; oldest-version-wins needs one`,
        );
      }
      const [oldest] = await oldestVersionsIn(store, bucket, key, { exactKey: key, signal });
      if (!oldest) {
        throw new StoreError(`${store.driver} does not list the version of ${key} it just wrote`);
      }
      const won = oldest.versionId === written.versionId;
      if (!won) debug('%s: version %s lost to %s', key, written.versionId, oldest.versionId);
      return won;
    },
    refuse: (key) => noCreateError(store, bucket, `writing ${key}`),
  };
}

/** True when `error` is a NotFound (for callers that turn a miss into `undefined`). */
export function isNotFound(error: unknown): error is NotFound {
  return error instanceof NotFound;
}
