/**
 * What a driver hands the conformance suite: how to make its store, where to write, and what
 * it can do.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { CreateMode } from '../../src/driver.js';
import type { Stage } from '../../src/lake/managed-stage.js';
import type { ObjectStore } from '../../src/object-store.js';
import type { StoreOptions } from '../../src/store.js';

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
  /**
   * `listUploads` lists open uploads (default true). False for a store with no such call (GCS
   * resumable sessions cannot be listed; they expire on their own).
   */
  listsUploads?: boolean | undefined;
}

/** A driver under test. */
export interface ConformanceTarget {
  /** Label for the suite. */
  name: string;
  /** A new store over the target. Tests pass their own `cache` (a temp dir) and `offline`. */
  store(options?: StoreOptions): ObjectStore;
  /** A bucket the tests may write to (versioned when `flags.versions`); every test uses a random prefix in it. */
  bucket: string;
  flags: ConformanceFlags;
  /** Environment a child process needs so that `storeFor()` reaches the same store. */
  env?: Record<string, string> | undefined;
  /**
   * A managed stage on the target under a fresh prefix (the stage part of the suite runs when
   * given). `partSize` is the smallest the store accepts, so uploads of a few parts stay small.
   */
  stage?: ((options: { prefix: string; partSize?: number }) => Stage) | undefined;
}

/** A fresh random key prefix (`t-<hex>/`) so tests never see each other's objects. */
export function randomPrefix(label = 't'): string {
  return `${label}-${randomBytes(6).toString('hex')}/`;
}
