/**
 * `provcat cat` for both kinds of input: a file URI (`s3://b/a.csv`, `?at=` included), read
 * through the cache like `ObjectStore.openRead`; or a managed object's LOCATION with `--stage`
 * (lake.ts). Both write with the same rules: to stdout, or with `-o FILE` to a temp file beside
 * FILE renamed over it only once every byte arrived and was checked (a FILE that is not new or a
 * regular file is refused with exit 2 before anything is created; src/core/output-file.ts).
 *
 * A folder URI is a `UriError` (exit 8) naming `fetch --to`, the verb that copies a folder out.
 *
 * @module
 */
import type { BodySink } from '../../contract/primitives.js';
import { UriError } from '../../core/errors.js';
import { checkOutputTarget, isStdout } from '../../core/output-file.js';
import { Uri } from '../../core/uri.js';
import { streamToSink } from '../../lake/reads.js';
import { storeFor } from '../../store/registry.js';
import { type CliArgs, type CliContext, type Command, cancelOnSignal } from '../command.js';
import { catOutput, lakeCommands, rangeArg } from './lake.js';

/** True when the argument is a URI (`scheme://…`) rather than a managed object's LOCATION. */
export function isFileUri(text: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(text);
}

/** `provcat cat URI [--range START:END] [-o FILE]`: one file's bytes, through the cache. */
export async function catFile(args: CliArgs, ctx: CliContext): Promise<number> {
  const output = args.values.output;
  if (typeof output === 'string' && !isStdout(output)) checkOutputTarget(output);
  const u = Uri.parse(args.positionals[0] as string);
  if (u.isFolder) {
    throw new UriError(
      `cat prints one file; ${u} is a folder (copy it out with fetch ${u} --to DIR)`,
      {
        uri: u.toString(),
      },
    );
  }
  const range = typeof args.values.range === 'string' ? rangeArg(args.values.range) : undefined;
  const store = ctx.track(await storeFor(u, { offline: ctx.offline }));
  const cancel = cancelOnSignal();
  try {
    const signal = cancel.signal;
    const deliver = async (sink: BodySink): Promise<void> =>
      streamToSink(await store.openRead(u, { range, signal }))(sink);
    return await catOutput(ctx, output, deliver);
  } finally {
    cancel.dispose();
  }
}

/** The managed `cat` (lake.ts), taught file URIs: the first argument decides which one runs. */
function catCommandOf(managed: Command): Command {
  return {
    ...managed,
    summary: 'write one file (a URI, ?at= included) or a managed object to stdout or a file',
    usage:
      'provcat cat URI [--range START:END] [-o FILE]  |  provcat cat LOCATION --stage STAGE [--range START:END] [-o FILE]',
    async run(args, ctx) {
      const first = args.positionals[0] as string;
      if (args.values.stage === undefined && isFileUri(first)) return catFile(args, ctx);
      return managed.run(args, ctx);
    },
  };
}

/** The managed-object commands with the `cat` that also reads file URIs (for src/cli/main.ts). */
export const readCommands: Command[] = lakeCommands.map((c) =>
  c.name === 'cat' ? catCommandOf(c) : c,
);
