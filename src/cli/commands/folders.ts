/**
 * The CLI verbs of whole folders: `push` (a local folder to a store folder) and `diff` (two
 * versions of a folder). Registered by src/cli/main.ts and loaded only when one of them runs.
 *
 * `--json` contracts (docs/cli.md): push prints `{"uploaded","skipped","deleted","bytes"}` (a
 * dry run adds `"dryRun": true` and `"plan"`, the uploads and deletes it would make); diff prints
 * `{"added","removed","changed"}`, each in path order: added and removed elements are
 * `{"path","size","version"}`, changed ones `{"path","from":{"size","version"},"to":{...}}`.
 *
 * @module
 */

import { Uri } from '../../core/uri.js';
import type { DiffChange, DiffFile, DiffResult } from '../../folders/diff.js';
import type { PushResult } from '../../folders/push.js';
import { storeFor } from '../../store/registry.js';
import type { CliContext, Command } from '../command.js';
import { formatBytes } from '../progress.js';
import { concurrencyOf, emit } from './files.js';

/** The four counts of a push, as `--json` prints them. */
export function pushCounts(r: PushResult): {
  uploaded: number;
  skipped: number;
  deleted: number;
  bytes: number;
} {
  return { uploaded: r.uploaded, skipped: r.skipped, deleted: r.deleted, bytes: r.bytes };
}

/** One line saying what a push did (or would do). */
export function pushSummary(r: PushResult): string {
  const verb = r.dryRun ? 'would upload' : 'uploaded';
  const del = r.dryRun ? 'would delete' : 'deleted';
  return `${verb} ${r.uploaded} file(s) (${formatBytes(r.bytes)}), ${r.skipped} unchanged, ${del} ${r.deleted}: ${r.uri}`;
}

function humanPlan(r: PushResult): string {
  const lines = r.actions.map(
    (a) => `${a.action.padEnd(6)}  ${formatBytes(a.size).padStart(10)}  ${a.path}`,
  );
  return [...lines, pushSummary(r)].join('\n');
}

function side(f: { size: number; version: string | null }): string {
  return `${formatBytes(f.size)}, ${f.version ?? '-'}`;
}

/** The human form of a diff: `+` added, `-` removed, `~` changed, one file per line. */
export function formatDiff(d: DiffResult): string {
  const lines = [
    ...d.added.map((f: DiffFile) => `+ ${f.path}  (${side(f)})`),
    ...d.removed.map((f: DiffFile) => `- ${f.path}  (${side(f)})`),
    ...d.changed.map((c: DiffChange) => `~ ${c.path}  (${side(c.from)} -> ${side(c.to)})`),
  ];
  if (lines.length === 0) return `no differences between ${d.from} and ${d.to}`;
  return [
    `${d.from} -> ${d.to}`,
    ...lines,
    `${d.added.length} added, ${d.removed.length} removed, ${d.changed.length} changed`,
  ].join('\n');
}

async function storeOf(text: string, ctx: CliContext) {
  const u = Uri.parse(text);
  return { u, store: ctx.track(await storeFor(u, { offline: ctx.offline })) };
}

/** `push` and `diff`. */
export const folderCommands: Command[] = [
  {
    name: 'push',
    summary: 'upload a local folder to a store folder, skipping unchanged files',
    usage:
      'provcat push LOCALDIR URI/ [--delete] [--dry-run] [--concurrency N] [--content-type T] [--json]',
    options: {
      delete: { type: 'boolean' },
      'content-type': { type: 'string' },
      'dry-run': { type: 'boolean' },
      concurrency: { type: 'string' },
    },
    positionals: [2, 2],
    async run({ positionals, values }, ctx) {
      const concurrency = concurrencyOf(values);
      const { u, store } = await storeOf(positionals[1] as string, ctx);
      const dryRun = values['dry-run'] === true;
      const bar = ctx.progress(`push ${u.name}`);
      let r: PushResult;
      try {
        r = await store.push(positionals[0] as string, u, {
          delete: values.delete === true,
          dryRun,
          concurrency,
          contentType:
            typeof values['content-type'] === 'string' ? values['content-type'] : undefined,
          onProgress: bar.onProgress,
        });
      } finally {
        bar.done();
      }
      const json = dryRun ? { ...pushCounts(r), dryRun: true, plan: r.actions } : pushCounts(r);
      emit(ctx, json, () => (dryRun ? humanPlan(r) : pushSummary(r)));
      return 0;
    },
  },
  {
    name: 'diff',
    summary: 'files added, removed and changed between two versions of a folder',
    usage:
      'provcat diff A [B] [--json]   (A, B: a folder URI, at ?at=commit:ID or now; B may be a commit ID; default: A now)',
    options: {},
    positionals: [1, 2],
    async run({ positionals }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const d = await store.diff(u, positionals[1]);
      emit(ctx, { added: d.added, removed: d.removed, changed: d.changed }, () => formatDiff(d));
      return 0;
    },
  },
];
