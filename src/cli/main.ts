/**
 * The `provcat` command. Human output by default, `--json` for scripts (one JSON value on
 * stdout), errors on stderr as `provcat: <ErrorClass>: <message>` with an exit status per error
 * class (docs/cli.md): 2 usage, 3 NotFound, 4 Exists, 5 OfflineMiss, 6 ObjectIntegrityError,
 * 7 StoreError, 8 UriError, 9 PermissionDenied, 10 PreconditionFailed, 11 NotSupported, 1
 * anything else.
 *
 * @module
 */

import { readFileSync } from 'node:fs';
import { debuglog, parseArgs } from 'node:util';
import { exitCodeOf } from '../core/errors.js';
import { offlineFromEnv } from '../store/store.js';
import { type CliArgs, type CliContext, type Command, UsageError } from './command.js';
import { commandWords } from './command-words.js';
import { coreCommands } from './commands/files.js';
import { progressBar } from './progress.js';

const debug = debuglog('provcat:cli');

/**
 * Command groups that live beside their code, imported only when one of their verbs runs (or
 * for `--help`): every CLI call is a fresh process, and loading the managed-object code for a
 * `stat` costs about 40 ms of CPU. `names` only says which group to import first; a verb missing
 * from it is still found, after every group is loaded.
 */
const groups: { names: readonly string[]; load: () => Promise<Command[]> }[] = [
  {
    names: ['pin', 'commit', 'log', 'branch'],
    load: async () => (await import('./commands/commits.js')).commitCommands,
  },
  {
    names: ['push', 'diff'],
    load: async () => (await import('./commands/folders.js')).folderCommands,
  },
  {
    names: ['upload', 'cat', 'verify'],
    load: async () => (await import('./commands/read.js')).readCommands,
  },
  {
    names: ['refs add', 'refs retire', 'refs ls', 'gc plan', 'gc apply', 'gc keep-set'],
    load: async () => (await import('./commands/gc.js')).gcCommands,
  },
  { names: ['tour'], load: async () => [(await import('./commands/tour.js')).tourCommand] },
];

/** Every command, in help order. */
async function allCommands(): Promise<Command[]> {
  const loaded = await Promise.all(groups.map((g) => g.load()));
  return [...coreCommands, ...loaded.flat()];
}

/** The command named by the first two words, else the first word; `undefined` if none. */
async function findCommand(words: string[]): Promise<Command | undefined> {
  const name2 = words.slice(0, 2).join(' ');
  const pick = (list: Command[]) =>
    list.find((c) => c.name === name2) ?? list.find((c) => c.name === words[0]);
  const core = pick(coreCommands);
  if (core) return core;
  const group = groups.find((g) => g.names.includes(name2) || g.names.includes(words[0] ?? ''));
  return (group && pick(await group.load())) ?? pick(await allCommands());
}

const GLOBAL = {
  json: { type: 'boolean' },
  offline: { type: 'boolean' },
  profile: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function helpText(commands: Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'provcat: files in object stores by URI, cached, offline, pinned.',
    '',
    'usage: provcat COMMAND [ARGS] [--json] [--offline] [--profile NAME]',
    '',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'URIs: local://bucket/key, s3://bucket/key, gs://bucket/key, az://container/key;',
    '      a trailing / names a folder; ?at=version:ID or ?at=commit:ID pins. See docs/cli.md.',
  ].join('\n');
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8'));
  return String(pkg.version);
}

/** Run the CLI on `argv` (without node and the script); returns the exit status. */
export async function main(
  argv: string[],
  io: Pick<CliContext, 'stdout' | 'stderr' | 'env'> = {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
  },
): Promise<number> {
  const fail = (error: unknown): number => {
    const name = error instanceof Error ? error.name : 'Error';
    const message = error instanceof Error ? error.message : String(error);
    io.stderr.write(`provcat: ${name}: ${message}\n`);
    if (io.env.PROVCAT_DEBUG && error instanceof Error) io.stderr.write(`${error.stack}\n`);
    return error instanceof UsageError ? 2 : exitCodeOf(error);
  };
  const words = commandWords(argv);
  if (argv.includes('--version')) {
    io.stdout.write(`${version()}\n`);
    return 0;
  }
  const command = await findCommand(words);
  if (!command) {
    const help = helpText(await allCommands());
    if (words.length === 0 && (argv.includes('--help') || argv.includes('-h'))) {
      io.stdout.write(`${help}\n`);
      return 0;
    }
    io.stderr.write(`${help}\n`);
    return words.length === 0 ? 2 : fail(new UsageError(`unknown command '${words[0]}'`));
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: argv,
      options: { ...GLOBAL, ...command.options },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    return fail(new UsageError(`${(error as Error).message}\nusage: ${command.usage}`));
  }
  if (parsed.values.help) {
    io.stdout.write(`usage: ${command.usage}\n${command.summary}\n`);
    return 0;
  }
  const positionals = parsed.positionals.slice(command.name.split(' ').length);
  const [min, max] = command.positionals;
  if (positionals.length < min || positionals.length > max) {
    return fail(new UsageError(`wrong number of arguments\nusage: ${command.usage}`));
  }
  const opened: { close(): Promise<void> }[] = [];
  const ctx: CliContext = {
    ...io,
    json: parsed.values.json === true,
    offline: parsed.values.offline === true || offlineFromEnv(io.env),
    progress: (label) => progressBar(io.stderr as never, label),
    track: (resource) => {
      opened.push(resource);
      return resource;
    },
  };
  if (ctx.offline) io.env.PROVCAT_OFFLINE = '1';
  // A named endpoint (src/store/profiles.ts) for every store the command opens.
  if (typeof parsed.values.profile === 'string') io.env.PROVCAT_PROFILE = parsed.values.profile;
  try {
    return (
      (await command.run({ positionals, values: parsed.values as CliArgs['values'] }, ctx)) ?? 0
    );
  } catch (error) {
    return fail(error);
  } finally {
    // The command's answer is out; a failure to close is not its failure.
    for (const resource of opened) {
      await resource.close().catch((error: unknown) => debug('close failed: %s', String(error)));
    }
  }
}
