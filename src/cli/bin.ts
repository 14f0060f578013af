#!/usr/bin/env node
/** The `provcat` executable: runs the CLI on the process's arguments. */
import { main } from './main.js';

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`provcat: Error: ${String(error)}\n`);
    process.exitCode = 1;
  },
);
