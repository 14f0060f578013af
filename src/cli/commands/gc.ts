/**
 * The garbage-collection verbs of the `provcat` CLI (shapes fixed: scripts depend on them):
 *
 * - `refs add NAME LOCATION... --stage STAGE` → `{"name","number","added"}`
 * - `refs retire NAME --stage STAGE` → `{"name","number","retired"}`
 * - `refs ls --stage STAGE` → `[{"name","number","entries","retired"}]`
 * - `gc plan --stage STAGE [--older-than DURATION] --out DIR [--inventory FILE|MANIFEST |
 *   --candidates FILE]` → `{"plan","candidates","bytes","uploads","scanned","keep"}`
 * - `gc apply DIR --stage STAGE [--shard I/N]` → `{"deleted","missing","aborted","skipped"}`;
 *   exit 7 when the references changed since the plan (nothing deleted after the change)
 * - `gc keep-set --stage STAGE --out FILE [--format jsonl|parquet]` →
 *   `{"out","entries","fingerprint","sets"}`
 *
 * A LOCATION is a DataLocation JSON, `@file.json` (one DataLocation, or an array of
 * DataLocations and URIs), a location URI, or a location URI ending in `/` (a prefix). A
 * DURATION is a whole number and a unit: `0s`, `90m`, `36h`, `7d` (also `ms`). Long plans and
 * applies draw a progress line on a terminal; SIGINT/SIGTERM stop an apply before its next
 * object (its checkpoint stays at the last finished page).
 *
 * @module
 */

import {
  type DataLocation,
  parseDataLocation,
  readLocationFile,
} from '../../lake/data-location.js';
import { applyGc, parseShard } from '../../lake/gc/apply.js';
import { parseDuration } from '../../lake/gc/duration.js';
import type { InventoryFormat, KeyEncoding } from '../../lake/gc/inventory.js';
import { writeKeepSet } from '../../lake/gc/keep-set.js';
import { writeKeepSetParquet } from '../../lake/gc/keep-set-parquet.js';
import { DEFAULT_OLDER_THAN_MS, planGc } from '../../lake/gc/plan.js';
import { MAX_PAGE_SIZE } from '../../lake/gc/plan-format.js';
import { nameProblem } from '../../lake/gc/refs-format.js';
import type { Stage } from '../../lake/stage.js';
import { stageFromString } from '../../lake/stage-factory.js';
import type { CliArgs, CliContext, Command } from '../command.js';
import { cancelOnSignal, UsageError } from '../command.js';
import { formatBytes } from '../progress.js';

/** The set name of a refs command, checked as the format checks it; UsageError otherwise. */
function setName(name: string): string {
  const problem = nameProblem(name);
  if (problem)
    throw new UsageError(`${JSON.stringify(name)} cannot name a reference set: ${problem}`);
  return name;
}

function stringArg(args: CliArgs, name: string, required: true): string;
function stringArg(args: CliArgs, name: string, required?: false): string | undefined;
function stringArg(args: CliArgs, name: string, required = false): string | undefined {
  const value = args.values[name];
  if (value === undefined && !required) return undefined;
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

async function openStage(args: CliArgs, ctx: CliContext): Promise<Stage> {
  return ctx.track(
    await stageFromString(stringArg(args, 'stage', true), { env: ctx.env, offline: ctx.offline }),
  );
}

function print(ctx: CliContext, json: unknown, human: string): void {
  ctx.stdout.write(ctx.json ? `${JSON.stringify(json)}\n` : `${human}\n`);
}

/** The locations one LOCATION argument names (see the module comment). */
export async function locationsOf(text: string): Promise<Array<string | DataLocation>> {
  if (text.startsWith('@')) {
    const value = await readLocationFile(text.slice(1));
    const items = Array.isArray(value) ? value : [value];
    return items.map((item) =>
      typeof item === 'string' ? item : parseDataLocation(JSON.stringify(item)),
    );
  }
  if (text.trimStart().startsWith('{')) return [parseDataLocation(text)];
  return [text];
}

const refsAdd: Command = {
  name: 'refs add',
  summary: 'record that a reference set references managed objects (or prefixes ending in /)',
  usage: 'provcat refs add NAME LOCATION... --stage STAGE [--json]',
  options: { stage: { type: 'string' } },
  positionals: [2, Number.MAX_SAFE_INTEGER],
  async run(args, ctx) {
    const [given, ...rest] = args.positionals as [string, ...string[]];
    const name = setName(given);
    const locations: Array<string | DataLocation> = [];
    for (const text of rest) locations.push(...(await locationsOf(text)));
    const stage = await openStage(args, ctx);
    const r = await stage.addReferences(name, locations);
    print(
      ctx,
      r,
      `${r.name}: entry ${r.number}, ${r.added} entr${r.added === 1 ? 'y' : 'ies'} added`,
    );
    return 0;
  },
};

const refsRetire: Command = {
  name: 'refs retire',
  summary: 'retire a reference set as a whole: its objects become collectable',
  usage: 'provcat refs retire NAME --stage STAGE [--json]',
  options: { stage: { type: 'string' } },
  positionals: [1, 1],
  async run(args, ctx) {
    const name = setName(args.positionals[0] as string);
    const stage = await openStage(args, ctx);
    const r = await stage.retireReferences(name);
    print(ctx, r, `${r.name}: retired at entry ${r.number}`);
    return 0;
  },
};

const refsLs: Command = {
  name: 'refs ls',
  summary: 'list the reference sets of a stage (each read whole and verified)',
  usage: 'provcat refs ls --stage STAGE [--json]',
  options: { stage: { type: 'string' } },
  positionals: [0, 0],
  async run(args, ctx) {
    const stage = await openStage(args, ctx);
    const sets = await stage.referenceSets();
    const lines = sets.map(
      (s) =>
        `${s.name}\t${s.number} entr${s.number === 1 ? 'y' : 'ies'}\t${s.entries} references${s.retired ? '\tretired' : ''}`,
    );
    print(ctx, sets, lines.length > 0 ? lines.join('\n') : '(no reference sets)');
    return 0;
  },
};

const gcPlan: Command = {
  name: 'gc plan',
  summary: 'list unreferenced managed objects older than a cutoff into a plan directory',
  usage:
    'provcat gc plan --stage STAGE --out DIR [--older-than DURATION] [--inventory FILE|MANIFEST [--inventory-format csv|jsonl|parquet|manifest] [--max-inventory-age DURATION] [--inventory-root DIR] | --candidates FILE] [--key-encoding url|raw] [--tmp-dir DIR] [--page-size N] [--json]',
  options: {
    stage: { type: 'string' },
    out: { type: 'string' },
    'older-than': { type: 'string' },
    inventory: { type: 'string' },
    candidates: { type: 'string' },
    'max-inventory-age': { type: 'string' },
    'inventory-root': { type: 'string' },
    'inventory-format': { type: 'string' },
    'key-encoding': { type: 'string' },
    'tmp-dir': { type: 'string' },
    'page-size': { type: 'string' },
  },
  positionals: [0, 0],
  async run(args, ctx) {
    const out = stringArg(args, 'out', true);
    const olderThan = stringArg(args, 'older-than');
    const format = stringArg(args, 'inventory-format');
    if (format !== undefined && !['csv', 'jsonl', 'parquet', 'manifest'].includes(format)) {
      throw new UsageError(
        `--inventory-format is csv, jsonl, parquet or manifest, not '${format}'`,
      );
    }
    const inventory = stringArg(args, 'inventory');
    const candidates = stringArg(args, 'candidates');
    if (inventory !== undefined && candidates !== undefined) {
      throw new UsageError('give --inventory or --candidates, not both');
    }
    if (candidates !== undefined && format === 'manifest') {
      throw new UsageError('--candidates takes a csv, jsonl or parquet file, not a manifest');
    }
    const maxAge = stringArg(args, 'max-inventory-age');
    const encoding = stringArg(args, 'key-encoding');
    if (encoding !== undefined && encoding !== 'url' && encoding !== 'raw') {
      throw new UsageError(`--key-encoding is url or raw, not '${encoding}'`);
    }
    const pageSizeText = stringArg(args, 'page-size');
    if (
      pageSizeText !== undefined &&
      !(/^\d+$/.test(pageSizeText) && +pageSizeText >= 1 && +pageSizeText <= MAX_PAGE_SIZE)
    ) {
      throw new UsageError(
        `--page-size takes a whole number in 1..${MAX_PAGE_SIZE}, not '${pageSizeText}'`,
      );
    }
    const stage = await openStage(args, ctx);
    const bar = ctx.progress('gc plan');
    const cancel = cancelOnSignal();
    let r: Awaited<ReturnType<typeof planGc>>;
    try {
      r = await planGc(stage, {
        out,
        olderThanMs: olderThan === undefined ? DEFAULT_OLDER_THAN_MS : parseDuration(olderThan),
        inventory,
        candidates,
        maxInventoryAgeMs: maxAge === undefined ? undefined : parseDuration(maxAge),
        inventoryRoot: stringArg(args, 'inventory-root'),
        inventoryFormat: format as InventoryFormat | 'manifest' | undefined,
        keyEncoding: encoding as KeyEncoding | undefined,
        tmpDir: stringArg(args, 'tmp-dir'),
        pageSize: pageSizeText === undefined ? undefined : Number(pageSizeText),
        signal: cancel.signal,
        onProgress: (p) =>
          bar.onProgress?.({
            operation: `gc plan (${p.phase})`,
            uri: out,
            bytes: p.bytes,
            files: p.scanned,
          }),
      });
    } finally {
      cancel.dispose();
      bar.done();
    }
    const json = {
      plan: r.plan,
      candidates: r.candidates,
      bytes: r.bytes,
      uploads: r.uploads,
      scanned: r.scanned,
      keep: r.keep,
    };
    const t = r.manifest.totals;
    print(
      ctx,
      json,
      [
        `plan ${r.plan} in ${r.dir}`,
        `  scanned ${t.scanned} objects: ${t.candidates} to delete (${formatBytes(t.bytes)}), ${t.referenced} referenced, ${t.young} younger than ${r.manifest.cutoff}, ${t.undated} undated, ${t.reserved} reserved`,
        `  ${t.uploads} stale uploads to abort; keep-set of ${r.keep} entries`,
      ].join('\n'),
    );
    return 0;
  },
};

const gcApply: Command = {
  name: 'gc apply',
  summary: 'carry out a GC plan (resumable; stops with exit 7 if the references changed)',
  usage:
    'provcat gc apply DIR --stage STAGE [--shard I/N] [--concurrency N] [--tmp-dir DIR] [--json]',
  options: {
    stage: { type: 'string' },
    shard: { type: 'string' },
    concurrency: { type: 'string' },
    'tmp-dir': { type: 'string' },
  },
  positionals: [1, 1],
  async run(args, ctx) {
    const dir = args.positionals[0] as string;
    const concurrency = stringArg(args, 'concurrency');
    if (
      concurrency !== undefined &&
      !(/^\d+$/.test(concurrency) && +concurrency >= 1 && +concurrency <= 64)
    ) {
      throw new UsageError(`--concurrency takes a whole number in 1..64, not '${concurrency}'`);
    }
    const shardText = stringArg(args, 'shard');
    let shard: ReturnType<typeof parseShard> | undefined;
    try {
      shard = shardText === undefined ? undefined : parseShard(shardText);
    } catch (error) {
      throw new UsageError(`--shard: ${(error as Error).message}`);
    }
    const stage = await openStage(args, ctx);
    const bar = ctx.progress('gc apply');
    const cancel = cancelOnSignal();
    let r: Awaited<ReturnType<typeof applyGc>>;
    try {
      r = await applyGc(stage, dir, {
        tmpDir: stringArg(args, 'tmp-dir'),
        concurrency: concurrency === undefined ? undefined : Number(concurrency),
        shard,
        signal: cancel.signal,
        onProgress: (p) =>
          bar.onProgress?.({
            operation: 'gc apply',
            uri: dir,
            bytes: p.bytes,
            totalBytes: p.totalBytes,
            files: p.decided,
            totalFiles: p.candidates,
          }),
      });
    } finally {
      cancel.dispose();
      bar.done();
    }
    print(
      ctx,
      { deleted: r.deleted, missing: r.missing, aborted: r.aborted, skipped: r.skipped },
      `deleted ${r.deleted} (${formatBytes(r.bytes)}), ${r.missing} already gone, ${r.skipped} kept, ${r.aborted} uploads aborted (${r.applied} of ${r.pages} pages this run)`,
    );
    return 0;
  },
};

const gcKeepSet: Command = {
  name: 'gc keep-set',
  summary: 'export the keep-set (sorted, canonical, fingerprinted) for an external anti-join',
  usage:
    'provcat gc keep-set --stage STAGE --out FILE [--format jsonl|parquet] [--tmp-dir DIR] [--json]',
  options: {
    stage: { type: 'string' },
    out: { type: 'string' },
    format: { type: 'string' },
    'tmp-dir': { type: 'string' },
  },
  positionals: [0, 0],
  async run(args, ctx) {
    const out = stringArg(args, 'out', true);
    const format = stringArg(args, 'format') ?? 'jsonl';
    if (format !== 'jsonl' && format !== 'parquet') {
      throw new UsageError(`--format is jsonl or parquet, not '${format}'`);
    }
    const stage = await openStage(args, ctx);
    const tmpDir = stringArg(args, 'tmp-dir');
    if (format === 'parquet') {
      const r = await writeKeepSetParquet(stage, out, { tmpDir });
      print(
        ctx,
        { out: r.path, entries: r.entries, fingerprint: r.fingerprint, sets: r.sets },
        `${r.entries} entries from ${r.sets} reference sets in ${r.path} (Parquet; fingerprint ${r.fingerprint})`,
      );
      return 0;
    }
    const file = await writeKeepSet(stage, out, { tmpDir });
    print(
      ctx,
      {
        out: file.path,
        entries: file.entries,
        fingerprint: file.fingerprint,
        sets: file.header.sets.length,
      },
      `${file.entries} entries from ${file.header.sets.length} reference sets in ${file.path} (fingerprint ${file.fingerprint})`,
    );
    return 0;
  },
};

/** The garbage-collection commands, for src/cli/main.ts to register. */
export const gcCommands: Command[] = [refsAdd, refsRetire, refsLs, gcPlan, gcApply, gcKeepSet];
