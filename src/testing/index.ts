/**
 * The conformance suite, run against every driver (`provcat/testing`).
 *
 * A driver's test file calls {@link conformance} once with a {@link ConformanceTarget}; the suite
 * registers vitest `describe` blocks for the primitives, the store methods, the cache and fetch,
 * the read API (`read`, `readText`, `openRead`, `exists`, `fetch` with `to`),
 * batched puts (`batchPuts`, with `flags.batch`), uploads (the driver contract's read rules; with `flags.parts`, puts through the upload engine
 * and the part protocol itself), the managed stage (when the target gives `stage`), and (when
 * `flags.versions`) pin/commit/log/branch, and digests (commit and diff agree; push skips
 * objects other clients wrote; content types — the last two with the target's `sdk`). Every test works under a random prefix.
 * {@link faultSuite} is the fault suite (a fault proxy and a SIGKILL loop) for the same targets,
 * and {@link startFaultProxy} its proxy, usable on its own.
 *
 * @module
 */
import { describe } from 'vitest';
import { batchSuite } from './batch.js';
import { commitPagesSuite } from './commit-pages.js';
import { digestsSuite } from './digests.js';
import { fetchSuite } from './fetch.js';
import { primitivesSuite } from './primitives.js';
import { readSuite } from './read.js';
import { stageSuite } from './stage.js';
import { storeSuite } from './store.js';
import type { ConformanceTarget } from './target.js';
import { uploadsSuite } from './uploads.js';
import { noVersionsSuite, versionsSuite } from './versions.js';

export {
  FAULT_KINDS,
  type FaultKind,
  type FaultProxy,
  type FaultProxyOptions,
  type FaultRule,
  type ProxyStats,
  startFaultProxy,
} from './fault-proxy.js';
export {
  type FaultConfig,
  type FaultSuiteOptions,
  Figures,
  type FiguresJson,
  faultConfig,
  faultSuite,
  INVARIANTS,
  type Invariant,
  KNOWN_FINDINGS,
} from './faults.js';
export type {
  ConformanceFlags,
  ConformanceTarget,
  NetworkAccess,
  TargetSdk,
  TargetStoreOptions,
} from './target.js';
export { randomPrefix } from './target.js';

/** Register the whole conformance suite for one driver. */
export function conformance(target: ConformanceTarget): void {
  describe(`conformance: ${target.name}`, () => {
    primitivesSuite(target);
    storeSuite(target);
    fetchSuite(target);
    readSuite(target);
    uploadsSuite(target);
    stageSuite(target);
    versionsSuite(target);
    commitPagesSuite(target);
    noVersionsSuite(target);
    digestsSuite(target);
    batchSuite(target);
  });
}
