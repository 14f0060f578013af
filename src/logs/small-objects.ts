/**
 * Small reads and conditional writes on the primitives, shared by commits, logs and branches.
 *
 * - {@link readSmall} reads one small object (a commit, a log entry, a branch record) whole, with
 *   a size cap: these objects are parsed as JSON or compared as text, so they are read into
 *   memory, and the cap keeps a hostile or corrupt object from exhausting it.
 * - {@link createOnce} is "create only if absent" in the bucket's create mode. `atomic` uses the
 *   store's conditional write. `oldest-version-wins` (a versioned store that ignores the
 *   condition) writes with `_put`, then lists the key's versions: the oldest version is the one
 *   that counts, for the writer deciding whether it won and for every reader
 *   ({@link readOldest}). The loser's version stays behind as a newer version of the key; no
 *   reader ever takes it, so no delete-version primitive is needed. `none` fails closed.
 *
 * @module
 */
import { debuglog } from 'node:util';
import type { CreateMode, VersionRecord } from '../contract/primitives.js';
import type { StoreContext } from '../contract/store-context.js';
import { Exists, NotFound, NotSupported, StoreError } from '../core/errors.js';

const debug = debuglog('provcat:commits');

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
  const where = `${store.scheme}://${bucket}/${key}`;
  if (result.info.size > limit) {
    result.body.destroy();
    throw new StoreError(`${where} is ${result.info.size} bytes, more than the ${limit} allowed`);
  }
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of result.body) {
      const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
      total += buf.length;
      if (total > limit) {
        throw new StoreError(`${where} sent more than the ${limit} bytes allowed`);
      }
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

/**
 * The oldest version that is not a delete marker of every key under `prefix` (keys equal to
 * `exactKey` only, when given), in key order. `_history` lists a key's versions newest first, so
 * the last one seen wins.
 */
export async function oldestVersions(
  store: StoreContext,
  bucket: string,
  prefix: string,
  options: { exactKey?: string | undefined; signal?: AbortSignal | undefined } = {},
): Promise<VersionRecord[]> {
  const byKey = new Map<string, VersionRecord>();
  for await (const record of store._history(bucket, prefix, { signal: options.signal })) {
    if (options.exactKey !== undefined && record.key !== options.exactKey) continue;
    if (record.size === null) continue;
    byKey.set(record.key, record);
  }
  return [...byKey.values()];
}

/** The bytes of the oldest version of `key`, or `undefined` when the key has none. */
export async function readOldest(
  store: StoreContext,
  bucket: string,
  key: string,
  options: { limit: number; signal?: AbortSignal | undefined },
): Promise<Buffer | undefined> {
  const [oldest] = await oldestVersions(store, bucket, key, {
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
 * Create `key` with `body` only if absent, in the bucket's create mode. Returns `true` when this
 * call's write is the one that counts, `false` when another write got there first. Throws
 * {@link StoreError} for mode `none`.
 */
export async function createOnce(
  store: StoreContext,
  bucket: string,
  key: string,
  body: Uint8Array,
  mode: CreateMode,
  signal?: AbortSignal,
): Promise<boolean> {
  if (mode === 'atomic') {
    try {
      await store._create(bucket, key, body, { signal });
      return true;
    } catch (error) {
      if (error instanceof Exists) return false;
      throw error;
    }
  }
  if (mode === 'oldest-version-wins') {
    const info = await store._put(bucket, key, body, { size: body.byteLength, signal });
    if (!info.versionId) {
      throw new StoreError(
        `${store.driver} wrote ${key} without a version ID; oldest-version-wins needs one`,
      );
    }
    const [oldest] = await oldestVersions(store, bucket, key, { exactKey: key, signal });
    if (!oldest) {
      throw new StoreError(`${store.driver} does not list the version of ${key} it just wrote`);
    }
    const won = oldest.versionId === info.versionId;
    if (!won) debug('%s: version %s lost to %s', key, info.versionId, oldest.versionId);
    return won;
  }
  throw noCreateError(store, bucket, `writing ${key}`);
}

/** True when `error` is a NotFound (for callers that turn a miss into `undefined`). */
export function isNotFound(error: unknown): error is NotFound {
  return error instanceof NotFound;
}

/** Sleep `ms`, or reject when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A short jittered exponential backoff: `base * 2^attempt`, +-50%, capped at one second. */
export function backoff(attempt: number, base = 20): number {
  const ms = Math.min(1000, base * 2 ** attempt);
  return Math.round(ms * (0.5 + Math.random()));
}
