/**
 * The harness of the fault suite's network trials: the state every trial shares (the proxy, the
 * direct store, the seeded files), running an operation with a fault set and judging how it ended
 * (typed, aborted, hung, or a violation), temps left behind, key and stage rotation.
 *
 * @module
 */
import { exitCodeOf, isAbort, ProvcatError } from '../core/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import { tempsIn } from './fault-checks.js';
import type { CliRun } from './fault-cli.js';
import type { SuiteContext } from './fault-config.js';
import type { Figures } from './fault-figures.js';
import type { FaultProxy, FaultRule } from './fault-proxy.js';

/** How an operation ended. */
export type Outcome =
  | { ok: true }
  | { ok: false; typed: boolean; aborted: boolean; what: string; name: string; error: unknown };

/** The fault of one trial, and whether the operation has a bound for a stall that never ends. */
export interface Trial {
  op: string;
  rule: FaultRule;
  /** A description for the figures' lines. */
  label: string;
}

export function failure(error: unknown, typed: boolean, aborted: boolean): Outcome {
  const { name, message } = error as Error;
  return { ok: false, typed, aborted, name, what: `${name}: ${message}`, error };
}

export interface Managed {
  stage: string;
  /** A file to upload in trials. */
  file: { path: string; sha: string; size: number };
  /** An object uploaded at setup, read by cat, verify and range trials. */
  location: { sha256: string; sizeBytes: number };
  locationFile: string;
  bytes: Buffer;
}

/** The state and the checks every network trial shares; the trials themselves extend it. */
export class NetworkHarness {
  protected readonly puts = new Map<string, string | undefined>();
  /** Trials of each put and of uploads, for dropping their keys and stage every few (rotateEvery). */
  protected readonly turns = new Map<string, number>();
  protected commits = 0;
  protected readonly reported = new Set<string>();
  protected readonly memo = new Set<string>();

  protected constructor(
    protected readonly ctx: SuiteContext,
    protected readonly figures: Figures,
    protected readonly proxy: FaultProxy,
    protected readonly direct: ObjectStore,
    protected readonly small: Map<string, string>,
    protected readonly folder: Map<string, string>,
    protected readonly large: string,
    protected readonly commitFolder: Map<string, string> | undefined,
    protected readonly managed: Managed | undefined,
  ) {}

  /** Run `fn` with the trial's fault set, and classify how it ended. */
  protected async faulted(
    trial: Trial,
    fn: () => Promise<void>,
    abortable = false,
  ): Promise<Outcome> {
    this.proxy.set([trial.rule]);
    let timer: NodeJS.Timeout | undefined;
    try {
      // An operation that never settles is a finding of its own, reported as one (a trial must
      // not hold the whole run until the test's timeout, and hide every other figure).
      const hung = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Hung(HANG_MS)), HANG_MS);
      });
      await Promise.race([fn(), hung]);
      return { ok: true };
    } catch (error) {
      const typed = error instanceof ProvcatError && [6, 7].includes(exitCodeOf(error));
      const aborted = abortable && isAbort(error);
      return failure(error, typed, aborted);
    } finally {
      clearTimeout(timer);
      this.proxy.set([]);
    }
  }

  /** Count a failure: typed (or an abort the trial asked for) is allowed; anything else is not. */
  protected failed(trial: Trial, outcome: Outcome, repro: string): void {
    if (outcome.ok) return;
    if (outcome.error instanceof Hung) {
      this.figures.violation('failedRuns', `${trial.label}: ${outcome.what} — ${repro}`);
    } else if (trial.rule.kind === 'latency') {
      this.figures.violation(
        'failedRuns',
        `${trial.label} failed under latency alone: ${outcome.what} — ${repro}`,
      );
    } else if (outcome.typed || outcome.aborted) {
      this.figures.typedFailure(outcome.name);
    } else {
      this.figures.violation('untypedFailures', `${trial.label}: ${outcome.what} — ${repro}`);
    }
  }

  protected cliOutcome(run: CliRun): Outcome {
    if (run.code === 0) return { ok: true };
    const name = /^provcat: ([A-Za-z]+): /m.exec(run.stderr)?.[1];
    const what = `exit ${run.code ?? run.signal}: ${run.stderr.trim().split('\n').pop()}`;
    const typed = (run.code === 6 || run.code === 7) && name !== undefined;
    return { ok: false, typed, aborted: false, name: name ?? `exit ${run.code}`, what, error: run };
  }

  protected async temps(dirs: string[], what: string): Promise<void> {
    const fresh = (await Promise.all(dirs.map((d) => tempsIn(d))))
      .flat()
      .filter((f) => !this.reported.has(f));
    for (const f of fresh) this.reported.add(f);
    if (fresh.length > 0)
      this.figures.violation('orphanedTemps', `${what}: ${fresh.slice(0, 3).join(', ')}`, {
        n: fresh.length,
      });
  }

  protected viaProxy(cache: string): ObjectStore {
    return this.ctx.target.store({ cache, endpoint: this.proxy.url });
  }

  protected repro(trial: Trial, detail: string): string {
    return `seed ${this.ctx.config.seed}, ${trial.label}: ${detail}`;
  }

  /**
   * The generation of `op`'s key or stage: a new one every `rotateEvery` trials, the old one
   * dropped with `drop` (a versioned store keeps every version of a key, and uploads add objects).
   */
  protected async rotate(op: string, drop: (generation: number) => Promise<void>): Promise<number> {
    const turn = this.turns.get(op) ?? 0;
    this.turns.set(op, turn + 1);
    const generation = Math.floor(turn / this.ctx.config.rotateEvery);
    if (turn > 0 && turn % this.ctx.config.rotateEvery === 0) await drop(generation - 1);
    return generation;
  }
}

/** How long an operation of a trial may take before it counts as hung (no bound of its own). */
export const HANG_MS = 30_000;

/** An operation of a trial that had not settled after {@link HANG_MS}. */
export class Hung extends Error {
  constructor(ms: number) {
    super(`the operation never settled (still running after ${ms / 1000} s)`);
    this.name = 'Hung';
  }
}
