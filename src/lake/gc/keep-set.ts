/**
 * Building the keep-set of a stage: the union of the entries of every present, unretired
 * reference set, read from their logs only — never by listing the objects — and written as a
 * keep-set file (keep-set-file.ts) in canonical order with the references' fingerprint.
 *
 * Fail closed: every set is read whole and verified (refs-log.ts `readSet`), every delta in the
 * stage must be accounted for (refs-audit.ts: a deleted log entry, the newest one included, or a
 * deleted log leaves its delta behind); any problem is a
 * {@link ReferenceSetError}, and so is a stage with no reference set or with only retired ones
 * (`NoSets`): an empty keep-set would authorize deleting the whole stage. A set that explicitly
 * holds no entries is a set, though: the caller said it references nothing.
 *
 * Memory: one delta at a time goes into an external sort (external-sort.ts); the file is written
 * from the sort's merge, repeats dropped. A set's entries are tagged with the set until the
 * merge, where those of retired sets are left out (a set is known to be retired only at its
 * last entry).
 *
 * @module
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { checkOutputTarget } from '../../core/output-file.js';
import { ReferenceSetError } from './errors.js';
import { ExternalSort, type ExternalSortOptions } from './external-sort.js';
import {
  KEEP_SET_FORMAT,
  KeepSetFile,
  type KeepSetSource,
  type KeepSetSummary,
  KeepSetWriter,
} from './keep-set-file.js';
import { checkEveryDelta, listDeltaIds } from './refs-audit.js';
import { fingerprintOf, listSets, type RefStage, readSet, stageText } from './refs-log.js';
import { makeWorkDir } from './work-dir.js';

/** Options of {@link writeKeepSet}. */
export interface KeepSetOptions {
  /** Where the sort's runs go (default: a fresh folder in the OS temp directory). */
  tmpDir?: string | undefined;
  signal?: AbortSignal | undefined;
  /** Called after each delta read: sets and deltas read so far, entries gathered. */
  onProgress?: ((p: { sets: number; deltas: number; entries: number }) => void) | undefined;
  /** @internal Sort settings (tests force small runs). */
  sort?: Omit<ExternalSortOptions, 'dir'> | undefined;
}

/**
 * Read every reference set of `stage` and write its keep-set to `file` (complete-or-absent);
 * returns the file, whose every read ({@link KeepSetFile.keys}) verifies it against the digest
 * written. Throws {@link ReferenceSetError} (see the
 * module comment).
 */
export async function writeKeepSet(
  stage: RefStage,
  file: string,
  options: KeepSetOptions = {},
): Promise<KeepSetFile> {
  const signal = options.signal;
  // A target that cannot be written is refused before anything is read (src/core/output-file.ts).
  checkOutputTarget(file, '--out');
  // The deltas first, then the logs (refs-audit.ts says why).
  const deltaIds = await listDeltaIds(stage, signal);
  const logged = await listSets(stage, signal);
  if (logged.size === 0) {
    // Deltas without any log: the logs were deleted, which says more than "no sets".
    await checkEveryDelta(stage, deltaIds, new Map(), signal);
    throw new ReferenceSetError(
      'NoSets',
      `the stage ${stageText(stage)} has no reference set: an empty keep-set would make every object a candidate (add a set first: docs/gc.md)`,
    );
  }
  const tmp = await makeWorkDir(options.tmpDir, 'keep');
  try {
    const sorter = new ExternalSort<[string, number]>({ dir: tmp, ...options.sort });
    const sources: KeepSetSource[] = [];
    const chains = new Map<string, string[]>();
    let deltas = 0;
    for (const set of [...logged.values()].sort((a, b) => (a.hash < b.hash ? -1 : 1))) {
      const ordinal = sources.length;
      let source: KeepSetSource | undefined;
      const chain: string[] = [];
      chains.set(set.hash, chain);
      for await (const { id, delta } of readSet(stage, set, signal)) {
        chain.push(id);
        source = {
          set: set.hash,
          name: delta.name,
          number: delta.number,
          head: id,
          retired: delta.retired,
        };
        for (const entry of delta.add) await sorter.add([entry, ordinal]);
        deltas += 1;
        options.onProgress?.({ sets: ordinal + 1, deltas, entries: sorter.count });
      }
      sources.push(source as KeepSetSource);
    }
    // A delta in no chain and in no lost race: an entry (or a whole log) was deleted.
    await checkEveryDelta(stage, deltaIds, chains, signal);
    if (sources.every((s) => s.retired)) {
      throw new ReferenceSetError(
        'NoSets',
        `every reference set of the stage ${stageText(stage)} is retired: an empty keep-set would make every object a candidate`,
      );
    }
    const fingerprint = fingerprintOf(
      sources.map(({ set, number, head }) => ({ set, number, head })),
    );
    const writer = await KeepSetWriter.create(file, {
      format: KEEP_SET_FORMAT,
      stage: stage.identity,
      fingerprint,
      sets: sources,
    });
    let summary: KeepSetSummary;
    try {
      let last: string | undefined;
      for await (const [entry, ordinal] of sorter.sorted()) {
        if ((sources[ordinal] as KeepSetSource).retired || entry === last) continue;
        last = entry;
        await writer.add(entry);
      }
      summary = await writer.finish();
    } catch (error) {
      await writer.abort();
      throw error;
    }
    // Every later read of the file (KeepSetFile.keys) verifies it again against this digest.
    return new KeepSetFile(path.resolve(file), summary.header, summary.entries, summary.sha256);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
