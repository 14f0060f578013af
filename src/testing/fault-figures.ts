/**
 * The figures of a fault-suite run: what was tried and every broken invariant, printed as one
 * block and appended as one JSON line to the file `PROVCAT_FAULT_FIGURES` names.
 *
 * A broken invariant is recorded with a line that says what was seen and how to reproduce it.
 * It may be attributed to a known, named finding (an issue item being fixed elsewhere): it is then
 * printed and counted under `known`, and does not fail the run. Everything else fails it. Keeping
 * the attribution at the check that found it, rather than relaxing the check, means a fix that
 * lands shows as the known count going to 0, and a regression of a fixed item fails again once
 * its attribution is removed.
 *
 * @module
 */
import { appendFileSync } from 'node:fs';
import { FAULT_KINDS, type FaultKind } from './fault-proxy.js';

/** The invariants; every one must be 0. */
export const INVARIANTS = {
  partialFiles: 'partial files seen',
  wrongBytes: 'wrong bytes served',
  lostOrDuplicatedCommits: 'lost or duplicated commits',
  orphanedTemps: 'orphaned temps left after the next operation',
  untypedFailures: 'failures without a typed provcat error',
  failedRuns: 'runs without a fault that did not complete',
} as const;

/** One invariant. */
export type Invariant = keyof typeof INVARIANTS;

/** The JSON form of the figures (one line of the `PROVCAT_FAULT_FIGURES` file). */
export interface FiguresJson {
  target: string;
  part: string;
  date: string;
  seed: number;
  config: Record<string, number | string>;
  seconds: number;
  trials: number;
  kills: number;
  /** Commands that failed with a typed error (a fault made them fail, as it may), by error class. */
  typedFailures: number;
  typedFailuresByClass: Record<string, number>;
  faults: Record<FaultKind, number>;
  /** Every invariant's count, known findings included. */
  figures: Record<Invariant, number>;
  /** How many of those each known finding explains. */
  known: Record<string, number>;
  /** Each invariant's count by where it was seen (`orphaned temps …: the cache after a killed fetch`). */
  breakdown: Record<string, number>;
  /** Trials and seconds by operation (`fetch`, `put`, `cat with flip`, ...). */
  operations: Record<string, { trials: number; seconds: number }>;
  /** The first recorded violations, for a look. */
  examples: string[];
}

/** The tally of one part (network faults, or the SIGKILL loop) of one target's run. */
export class Figures {
  trials = 0;
  kills = 0;
  typedFailures = 0;
  private readonly typedByClass = new Map<string, number>();
  readonly faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  readonly counts = Object.fromEntries(Object.keys(INVARIANTS).map((k) => [k, 0])) as Record<
    Invariant,
    number
  >;
  readonly known = new Map<string, number>();
  /** Each invariant's count by where it was seen (the `where` of each violation). */
  readonly breakdown = new Map<string, number>();
  /** The `where` of violations that give none (set by a part whose trials run one at a time). */
  where: string | undefined;
  /** Trials and seconds spent, by operation. */
  readonly byOperation = new Map<string, { trials: number; seconds: number }>();
  private readonly unexplained: string[] = [];
  private readonly explained: string[] = [];
  private readonly started = performance.now();

  constructor(
    readonly target: string,
    readonly part: string,
    readonly seed: number,
    readonly config: Record<string, number | string>,
    /** The known findings a violation may be attributed to: label → what it is. */
    readonly knownFindings: Record<string, string> = {},
  ) {}

  /** Count a command that failed with a typed error of class `name`, as a fault may make it. */
  typedFailure(name: string): void {
    this.typedFailures++;
    this.typedByClass.set(name, (this.typedByClass.get(name) ?? 0) + 1);
  }

  /** Count a trial of `operation` that took `ms`. */
  timed(operation: string, ms: number, detail = operation): void {
    const o = this.byOperation.get(operation) ?? { trials: 0, seconds: 0 };
    o.trials++;
    o.seconds += ms / 1000;
    this.byOperation.set(operation, o);
    this.trials++;
    if (process.env.PROVCAT_FAULT_VERBOSE === '1') {
      process.stderr.write(`fault suite: ${this.target} ${detail} ${ms.toFixed(0)} ms\n`);
    }
  }

  /** Add a proxy's fault counters (the difference over a trial). */
  addFaults(delta: Record<FaultKind, number>): void {
    for (const k of FAULT_KINDS) this.faults[k] += delta[k];
  }

  /**
   * Record `n` violations of `invariant`. `detail` says what was seen and how to reproduce it;
   * `known` names the known finding that explains it (a key of `knownFindings`); `where` says
   * where it was seen, for the breakdown (`the cache after a killed fetch`, an operation).
   */
  violation(
    invariant: Invariant,
    detail: string,
    options: { n?: number; known?: string; where?: string } = {},
  ): void {
    const n = options.n ?? 1;
    if (n <= 0) return;
    this.counts[invariant] += n;
    const key = `${INVARIANTS[invariant]}: ${options.where ?? this.where ?? 'other checks'}`;
    this.breakdown.set(key, (this.breakdown.get(key) ?? 0) + n);
    const line = `${INVARIANTS[invariant]} ×${n}: ${detail}`;
    if (options.known !== undefined) {
      if (!(options.known in this.knownFindings)) {
        throw new Error(`fault suite: unknown finding label ${options.known}`);
      }
      this.known.set(options.known, (this.known.get(options.known) ?? 0) + n);
      if (this.explained.length < 5) this.explained.push(`[known: ${options.known}] ${line}`);
    } else if (this.unexplained.length < 50) {
      this.unexplained.push(line);
    }
  }

  /** The violations no known finding explains (empty when the run passed). */
  failures(): string[] {
    return [...this.unexplained];
  }

  /** Everything as JSON (see {@link FiguresJson}). */
  json(): FiguresJson {
    return {
      target: this.target,
      part: this.part,
      date: new Date().toISOString(),
      seed: this.seed,
      config: this.config,
      seconds: Math.round((performance.now() - this.started) / 100) / 10,
      trials: this.trials,
      kills: this.kills,
      typedFailures: this.typedFailures,
      typedFailuresByClass: Object.fromEntries(this.typedByClass),
      faults: { ...this.faults },
      figures: { ...this.counts },
      known: Object.fromEntries(this.known),
      breakdown: Object.fromEntries(this.breakdown),
      operations: Object.fromEntries(
        [...this.byOperation].map(([k, v]) => [
          k,
          { trials: v.trials, seconds: Math.round(v.seconds * 10) / 10 },
        ]),
      ),
      examples: [...this.unexplained, ...this.explained].slice(0, 20),
    };
  }

  /** The block a run prints. */
  block(): string {
    const j = this.json();
    const faults = FAULT_KINDS.map((k) => `${k} ${j.faults[k]}`).join(', ');
    const knownOf = (inv: Invariant) => {
      // A known finding explains part of a figure; say which, from the recorded lines.
      const labels = [...this.known.keys()].filter((label) =>
        this.explained.some((l) => l.startsWith(`[known: ${label}] ${INVARIANTS[inv]}`)),
      );
      return labels.length > 0 ? ` (known: ${labels.join(', ')})` : '';
    };
    const lines = [
      `fault suite — ${j.target}, ${j.part} (seed ${j.seed}, ${j.seconds} s, ${j.date})`,
      `  trials                     ${j.trials}`,
      `  kills                      ${j.kills}`,
      `  typed failures             ${j.typedFailures} (${Object.entries(j.typedFailuresByClass)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')})`,
      `  faults injected            ${faults}`,
      `  operations                 ${Object.entries(j.operations)
        .map(([k, v]) => `${k} ${v.trials} (${v.seconds} s)`)
        .join(', ')}`,
      ...(Object.keys(INVARIANTS) as Invariant[]).map(
        (inv) => `  ${INVARIANTS[inv].padEnd(46)} ${j.figures[inv]}${knownOf(inv)}`,
      ),
    ];
    for (const [label, n] of this.known) {
      lines.push(`  known ${label}: ${n} — ${this.knownFindings[label]}`);
    }
    for (const label of Object.keys(this.knownFindings)) {
      if (!this.known.has(label)) lines.push(`  known ${label}: explained nothing this run`);
    }
    for (const [where, n] of this.breakdown) lines.push(`  ${n} × ${where}`);
    for (const example of j.examples) lines.push(`  · ${example}`);
    return lines.join('\n');
  }

  /** Print the block and append the JSON line to `PROVCAT_FAULT_FIGURES` when it is set. */
  report(env: NodeJS.ProcessEnv = process.env): void {
    process.stdout.write(`${this.block()}\n`);
    const file = env.PROVCAT_FAULT_FIGURES;
    if (file) appendFileSync(file, `${JSON.stringify(this.json())}\n`);
  }
}
