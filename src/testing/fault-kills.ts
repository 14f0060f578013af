/**
 * The SIGKILL loop of the fault suite: run the CLI for `fetch`, `put`, `commit`, `branch` and
 * `upload`, kill it with SIGKILL at a random moment of its run, look at what it left, run the same
 * command again to completion and check the result.
 *
 * The kill lands uniformly within the command's duration, measured by a first, complete run of
 * each command (which is checked like every other) and refreshed by every run that completes.
 * After each trial: nothing partial is visible (an interrupted fetch is never served offline as
 * complete), the rerun completes, its result is byte-exact, the folder's log is gapless with the
 * trial's commit exactly once, and the rerun left no temp of the killed run behind it. Put, commit, branch and upload run one at a time, so a temp
 * seen in the store is never a live one. Fetches write only into caches of their own, so they run
 * beside them, in lanes of their own folder and cache: a killed fetch's lock needs 5 s to go stale,
 * and the lanes wait that out together while the other commands go on.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TEMP_PREFIX } from '../core/fs-atomic.js';
import { Uri } from '../core/uri.js';
import type { ObjectStore } from '../store/object-store.js';
import {
  cacheDataDirs,
  exists,
  judgeFiles,
  readObject,
  sha256,
  tempsIn,
  treeDiff,
  treeOf,
} from './fault-checks.js';
import { type CliRun, commandLine, runCli } from './fault-cli.js';
import { closeStore, type KnownFinding, type SuiteContext } from './fault-config.js';
import type { Figures } from './fault-figures.js';

type Command = 'fetch' | 'put' | 'commit' | 'branch' | 'upload';

/** A folder the suite wrote, and what each file under it holds now (relative path → SHA-256). */
interface Folder {
  uri: string;
  files: Map<string, string>;
  sizes: Map<string, number>;
}

/** Write `n` files of random sizes up to `max` bytes (and one of `large` bytes) under `uri`. */
async function seedFolder(
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
async function writeFile_(
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

/** The SIGKILL loop for one target: `ctx.config.killTrials` trials, then their figures. */
export async function killLoop(ctx: SuiteContext, figures: Figures): Promise<void> {
  const loop = await KillLoop.setup(ctx, figures);
  await loop.run();
}

/** The file the upload trials upload. */
interface Upload {
  path: string;
  sha: string;
  size: number;
}

class KillLoop {
  private readonly durations = new Map<Command, number>();
  private readonly reported = new Set<string>();
  private readonly memo = new Set<string>();
  private putTurn = 0;
  private putCurrent: string | undefined;
  private putGeneration = 0;
  private commitFolder!: Folder;
  private commits = 0;
  private commitGeneration = 0;
  /** Where uploads go now: a stage that is dropped and replaced every `rotateEvery` uploads. */
  private stage = {
    uri: '',
    prefix: '',
    local: undefined as string | undefined,
    uploads: 0,
    gen: 0,
  };

  private constructor(
    private readonly ctx: SuiteContext,
    private readonly figures: Figures,
    private readonly store: ObjectStore,
    private readonly fetchFolders: Folder[],
    private readonly putFiles: Array<{ path: string; sha: string }>,
    private readonly branchSource: { uri: string; folder: Folder } | undefined,
    private readonly upload: Upload | undefined,
  ) {
    if (upload) this.nextStage();
  }

  /** Use a new stage for the uploads to come (see {@link FaultConfig.rotateEvery}). */
  private nextStage(): void {
    const prefix = `${this.ctx.prefix}stage-kill-${this.stage.gen}/`;
    const uri = (this.ctx.target.stageUri as (prefix: string) => string)(prefix);
    const local = uri.startsWith('file:') ? fileURLToPath(uri) : undefined;
    this.stage = { uri, prefix, local, uploads: 0, gen: this.stage.gen + 1 };
  }

  static async setup(ctx: SuiteContext, figures: Figures): Promise<KillLoop> {
    const { config } = ctx;
    const store = await ctx.direct();
    const fetchFolders = await Promise.all(
      Array.from({ length: config.lanes }, (_, i) =>
        seedFolder(
          ctx,
          store,
          ctx.uri(`kill/fetch-${i}/`),
          config.folderFiles,
          config.smallBytes,
          config.largeBytes,
        ),
      ),
    );
    const putFiles = [];
    for (const name of ['a', 'b']) {
      const bytes = randomBytes(config.putBytes);
      const file = path.join(ctx.work, `put-${name}.bin`);
      await writeFile(file, bytes);
      putFiles.push({ path: file, sha: ctx.contents.add(bytes) });
    }
    let branchSource: { uri: string; folder: Folder } | undefined;
    if (ctx.target.flags.versions) {
      const folder = await seedFolder(
        ctx,
        store,
        ctx.uri('kill/branch-src/'),
        config.branchFiles,
        config.smallBytes,
      );
      const pinned = await store.commit(folder.uri, 'the source of the branch trials');
      branchSource = { uri: pinned.toString(), folder };
    }
    let upload: Upload | undefined;
    if (ctx.target.stageUri) {
      const bytes = randomBytes(config.uploadBytes);
      const file = path.join(ctx.work, 'upload.bin');
      await writeFile(file, bytes);
      upload = { path: file, sha: ctx.contents.add(bytes), size: bytes.length };
    }
    const loop = new KillLoop(ctx, figures, store, fetchFolders, putFiles, branchSource, upload);
    if (ctx.target.flags.versions) await loop.newCommitFolder();
    return loop;
  }

  private commands(): Command[] {
    const out: Command[] = ['fetch', 'put'];
    if (this.ctx.target.flags.versions) out.push('commit', 'branch');
    if (this.upload) out.push('upload');
    return out;
  }

  async run(): Promise<void> {
    const others = this.commands().filter((c) => c !== 'fetch');
    const { killTrials, lanes } = this.ctx.config;
    // Every command gets its share of the trials; fetches run beside the others (see the module comment).
    const fetches = Math.ceil(killTrials / (others.length + 1));
    let t = 0;
    const fetchLoop = async () => {
      // The first fetch runs alone: it measures the duration the kills of later ones use.
      if (fetches > 0) await this.trial('fetch', t++, 0);
      let done = 1;
      await Promise.all(
        Array.from({ length: lanes }, async (_, lane) => {
          while (done < fetches) {
            done++;
            await this.trial('fetch', t++, lane);
          }
        }),
      );
    };
    const otherLoop = async () => {
      for (let i = 0; i < killTrials - fetches; i++) {
        await this.trial(others[i % others.length] as Command, t++, 0);
      }
    };
    await Promise.all([fetchLoop(), otherLoop()]);
    await this.temps(this.ctx.target.localDirs ?? [], 'the store after the loop', { final: true });
    await closeStore(this.store);
  }

  /** A delay for the kill, or `undefined` when this command's duration is not known yet. */
  private delay(command: Command): number | undefined {
    const d = this.durations.get(command);
    return d === undefined ? undefined : this.ctx.random.float() * d;
  }

  private env(cache: string): NodeJS.ProcessEnv {
    return this.ctx.cliEnv(cache);
  }

  /** Run `args`, killed at a random moment (after the calibration run), and record what happened. */
  private async first(command: Command, args: string[], cache: string): Promise<CliRun> {
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
  private expectSuccess(run: CliRun, args: string[], cache: string, what: string): boolean {
    if (run.code === 0) return true;
    this.figures.violation(
      'failedRuns',
      `${what} exited ${run.code ?? run.signal}${run.hung ? ' (hung)' : ''}: ${run.stderr.trim().split('\n').slice(-3).join(' | ')} — ${this.repro(args, cache)}`,
    );
    return false;
  }

  private repro(args: string[], cache: string): string {
    return commandLine(args, { ...this.ctx.target.env, PROVCAT_CACHE_DIR: cache });
  }

  /**
   * Count temps below `dirs` not reported before (each leftover counts once). While the loop
   * runs, temps of this process are left out: the fetch lanes change their folders in-process
   * while the other commands run and are checked, so such a temp is a write in progress (they
   * are counted at the end, `final`). The CLI runs, which the loop kills, are other processes.
   * `attribute` names the known finding a temp is one of (see {@link KNOWN_FINDINGS}), if any.
   */
  private async temps(
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

  private async trial(command: Command, t: number, lane: number): Promise<void> {
    const started = performance.now();
    try {
      if (command === 'fetch') await this.fetchTrial(t, lane);
      else if (command === 'put') await this.putTrial();
      else if (command === 'commit') await this.commitTrial(t);
      else if (command === 'branch') await this.branchTrial(t);
      else await this.uploadTrial(t);
    } catch (error) {
      // A check that could not be made is a failure too; the loop goes on (a soak runs for hours).
      this.figures.violation(
        'failedRuns',
        `${command} trial ${t}: the check itself failed: ${(error as Error).stack}`,
      );
    }
    this.figures.timed(command, performance.now() - started);
  }

  // ---- fetch -----------------------------------------------------------------------------

  private async fetchTrial(t: number, lane: number): Promise<void> {
    const folder = this.fetchFolders[lane] as Folder;
    const cache = await mkdtemp(path.join(this.ctx.work, `cache-fetch-${t}-`));
    const args = ['fetch', folder.uri, '--json'];
    const first = await this.first('fetch', args, cache);
    let final = first;
    let changed = false;
    if (first.killed) {
      const rest = await judgeFiles(cacheDataDirs(cache), this.ctx.contents, this.memo);
      for (const f of rest.partial)
        this.figures.violation('partialFiles', `after a killed fetch: ${f}`);
      for (const f of rest.corrupt)
        this.figures.violation('wrongBytes', `after a killed fetch: ${f}`);
      // An interrupted fetch is served offline complete and right, or not at all.
      const offline = await runCli([...args, '--offline'], { env: this.env(cache) });
      if (offline.code === 0) {
        const diff = treeDiff(await treeOf(JSON.parse(offline.stdout).path), folder.files);
        if (diff.length > 0) {
          this.figures.violation(
            'partialFiles',
            `a killed fetch served offline as complete: ${diff.slice(0, 3).join(', ')} — ${this.repro([...args, '--offline'], cache)}`,
            { n: diff.length },
          );
        }
      } else if (offline.code !== 5) {
        this.expectSuccess(
          offline,
          [...args, '--offline'],
          cache,
          'an offline fetch after a kill (0 or 5)',
        );
      }
      // Half the time the folder changes before the rerun: it must then fetch the new state.
      changed = this.ctx.random.chance(0.5);
      if (changed) {
        const rels = [...folder.files.keys()];
        for (let i = 0; i < 2; i++) {
          const rel = this.ctx.random.pick(rels);
          await writeFile_(
            this.ctx,
            this.store,
            folder,
            rel,
            randomBytes(this.ctx.random.int(1, this.ctx.config.smallBytes)),
          );
        }
        await writeFile_(this.ctx, this.store, folder, `new-${t}.bin`, randomBytes(100));
      }
      final = await runCli(args, { env: this.env(cache) });
      this.expectSuccess(final, args, cache, 'the rerun of a killed fetch');
    }
    if (final.code === 0) {
      const diff = treeDiff(await treeOf(JSON.parse(final.stdout).path), folder.files);
      if (diff.length > 0) {
        this.figures.violation(
          'wrongBytes',
          `fetch: ${diff.slice(0, 3).join(', ')} — ${this.repro(args, cache)}`,
          { n: diff.length },
        );
      }
    }
    await this.temps(
      [cache],
      `the cache after ${first.killed ? 'a killed fetch and its rerun' : 'a fetch'}`,
    );
    await rm(cache, { recursive: true, force: true });
  }

  // ---- put -------------------------------------------------------------------------------

  private async putTrial(): Promise<void> {
    // A new key every few trials, the old one dropped: a versioned store keeps every version.
    if (this.putTurn > 0 && this.putTurn % this.ctx.config.rotateEvery === 0) {
      await this.ctx.purge(`${this.ctx.prefix}kill/put-${this.putGeneration++}/`);
      this.putCurrent = undefined;
    }
    const next = this.putFiles[this.putTurn++ % 2] as { path: string; sha: string };
    const uri = this.ctx.uri(`kill/put-${this.putGeneration}/object.bin`);
    const cache = path.join(this.ctx.work, 'cache-put');
    const args = ['put', next.path, uri, '--json'];
    const first = await this.first('put', args, cache);
    let final = first;
    if (first.killed) {
      const now = await readObject(this.store, uri);
      if (now !== undefined) {
        const sha = sha256(now);
        if (sha !== next.sha && sha !== this.putCurrent) {
          const verdict = this.ctx.contents.judge(now);
          this.figures.violation(
            verdict === 'partial' ? 'partialFiles' : 'wrongBytes',
            `a killed put left ${now.length} bytes at ${uri}, neither the old nor the new object`,
          );
        }
      }
      final = await runCli(args, { env: this.env(cache) });
      this.expectSuccess(final, args, cache, 'the rerun of a killed put');
    }
    if (final.code === 0) {
      const now = await readObject(this.store, uri);
      if (now === undefined || sha256(now) !== next.sha) {
        this.figures.violation(
          'wrongBytes',
          `after put, ${uri} holds ${now?.length ?? 'nothing'} other bytes — ${this.repro(args, cache)}`,
        );
      }
      this.putCurrent = next.sha;
    }
    await this.temps(
      this.ctx.target.localDirs ?? [],
      `the store after ${first.killed ? 'a killed put and its rerun' : 'a put'}`,
    );
  }

  // ---- commit ----------------------------------------------------------------------------

  private async newCommitFolder(): Promise<void> {
    if (this.commitGeneration > 0) {
      await this.ctx.purge(`${this.ctx.prefix}kill/commit-${this.commitGeneration - 1}/`);
    }
    const uri = this.ctx.uri(`kill/commit-${this.commitGeneration++}/`);
    this.commitFolder = await seedFolder(
      this.ctx,
      this.store,
      uri,
      this.ctx.config.commitFiles,
      this.ctx.config.smallBytes,
    );
    this.commits = 0;
  }

  /** The folder's log read fresh from the store (every commit object re-hashed), or the error. */
  private log(uri: string) {
    return this.ctx.withDirect(async (store) => {
      try {
        return await store.log(uri);
      } catch (error) {
        return error as Error;
      }
    });
  }

  private async commitTrial(t: number): Promise<void> {
    // A long log makes every check slower; a fresh folder every 25 commits keeps them short.
    if (this.commits >= 25) await this.newCommitFolder();
    const folder = this.commitFolder;
    const rel = this.ctx.random.pick([...folder.files.keys()]);
    await writeFile_(
      this.ctx,
      this.store,
      folder,
      rel,
      randomBytes(this.ctx.random.int(1, this.ctx.config.smallBytes)),
    );
    const message = `fault trial ${this.ctx.id} ${t}`;
    const cache = path.join(this.ctx.work, 'cache-commit');
    const args = ['commit', folder.uri, '-m', message, '--json'];
    const first = await this.first('commit', args, cache);
    let final = first;
    let landed = false;
    if (first.killed) {
      const log = await this.log(folder.uri);
      if (log instanceof Error) {
        this.figures.violation(
          'lostOrDuplicatedCommits',
          `the log after a killed commit is unreadable: ${log.name}: ${log.message}`,
        );
      } else {
        landed = log[0]?.message === message;
      }
      final = await runCli(args, { env: this.env(cache) });
      // A commit that landed before the kill makes the rerun find nothing new: that is complete too.
      const nothingNew = landed && final.code === 7 && /no change since commit/.test(final.stderr);
      if (!nothingNew) this.expectSuccess(final, args, cache, 'the rerun of a killed commit');
    }
    const log = await this.log(folder.uri);
    if (log instanceof Error) {
      this.figures.violation(
        'lostOrDuplicatedCommits',
        `the log is unreadable: ${log.name}: ${log.message} — ${this.repro(args, cache)}`,
      );
      return;
    }
    const gapless = log.every(
      (e, i) => e.number === log.length - i && e.parent === (log[i + 1]?.id ?? null),
    );
    const mine = log.filter((e) => e.message === message);
    const expected = final.code === 0 || landed ? this.commits + 1 : this.commits;
    if (!gapless || mine.length > 1 || log.length !== expected) {
      this.figures.violation(
        'lostOrDuplicatedCommits',
        `${folder.uri}: ${log.length} commits where ${expected} were made, this one ${mine.length} times${gapless ? '' : ', numbers with a gap'} — ${this.repro(args, cache)}`,
        { n: Math.max(1, Math.abs(log.length - expected)) },
      );
    }
    this.commits = log.length;
    const newest = log[0];
    if (newest?.message === message) {
      const diff = await this.ctx.withDirect(async (store) => {
        const at = await store.fetch(`${folder.uri}?at=commit:${newest.id}`);
        return treeDiff(await treeOf(at.path), folder.files);
      });
      if (diff.length > 0) {
        this.figures.violation(
          'wrongBytes',
          `at commit ${newest.id}: ${diff.slice(0, 3).join(', ')}`,
          {
            n: diff.length,
          },
        );
      }
    }
    await this.temps(
      this.ctx.target.localDirs ?? [],
      `the store after ${first.killed ? 'a killed commit and its rerun' : 'a commit'}`,
    );
  }

  // ---- branch ----------------------------------------------------------------------------

  private async branchTrial(t: number): Promise<void> {
    const name = `fb-${this.ctx.id}-${t}`;
    try {
      await this.branch(name);
    } finally {
      // The copies are checked: drop them (the branch's record in .provcat/ is small).
      await this.ctx.purge(`${name}/`);
    }
  }

  private async branch(name: string): Promise<void> {
    const source = this.branchSource as { uri: string; folder: Folder };
    const uri = this.ctx.top(`${name}/`);
    const { bucket } = this.store.locate(Uri.parse(uri));
    const cache = path.join(this.ctx.work, 'cache-branch');
    const args = ['branch', uri, source.uri, '--json'];
    const first = await this.first('branch', args, cache);
    let final = first;
    if (first.killed) {
      // Copies are whole or absent: every file there already is a whole source file.
      let there: Array<{ uri: Uri; size: number | null }> = [];
      try {
        there = await this.store.walk(uri);
      } catch (error) {
        if ((error as Error).name !== 'NotFound') throw error;
      }
      for (const e of there) {
        const rel = e.uri.toString().slice(uri.length);
        if (source.folder.sizes.get(rel) !== e.size) {
          this.figures.violation(
            'partialFiles',
            `a killed branch left ${rel} with ${e.size} bytes in ${uri}`,
          );
        }
      }
      const marked = () => exists(this.store, bucket, `.provcat/branches/${name}.done`);
      const done = await marked();
      final = await runCli(args, { env: this.env(cache) });
      // A rerun of a branch that had finished says it exists: complete. The killed run's last
      // request (its done mark) may reach the store after the kill and after the check above.
      const wasDone =
        final.code === 7 && /already exists/.test(final.stderr) && (done || (await marked()));
      if (!wasDone) this.expectSuccess(final, args, cache, 'the rerun of a killed branch');
    }
    if (!(await exists(this.store, bucket, `.provcat/branches/${name}.done`))) {
      if (final.code === 0)
        this.figures.violation(
          'failedRuns',
          `branch ${uri} exited 0 but is not marked done — ${this.repro(args, cache)}`,
        );
      return;
    }
    const diff = await this.ctx.withDirect(async (store) => {
      const got = await store.fetch(uri);
      return treeDiff(await treeOf(got.path), source.folder.files);
    });
    if (diff.length > 0) {
      this.figures.violation(
        'wrongBytes',
        `branch ${uri}: ${diff.slice(0, 3).join(', ')} — ${this.repro(args, cache)}`,
        {
          n: diff.length,
        },
      );
    }
    await this.temps(
      this.ctx.target.localDirs ?? [],
      `the store after ${first.killed ? 'a killed branch and its rerun' : 'a branch'}`,
    );
  }

  // ---- upload ----------------------------------------------------------------------------

  private async uploadTrial(t: number): Promise<void> {
    const upload = this.upload as Upload;
    // A new stage every few uploads, the old one dropped: each upload is a new object.
    if (this.stage.uploads >= this.ctx.config.rotateEvery) {
      await this.ctx.purgeStage(this.stage.uri, this.stage.prefix);
      this.nextStage();
    }
    this.stage.uploads++;
    const { uri: stage, local } = this.stage;
    const cache = path.join(this.ctx.work, 'cache-upload');
    const checkpoints = path.join(this.ctx.work, 'checkpoints');
    const args = [
      'upload',
      upload.path,
      '--stage',
      stage,
      '--checkpoint-dir',
      checkpoints,
      '--json',
    ];
    const first = await this.first('upload', args, cache);
    let final = first;
    if (first.killed) {
      await this.stageAtRest(upload, stage, local);
      final = await runCli(args, { env: this.env(cache) });
      this.expectSuccess(final, args, cache, 'the rerun of a killed upload');
    }
    if (final.code === 0) await this.readBack(JSON.parse(final.stdout), upload, stage, t, cache);
    const what = `after ${first.killed ? 'a killed upload and its rerun' : 'an upload'}`;
    if (local) await this.temps([local], `the stage ${what}`);
    await this.temps([checkpoints], `the checkpoint folder ${what}`);
  }

  /** Objects in the stage are whole: a file of the upload's size, or (a local stage) its bytes. */
  private async stageAtRest(
    upload: Upload,
    stage: string,
    local: string | undefined,
  ): Promise<void> {
    if (local) {
      const rest = await judgeFiles([local], this.ctx.contents, this.memo);
      for (const f of rest.partial)
        this.figures.violation('partialFiles', `after a killed upload: ${f}`);
      for (const f of rest.corrupt)
        this.figures.violation('wrongBytes', `after a killed upload: ${f}`);
      return;
    }
    let there: Array<{ uri: Uri; size: number | null }> = [];
    try {
      there = await this.store.walk(stage);
    } catch (error) {
      if ((error as Error).name !== 'NotFound') throw error;
    }
    for (const e of there) {
      if (e.size !== upload.size) {
        this.figures.violation(
          'partialFiles',
          `after a killed upload: ${e.uri} has ${e.size} bytes`,
        );
      }
    }
  }

  /** The location names the upload's bytes, and `verify`, `cat -o` and a range read agree. */
  private async readBack(
    location: { sha256: string; sizeBytes: number },
    upload: Upload,
    stage: string,
    t: number,
    cache: string,
  ): Promise<void> {
    if (location.sha256 !== upload.sha || location.sizeBytes !== upload.size) {
      this.figures.violation(
        'wrongBytes',
        `upload returned ${JSON.stringify(location)} for ${upload.size} bytes ${upload.sha}`,
      );
      return;
    }
    const loc = path.join(this.ctx.work, `location-${t}.json`);
    await writeFile(loc, JSON.stringify(location));
    const verify = ['verify', `@${loc}`, '--stage', stage];
    const v = await runCli(verify, { env: this.env(cache) });
    if (v.code !== 0) {
      this.figures.violation(
        'wrongBytes',
        `verify of a fresh upload exited ${v.code}: ${v.stderr.trim()} — ${this.repro(verify, cache)}`,
      );
    }
    const outDir = path.join(this.ctx.work, 'out');
    await mkdir(outDir, { recursive: true });
    const out = path.join(outDir, `upload-${t}.bin`);
    const start = this.ctx.random.int(0, upload.size - 2);
    const end = this.ctx.random.int(start + 1, upload.size);
    const whole = await readFile(upload.path);
    for (const extra of [[], ['--range', `${start}:${end}`]]) {
      const cat = ['cat', `@${loc}`, '--stage', stage, ...extra, '-o', out];
      const c = await runCli(cat, { env: this.env(cache) });
      if (!this.expectSuccess(c, cat, cache, 'cat of a fresh upload')) continue;
      const want = extra.length === 0 ? whole : whole.subarray(start, end);
      if (sha256(await readFile(out)) !== sha256(want)) {
        this.figures.violation('wrongBytes', `cat wrote other bytes — ${this.repro(cat, cache)}`);
      }
      await rm(out, { force: true });
    }
    await rm(loc, { force: true });
    await this.temps([outDir], 'the output folder after cat -o');
  }
}
