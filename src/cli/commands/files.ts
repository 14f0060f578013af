/**
 * The core CLI verbs: stat, ls, walk, fetch, put, rm, mb, cache info.
 *
 * @module
 */
import { Cache } from '../../cache/cache.js';
import type { Entry } from '../../contract/entry.js';
import { entryToJson } from '../../contract/entry.js';
import { MAX_CONCURRENCY, parseInteger } from '../../core/concurrency.js';
import { Uri } from '../../core/uri.js';
import type { FetchToResult } from '../../folders/fetch-to.js';
import { storeFor } from '../../store/registry.js';
import { type CliArgs, type CliContext, type Command, UsageError } from '../command.js';
import { formatBytes } from '../progress.js';

/** Print one JSON value, or human lines. */
export function emit(ctx: CliContext, json: unknown, human: () => string): void {
  ctx.stdout.write(ctx.json ? `${JSON.stringify(json)}\n` : `${human()}\n`);
}

function humanEntry(e: Entry): string {
  const size = e.size === null ? '-' : formatBytes(e.size);
  return `${e.kind === 'folder' ? 'dir ' : 'file'}  ${size.padStart(10)}  ${e.uri}`;
}

function str(v: CliArgs['values'][string]): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

function list(v: CliArgs['values'][string]): string[] | undefined {
  if (v === undefined || typeof v === 'boolean') return undefined;
  return Array.isArray(v) ? v : [v];
}

/**
 * `--concurrency N` (`undefined` when absent): a whole number in 1..256, checked by the same
 * validator as the library's `concurrency` (src/core/concurrency.ts), so a bad value is
 * `InvalidArgument` (exit 2) before any store is opened.
 */
export function concurrencyOf(values: CliArgs['values']): number | undefined {
  const c = str(values.concurrency);
  return c === undefined ? undefined : parseInteger(c, '--concurrency', 1, MAX_CONCURRENCY);
}

/** The store for the first positional (a URI), with the CLI's offline mode. */
async function storeOf(uri: string, ctx: CliContext) {
  const u = Uri.parse(uri);
  return { u, store: ctx.track(await storeFor(u, { offline: ctx.offline })) };
}

/** Print entries: a JSON array, or one line each. */
function emitEntries(ctx: CliContext, entries: Entry[]): void {
  emit(ctx, entries.map(entryToJson), () => entries.map(humanEntry).join('\n'));
}

/**
 * A `cache VERB` command: no arguments; runs `action` on the default cache and prints its
 * result as JSON or through `human`.
 */
function cacheCommand<T>(
  verb: string,
  summary: string,
  action: (cache: Cache) => Promise<T>,
  human: (result: T) => string,
): Command {
  return {
    name: `cache ${verb}`,
    summary,
    usage: `provcat cache ${verb} [--json]`,
    options: {},
    positionals: [0, 0],
    async run(_args, ctx) {
      const result = await action(new Cache());
      emit(ctx, result, () => human(result));
      return 0;
    },
  };
}

/** The core verbs, in help order. */
export const coreCommands: Command[] = [
  {
    name: 'stat',
    summary: 'describe one file or folder',
    usage: 'provcat stat URI [--json]',
    options: {},
    positionals: [1, 1],
    async run({ positionals }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const e = await store.stat(u);
      emit(ctx, entryToJson(e), () =>
        [
          `uri      ${e.uri}`,
          `kind     ${e.kind}`,
          `size     ${e.size ?? '-'}`,
          `version  ${e.version ?? '-'}`,
        ].join('\n'),
      );
      return 0;
    },
  },
  {
    name: 'ls',
    summary: 'list a folder one level deep',
    usage: 'provcat ls URI [--json]',
    options: {},
    positionals: [1, 1],
    async run({ positionals }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const entries = await store.list(u);
      emitEntries(ctx, entries);
      return 0;
    },
  },
  {
    name: 'walk',
    summary: 'list every file below a folder',
    usage: 'provcat walk URI [--include GLOB ...] [--exclude GLOB ...] [--json]',
    options: {
      include: { type: 'string', multiple: true },
      exclude: { type: 'string', multiple: true },
    },
    positionals: [1, 1],
    async run({ positionals, values }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const entries = await store.walk(u, {
        include: list(values.include),
        exclude: list(values.exclude),
      });
      emitEntries(ctx, entries);
      return 0;
    },
  },
  {
    name: 'fetch',
    summary:
      'copy a file or folder into the cache (or find it current) and print its path; --to DIR copies it out',
    usage: 'provcat fetch URI [--to DIR [--delete]] [--concurrency N] [--json]',
    options: {
      concurrency: { type: 'string' },
      to: { type: 'string' },
      delete: { type: 'boolean' },
    },
    positionals: [1, 1],
    async run({ positionals, values }, ctx) {
      const concurrency = concurrencyOf(values);
      const to = str(values.to);
      if (to === undefined && values.delete === true)
        throw new UsageError('--delete goes with --to DIR');
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      const bar = ctx.progress(`fetch ${u.name}`);
      if (to !== undefined) {
        let r: FetchToResult;
        try {
          r = await store.fetch(u, {
            to,
            delete: values.delete === true,
            onProgress: bar.onProgress,
            concurrency,
          });
        } finally {
          bar.done();
        }
        emit(ctx, r, () => r.path);
        if (!ctx.json) {
          ctx.stderr.write(
            `${r.files} file(s), ${r.written} written (${formatBytes(r.bytes)}), ${r.deleted} deleted\n`,
          );
        }
        return 0;
      }
      let r: Awaited<ReturnType<typeof store.fetch>>;
      try {
        r = await store.fetch(u, { onProgress: bar.onProgress, concurrency });
      } finally {
        bar.done();
      }
      emit(ctx, r, () => r.path);
      if (!ctx.json) {
        ctx.stderr.write(
          `${r.files} file(s), ${r.downloaded} transferred (${formatBytes(r.bytes)})\n`,
        );
      }
      return 0;
    },
  },
  {
    name: 'put',
    summary: 'write a local file as one object',
    usage: 'provcat put LOCAL URI [--content-type T] [--json]',
    options: { 'content-type': { type: 'string' } },
    positionals: [2, 2],
    async run({ positionals, values }, ctx) {
      const { u, store } = await storeOf(positionals[1] as string, ctx);
      const bar = ctx.progress(`put ${u.name}`);
      let e: Entry;
      try {
        e = await store.put(u, positionals[0] as string, {
          contentType: str(values['content-type']),
          onProgress: bar.onProgress,
        });
      } finally {
        bar.done();
      }
      emit(ctx, entryToJson(e), () => `${e.uri}  ${e.version}`);
      return 0;
    },
  },
  {
    name: 'rm',
    summary: 'delete one object, or with -r every object under a folder',
    usage: 'provcat rm URI [--json]  |  provcat rm -r URI/ [--force] [--concurrency N] [--json]',
    options: {
      recursive: { type: 'boolean', short: 'r' },
      force: { type: 'boolean' },
      concurrency: { type: 'string' },
    },
    positionals: [1, 1],
    async run({ positionals, values }, ctx) {
      const recursive = values.recursive === true;
      if (!recursive && (values.force === true || values.concurrency !== undefined)) {
        throw new UsageError('--force and --concurrency go with rm -r');
      }
      const concurrency = concurrencyOf(values);
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      if (!recursive) {
        await store.delete(u);
        emit(ctx, { uri: u.toString(), deleted: true }, () => `deleted ${u}`);
        return 0;
      }
      if (u.isBucket && values.force !== true) {
        throw new UsageError(
          `rm -r ${u} would delete every file in the bucket; add --force to mean it`,
        );
      }
      const r = await store.deleteFolder(u, {
        force: values.force === true,
        concurrency,
      });
      emit(
        ctx,
        { uri: r.uri.toString(), deleted: r.deleted },
        () => `deleted ${r.deleted} object(s) under ${r.uri}`,
      );
      return 0;
    },
  },
  {
    name: 'mb',
    summary: 'make a bucket (with --versioning, one that keeps versions)',
    usage: 'provcat mb URI [--versioning] [--json]',
    options: { versioning: { type: 'boolean' } },
    positionals: [1, 1],
    async run({ positionals, values }, ctx) {
      const { u, store } = await storeOf(positionals[0] as string, ctx);
      if (!u.isBucket) throw new UsageError(`mb takes a bucket URI (scheme://bucket), not ${u}`);
      store.online(u, 'mb');
      await store.makeBucket(u.bucket, { versioning: values.versioning === true });
      // The local store keeps versions in every bucket, asked or not.
      const versioning = values.versioning === true || store.capabilities.versionsAlways === true;
      emit(ctx, { uri: u.toString(), versioning }, () => `made ${u}`);
      return 0;
    },
  },
  cacheCommand(
    'info',
    'where the cache is and what it holds',
    (cache) => cache.info(),
    (info) =>
      [`root   ${info.root}`, `blobs  ${info.blobs}`, `bytes  ${formatBytes(info.bytes)}`].join(
        '\n',
      ),
  ),
  cacheCommand(
    'prune',
    'free cached bytes that no fetched file, folder, pin or commit uses',
    (cache) => cache.collect(),
    (freed) => `removed ${freed.files} file(s), ${formatBytes(freed.bytes)}`,
  ),
];
