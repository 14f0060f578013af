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
 */
import module from 'node:module';

// provcat pins an SDK release that supports this Node; its "future releases will need Node 22"
// notice is not something a CLI user can act on, so it stays out of their stderr.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();
const { main } = await import('./main.js');

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`provcat: Error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
