/**
 * The CLI verbs of versions: `pin`, `commit`, `log`, `branch` (registered by src/cli/main.ts).
 *
 * Human output prints the pinned URI (pin, commit, branch) or a git-style log; `--json` prints
 * `{"uri": "..."}` for pin, commit and branch, and for log an array of
 * `{"id","number","parent","message","metadata","time","files"}` (newest first).
 *
 * @module
 */

import { branchFrom } from '../../commits/branch.js';
import { commitFolder } from '../../commits/commit.js';
import { type LogEntry, logFolder } from '../../commits/log.js';
import { pinUri } from '../../commits/pin.js';
import { Uri } from '../../core/uri.js';
import type { ObjectStore } from '../../store/object-store.js';
import { storeFor } from '../../store/registry.js';
import type { CliArgs, CliContext, Command } from '../command.js';
import { UsageError } from '../command.js';
import { concurrencyOf } from './files.js';

function emit(ctx: CliContext, json: unknown, human: () => string): void {
  ctx.stdout.write(ctx.json ? `${JSON.stringify(json)}\n` : `${human()}\n`);
}

async function storeOf(text: string, ctx: CliContext): Promise<{ u: Uri; store: ObjectStore }> {
  const u = Uri.parse(text);
  return { u, store: ctx.track(await storeFor(u, { offline: ctx.offline })) };
}

/** `--meta k=v` options as an object; UsageError for a pair without `=` or a repeated key. */
export function parseMeta(values: CliArgs['values'][string]): Record<string, string> {
  const pairs = values === undefined || typeof values === 'boolean' ? [] : [values].flat();
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new UsageError(`--meta takes KEY=VALUE, not '${pair}'`);
    const key = pair.slice(0, eq);
    if (Object.hasOwn(out, key)) throw new UsageError(`--meta ${key} given twice`);
    out[key] = pair.slice(eq + 1);
  }
  return out;
}

/** The human form of a log: one block per commit, newest first. */
export function formatLog(entries: readonly LogEntry[]): string {
  if (entries.length === 0) return '(no commits)';
  return entries
    .map((e) => {
      const lines = [
        `commit ${e.id} (#${e.number})`,
        `Parent: ${e.parent ?? '-'}`,
        `Date:   ${e.time}`,
        `Files:  ${e.files}`,
      ];
      for (const [k, v] of Object.entries(e.metadata).sort(([a], [b]) => (a < b ? -1 : 1))) {
        lines.push(`Meta:   ${k}=${v}`);
      }
      lines.push('', ...e.message.split('\n').map((l) => `    ${l}`));
      return lines.join('\n');
    })
    .join('\n\n');
}

/** `commit --from`: push, then commit; the push's counts on stderr (or in `--json`). */
async function commitFromCli(
  store: ObjectStore,
  u: Uri,
  from: string,
  message: string,
  options: { metadata: Record<string, string>; concurrency: number | undefined },
  values: CliArgs['values'],
  ctx: CliContext,
): Promise<number> {
  const [{ commitFrom }, { pushCounts, pushSummary }] = await Promise.all([
    import('../../folders/commit-from.js'),
    import('./folders.js'),
  ]);
  const bar = ctx.progress(`push ${u.name}`);
  let r: Awaited<ReturnType<typeof commitFrom>>;
  try {
    r = await commitFrom(store, from, u, message, {
      metadata: options.metadata,
      allowEmpty: values['allow-empty'] === true,
      delete: values.delete === true,
      concurrency: options.concurrency,
      onProgress: bar.onProgress,
    });
  } finally {
    bar.done();
  }
  emit(ctx, { uri: r.uri.toString(), push: pushCounts(r.push) }, () => r.uri.toString());
  if (!ctx.json) {
    ctx.stderr.write(`${pushSummary(r.push)}\n`);
    if (r.extra.length > 0) {
      ctx.stderr.write(
        `note: the commit also holds ${r.extra.length} file(s) that ${from} lacks ` +
          `(e.g. ${r.extra[0]}); --delete removes them before committing\n`,
      );
    }
  }
  return 0;
}

/** The commands `pin`, `commit`, `log`, `branch`. */
export const commitCommands: Command[] = [
  {
    name: 'pin',
    summary: 'pin a file to its version or a folder to its newest commit; check a pinned URI',
    usage: 'provcat pin URI [--json]',
    options: {},
    positionals: [1, 1],
    async run({ positionals }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const pinned = await pinUri(store, u);
      emit(ctx, { uri: pinned.toString() }, () => pinned.toString());
      return 0;
    },
  },
  {
    name: 'commit',
    summary:
      'record the version of every file under a folder as a new commit (--from: push a local folder first)',
    usage:
      'provcat commit URI -m MESSAGE [--meta KEY=VALUE ...] [--allow-empty] [--from LOCALDIR [--delete] [--concurrency N]] [--json]',
    options: {
      message: { type: 'string', short: 'm' },
      meta: { type: 'string', multiple: true },
      'allow-empty': { type: 'boolean' },
      from: { type: 'string' },
      delete: { type: 'boolean' },
      concurrency: { type: 'string' },
    },
    positionals: [1, 1],
    async run({ positionals, values }, ctx) {
      const message = values.message;
      if (typeof message !== 'string') throw new UsageError('commit needs -m MESSAGE');
      if (message.trim() === '') throw new UsageError('commit needs a message that is not empty');
      const metadata = parseMeta(values.meta);
      const from = values.from;
      if (from === undefined && (values.delete === true || values.concurrency !== undefined)) {
        throw new UsageError('--delete and --concurrency go with --from LOCALDIR');
      }
      const concurrency = concurrencyOf(values);
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const allowEmpty = values['allow-empty'] === true;
      if (typeof from === 'string') {
        return commitFromCli(store, u, from, message, { metadata, concurrency }, values, ctx);
      }
      const pinned = await commitFolder(store, u, message, { metadata, allowEmpty });
      emit(ctx, { uri: pinned.toString() }, () => pinned.toString());
      return 0;
    },
  },
  {
    name: 'log',
    summary: 'the commits of a folder, newest first',
    usage: 'provcat log URI [--json]',
    options: {},
    positionals: [1, 1],
    async run({ positionals }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const entries = await logFolder(store, u);
      emit(
        ctx,
        entries.map((e) => ({
          id: e.id,
          number: e.number,
          parent: e.parent,
          message: e.message,
          metadata: e.metadata,
          time: e.time,
          files: e.files,
        })),
        () => formatLog(entries),
      );
      return 0;
    },
  },
  {
    name: 'branch',
    summary:
      'make a top-level folder from a branch or a commit (rerun to complete one that failed)',
    usage: 'provcat branch URI SOURCE [--json]   (SOURCE: a branch name, a commit ID or a URI)',
    options: {},
    positionals: [2, 2],
    async run({ positionals }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const bar = ctx.progress(`branch ${u.name}`);
      let made: Uri;
      try {
        made = await branchFrom(store, u, positionals[1] as string, {
          onProgress: bar.onProgress,
        });
      } finally {
        bar.done();
      }
      emit(ctx, { uri: made.toString() }, () => made.toString());
      return 0;
    },
  },
];
