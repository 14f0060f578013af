/**
 * The harness of the fault suite's SIGKILL loop: the state every trial shares (the seeded
 * folders and files, the stage uploads go to), running a CLI command killed at a random moment of
 * its measured duration, and the checks of what a run left (its exit, temps not reported before).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TEMP_PREFIX } from '../core/fs-atomic.js';
import type { ObjectStore } from '../store/object-store.js';
import { tempsIn } from './fault-checks.js';
import { type CliRun, commandLine, runCli } from './fault-cli.js';
import type { KnownFinding, SuiteContext } from './fault-config.js';
import type { Figures } from './fault-figures.js';

export type Command = 'fetch' | 'put' | 'commit' | 'branch' | 'upload';

/** A folder the suite wrote, and what each file under it holds now (relative path → SHA-256). */
export interface Folder {
  uri: string;
  files: Map<string, string>;
  sizes: Map<string, number>;
}

/** Write `n` files of random sizes up to `max` bytes (and one of `large` bytes) under `uri`. */
export async function seedFolder(
  ctx: SuiteContext,
  store: ObjectStore,
  uri: string,
  n: number,
  max: number,
  large = 0,
): Promise<Folder> {
  const folder: Folder = { uri, files: new Map(), sizes: new Map() };
  const names = Array.from({ length: n }, (_, i) => (i % 4 === 3 ? `sub/f${i}.bin` : `f${i}.bin`));
  if (large > 0) names.push('large.bin');
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < names.length) {
        const rel = names[next++] as string;
        const size = rel === 'large.bin' ? large : ctx.random.int(1, max);
        await writeFile_(ctx, store, folder, rel, randomBytes(size));
      }
    }),
  );
  return folder;
}

/** Put `bytes` at `rel` of `folder` directly, and remember them. */
export async function writeFile_(
  ctx: SuiteContext,
  store: ObjectStore,
  folder: Folder,
  rel: string,
  bytes: Buffer,
): Promise<void> {
  await store.put(`${folder.uri}${rel}`, bytes);
  folder.files.set(rel, ctx.contents.add(bytes));
  folder.sizes.set(rel, bytes.length);
}

/** The file the upload trials upload. */
export interface Upload {
  path: string;
  sha: string;
  size: number;
}

/** The state and the checks every kill trial shares; the trials themselves extend it. */
export class KillHarness {
  protected readonly durations = new Map<Command, number>();
  protected readonly reported = new Set<string>();
  protected readonly memo = new Set<string>();
  protected putTurn = 0;
  protected putCurrent: string | undefined;
  protected putGeneration = 0;
  protected commitFolder!: Folder;
  protected commits = 0;
  protected commitGeneration = 0;
  /** Where uploads go now: a stage that is dropped and replaced every `rotateEvery` uploads. */
  protected stage = {
    uri: '',
    prefix: '',
    local: undefined as string | undefined,
    uploads: 0,
    gen: 0,
  };

  protected constructor(
    protected readonly ctx: SuiteContext,
    protected readonly figures: Figures,
    protected readonly store: ObjectStore,
    protected readonly fetchFolders: Folder[],
    protected readonly putFiles: Array<{ path: string; sha: string }>,
    protected readonly branchSource: { uri: string; folder: Folder } | undefined,
    protected readonly upload: Upload | undefined,
  ) {
    if (upload) this.nextStage();
  }

  /** Use a new stage for the uploads to come (see {@link FaultConfig.rotateEvery}). */
  protected nextStage(): void {
    const prefix = `${this.ctx.prefix}stage-kill-${this.stage.gen}/`;
    const uri = (this.ctx.target.stageUri as (prefix: string) => string)(prefix);
    const local = uri.startsWith('file:') ? fileURLToPath(uri) : undefined;
    this.stage = { uri, prefix, local, uploads: 0, gen: this.stage.gen + 1 };
  }

  /** A delay for the kill, or `undefined` when this command's duration is not known yet. */
  protected delay(command: Command): number | undefined {
    const d = this.durations.get(command);
    return d === undefined ? undefined : this.ctx.random.float() * d;
  }

  protected env(cache: string): NodeJS.ProcessEnv {
    return this.ctx.cliEnv(cache);
  }

  /** Run `args`, killed at a random moment (after the calibration run), and record what happened. */
  protected async first(command: Command, args: string[], cache: string): Promise<CliRun> {
    const killAfterMs = this.delay(command);
    const run = await runCli(args, { env: this.env(cache), killAfterMs });
    // Every complete run refreshes the duration: the machine's load changes, and a kill drawn
    // from an old, longer duration would land after the command ended.
    if (!run.killed && run.code === 0) {
      const known = this.durations.get(command);
      this.durations.set(command, known === undefined ? run.ms : 0.7 * known + 0.3 * run.ms);
    }
    if (run.killed) this.figures.kills++;
    else this.expectSuccess(run, args, cache, 'a run that was not killed');
    return run;
  }

  /** A run without a fault must exit 0. */
  protected expectSuccess(run: CliRun, args: string[], cache: string, what: string): boolean {
    if (run.code === 0) return true;
    this.figures.violation(
      'failedRuns',
      `${what} exited ${run.code ?? run.signal}${run.hung ? ' (hung)' : ''}: ${run.stderr.trim().split('\n').slice(-3).join(' | ')} — ${this.repro(args, cache)}`,
    );
    return false;
  }

  protected repro(args: string[], cache: string): string {
    return commandLine(args, { ...this.ctx.target.env, PROVCAT_CACHE_DIR: cache });
  }

  /**
   * Count temps below `dirs` not reported before (each leftover counts once). While the loop
   * runs, temps of this process are left out: the fetch lanes change their folders in-process
   * while the other commands run and are checked, so such a temp is a write in progress (they
   * are counted at the end, `final`). The CLI runs, which the loop kills, are other processes.
   * `attribute` names the known finding a temp is one of (see {@link KNOWN_FINDINGS}), if any.
   */
  protected async temps(
    dirs: string[],
    what: string,
    options: { final?: boolean; attribute?: (file: string) => KnownFinding | undefined } = {},
  ): Promise<void> {
    const found = (await Promise.all(dirs.map((d) => tempsIn(d)))).flat();
    const own = `${TEMP_PREFIX}${process.pid}-`;
    const fresh = found.filter(
      (f) => !this.reported.has(f) && (options.final || !path.basename(f).startsWith(own)),
    );
    const byFinding = new Map<KnownFinding | undefined, string[]>();
    for (const f of fresh) {
      this.reported.add(f);
      const finding = options.attribute?.(f);
      byFinding.set(finding, [...(byFinding.get(finding) ?? []), f]);
    }
    for (const [known, list] of byFinding) {
      this.figures.violation('orphanedTemps', `${what}: ${list.slice(0, 3).join(', ')}`, {
        n: list.length,
        known,
        where: what,
      });
    }
  }
}
