/**
 * The managed-object verbs of the `provcat` CLI: `upload`, `cat`, `verify`.
 *
 * `--stage` takes `file:///abs/root/`, `s3://bucket/prefix/` or `@descriptor.json` (see
 * factory.ts). A LOCATION is the DataLocation JSON itself or `@file.json`.
 *
 * `cat` streams verified bytes. To stdout it cannot take back bytes already written, so an
 * integrity failure at the end is reported on stderr with exit status 6 — a script must check
 * the status. With `-o FILE` nothing appears under FILE unless verification succeeded: bytes go
 * to a temp file beside it, which is fsynced and renamed only after the stream ended cleanly,
 * and removed otherwise.
 *
 * @module
 */
import { closeSync, openSync } from 'node:fs';
import { readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { CliArgs, CliContext, Command } from '../cli/command.js';
import { UsageError } from '../cli/command.js';
import { fsyncDir, tempPathFor } from '../fs-atomic.js';
import { FileSink } from '../net/file-sink.js';
import { InvalidDataLocation } from './errors.js';
import { stageFromString } from './factory.js';
import { type DataLocation, formatDataLocation, parseDataLocation } from './location.js';
import { streamToSink } from './stage-base.js';

function stageArg(args: CliArgs): string {
  const stage = args.values.stage;
  if (typeof stage !== 'string' || stage === '') throw new UsageError('--stage STAGE is required');
  return stage;
}

/** A DataLocation from the argument: JSON text, or `@file.json`. */
export async function locationArg(text: string): Promise<DataLocation> {
  if (text.startsWith('@')) {
    let json: string;
    try {
      json = await readFile(text.slice(1), 'utf8');
    } catch (cause) {
      throw new InvalidDataLocation(`cannot read the location file ${text.slice(1)}`, { cause });
    }
    return parseDataLocation(json);
  }
  return parseDataLocation(text);
}

function intArg(value: unknown, name: string): number | undefined {
  if (value === undefined) return undefined;
  const text = String(value);
  if (!/^\d+$/.test(text))
    throw new UsageError(`${name} takes a non-negative integer, not '${text}'`);
  return Number(text);
}

/** Parse `--range START:END` (half-open, bytes). */
export function rangeArg(text: string): { start: number; end: number } {
  const m = /^(\d+):(\d+)$/.exec(text);
  if (!m) throw new UsageError(`--range takes START:END (bytes, half-open), not '${text}'`);
  return { start: Number(m[1]), end: Number(m[2]) };
}

function cancelOnSignal(): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const onSignal = () => controller.abort(new Error('interrupted'));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    signal: controller.signal,
    dispose() {
      process.removeListener('SIGINT', onSignal);
      process.removeListener('SIGTERM', onSignal);
    },
  };
}

const uploadCommand: Command = {
  name: 'upload',
  summary: 'upload a local file as an immutable managed object; prints its DataLocation',
  usage:
    'provcat upload LOCAL --stage STAGE [--content-type T] [--checkpoint-dir D] [--parts-in-flight N] [--json]',
  options: {
    stage: { type: 'string' },
    'content-type': { type: 'string' },
    'checkpoint-dir': { type: 'string' },
    'parts-in-flight': { type: 'string' },
  },
  positionals: [1, 1],
  async run(args: CliArgs, ctx: CliContext) {
    const source = args.positionals[0] as string;
    const stage = await stageFromString(stageArg(args), { env: ctx.env });
    const partsInFlight = intArg(args.values['parts-in-flight'], '--parts-in-flight');
    const contentType = args.values['content-type'];
    const checkpointDir = args.values['checkpoint-dir'];
    const bar = ctx.progress(`upload ${path.basename(source)}`);
    const cancel = cancelOnSignal();
    let location: DataLocation;
    try {
      location = await stage.upload(source, {
        contentType: typeof contentType === 'string' ? contentType : undefined,
        checkpointDir: typeof checkpointDir === 'string' ? checkpointDir : undefined,
        partsInFlight,
        onProgress: bar.onProgress,
        signal: cancel.signal,
      });
    } finally {
      cancel.dispose();
      bar.done();
    }
    ctx.stdout.write(
      ctx.json
        ? `${formatDataLocation(location)}\n`
        : `${JSON.stringify(JSON.parse(formatDataLocation(location)), null, 2)}\n`,
    );
    return 0;
  },
};

const catCommand: Command = {
  name: 'cat',
  summary: 'write the verified bytes of a managed object (or a byte range) to stdout or a file',
  usage: 'provcat cat LOCATION --stage STAGE [--range START:END] [-o FILE]',
  options: {
    stage: { type: 'string' },
    range: { type: 'string' },
    output: { type: 'string', short: 'o' },
  },
  positionals: [1, 1],
  async run(args: CliArgs, ctx: CliContext) {
    const location = await locationArg(args.positionals[0] as string);
    const stage = await stageFromString(stageArg(args), { env: ctx.env });
    const range = typeof args.values.range === 'string' ? rangeArg(args.values.range) : undefined;
    const output = args.values.output;
    const cancel = cancelOnSignal();
    try {
      const signal = cancel.signal;
      if (typeof output !== 'string') {
        const stream = range
          ? await stage.openRange(location, range.start, range.end, { signal })
          : await stage.open(location, { signal });
        await pipeline(stream, ctx.stdout, { end: false });
        return 0;
      }
      const target = path.resolve(output);
      const temp = tempPathFor(target);
      // Written the way the cache writes a download (FileSink): the chunks as they come (a whole
      // object straight from the S3 driver's reused read buffers, through readTo), an early
      // fdatasync every 64 MiB so the final fsync finds little left, then fsync and rename.
      const fd = openSync(temp, 'wx', 0o644);
      const sink = new FileSink(fd);
      let open = true;
      try {
        if (range) {
          const stream = await stage.openRange(location, range.start, range.end, { signal });
          await streamToSink(stream)(sink);
        } else {
          await stage.readTo(location, sink, { signal });
        }
        await sink.finish();
        open = false;
        closeSync(fd);
        await rename(temp, target);
      } catch (error) {
        if (open) {
          await sink.settle();
          closeSync(fd);
        }
        await rm(temp, { force: true });
        throw error;
      }
      await fsyncDir(path.dirname(target));
      return 0;
    } finally {
      cancel.dispose();
    }
  },
};

const verifyCommand: Command = {
  name: 'verify',
  summary: 'read a managed object end to end and check its size and SHA-256 (exit 6 if not)',
  usage: 'provcat verify LOCATION --stage STAGE [--json]',
  options: { stage: { type: 'string' } },
  positionals: [1, 1],
  async run(args: CliArgs, ctx: CliContext) {
    const location = await locationArg(args.positionals[0] as string);
    const stage = await stageFromString(stageArg(args), { env: ctx.env });
    const bar = ctx.progress('verify');
    const cancel = cancelOnSignal();
    try {
      const stream = await stage.open(location, { signal: cancel.signal });
      let bytes = 0;
      for await (const chunk of stream) {
        bytes += (chunk as Buffer).length;
        bar.onProgress?.({
          operation: 'read',
          uri: location.uri,
          bytes,
          totalBytes: location.sizeBytes,
        });
      }
    } finally {
      cancel.dispose();
      bar.done();
    }
    ctx.stdout.write(
      ctx.json
        ? `${JSON.stringify({ ok: true, uri: location.uri, sizeBytes: location.sizeBytes, sha256: location.sha256 })}\n`
        : `ok ${location.uri} ${location.sizeBytes} bytes sha256 ${location.sha256}\n`,
    );
    return 0;
  },
};

/** The managed-object commands, for src/cli/main.ts to register. */
export const lakeCommands: Command[] = [uploadCommand, catCommand, verifyCommand];
