/**
 * {@link tempCache}: a new temporary cache directory, for the shared suites (a module of its own
 * so the suites that use it import no other suite).
 *
 * @module
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** A new temp directory for a cache. */
export function tempCache(): string {
  return mkdtempSync(path.join(tmpdir(), 'provcat-cache-'));
}
