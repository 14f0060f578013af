/**
 * What a driver hands the conformance suite: how to make its store, where to write, and what
 * it can do.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { CreateMode } from '../contract/primitives.js';
import type { Stage } from '../lake/stage.js';
import type { ObjectStore } from '../store/object-store.js';
import type { StoreOptions } from '../store/store.js';

/** Capability flags: which parts of the suite apply, and what to expect. */
export interface ConformanceFlags {
  /** The bucket keeps versions (the version primitives, pin, commit, branch apply). */
  versions: boolean;
  /** What `_createMode` reports on the test bucket. */
  createMode: CreateMode;
  /** `_get` honours byte ranges. */
  ranges: boolean;
  /** The store can hold keys no URI can name (`a//b`, `..`), so refusal tests can seed them. */
  hostileKeys: boolean;
  /** The driver has a part protocol (`partProtocol(bucket)`): large puts go in parts. */
  parts?: boolean | undefined;
  /** The driver has `batchPuts` (batched durability): the batch part of the suite runs. */
  batch?: boolean | undefined;
  /**
   * `listUploads` lists open uploads (default true). False for a store with no such call (GCS
   * resumable sessions cannot be listed; they expire on their own).
   */
  listsUploads?: boolean | undefined;
}

/** The options a target's `store()` takes: every store's, and an endpoint to reach the server at. */
export interface TargetStoreOptions extends StoreOptions {
  /**
   * Reach the server at this URL instead of its own (the fault suite passes a fault proxy's).
   * Only targets with {@link ConformanceTarget.network} are given one.
   */
  endpoint?: string | undefined;
}

/** How the fault suite puts a proxy between a driver that talks HTTP/1.1 and its server. */
export interface NetworkAccess {
  /** The server's own URL (`http://127.0.0.1:7480`): the proxy forwards to it. */
  endpoint: string;
  /** The environment a child process (the CLI) needs to reach the server at `url` instead. */
  env(url: string): Record<string, string>;
  /** Puts of at least this many bytes through `store()` are multipart uploads (the suite makes one). */
  multipartBytes?: number | undefined;
}

/**
 * The store's own SDK (not provcat), for objects another client writes and for what the store
 * says of them. The local store has no SDK of its own: another `LocalStore` on the same root is
 * its other client.
 */
export interface TargetSdk {
  /** Write `body` at `key` of the target's bucket, as another client would (one plain request). */
  put(key: string, body: Uint8Array): Promise<void>;
  /** The Content-Type the store holds for `key` (a HEAD by the SDK); absent: no content types. */
  contentType?: ((key: string) => Promise<string | undefined>) | undefined;
}

/** A driver under test. */
export interface ConformanceTarget {
  /** Label for the suite. */
  name: string;
  /** A new store over the target. Tests pass their own `cache` (a temp dir) and `offline`. */
  store(options?: TargetStoreOptions): ObjectStore;
  /** A bucket the tests may write to (versioned when `flags.versions`); every test uses a random prefix in it. */
  bucket: string;
  /**
   * A bucket without versions on the same store, when `bucket` keeps them and the server can
   * make one: the no-versions part of the suite runs on it (on `bucket` itself when
   * `flags.versions` is false).
   */
  unversionedBucket?: string | undefined;
  flags: ConformanceFlags;
  /** Environment a child process needs so that `storeFor()` reaches the same store. */
  env?: Record<string, string> | undefined;
  /** The store's own SDK (the digests part: objects another client wrote, content types). */
  sdk?: TargetSdk | undefined;
  /** Set for a driver with a network endpoint: the fault suite's network part runs through a proxy. */
  network?: NetworkAccess | undefined;
  /**
   * A managed-object stage for `prefix` (a relative folder, ending in `/`), as `provcat upload
   * --stage` takes it (`file:///…/`, `s3://bucket/prefix/`); the fault suite's upload trials
   * need it. (`stage` is the managed stage the conformance suite tests.)
   */
  stageUri?: ((prefix: string) => string) | undefined;
  /**
   * Remove every version of every key under `prefix` (a key prefix of `bucket`, ending in `/`,
   * never written again). The fault suite calls it as it goes, so that thousands of trials on a
   * versioned bucket keep little stored. A stage from {@link stageUri} that is not a `file://`
   * folder must keep its objects under the same `prefix` of `bucket`, so that this removes them.
   */
  purge?: ((prefix: string) => Promise<void>) | undefined;
  /** Local folders the store itself writes into (the local store's root), checked for temps. */
  localDirs?: string[] | undefined;
  /**
   * A managed stage on the target under a fresh prefix (the stage part of the suite runs when
   * given). `partSize` is the smallest the store accepts, so uploads of a few parts stay small.
   */
  stage?: ((options: { prefix: string; partSize?: number }) => Stage) | undefined;
  /**
   * Write one object with the store's official SDK directly (another client, not provcat), its
   * key exactly as given, in `bucket` (which the test made with `makeBucket`). Tests of keys
   * provcat itself never writes (a leading `/` at a bucket root) run when given.
   */
  foreignPut?: ((bucket: string, key: string, body: Buffer) => Promise<void>) | undefined;
}

/** A fresh bucket name no test has used (valid on every store: lowercase letters and digits). */
export function randomBucket(label = 'pc'): string {
  return `${label}${randomBytes(6).toString('hex')}`;
}

/** A fresh random key prefix (`t-<hex>/`) so tests never see each other's objects. */
export function randomPrefix(label = 't'): string {
  return `${label}-${randomBytes(6).toString('hex')}/`;
}
