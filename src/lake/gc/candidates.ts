/**
 * Candidates from an external engine (`gc plan --candidates FILE`): the output of an anti-join of
 * an inventory against the exported keep-set — rows of key (the full key in the bucket, as the
 * inventory names it), size and last-modified time, as Parquet, CSV or JSON Lines.
 *
 * **An engine may narrow, never widen.** Every candidate is planned as an inventory row is, and
 * more: the keep-set rules, the stage's containment (nested stages, `.provcat/`), the cutoff,
 * and — at plan time — the live store (HEAD: present, of that size and time, older than the
 * cutoff; the plan records the version the HEAD saw, so apply deletes only that version). What
 * fails any check is dropped and counted (plan.ts).
 *
 * FILE may be a directory, as Spark writes one (`part-*.parquet`, `_SUCCESS`): its files are
 * read in name order, those whose name starts with `_` or `.` left out; each must be bound to
 * the keep-set as below.
 *
 * **Bound to one keep-set.** The file must say which keep-set it was made against: Parquet
 * key-value metadata `provcat.fingerprint` (DuckDB: `COPY … (KV_METADATA {'provcat.fingerprint':
 * '…'})`), or a `fingerprint` column in every row (any format). A file that says nothing, or
 * names another fingerprint than the live references', refuses the plan
 * (`GcPlanError('KeepSetMismatch')`): its anti-join answered another question.
 *
 * @module
 */
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { GcPlanError, InventoryError } from './errors.js';
import {
  type InventoryFormat,
  type InventoryRow,
  type KeyEncoding,
  readInventoryFile,
} from './inventory.js';
import { parquetInfo } from './parquet.js';

/** The Parquet metadata key naming the keep-set fingerprint a file was made against. */
export const FINGERPRINT_METADATA = 'provcat.fingerprint';

/** Options of {@link readCandidates}. */
export interface CandidatesOptions {
  format?: InventoryFormat | undefined;
  /** Default `raw`: engines write keys as they are. */
  keyEncoding?: KeyEncoding | undefined;
  signal?: AbortSignal | undefined;
}

function mismatch(file: string, theirs: string, live: string): GcPlanError {
  return new GcPlanError(
    'KeepSetMismatch',
    `the candidates ${file} were made against keep-set ${theirs}, the live references are ${live}: export the keep-set again and rerun the anti-join`,
  );
}

/**
 * The candidates of `file` (or of every file in the directory `file`), each checked to be of
 * keep-set `fingerprint` (see the module comment). Rows come as inventory rows (no versions).
 */
export async function* readCandidates(
  file: string,
  fingerprint: string,
  options: CandidatesOptions = {},
): AsyncGenerator<InventoryRow> {
  if ((await stat(file)).isDirectory()) {
    const names = (await readdir(file)).filter((n) => !n.startsWith('_') && !n.startsWith('.'));
    if (names.length === 0) throw new InventoryError(`the candidates folder ${file} holds no file`);
    for (const name of names.sort()) {
      yield* readCandidateFile(path.join(file, name), fingerprint, options);
    }
    return;
  }
  yield* readCandidateFile(file, fingerprint, options);
}

async function* readCandidateFile(
  file: string,
  fingerprint: string,
  options: CandidatesOptions,
): AsyncGenerator<InventoryRow> {
  const format =
    options.format ?? (file.toLowerCase().endsWith('.parquet') ? 'parquet' : undefined);
  let declared: string | undefined;
  if (format === 'parquet') {
    declared = (await parquetInfo(file)).metadata.get(FINGERPRINT_METADATA);
    if (declared !== undefined && declared !== fingerprint) {
      throw mismatch(file, declared, fingerprint);
    }
  }
  const rows = readInventoryFile(file, {
    format,
    keyEncoding: options.keyEncoding ?? 'raw',
    aliases: { fingerprint: 'fingerprint' },
    signal: options.signal,
  });
  for await (const row of rows) {
    if (row.fingerprint !== undefined) {
      if (row.fingerprint !== fingerprint) throw mismatch(file, row.fingerprint, fingerprint);
    } else if (declared === undefined) {
      throw new GcPlanError(
        'KeepSetMismatch',
        `the candidates ${file} do not say which keep-set they were made against: give Parquet metadata ${FINGERPRINT_METADATA} or a fingerprint column`,
      );
    }
    yield row;
  }
}
