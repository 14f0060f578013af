/**
 * The fault suite, shared by every driver (`provcat/testing`): network faults through a proxy of
 * the project's own (fault-network.ts, for drivers with a network endpoint) and a SIGKILL loop
 * over the CLI (fault-kills.ts, every driver). Each part prints its figures as one block (and
 * appends them as JSON to `PROVCAT_FAULT_FIGURES`), and its test fails when an invariant that
 * must be 0 is not, unless a known finding explains it (fault-config.ts).
 *
 * The suite is parameterized like {@link conformance}: a driver's test file calls
 * {@link faultSuite} with its {@link ConformanceTarget}, adding `network` (how to put a proxy in
 * front of its server), `stage` (a managed-object stage) and `localDirs` (folders it writes
 * into) where they apply. Nothing in it knows a driver. The size of a run comes from the
 * environment (`faultConfig`): short in `npm test`, thousands of trials in `npm run soak`.
 *
 * The CLI it runs is the package's bundled `dist/cli/provcat.cjs`: run `npm run build` first.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Contents } from './fault-checks.js';
import { cliPath } from './fault-cli.js';
import {
  closeStore,
  type FaultConfig,
  faultConfig,
  KNOWN_FINDINGS,
  Random,
  type SuiteContext,
} from './fault-config.js';
import { Figures } from './fault-figures.js';
import { flipChecks } from './fault-flip.js';
import { killLoop } from './fault-kills.js';
import { networkTrials } from './fault-network.js';
import { partResendChecks, resetAnswerChecks, stalledRequestChecks } from './fault-parts.js';
import type { ConformanceTarget } from './target.js';

export { type FaultConfig, faultConfig, KNOWN_FINDINGS } from './fault-config.js';
export { Figures, type FiguresJson, INVARIANTS, type Invariant } from './fault-figures.js';

/** Options of {@link faultSuite}. */
export interface FaultSuiteOptions {
  /** The size of the run; default {@link faultConfig} of `process.env`. */
  config?: FaultConfig | undefined;
}

function summary(config: FaultConfig): Record<string, number | string> {
  const { seed: _seed, ...rest } = config;
  return rest;
}

/**
 * Register the fault suite for one driver: a `describe` with the network part (when
 * `target.network` is set) and the SIGKILL loop, each one test that fails on any invariant
 * broken and not explained by a known finding. Works under a random prefix of `target.bucket`
 * (and top-level `fb-<id>-<n>/` branch folders), in a scratch folder it removes at the end.
 */
export function faultSuite(target: ConformanceTarget, options: FaultSuiteOptions = {}): void {
  const config = options.config ?? faultConfig();
  describe(`fault suite: ${target.name} (${config.mode})`, () => {
    let work = '';
    const id = randomBytes(4).toString('hex');
    const contents = new Contents();
    const context = (part: number): SuiteContext => {
      const random = new Random(config.seed + part);
      const scheme = target.store({ cache: path.join(work, 'cache-scheme') }).scheme;
      return {
        target,
        config,
        random,
        contents,
        work,
        id,
        prefix: `faults-${id}/`,
        scheme,
        direct: async () =>
          target.store({ cache: await mkdtemp(path.join(work, 'cache-direct-')) }),
        withDirect: async (fn) => {
          const cache = await mkdtemp(path.join(work, 'cache-direct-'));
          const store = target.store({ cache });
          try {
            return await fn(store);
          } finally {
            await closeStore(store);
            await rm(cache, { recursive: true, force: true });
          }
        },
        purge: async (prefix) => {
          await target.purge?.(prefix);
        },
        purgeStage: async (stage, prefix) => {
          if (stage.startsWith('file:'))
            await rm(fileURLToPath(stage), { recursive: true, force: true });
          else await target.purge?.(prefix);
        },
        uri: (rel) => `${scheme}://${target.bucket}/faults-${id}/${rel}`,
        top: (rel) => `${scheme}://${target.bucket}/${rel}`,
        cliEnv: (cache, extra = {}) => ({
          ...process.env,
          ...target.env,
          PROVCAT_CACHE_DIR: cache,
          PROVCAT_OFFLINE: '0',
          ...extra,
        }),
      };
    };

    beforeAll(async () => {
      cliPath();
      work = await mkdtemp(path.join(tmpdir(), 'provcat-faults-'));
    });
    afterAll(async () => {
      if (work) await rm(work, { recursive: true, force: true });
    });

    const run = async (
      part: string,
      seedOffset: number,
      body: (ctx: SuiteContext, f: Figures) => Promise<void>,
    ) => {
      const figures = new Figures(
        target.name,
        part,
        config.seed + seedOffset,
        summary(config),
        KNOWN_FINDINGS,
      );
      // Said before the part runs: a run that outlives its test's timeout prints no figures.
      process.stderr.write(
        `fault suite: ${target.name}, ${part}: seed ${config.seed + seedOffset} (PROVCAT_FAULT_SEED=${config.seed} repeats it)\n`,
      );
      try {
        await body(context(seedOffset), figures);
      } finally {
        figures.report();
      }
      expect(figures.failures(), figures.block()).toEqual([]);
    };

    // The parts run side by side unless the store writes into local folders the SIGKILL loop
    // scans for temps (a network trial's live temp would look orphaned there).
    partResendChecks(target);
    flipChecks(target);
    resetAnswerChecks(target);
    stalledRequestChecks(target);

    const test = target.network && !target.localDirs?.length ? it.concurrent : it;
    // A trial takes a few seconds on a quiet machine; a soak is often run beside other work, so
    // it is given more per trial (a bound on a hung run, not a performance target).
    const perTrialMs = config.mode === 'soak' ? 15_000 : 6_000;
    if (target.network) {
      test(
        `network faults: ${config.networkTrials} trials, each command exact or a typed failure`,
        () => run('network faults', 0, networkTrials),
        120_000 + config.networkTrials * perTrialMs,
      );
    }
    test(
      `SIGKILL loop: ${config.killTrials} trials of fetch, put, commit, branch and upload`,
      () => run('SIGKILL loop', 1, killLoop),
      120_000 + config.killTrials * perTrialMs,
    );
  });
}
