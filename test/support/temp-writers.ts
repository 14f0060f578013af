/**
 * Temp files as writers leave them (src/core/fs-atomic.ts names): those of a writer that is gone (a
 * child process that wrote them and exited, as a killed one would: its pid no longer runs) and
 * those of a live writer (this process). The tests of item 8 plant them, run the next operation
 * and check that it removes the first and keeps the second.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import { TEMP_PREFIX, tempName } from '../../src/core/fs-atomic.js';

const FS_ATOMIC = path.join(import.meta.dirname, '..', '..', 'dist', 'src', 'core', 'fs-atomic.js');

/** One temp file in each of `dirs`, written by a process that then exited (a dead writer). */
export function deadWriterTemps(dirs: string[]): string[] {
  const script = `import { tempName } from ${JSON.stringify(FS_ATOMIC)};
import { writeFileSync } from 'node:fs';
import path from 'node:path';
const out = [];
for (const d of JSON.parse(process.argv[1])) { const p = path.join(d, tempName()); writeFileSync(p, 'partial'); out.push(p); }
process.stdout.write(JSON.stringify(out));`;
  const r = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', script, JSON.stringify(dirs)],
    {
      encoding: 'utf8',
    },
  );
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as string[];
}

/**
 * A temp file of this (live) process in `dir`, made to look two hours old: older than the age
 * rule, so only the pid check keeps it.
 */
export function liveTempIn(dir: string): string {
  const p = path.join(dir, tempName());
  writeFileSync(p, 'in progress');
  const old = new Date(Date.now() - 2 * 3600_000);
  utimesSync(p, old, old);
  return p;
}

/** Every temp file below `dir` (recursively), as full paths. */
export function tempsBelow(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.name.startsWith(TEMP_PREFIX))
    .map((e) => path.join(e.parentPath, e.name))
    .sort();
}
