/**
 * vitest global setup: one temporary directory per test run, removed at the end.
 *
 * Tests make their caches, stores and scratch files with `mkdtemp(os.tmpdir())`, and many
 * cannot clean up after themselves (a child process killed on purpose, a cache a later test
 * reads). Pointing `TMPDIR` at a fresh directory before the workers start sends all of that —
 * the workers', and their child processes' — into one place that teardown removes, so runs do
 * not pile up thousands of directories in /tmp. `PROVCAT_KEEP_TEST_TMP=1` keeps it (its path is
 * printed) for a look after a failure.
 *
 * @module
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** vitest globalSetup: see the module comment. Returns the teardown. */
export default function setup(): () => void {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-test-run-'));
  process.env.TMPDIR = dir;
  return () => {
    if (process.env.PROVCAT_KEEP_TEST_TMP === '1') {
      process.stderr.write(`[provcat test setup] test files kept in ${dir}\n`);
      return;
    }
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  };
}
