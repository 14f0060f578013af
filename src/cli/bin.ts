#!/usr/bin/env node
/**
 * The `provcat` executable: runs the CLI on the process's arguments.
 *
 * Every command is a fresh process that compiles provcat's modules and, for commands that reach
 * a store, the AWS SDK's (about 0.3 s of CPU; see docs/performance.md). On Node 22.1 and later
 * the compiled code is kept in Node's on-disk compile cache (`module.enableCompileCache`; Node
 * honours `NODE_DISABLE_COMPILE_CACHE`), so later runs skip most of that work. Node 20 has no
 * such cache and this is a no-op there. It must run before the CLI's modules load, hence the
 * dynamic import below.
 *
 * The same holds for V8's optimizing compiler: a command lives for a second or a few, and by
 * default V8 spends a good part of that compiling functions that have run a few thousand times
 * (TurboFan, on a background thread, which on a small machine competes with the transfer and,
 * for a local S3 server, with the server). The CLI raises the tier-up budget 30-fold, so only
 * code that stays hot (long listings, big commits) is optimized. Measured on 2 cores against a
 * local Ceph (docs/performance.md): CPU of a cold 1,000-file fetch 2.40 → 2.12 s, of a 1 GiB
 * fetch 2.07 → 1.51 s, of a 10,000-file commit 1.31 → 1.11 s. A budget given in `NODE_OPTIONS`
 * or on node's command line is left alone. Only the executable does this: the library never
 * changes its host's V8 flags.
 */
import module from 'node:module';
import v8 from 'node:v8';
import { commandWords } from './command-words.js';

// provcat pins an SDK release that supports this Node; its "future releases will need Node 22"
// notice is not something a CLI user can act on, so it stays out of their stderr.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

/** V8's tier-up budget for the CLI (its default is 67,584 bytecodes executed). */
const INTERRUPT_BUDGET = 2_000_000;
const given = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].join(' ');
if (!given.includes('--interrupt-budget')) {
  v8.setFlagsFromString(`--interrupt-budget=${INTERRUPT_BUDGET}`);
}

/**
 * How far V8 lets the heap grow past what survived the last full collection, for `gc` commands,
 * in percent. V8's own factor is dynamic, up to 4×, and took a `gc plan` whose live set stays
 * small to more than twice the 256 MiB target; at 25 % it stays well within it at the same CPU
 * (docs/performance.md, "Garbage collection past one machine"). A factor is not a ceiling: a
 * plan whose live set is larger (a keep-set of millions of entries) gets the heap it needs
 * instead of dying at a fixed `--max-old-space-size`. The flag is read at every collection, so
 * setting it here, before any work, is in time. A value given in `NODE_OPTIONS` or on node's
 * command line is left alone.
 */
const GC_HEAP_GROWING_PERCENT = 25;
if (commandWords(process.argv.slice(2))[0] === 'gc' && !given.includes('--heap-growing-percent')) {
  v8.setFlagsFromString(`--heap-growing-percent=${GC_HEAP_GROWING_PERCENT}`);
}

(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();

/**
 * A reader of stdout that goes away (`provcat walk … | head -c 10`: EPIPE) ends every command
 * quietly with this status: nobody is left to want the output, and that is not a failure of the
 * command worth a stack trace (Node would raise the stream's `error` as an uncaught exception).
 * The same status `cat` gives (src/cli/commands/lake.ts), not 0, so that `set -o pipefail` still sees
 * that the output was cut short. Any other failure to write stdout (ENOSPC, EIO) is reported on
 * stderr with status 1.
 */
const EXIT_OUTPUT_CLOSED = 1;
let outputFailed = false;
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (!outputFailed && error.code !== 'EPIPE') {
    process.stderr.write(`provcat: Error: cannot write the output: ${error.message}\n`);
  }
  outputFailed = true;
  process.exitCode = EXIT_OUTPUT_CLOSED;
});

/**
 * How long a finished command waits for the event loop to empty before it exits anyway. A command
 * is done when `main` settles; a request it abandoned at a bound (the GCS SDK's session create
 * takes no signal, so a create that stalls for ever is raced, not cancelled) would otherwise keep
 * the process alive for as long as the connection stays open. Output is written by then (stdout
 * and stderr on pipes and files are synchronous on Linux), and an emptied loop exits at once, as
 * before: the timer is unref'd.
 */
const LINGER_MS = 500;
const finish = () => setTimeout(() => process.exit(), LINGER_MS).unref();

// No top-level await: the executable is bundled as CommonJS (scripts/bundle-cli.mjs).
import('./main.js')
  .then(({ main }) => main(process.argv.slice(2)))
  .then(
    (code) => {
      process.exitCode = outputFailed && code === 0 ? EXIT_OUTPUT_CLOSED : code;
    },
    (error: unknown) => {
      process.stderr.write(`provcat: Error: ${String(error)}\n`);
      process.exitCode = 1;
    },
  )
  .finally(finish);
