/**
 * The network part of the fault suite: with a fault proxy between the driver and its server,
 * fetches (one small file, a folder of many, a large file), puts (small and multipart), commits
 * and the managed-object verbs (`upload`, `cat -o`, `verify`, a range read) run while one fault
 * fires, and every trial ends with the invariants checked from the server directly.
 *
 * A trial picks an operation and a fault the operation can meet (a body fault on one of its
 * requests, chosen at random among them; a 500/503 burst; latency; a stall, finite or — where
 * the operation has a bound — forever). The operation must then either succeed with exactly the
 * right bytes or fail with a typed provcat error; what it leaves at rest must be whole; and the
 * next operation on the same key, run without a fault, must succeed exactly and leave no temp.
 * Store operations run in this process through `target.store({ endpoint })`; the managed verbs
 * run the CLI with `target.network.env(proxy.url)`.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitCodeOf, isAbort, ProvcatError } from '../core/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import {
  cacheDataDirs,
  judgeFiles,
  readObject,
  sha256,
  tempsIn,
  treeDiff,
  treeOf,
} from './fault-checks.js';
import { type CliRun, commandLine, runCli } from './fault-cli.js';
import { closeStore, type SuiteContext } from './fault-config.js';
import type { Figures } from './fault-figures.js';
import {
  FAULT_KINDS,
  type FaultKind,
  type FaultProxy,
  type FaultRule,
  startFaultProxy,
} from './fault-proxy.js';

/** How an operation ended. */
type Outcome =
  | { ok: true }
  | { ok: false; typed: boolean; aborted: boolean; what: string; name: string; error: unknown };

/** The fault of one trial, and whether the operation has a bound for a stall that never ends. */
interface Trial {
  op: string;
  rule: FaultRule;
  /** A description for the figures' lines. */
  label: string;
}

function failure(error: unknown, typed: boolean, aborted: boolean): Outcome {
  const { name, message } = error as Error;
  return { ok: false, typed, aborted, name, what: `${name}: ${message}`, error };
}

const READ = /^(GET|HEAD)$/;
const WRITE = /^(PUT|POST)$/;

function describe(rule: FaultRule): string {
  const { kind, ...rest } = rule;
  const parts = Object.entries(rest).map(([k, v]) => `${k}=${v instanceof RegExp ? v.source : v}`);
  return `${kind}(${parts.join(' ')})`;
}

function delta(after: Record<FaultKind, number>, before: Record<FaultKind, number>) {
  return Object.fromEntries(FAULT_KINDS.map((k) => [k, after[k] - before[k]])) as Record<
    FaultKind,
    number
  >;
}

/** Run the network trials of one target through a fresh proxy. */
export async function networkTrials(ctx: SuiteContext, figures: Figures): Promise<void> {
  const net = ctx.target.network;
  if (!net) throw new Error(`${ctx.target.name} has no network endpoint`);
  const proxy = await startFaultProxy({ target: net.endpoint, random: ctx.random.float });
  try {
    const trials = await NetworkTrials.setup(ctx, figures, proxy);
    for (let t = 0; t < ctx.config.networkTrials; t++) await trials.trial();
    const { unreadable, lastUnreadable } = proxy.stats();
    if (unreadable > 0) {
      figures.violation(
        'failedRuns',
        `the proxy could not read ${unreadable} connections (${lastUnreadable?.message}): the figures miss what they carried`,
      );
    }
  } finally {
    await proxy.close();
  }
}

interface Managed {
  stage: string;
  /** A file to upload in trials. */
  file: { path: string; sha: string; size: number };
  /** An object uploaded at setup, read by cat, verify and range trials. */
  location: { sha256: string; sizeBytes: number };
  locationFile: string;
  bytes: Buffer;
}

class NetworkTrials {
  private readonly puts = new Map<string, string | undefined>();
  /** Trials of each put and of uploads, for dropping their keys and stage every few (rotateEvery). */
  private readonly turns = new Map<string, number>();
  private commits = 0;
  private readonly reported = new Set<string>();
  private readonly memo = new Set<string>();

  private constructor(
    private readonly ctx: SuiteContext,
    private readonly figures: Figures,
    private readonly proxy: FaultProxy,
    private readonly direct: ObjectStore,
    private readonly small: Map<string, string>,
    private readonly folder: Map<string, string>,
    private readonly large: string,
    private readonly commitFolder: Map<string, string> | undefined,
    private readonly managed: Managed | undefined,
  ) {}

  static async setup(
    ctx: SuiteContext,
    figures: Figures,
    proxy: FaultProxy,
  ): Promise<NetworkTrials> {
    const { config } = ctx;
    const direct = await ctx.direct();
    const put = async (rel: string, bytes: Buffer) => {
      await direct.put(ctx.uri(rel), bytes);
      return ctx.contents.add(bytes);
    };
    const small = new Map<string, string>();
    for (let i = 0; i < 8; i++)
      small.set(
        `s${i}.bin`,
        await put(`net/small/s${i}.bin`, randomBytes(ctx.random.int(1, 64 * 1024))),
      );
    const folder = new Map<string, string>();
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < config.folderFiles) {
          const rel = `f${next++}.bin`;
          folder.set(
            rel,
            await put(`net/folder/${rel}`, randomBytes(ctx.random.int(1, config.smallBytes))),
          );
        }
      }),
    );
    const large = await put('net/large.bin', randomBytes(config.largeBytes));
    let commitFolder: Map<string, string> | undefined;
    if (ctx.target.flags.versions) {
      commitFolder = new Map();
      for (let i = 0; i < config.commitFiles; i++) {
        commitFolder.set(
          `c${i}.bin`,
          await put(`net/commit/c${i}.bin`, randomBytes(ctx.random.int(1, config.smallBytes))),
        );
      }
    }
    let managed: Managed | undefined;
    if (ctx.target.stageUri) {
      const stage = ctx.target.stageUri(`${ctx.prefix}stage-net/`);
      const bytes = randomBytes(config.uploadBytes);
      const file = path.join(ctx.work, 'net-upload.bin');
      await writeFile(file, bytes);
      const sha = ctx.contents.add(bytes);
      const cache = path.join(ctx.work, 'cache-net-setup');
      const up = await runCli(['upload', file, '--stage', stage, '--json'], {
        env: ctx.cliEnv(cache),
      });
      if (up.code !== 0) throw new Error(`fault suite setup: upload failed: ${up.stderr}`);
      const locationFile = path.join(ctx.work, 'net-location.json');
      await writeFile(locationFile, up.stdout);
      managed = {
        stage,
        file: { path: file, sha, size: bytes.length },
        location: JSON.parse(up.stdout),
        locationFile,
        bytes,
      };
    }
    await mkdir(path.join(ctx.work, 'net-out'), { recursive: true });
    return new NetworkTrials(
      ctx,
      figures,
      proxy,
      direct,
      small,
      folder,
      large,
      commitFolder,
      managed,
    );
  }

  private ops(): string[] {
    const out = ['fetch-file', 'fetch-folder', 'fetch-large', 'put-small'];
    if (this.ctx.target.network?.multipartBytes) out.push('put-multipart');
    if (this.commitFolder) out.push('commit');
    if (this.managed) out.push('upload', 'cat', 'verify', 'range');
    return out;
  }

  /** A fault the operation can meet; `requests` is about how many requests it makes. */
  private choose(op: string, requests: number): FaultRule {
    const r = this.ctx.random;
    const p = Math.min(1, 1.5 / requests);
    const reads = op.startsWith('fetch') || op === 'cat' || op === 'verify' || op === 'range';
    const writes = op.startsWith('put') || op === 'upload';
    const method = reads ? READ : writes ? WRITE : undefined;
    const kinds: string[] = ['latency', 'status', 'reset-response', 'stall'];
    if (reads || op === 'commit') kinds.push('truncate', 'reset-response');
    if ((reads && op !== 'range') || op === 'commit') kinds.push('flip', 'flip');
    if (writes || op === 'commit') kinds.push('reset-request', 'reset-request');
    // A stall that never ends, where the operation has a bound: the caller's signal, or --stall-timeout.
    if (op.startsWith('fetch') || op === 'upload') kinds.push('stall-forever');
    const kind = r.pick(kinds);
    const direction = writes ? 'request' : 'response';
    switch (kind) {
      case 'latency':
        return { kind: 'latency', ms: r.int(2, 40) };
      case 'status':
        return { kind: 'status', status: r.pick([500, 503]), next: r.int(1, 4), method };
      case 'reset-response':
        return { kind: 'reset', direction: 'response', next: 1, probability: p, method };
      case 'reset-request':
        return { kind: 'reset', direction: 'request', next: 1, probability: p, method: WRITE };
      case 'stall':
        return { kind: 'stall', direction, ms: r.int(200, 1200), next: 1, probability: p, method };
      case 'stall-forever':
        return {
          kind: 'stall',
          direction,
          ms: Number.POSITIVE_INFINITY,
          next: 1,
          probability: p,
          method,
        };
      case 'truncate':
        return { kind: 'truncate', next: 1, probability: p, method: READ };
      default:
        return { kind: 'flip', next: 1, probability: p, method: READ };
    }
  }

  async trial(): Promise<void> {
    const op = this.ctx.random.pick(this.ops());
    const requests =
      op === 'fetch-folder'
        ? this.folder.size
        : op === 'commit'
          ? 8
          : op === 'put-multipart'
            ? 4
            : 2;
    const rule = this.choose(op, requests);
    const trial: Trial = { op, rule, label: `${op} with ${describe(rule)}` };
    const before = this.proxy.stats().faults;
    const started = performance.now();
    const forever = rule.kind === 'stall' && rule.ms === Number.POSITIVE_INFINITY;
    this.figures.where = `${op} with ${rule.kind}${forever ? ' (forever)' : ''}`;
    try {
      if (op.startsWith('fetch')) await this.fetchTrial(trial, forever);
      else if (op.startsWith('put')) await this.putTrial(trial);
      else if (op === 'commit') await this.commitTrial(trial);
      else if (op === 'upload') await this.uploadTrial(trial, forever);
      else await this.readTrial(trial);
    } catch (error) {
      // A check that could not be made is a failure too; the trials go on (a soak runs for hours).
      this.figures.violation(
        'failedRuns',
        this.repro(trial, `the check itself failed: ${(error as Error).stack}`),
      );
    } finally {
      this.proxy.set([]);
      this.figures.addFaults(delta(this.proxy.stats().faults, before));
      this.figures.timed(op, performance.now() - started, trial.label);
    }
  }

  /** Run `fn` with the trial's fault set, and classify how it ended. */
  private async faulted(
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
  private failed(trial: Trial, outcome: Outcome, repro: string): void {
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

  private cliOutcome(run: CliRun): Outcome {
    if (run.code === 0) return { ok: true };
    const name = /^provcat: ([A-Za-z]+): /m.exec(run.stderr)?.[1];
    const what = `exit ${run.code ?? run.signal}: ${run.stderr.trim().split('\n').pop()}`;
    const typed = (run.code === 6 || run.code === 7) && name !== undefined;
    return { ok: false, typed, aborted: false, name: name ?? `exit ${run.code}`, what, error: run };
  }

  private async temps(dirs: string[], what: string): Promise<void> {
    const fresh = (await Promise.all(dirs.map((d) => tempsIn(d))))
      .flat()
      .filter((f) => !this.reported.has(f));
    for (const f of fresh) this.reported.add(f);
    if (fresh.length > 0)
      this.figures.violation('orphanedTemps', `${what}: ${fresh.slice(0, 3).join(', ')}`, {
        n: fresh.length,
      });
  }

  private viaProxy(cache: string): ObjectStore {
    return this.ctx.target.store({ cache, endpoint: this.proxy.url });
  }

  private repro(trial: Trial, detail: string): string {
    return `seed ${this.ctx.config.seed}, ${trial.label}: ${detail}`;
  }

  // ---- fetch -----------------------------------------------------------------------------

  private async fetchTrial(trial: Trial, forever: boolean): Promise<void> {
    const { op } = trial;
    const name = op === 'fetch-file' ? this.ctx.random.pick([...this.small.keys()]) : 'large.bin';
    const rel =
      op === 'fetch-folder'
        ? 'net/folder/'
        : op === 'fetch-large'
          ? 'net/large.bin'
          : `net/small/${name}`;
    const uri = this.ctx.uri(rel);
    const want =
      op === 'fetch-folder'
        ? this.folder
        : new Map([[name, op === 'fetch-large' ? this.large : (this.small.get(name) as string)]]);
    const cache = await mkdtemp(path.join(this.ctx.work, 'cache-net-'));
    const store = this.viaProxy(cache);
    const fetchAndCompare = async (options: { signal?: AbortSignal }) => {
      const r = await store.fetch(uri, options);
      const got =
        op === 'fetch-folder'
          ? await treeOf(r.path)
          : new Map([[path.basename(r.path), sha256(await readFile(r.path))]]);
      return treeDiff(got, want);
    };
    try {
      let served = false;
      const outcome = await this.faulted(
        trial,
        async () => {
          const diff = await fetchAndCompare(forever ? { signal: AbortSignal.timeout(1500) } : {});
          if (diff.length > 0) throw new WrongBytes(diff);
        },
        forever,
      );
      if (!outcome.ok && outcome.error instanceof WrongBytes) {
        served = true;
        this.figures.violation(
          'wrongBytes',
          this.repro(trial, `fetch of ${uri} returned with ${outcome.what}`),
        );
      } else {
        this.failed(trial, outcome, `fetch ${uri}`);
      }
      // What is at rest in the cache is whole (a corrupt copy already served counts once).
      const rest = await judgeFiles(cacheDataDirs(cache), this.ctx.contents, this.memo);
      for (const f of rest.partial)
        this.figures.violation('partialFiles', this.repro(trial, `in the cache: ${f}`));
      if (!served && rest.corrupt.length > 0) {
        this.figures.violation(
          'wrongBytes',
          this.repro(trial, `corrupt in the cache: ${rest.corrupt[0]}`),
          { n: rest.corrupt.length },
        );
      }
      // The next fetch, without a fault, through the same cache.
      try {
        const diff = await fetchAndCompare({});
        if (diff.length > 0) {
          this.figures.violation(
            'wrongBytes',
            this.repro(trial, `the next fetch of ${uri}: ${diff.slice(0, 3).join(', ')}`),
            { n: diff.length },
          );
        }
      } catch (error) {
        this.figures.violation(
          'failedRuns',
          this.repro(
            trial,
            `the next fetch failed: ${(error as Error).name}: ${(error as Error).message}`,
          ),
        );
      }
      await this.temps([cache], this.repro(trial, 'the cache after the next fetch'));
    } finally {
      await closeStore(store);
      await rm(cache, { recursive: true, force: true });
    }
  }

  // ---- put -------------------------------------------------------------------------------

  private async putTrial(trial: Trial): Promise<void> {
    const multipart = trial.op === 'put-multipart';
    const generation = await this.rotate(trial.op, (gen) =>
      this.ctx.purge(`${this.ctx.prefix}net/${trial.op}-${gen}/`),
    );
    const rel = `net/${trial.op}-${generation}/object.bin`;
    const uri = this.ctx.uri(rel);
    const size = multipart
      ? (this.ctx.target.network?.multipartBytes ?? 0) + 64 * 1024
      : this.ctx.random.int(1, 256 * 1024);
    const bytes = randomBytes(size);
    const sha = this.ctx.contents.add(bytes);
    const old = this.puts.get(rel);
    const cache = await mkdtemp(path.join(this.ctx.work, 'cache-net-'));
    const store = this.viaProxy(cache);
    try {
      const outcome = await this.faulted(trial, async () => {
        await store.put(uri, bytes);
      });
      this.failed(trial, outcome, `put ${uri}`);
      const now = await readObject(this.direct, uri);
      const nowSha = now && sha256(now);
      if (outcome.ok && nowSha !== sha) {
        this.figures.violation(
          'wrongBytes',
          this.repro(
            trial,
            `put succeeded but ${uri} holds ${now?.length ?? 'nothing'} other bytes`,
          ),
        );
      } else if (!outcome.ok && now !== undefined && nowSha !== sha && nowSha !== old) {
        const verdict = this.ctx.contents.judge(now);
        this.figures.violation(
          verdict === 'partial' ? 'partialFiles' : 'wrongBytes',
          this.repro(trial, `a failed put left ${now.length} bytes, neither old nor new`),
        );
      }
      // The next put of the same key, without a fault.
      try {
        await store.put(uri, bytes);
        const again = await readObject(this.direct, uri);
        if (!again || sha256(again) !== sha)
          this.figures.violation(
            'wrongBytes',
            this.repro(trial, `the next put left other bytes at ${uri}`),
          );
        this.puts.set(rel, sha);
      } catch (error) {
        this.figures.violation(
          'failedRuns',
          this.repro(
            trial,
            `the next put failed: ${(error as Error).name}: ${(error as Error).message}`,
          ),
        );
      }
      await this.temps(
        [cache, ...(this.ctx.target.localDirs ?? [])],
        this.repro(trial, 'after the next put'),
      );
    } finally {
      await closeStore(store);
      await rm(cache, { recursive: true, force: true });
    }
  }

  // ---- commit ----------------------------------------------------------------------------

  private async commitTrial(trial: Trial): Promise<void> {
    const files = this.commitFolder as Map<string, string>;
    const folder = this.ctx.uri('net/commit/');
    const rel = this.ctx.random.pick([...files.keys()]);
    const bytes = randomBytes(this.ctx.random.int(1, this.ctx.config.smallBytes));
    await this.direct.put(`${folder}${rel}`, bytes);
    files.set(rel, this.ctx.contents.add(bytes));
    const message = `network trial ${this.ctx.id} ${this.figures.trials} ${this.ctx.random.int(0, 1e9)}`;
    const cache = await mkdtemp(path.join(this.ctx.work, 'cache-net-'));
    const store = this.viaProxy(cache);
    try {
      const outcome = await this.faulted(trial, async () => {
        await store.commit(folder, message);
      });
      this.failed(trial, outcome, `commit ${folder}`);
      // The next commit, without a fault: it commits, or finds that the first one landed.
      let next: Outcome = { ok: true };
      try {
        await store.commit(folder, message);
      } catch (error) {
        next = failure(error, true, false);
      }
      const log = await this.log(folder);
      if (log instanceof Error) {
        this.figures.violation(
          'lostOrDuplicatedCommits',
          this.repro(trial, `the log is unreadable: ${log.name}: ${log.message}`),
        );
        return;
      }
      const mine = log.filter((e) => e.message === message);
      const landedFirst = !next.ok && /no change since commit/.test(next.what);
      if (!next.ok && !landedFirst)
        this.figures.violation(
          'failedRuns',
          this.repro(trial, `the next commit failed: ${next.what}`),
        );
      const gapless = log.every(
        (e, i) => e.number === log.length - i && e.parent === (log[i + 1]?.id ?? null),
      );
      const made = outcome.ok ? 1 + (next.ok ? 1 : 0) : next.ok || landedFirst ? 1 : 0;
      if (!gapless || log.length !== this.commits + made || mine.length !== made) {
        this.figures.violation(
          'lostOrDuplicatedCommits',
          this.repro(
            trial,
            `${log.length} commits where ${this.commits + made} were made, this message ${mine.length} times${gapless ? '' : ', with a gap'}`,
          ),
          { n: Math.max(1, Math.abs(log.length - this.commits - made)) },
        );
      }
      this.commits = log.length;
      const newest = log[0];
      if (newest?.message === message) {
        const diff = await this.ctx.withDirect(async (check) => {
          const at = await check.fetch(`${folder}?at=commit:${newest.id}`);
          return treeDiff(await treeOf(at.path), files);
        });
        if (diff.length > 0) {
          this.figures.violation(
            'wrongBytes',
            this.repro(trial, `at commit ${newest.id}: ${diff.slice(0, 3).join(', ')}`),
            { n: diff.length },
          );
        }
      }
    } finally {
      await closeStore(store);
      await rm(cache, { recursive: true, force: true });
    }
  }

  private log(folder: string) {
    return this.ctx.withDirect(async (store) => {
      try {
        return await store.log(folder);
      } catch (error) {
        return error as Error;
      }
    });
  }

  /**
   * The generation of `op`'s key or stage: a new one every `rotateEvery` trials, the old one
   * dropped with `drop` (a versioned store keeps every version of a key, and uploads add objects).
   */
  private async rotate(op: string, drop: (generation: number) => Promise<void>): Promise<number> {
    const turn = this.turns.get(op) ?? 0;
    this.turns.set(op, turn + 1);
    const generation = Math.floor(turn / this.ctx.config.rotateEvery);
    if (turn > 0 && turn % this.ctx.config.rotateEvery === 0) await drop(generation - 1);
    return generation;
  }

  // ---- managed objects (the CLI) ---------------------------------------------------------

  private proxyEnv(cache: string): NodeJS.ProcessEnv {
    const net = this.ctx.target.network;
    return this.ctx.cliEnv(cache, net ? net.env(this.proxy.url) : {});
  }

  /** The command line of a CLI trial (the proxy's address as PROXY), and what was seen. */
  private cliRepro(trial: Trial, args: string[], seen = ''): string {
    const net = this.ctx.target.network;
    const env = { ...this.ctx.target.env, ...(net ? net.env('http://127.0.0.1:PROXY') : {}) };
    return this.repro(trial, `${seen}${seen ? ' — ' : ''}${commandLine(args, env)}`);
  }

  private async uploadTrial(trial: Trial, forever: boolean): Promise<void> {
    const m = this.managed as Managed;
    // Uploads go to a stage of their own, dropped and replaced every few trials.
    const stageOf = (gen: number) => {
      const prefix = `${this.ctx.prefix}stage-net-up-${gen}/`;
      return { prefix, uri: (this.ctx.target.stageUri as (p: string) => string)(prefix) };
    };
    const generation = await this.rotate('upload', async (gen) => {
      const old = stageOf(gen);
      await this.ctx.purgeStage(old.uri, old.prefix);
    });
    const stage = stageOf(generation).uri;
    const cache = path.join(this.ctx.work, 'cache-net-cli');
    const checkpoints = path.join(this.ctx.work, 'net-checkpoints');
    const resumable = this.ctx.random.chance(0.5);
    const args = [
      'upload',
      m.file.path,
      '--stage',
      stage,
      '--json',
      '--stall-timeout',
      '2',
      ...(resumable ? ['--checkpoint-dir', checkpoints] : []),
    ];
    this.proxy.set([trial.rule]);
    // `--stall-timeout 2` bounds every request of the upload: a stalled part ends it within 2 s,
    // a stalled create, listing or completion within its 3 attempts of 2 s and their backoff;
    // then at most 30 s for the abort (managed-objects.md). A run still going after that never
    // will end on its own, and is a failure like any other.
    const bound = forever ? 45_000 : 120_000;
    const run = await runCli(args, { env: this.proxyEnv(cache), timeoutMs: bound });
    this.proxy.set([]);
    const outcome = this.cliOutcome(run);
    this.failed(
      trial,
      outcome,
      this.cliRepro(trial, args, run.hung ? `killed after ${bound / 1000} s, still running` : ''),
    );
    if (outcome.ok) await this.checkLocation(trial, run.stdout, stage, 'upload');
    // The next upload, without a fault (with a checkpoint it resumes).
    const next = await runCli(args, { env: this.proxyEnv(cache) });
    if (next.code !== 0)
      this.figures.violation(
        'failedRuns',
        this.cliRepro(trial, args, `the next upload exited ${next.code}: ${next.stderr.trim()}`),
      );
    else await this.checkLocation(trial, next.stdout, stage, 'the next upload');
    const stageDir = stage.startsWith('file:') ? [fileURLToPath(stage)] : [];
    await this.temps([...stageDir, checkpoints], this.repro(trial, 'after the next upload'));
  }

  private async checkLocation(
    trial: Trial,
    stdout: string,
    stage: string,
    what: string,
  ): Promise<void> {
    const m = this.managed as Managed;
    const loc = JSON.parse(stdout) as { sha256: string; sizeBytes: number };
    if (loc.sha256 !== m.file.sha || loc.sizeBytes !== m.file.size) {
      this.figures.violation('wrongBytes', this.repro(trial, `${what} returned ${stdout.trim()}`));
      return;
    }
    const file = path.join(this.ctx.work, 'net-check-location.json');
    await writeFile(file, stdout);
    const v = await runCli(['verify', `@${file}`, '--stage', stage], {
      env: this.ctx.cliEnv(path.join(this.ctx.work, 'cache-net-cli')),
    });
    if (v.code !== 0)
      this.figures.violation(
        'wrongBytes',
        this.repro(
          trial,
          `${what}: the object does not verify from the server: ${v.stderr.trim()}`,
        ),
      );
  }

  /** `cat -o`, `verify` or a range read of the object uploaded at setup. */
  private async readTrial(trial: Trial): Promise<void> {
    const m = this.managed as Managed;
    const cache = path.join(this.ctx.work, 'cache-net-cli');
    const out = path.join(this.ctx.work, 'net-out', 'cat.bin');
    const previous = Buffer.from('the previous contents of the output file\n');
    await writeFile(out, previous);
    let want = m.bytes;
    const args = ['cat', `@${m.locationFile}`, '--stage', m.stage];
    if (trial.op === 'verify') args[0] = 'verify';
    else {
      if (trial.op === 'range') {
        const start = this.ctx.random.int(0, m.bytes.length - 2);
        const end = this.ctx.random.int(start + 1, m.bytes.length);
        args.push('--range', `${start}:${end}`);
        want = m.bytes.subarray(start, end);
      }
      args.push('-o', out);
    }
    const flips = this.proxy.stats().faults.flip;
    this.proxy.set([trial.rule]);
    const run = await runCli(args, { env: this.proxyEnv(cache) });
    this.proxy.set([]);
    const flipped = this.proxy.stats().faults.flip > flips;
    const outcome = this.cliOutcome(run);
    this.failed(trial, outcome, this.cliRepro(trial, args));
    if (trial.op === 'verify') {
      if (outcome.ok && flipped)
        this.figures.violation(
          'wrongBytes',
          this.cliRepro(trial, args, 'verify passed a flipped byte'),
        );
    } else {
      const got = await readFile(out);
      if (outcome.ok && sha256(got) !== sha256(want)) {
        this.figures.violation('wrongBytes', this.cliRepro(trial, args, 'exit 0 with other bytes'));
      } else if (!outcome.ok && !got.equals(previous)) {
        this.figures.violation(
          'partialFiles',
          this.cliRepro(
            trial,
            args,
            `a failed cat -o changed the output file (${got.length} bytes)`,
          ),
        );
      }
    }
    // The next read, without a fault.
    const next = await runCli(args, { env: this.proxyEnv(cache) });
    if (next.code !== 0)
      this.figures.violation(
        'failedRuns',
        this.cliRepro(
          trial,
          args,
          `the next ${args[0]} exited ${next.code}: ${next.stderr.trim()}`,
        ),
      );
    else if (trial.op !== 'verify' && sha256(await readFile(out)) !== sha256(want)) {
      this.figures.violation(
        'wrongBytes',
        this.cliRepro(trial, args, 'the next cat wrote other bytes'),
      );
    }
    await this.temps(
      [path.dirname(out)],
      this.repro(trial, 'the output folder after the next cat'),
    );
  }
}

/** A fetch that returned with bytes other than those written. */
class WrongBytes extends Error {
  constructor(readonly diff: string[]) {
    super(diff.slice(0, 3).join(', '));
    this.name = 'WrongBytes';
  }
}

/** How long an operation of a trial may take before it counts as hung (no bound of its own). */
const HANG_MS = 30_000;

/** An operation of a trial that had not settled after {@link HANG_MS}. */
class Hung extends Error {
  constructor(ms: number) {
    super(`the operation never settled (still running after ${ms / 1000} s)`);
    this.name = 'Hung';
  }
}
