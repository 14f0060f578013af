/**
 * The keep-set as Parquet (`gc keep-set --format parquet`), for an engine's anti-join: the same
 * sorted, canonical entries as the JSON Lines file (keep-set-file.ts), one row each:
 *
 * | column | meaning |
 * |---|---|
 * | `key` | the entry: a stage-relative key, or a prefix ending in `/` |
 * | `kind` | `exact` (covers the equal key) or `prefix` (covers every key starting with it) |
 *
 * The file's key-value metadata: `provcat.format` (`provcat.keep-set/1`), `provcat.stage` (the
 * stage's identity), `provcat.fingerprint` (of the reference sets), `provcat.entries`,
 * `provcat.sha256` (of the JSON Lines form of the same keep-set, as a plan's manifest records
 * it), `provcat.key-prefix` (the stage's prefix in the bucket, `""` for none: an inventory's full
 * key is `key-prefix/` + key) and `provcat.sets` (the header's sets, as JSON).
 *
 * Written complete-or-absent through the one safe-output routine (src/core/output-file.ts). The
 * entries come from a verified JSON Lines keep-set built first in a temp folder, so both forms
 * hold exactly the same entries.
 *
 * @module
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { openOutputFile } from '../../core/output-file.js';
import { type KeepSetOptions, writeKeepSet } from './keep-set.js';
import type { KeepSetFile } from './keep-set-file.js';
import { isPrefixEntry } from './keys.js';
import { type ParquetColumn, writeParquet } from './parquet.js';
import type { RefStage } from './refs-log.js';
import { makeWorkDir } from './work-dir.js';

/** Rows per row group of a keep-set Parquet file. */
const GROUP = 100_000;

/** What {@link writeKeepSetParquet} wrote. */
export interface KeepSetParquetResult {
  path: string;
  entries: number;
  fingerprint: string;
  /** SHA-256 of the JSON Lines form. */
  sha256: string;
  sets: number;
}

async function* batches(file: KeepSetFile): AsyncGenerator<ParquetColumn[]> {
  let keys: string[] = [];
  const batch = (): ParquetColumn[] => [
    { name: 'key', type: 'STRING', data: keys },
    {
      name: 'kind',
      type: 'STRING',
      data: keys.map((k) => (isPrefixEntry(k) ? 'prefix' : 'exact')),
    },
  ];
  for await (const key of file.keys()) {
    keys.push(key);
    if (keys.length >= GROUP) {
      yield batch();
      keys = [];
    }
  }
  // An empty keep-set still gets its schema (one empty row group).
  if (keys.length > 0 || file.entries === 0) yield batch();
}

/**
 * Read the keep-set of `stage` (keep-set.ts, fail closed) and write it to `out` as Parquet (see
 * the module comment).
 */
export async function writeKeepSetParquet(
  stage: RefStage,
  out: string,
  options: KeepSetOptions = {},
): Promise<KeepSetParquetResult> {
  // Refused before anything is read: a device, FIFO, symlink, directory (output-file.ts).
  const target = openOutputFile(out, '--out');
  const tmp = await makeWorkDir(options.tmpDir, 'keep');
  try {
    const file = await writeKeepSet(stage, path.join(tmp, 'keep.jsonl'), {
      ...options,
      tmpDir: tmp,
    });
    await writeParquet(target, batches(file), {
      'provcat.format': file.header.format,
      'provcat.stage': file.header.stage,
      'provcat.fingerprint': file.fingerprint,
      'provcat.entries': String(file.entries),
      'provcat.sha256': file.sha256,
      'provcat.key-prefix': stage.keyPrefix,
      'provcat.sets': JSON.stringify(file.header.sets),
    });
    await target.commit();
    return {
      path: target.path,
      entries: file.entries,
      fingerprint: file.fingerprint,
      sha256: file.sha256,
      sets: file.header.sets.length,
    };
  } catch (error) {
    target.abort();
    throw error;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
