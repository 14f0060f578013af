#!/usr/bin/env node
/** The `provcat` executable: runs the CLI on the process's arguments. */
import { main } from './main.js';

// provcat pins an SDK release that supports this Node; its "future releases will need Node 22"
// notice is not something a CLI user can act on, so it stays out of their stderr.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`provcat: Error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
