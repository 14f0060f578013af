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
 * and removed otherwise; a FILE that is not a new or regular file (a device, a FIFO, a link, a
 * directory) is refused with exit 2 before anything is created, and `-o -` is stdout
 * (src/core/output-file.ts).
 *
 * Whole-object reads (`cat`, `cat -o`, `verify`) go through `ManagedStage.readTo`, so on S3 the
 * driver's reused read buffers reach the output without being copied into fresh memory; the
 * sinks below therefore never keep a chunk past their `data` call. A reader of stdout that goes
 * away (`provcat cat … | head -c 10`: EPIPE) ends `cat` quietly with exit status 1 — what the
 * CLI answered before, minus the `write EPIPE` line on stderr, since nobody is left to want the
 * bytes and that is not a failure of the object.
 *
 * @module
 */
import path from 'node:path';
import type { Writable } from 'node:stream';
import { debuglog } from 'node:util';
import type { BodySink } from '../../contract/primitives.js';
import { parseInteger } from '../../core/concurrency.js';
import { checkOutputTarget, isStdout, writeOutputFile } from '../../core/output-file.js';
import {
  type DataLocation,
  formatDataLocation,
  parseDataLocation,
  readLocationFile,
} from '../../lake/data-location.js';
import { streamToSink } from '../../lake/reads.js';
import { stageFromString } from '../../lake/stage-factory.js';
import { DEFAULT_WRITE_BATCH_BYTES, FileSink } from '../../net/file-sink.js';
import { MAX_PARTS_IN_FLIGHT, MAX_STALL_TIMEOUT_MS } from '../../upload/settings.js';
import type { CliArgs, CliContext, Command } from '../command.js';
import { cancelOnSignal, UsageError } from '../command.js';

function stageArg(args: CliArgs): string {
  const stage = args.values.stage;
  if (typeof stage !== 'string' || stage === '') throw new UsageError('--stage STAGE is required');
  return stage;
}

/** A DataLocation from the argument: JSON text, or `@file.json`. */
export async function locationArg(text: string): Promise<DataLocation> {
  if (text.startsWith('@')) return parseDataLocation(await readLocationFile(text.slice(1)));
  return parseDataLocation(text);
}

/** An integer option's value in `min..max` (`undefined` when absent); InvalidArgument (exit 2) otherwise. */
function intArg(value: unknown, name: string, min: number, max: number): number | undefined {
  return value === undefined ? undefined : parseInteger(String(value), name, min, max);
}

/** Parse `--range START:END` (half-open, bytes). */
export function rangeArg(text: string): { start: number; end: number } {
  const m = /^(\d+):(\d+)$/.exec(text);
  if (!m) throw new UsageError(`--range takes START:END (bytes, half-open), not '${text}'`);
  return { start: Number(m[1]), end: Number(m[2]) };
}

const debug = debuglog('provcat:cli');

/** The exit status of `cat` when the reader of stdout went away (as before readTo: 1). */
export const EXIT_OUTPUT_CLOSED = 1;

/**
 * A {@link BodySink} that writes each chunk to a Writable (the CLI's stdout).
 *
 * `data` resolves in the write's callback, when the stream is done with the chunk
 * (process.stdout has handed it to the OS by then, whether stdout is a file, a pipe or a
 * terminal), so the chunk may be a reused read buffer and nothing here keeps it; one write at a
 * time is the backpressure. Chunks are asked in batches of at least 1 MiB (fewer, larger
 * writes). A failed write rejects `data` with the stream's error; {@link outputClosed} tells
 * whether that error was the reader going away.
 *
 * While attached ({@link attach} until {@link detach}) it listens for the stream's `error`
 * event, which Node would otherwise raise as an uncaught exception: the same error reaches the
 * failed write's callback, so nothing is lost.
 */
export class WritableSink implements BodySink {
  readonly batchBytes = DEFAULT_WRITE_BATCH_BYTES;
  /** Bytes written so far. */
  written = 0;
  private failure: NodeJS.ErrnoException | undefined;
  private readonly onError = (error: NodeJS.ErrnoException) => {
    this.failure ??= error;
  };

  constructor(private readonly out: Writable) {}

  /** Start listening for the stream's `error` event (see the class comment). */
  attach(): this {
    this.out.on('error', this.onError);
    return this;
  }

  /**
   * Stop listening; call once the read is over. After a failed write it keeps listening: the
   * stream may still emit that failure, and it is already reported through `data`.
   */
  detach(): void {
    if (this.failure === undefined) this.out.removeListener('error', this.onError);
  }

  /** Write one chunk; resolves once the stream is done with it. */
  data(chunk: Buffer): Promise<void> {
    return new Promise((resolve, reject) => {
      this.out.write(chunk, (error) => {
        if (error) {
          this.failure ??= error;
          reject(error);
        } else {
          this.written += chunk.length;
          resolve();
        }
      });
    });
  }

  /** True when a write failed because the reader closed its end (EPIPE). */
  get outputClosed(): boolean {
    return this.failure?.code === 'EPIPE';
  }
}

const uploadCommand: Command = {
  name: 'upload',
  summary: 'upload a local file as an immutable managed object; prints its DataLocation',
  usage:
    'provcat upload LOCAL --stage STAGE [--content-type T] [--checkpoint-dir D] [--parts-in-flight N] [--stall-timeout SECONDS] [--json]',
  options: {
    stage: { type: 'string' },
    'content-type': { type: 'string' },
    'checkpoint-dir': { type: 'string' },
    'parts-in-flight': { type: 'string' },
    'stall-timeout': { type: 'string' },
  },
  positionals: [1, 1],
  async run(args: CliArgs, ctx: CliContext) {
    const source = args.positionals[0] as string;
    // Checked before the stage is opened: a bad number is a usage error (exit 2), not a stage's.
    const partsInFlight = intArg(
      args.values['parts-in-flight'],
      '--parts-in-flight',
      1,
      MAX_PARTS_IN_FLIGHT,
    );
    const stallSeconds = intArg(
      args.values['stall-timeout'],
      '--stall-timeout',
      1,
      Math.floor(MAX_STALL_TIMEOUT_MS / 1000),
    );
    const stage = ctx.track(
      await stageFromString(stageArg(args), { env: ctx.env, offline: ctx.offline }),
    );
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
        stallTimeoutMs: stallSeconds === undefined ? undefined : stallSeconds * 1000,
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

/**
 * `cat`'s output, for the managed `cat` and for `cat URI` (read.ts): what `deliver` writes,
 * to stdout — a reader that goes away ends it with {@link EXIT_OUTPUT_CLOSED} — or to the file
 * `output`, written the way the cache writes a download (FileSink: the chunks as they come, an
 * early fdatasync every 64 MiB so the final fsync finds little left) and renamed over the target
 * only then (src/core/output-file.ts says which targets are refused). Returns the exit status.
 */
export async function catOutput(
  ctx: CliContext,
  output: unknown,
  deliver: (sink: BodySink) => Promise<void>,
): Promise<number> {
  if (typeof output !== 'string' || isStdout(output)) {
    const sink = new WritableSink(ctx.stdout).attach();
    try {
      await deliver(sink);
    } catch (error) {
      if (!sink.outputClosed) throw error;
      debug('cat: stdout closed after %d bytes: %o', sink.written, error);
      return EXIT_OUTPUT_CLOSED;
    } finally {
      sink.detach();
    }
    return 0;
  }
  await writeOutputFile(output, async (fd) => {
    const sink = new FileSink(fd);
    try {
      await deliver(sink);
      await sink.finish();
    } catch (error) {
      await sink.settle();
      throw error;
    }
  });
  return 0;
}

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
    const output = args.values.output;
    // A target that is not a new or regular file is refused before anything else happens.
    if (typeof output === 'string' && !isStdout(output)) checkOutputTarget(output);
    const location = await locationArg(args.positionals[0] as string);
    const stage = ctx.track(
      await stageFromString(stageArg(args), { env: ctx.env, offline: ctx.offline }),
    );
    const range = typeof args.values.range === 'string' ? rangeArg(args.values.range) : undefined;
    const cancel = cancelOnSignal();
    try {
      const signal = cancel.signal;
      // A range has no digest to check: openRange's stream (exactly its bytes), chunk by chunk.
      // The whole object: readTo, verified, in the S3 driver's reused read buffers.
      const deliver = async (sink: BodySink): Promise<void> => {
        if (!range) return stage.readTo(location, sink, { signal });
        const stream = await stage.openRange(location, range.start, range.end, { signal });
        return streamToSink(stream)(sink);
      };
      return await catOutput(ctx, output, deliver);
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
    const stage = ctx.track(
      await stageFromString(stageArg(args), { env: ctx.env, offline: ctx.offline }),
    );
    const bar = ctx.progress('verify');
    const cancel = cancelOnSignal();
    try {
      // readTo checks the size and the SHA-256; the sink only counts, for the progress bar.
      let bytes = 0;
      const onProgress = bar.onProgress;
      const counter: BodySink = {
        data(chunk) {
          bytes += chunk.length;
          onProgress?.({
            operation: 'read',
            uri: location.uri,
            bytes,
            totalBytes: location.sizeBytes,
          });
        },
      };
      await stage.readTo(location, counter, { signal: cancel.signal });
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
