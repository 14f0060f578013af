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
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { runCli } from './fault-cli.js';
import type { SuiteContext } from './fault-config.js';
import type { Figures } from './fault-figures.js';
import type { Managed, Trial } from './fault-network-harness.js';
import { ManagedTrials } from './fault-network-managed.js';
import {
  FAULT_KINDS,
  type FaultKind,
  type FaultProxy,
  type FaultRule,
  startFaultProxy,
} from './fault-proxy.js';

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

/** The trials of one target: the files they use, and which operation and fault each runs. */
class NetworkTrials extends ManagedTrials {
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
    if (process.env.PROVCAT_FAULT_VERBOSE === '1') {
      process.stderr.write(`fault suite: ${this.ctx.target.name} starts ${trial.label}\n`);
    }
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
}
