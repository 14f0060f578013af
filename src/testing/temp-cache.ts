/**
 * {@link tempCache}: a new temporary cache directory, and {@link seededStore}, for the shared suites (a module of its own
 * so the suites that use it import no other suite).
 *
 * @module
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type ConformanceTarget, randomPrefix } from './target.js';

/** A new temp directory for a cache. */
export function tempCache(): string {
  return mkdtempSync(path.join(tmpdir(), 'provcat-cache-'));
}

/**
 * A store of `target` on a fresh temp cache, with `files` (relative key → text) put under a new
 * random prefix of its bucket; `url(rel)` names a key below that prefix.
 */
export async function seededStore(target: ConformanceTarget, files: Record<string, string>) {
  const cache = tempCache();
  const store = target.store({ cache });
  const p = randomPrefix();
  const url = (rel: string) => `${store.scheme}://${target.bucket}/${p}${rel}`;
  for (const [k, v] of Object.entries(files)) await store.put(url(k), Buffer.from(v));
  return { cache, store, p, url };
}
