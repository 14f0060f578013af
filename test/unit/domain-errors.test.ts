/**
 * Domain code raises the core's typed errors, never the CLI's: an output target the library
 * must not write and a malformed duration are `InvalidArgument` (exit status 2 through
 * `exitCodeOf`), so src/core/output-file.ts and src/lake/gc/ import nothing from src/cli/.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { exitCodeOf, InvalidArgument } from '../../src/core/errors.js';
import { checkOutputDirectory, checkOutputTarget } from '../../src/core/output-file.js';
import { parseDuration } from '../../src/lake/gc/index.js';

/** The error `f` throws; a call that returns fails the test. */
function thrown(f: () => unknown): unknown {
  try {
    f();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('domain errors (no CLI error below src/cli/)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-domain-errors-'));
  const file = path.join(dir, 'file.txt');
  writeFileSync(file, 'x');

  it('an output target that is a directory is InvalidArgument, exit status 2', () => {
    const error = thrown(() => checkOutputTarget(dir, '-o'));
    expect(error).toBeInstanceOf(InvalidArgument);
    expect((error as Error).message).toMatch(/-o .* is a directory/);
    expect(exitCodeOf(error)).toBe(2);
  });

  it('an output directory that is a file is InvalidArgument, exit status 2', () => {
    const error = thrown(() => checkOutputDirectory(file, '--out'));
    expect(error).toBeInstanceOf(InvalidArgument);
    expect(exitCodeOf(error)).toBe(2);
  });

  it('parseDuration (src/lake/gc) reads DURATIONs and refuses others with InvalidArgument', () => {
    expect(parseDuration('36h')).toBe(36 * 3_600_000);
    for (const bad of ['7', 'x', '1w', '36526d']) {
      const error = thrown(() => parseDuration(bad));
      expect(error, bad).toBeInstanceOf(InvalidArgument);
      expect(exitCodeOf(error)).toBe(2);
    }
  });
});
