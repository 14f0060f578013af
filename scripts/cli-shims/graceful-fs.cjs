// In the `provcat` executable's bundle, `graceful-fs` (a dependency of proper-lockfile) is
// node:fs itself (scripts/bundle-cli.mjs). graceful-fs queues and retries calls that fail with
// EMFILE, which only calls that open a file descriptor can; proper-lockfile makes none (mkdir,
// stat, utimes, rmdir, realpath). Loading it costs every locking command ~4 ms of CPU, and it
// wraps the process-wide fs.close and fs.closeSync.
module.exports = require('node:fs');
