/**
 * The shape of a CLI command, so that command groups can live beside the code they drive
 * (src/cli/commands/lake.ts, ...) and src/cli/main.ts only registers them.
 *
 * @module
 */
import type { Writable } from 'node:stream';
import type { ParseArgsConfig } from 'node:util';
import type { ProgressCallback } from '../store/store.js';

/** What a command gets besides its arguments. */
export interface CliContext {
  /**
   * Where results go. `cat` writes reused read buffers to it, one at a time: a write's chunk
   * must be consumed (written out or copied) by the time its callback runs, as process.stdout,
   * file streams and sockets do.
   */
  stdout: Writable;
  stderr: Writable;
  env: NodeJS.ProcessEnv;
  /** `--json`: print exactly one JSON value on stdout. */
  json: boolean;
  /** `--offline` or `PROVCAT_OFFLINE=1`. */
  offline: boolean;
  /**
   * A progress callback that draws a bar on stderr when stderr is a terminal, `undefined`
   * otherwise. Call `done()` after the transfer to clear the bar.
   */
  progress(label: string): { onProgress: ProgressCallback | undefined; done(): void };
  /**
   * Close `resource` (a store, a stage) when the command ends, whatever the outcome: its
   * keep-alive sockets, and what it learned (S3 routes), are not left to process exit.
   */
  track<T extends { close(): Promise<void> }>(resource: T): T;
}

/** Parsed arguments: positionals and option values as node:util parseArgs gives them. */
export interface CliArgs {
  positionals: string[];
  values: Record<string, string | boolean | string[] | undefined>;
}

/** One CLI verb. */
export interface Command {
  /** The verb (`fetch`, `upload`, ...); a group verb may contain a space (`cache info`). */
  name: string;
  /** One line for `provcat --help`. */
  summary: string;
  /** The usage line, e.g. `provcat upload LOCAL --stage STAGE [--json]`. */
  usage: string;
  /** Options beyond the global `--json`, `--offline`, `--help`. */
  options: NonNullable<ParseArgsConfig['options']>;
  /** Smallest and largest number of positionals. */
  positionals: [min: number, max: number];
  /** Run; throw typed errors (src/core/errors.ts) and a UsageError for bad usage. Returns the exit code (default 0). */
  run(args: CliArgs, ctx: CliContext): Promise<number | undefined>;
}

/** Bad command-line usage: exit status 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/**
 * An AbortSignal that fires on SIGINT or SIGTERM until disposed: long commands (uploads, GC
 * applies) stop at their next safe point and clean up instead of dying mid-write.
 */
export function cancelOnSignal(): { signal: AbortSignal; dispose(): void } {
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
