/**
 * The managed-object verbs of the network trials (`upload`, `cat -o`, `verify`, a range read),
 * each run by the CLI through the fault proxy and checked from the server directly.
 *
 * @module
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sha256 } from './fault-checks.js';
import { commandLine, runCli } from './fault-cli.js';
import type { Managed, Trial } from './fault-network-harness.js';
import { StoreTrials } from './fault-network-store.js';

/** The upload, cat, verify and range trials. */
export class ManagedTrials extends StoreTrials {
  protected proxyEnv(cache: string): NodeJS.ProcessEnv {
    const net = this.ctx.target.network;
    return this.ctx.cliEnv(cache, net ? net.env(this.proxy.url) : {});
  }

  /** The command line of a CLI trial (the proxy's address as PROXY), and what was seen. */
  protected cliRepro(trial: Trial, args: string[], seen = ''): string {
    const net = this.ctx.target.network;
    const env = { ...this.ctx.target.env, ...(net ? net.env('http://127.0.0.1:PROXY') : {}) };
    return this.repro(trial, `${seen}${seen ? ' — ' : ''}${commandLine(args, env)}`);
  }

  protected async uploadTrial(trial: Trial, forever: boolean): Promise<void> {
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

  protected async checkLocation(
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
  protected async readTrial(trial: Trial): Promise<void> {
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
