/**
 * `gc apply`: carry out a plan (plan.ts), page by page, so that it never deletes what it should
 * not and a killed apply resumes where it stopped.
 *
 * Before the first deletion:
 * 1. the whole plan is verified (plan-format.ts `verifyPlan`): manifest, every page re-hashed,
 *    order, cutoff, totals — a plan without its manifest, or with a changed page, deletes
 *    nothing;
 * 2. the live keep-set is read again from the reference logs, fully verified, and its
 *    fingerprint must be the plan's (else {@link ReferencesChanged}).
 *
 * Then, for each page not yet done:
 * 3. the references' fingerprint is read again (the set heads) and compared: any change stops
 *    the apply before the page, with nothing more deleted ({@link ReferencesChanged});
 * 4. the page is re-read and re-hashed;
 * 5. every object is checked against the live keep-set (streaming, in key order) — so a plan
 *    computed elsewhere, from an inventory, cannot delete a referenced object — and against the
 *    stages nested in this one as the store shows them now (nested.ts: a folder above the key
 *    with a `.provcat/` folder; asked again for each page) — and the others
 *    are deleted (`concurrency` at once, default 8), each conditionally: `deleteIf(uri, version)`, so an object rewritten since the plan is kept
 *    (`skipped`). A plan from an inventory file has no versions: the object is read first (HEAD)
 *    and deleted only if it is still older than the cutoff and of the planned size, on the
 *    version the HEAD saw. Gone already: `missing`. A store without a conditional delete: HEAD,
 *    compare the version, then a plain delete — the window between the two is a writer
 *    replacing that very object in that moment, which managed objects (immutable, random keys)
 *    never do;
 * 6. the page's stale uploads are aborted;
 * 7. the checkpoint `apply.json` is written durably (temp, fsync, rename, directory fsync),
 *    naming the pages done and the next page's ID.
 *
 * A killed apply restarts at the first page not in the checkpoint; a page it had begun is done
 * again, its deleted objects now `missing`. So every run ends with exactly the planned
 * deletions (less what was skipped), however often it is interrupted.
 *
 * **Shards** (`shard: {index, count}`, `gc apply --shard I/N`): the same steps over the pages
 * numbered I, I+N, … only, with their own checkpoint `apply-I-of-N.json`; N shards on N
 * machines are disjoint and together one whole apply, each resumable alone.
 *
 * The window that remains: a reference added between step 3 and the deletions of one page. The
 * horizon rule (plan.ts) covers it — a reference is written within the cutoff of its object's
 * upload, and every candidate is older than that — and apply should run when datasets are not
 * being written.
 *
 * @module
 */
import { constants as fsc } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { forEachLimit } from '../../core/concurrency.js';
import { NotFound, NotSupported, PreconditionFailed } from '../../core/errors.js';
import { writeFileAtomic } from '../../core/fs-atomic.js';
import { canonicalJson } from '../../logs/canonical-json.js';
import type { StageUpload } from '../stage.js';
import type { ReadOptions } from '../stage-contract.js';
import { GcPlanError, ReferencesChanged } from './errors.js';
import type { ExternalSortOptions } from './external-sort.js';
import { writeKeepSet } from './keep-set.js';
import type { SortedMatcher } from './matcher.js';
import { NestedStages } from './nested.js';
import { type PlanObject, planPaths, readPage, verifyPlan } from './plan-format.js';
import { fullKey, type RefStage, readHeads } from './refs-log.js';
import { makeWorkDir } from './work-dir.js';

/** Deletes in flight at once within a page, by default. */
export const DEFAULT_CONCURRENCY = 8;

/** The `format` of the apply checkpoint. */
export const CHECKPOINT_FORMAT = 'provcat.gc-apply/1';

/** What applying needs of a stage (a `Stage` is one). */
export interface ApplyStage extends RefStage {
  deleteIf(uri: string, version: string, options?: ReadOptions): Promise<void>;
  abortUpload(upload: StageUpload, options?: ReadOptions): Promise<void>;
}

/** The counts of an apply (cumulative over every run of the same plan, or of the same shard). */
export interface ApplyCounts {
  /** Objects deleted. */
  deleted: number;
  /** Objects already gone. */
  missing: number;
  /** Objects kept: referenced now, rewritten since the plan, or younger than the cutoff now. */
  skipped: number;
  /** Uploads aborted. */
  aborted: number;
  /** Bytes of the deleted objects (as planned). */
  bytes: number;
}

/** Progress of an apply. */
export interface ApplyProgress extends ApplyCounts {
  /** Pages done, of `totalPages`. */
  pages: number;
  totalPages: number;
  /** Objects the plan holds, and their bytes. */
  candidates: number;
  totalBytes: number;
  /** Objects decided so far (deleted, missing or skipped). */
  decided: number;
}

/** Options of {@link applyGc}. */
export interface ApplyOptions {
  /** Where temporary files go (default: the OS temp directory). */
  tmpDir?: string | undefined;
  /** Stops before the next object; the checkpoint stays at the last finished page. */
  signal?: AbortSignal | undefined;
  /** Deletes in flight at once within a page (1..64, default 8). */
  concurrency?: number | undefined;
  /** Called after every object and after every page's checkpoint. */
  onProgress?: ((p: ApplyProgress) => void) | undefined;
  /** @internal Sort settings (tests force small runs). */
  sort?: Omit<ExternalSortOptions, 'dir'> | undefined;
  /**
   * Apply only shard `index` of `count` (1-based): the pages whose number N has
   * `(N - 1) mod count = index - 1`. Shards are disjoint and together the whole plan; each has
   * its own checkpoint (`apply-I-of-N.json`), so each resumes on its own machine.
   */
  shard?: { index: number; count: number } | undefined;
}

/** The shard `I/N` of `gc apply --shard` as {@link ApplyOptions.shard}; RangeError otherwise. */
export function parseShard(text: string): { index: number; count: number } {
  const m = /^(\d{1,6})\/(\d{1,6})$/.exec(text);
  const index = Number(m?.[1]);
  const count = Number(m?.[2]);
  if (!m || count < 1 || index < 1 || index > count) {
    throw new RangeError(`a shard is I/N with 1 <= I <= N (e.g. 1/4), not '${text}'`);
  }
  return { index, count };
}

/** What {@link applyGc} did. */
export interface ApplyResult extends ApplyCounts {
  /** The plan's ID. */
  plan: string;
  /** Pages of the plan, and how many this run carried out. */
  pages: number;
  applied: number;
}

interface Checkpoint extends ApplyCounts {
  format: typeof CHECKPOINT_FORMAT;
  plan: string;
  /** `I/N` for a shard's checkpoint; absent for a whole apply. */
  shard?: string;
  /** Pages done. */
  done: number;
  /** The ID of the next page to do, `null` when every page is done. */
  next: string | null;
}

function checkpointError(file: string, why: string, cause?: unknown): GcPlanError {
  return new GcPlanError('Checkpoint', `apply checkpoint ${file}: ${why}`, { cause });
}

/** The checkpoint of plan `id` in `dir`, or a fresh one. Refuses one of another plan. */
async function readCheckpoint(
  file: string,
  id: string,
  pages: readonly string[],
  shard: string | undefined,
): Promise<Checkpoint> {
  let text: string;
  try {
    text = await readFile(file, { encoding: 'utf8', flag: fsc.O_RDONLY | fsc.O_NOFOLLOW });
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'EISDIR' || code === 'ELOOP') {
      throw checkpointError(file, 'not a regular file (a directory or a symbolic link)', error);
    }
    if (code !== 'ENOENT') throw error;
    return {
      format: CHECKPOINT_FORMAT,
      plan: id,
      ...(shard === undefined ? {} : { shard }),
      done: 0,
      next: pages[0] ?? null,
      deleted: 0,
      missing: 0,
      skipped: 0,
      aborted: 0,
      bytes: 0,
    };
  }
  let value: Checkpoint;
  try {
    value = JSON.parse(text) as Checkpoint;
  } catch (cause) {
    throw checkpointError(file, 'not JSON', cause);
  }
  if (typeof value !== 'object' || value === null || canonicalJson(value) !== text) {
    throw checkpointError(file, 'not a canonical JSON object');
  }
  if (value.format !== CHECKPOINT_FORMAT)
    throw checkpointError(file, `format ${String(value.format)}`);
  if (value.plan !== id) throw checkpointError(file, `it is of plan ${value.plan}, not ${id}`);
  if (value.shard !== shard) {
    throw checkpointError(
      file,
      `it is of shard ${value.shard ?? '(whole)'}, not ${shard ?? '(whole)'}`,
    );
  }
  const counts = [
    value.done,
    value.deleted,
    value.missing,
    value.skipped,
    value.aborted,
    value.bytes,
  ];
  if (!counts.every((n) => Number.isSafeInteger(n) && n >= 0) || value.done > pages.length) {
    throw checkpointError(file, 'counts are not valid');
  }
  if (value.next !== (pages[value.done] ?? null)) {
    throw checkpointError(
      file,
      `its next page ${value.next} is not page ${value.done + 1} of the ${shard === undefined ? 'plan' : `shard ${shard}`}`,
    );
  }
  return value;
}

type Outcome = 'deleted' | 'missing' | 'skipped';

/** Delete one planned object as step 5 of the module comment says. */
async function deleteOne(
  stage: ApplyStage,
  object: PlanObject,
  cutoffMs: number,
  signal: AbortSignal | undefined,
): Promise<Outcome> {
  const backend = await stage.backend();
  const key = fullKey(stage, object.key);
  const uri = stage.uriOf(object.key);
  const head = async () => {
    try {
      return await backend.head(key, { signal });
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
  };
  let version = object.version;
  if (version === null) {
    const now = await head();
    if (now === undefined) return 'missing';
    const mtime = now.lastModified?.getTime();
    if (mtime === undefined || mtime >= cutoffMs || now.size !== object.size) return 'skipped';
    version = now.version;
  }
  try {
    await stage.deleteIf(uri, version, { signal });
    return 'deleted';
  } catch (error) {
    if (error instanceof NotFound) return 'missing';
    if (error instanceof PreconditionFailed) return 'skipped';
    if (!(error instanceof NotSupported)) throw error;
  }
  // No conditional delete on this store: compare by HEAD immediately before a plain delete.
  const now = await head();
  if (now === undefined) return 'missing';
  if (now.version !== version) return 'skipped';
  try {
    await backend.delete(key, { signal });
    return 'deleted';
  } catch (error) {
    if (error instanceof NotFound) return 'missing';
    throw error;
  }
}

/**
 * Apply the plan in `dir` to `stage` (see the module comment). Throws {@link GcPlanError} for a
 * plan that cannot be trusted and `ReferenceSetError` for references that cannot be read (both
 * before any deletion), {@link ReferencesChanged} when the references changed (before the
 * first page, or before a later one: nothing more is deleted).
 */
export async function applyGc(
  stage: ApplyStage,
  dir: string,
  options: ApplyOptions = {},
): Promise<ApplyResult> {
  const signal = options.signal;
  const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    throw new RangeError(`concurrency must be an integer in 1..64, not ${concurrency}`);
  }
  const resolved = path.resolve(dir);
  const { id, manifest } = await verifyPlan(resolved, stage.identity);
  const shard = options.shard;
  if (shard !== undefined) parseShard(`${shard.index}/${shard.count}`);
  // The plan's page numbers (0-based) this apply does, in order.
  const mine = manifest.pages
    .map((_, i) => i)
    .filter((i) => shard === undefined || i % shard.count === shard.index - 1);
  const shardText = shard === undefined ? undefined : `${shard.index}/${shard.count}`;
  const checkpointFile =
    shard === undefined
      ? planPaths(resolved).checkpoint
      : path.join(resolved, `apply-${shard.index}-of-${shard.count}.json`);
  const checkpoint = await readCheckpoint(
    checkpointFile,
    id,
    mine.map((i) => manifest.pages[i] as string),
    shardText,
  );
  const result = (applied: number): ApplyResult => ({
    plan: id,
    pages: mine.length,
    applied,
    deleted: checkpoint.deleted,
    missing: checkpoint.missing,
    skipped: checkpoint.skipped,
    aborted: checkpoint.aborted,
    bytes: checkpoint.bytes,
  });
  if (checkpoint.done === mine.length) return result(0);
  const cutoffMs = Date.parse(manifest.cutoff);
  const changed = (current: string) =>
    new ReferencesChanged(
      `the reference sets changed since the plan was made (fingerprint ${current}, the plan's ${manifest.references}): nothing more is deleted; make a new plan`,
      manifest.references,
      current,
    );
  const tmp = await makeWorkDir(options.tmpDir, 'apply');
  let matcher: SortedMatcher | undefined;
  let applied = 0;
  try {
    const keep = await writeKeepSet(stage, path.join(tmp, 'keep.jsonl'), {
      tmpDir: tmp,
      signal,
      sort: options.sort,
    });
    if (keep.fingerprint !== manifest.references) throw changed(keep.fingerprint);
    if (keep.entries !== manifest.keep.entries || keep.sha256 !== manifest.keep.sha256) {
      throw changed(keep.fingerprint);
    }
    const live = keep.matcher();
    matcher = live;
    let decided = checkpoint.deleted + checkpoint.missing + checkpoint.skipped;
    const none: ApplyCounts = { deleted: 0, missing: 0, skipped: 0, aborted: 0, bytes: 0 };
    const progress = (page: ApplyCounts) =>
      options.onProgress?.({
        pages: checkpoint.done,
        totalPages: mine.length,
        candidates: manifest.totals.candidates,
        totalBytes: manifest.totals.bytes,
        decided,
        deleted: checkpoint.deleted + page.deleted,
        missing: checkpoint.missing + page.missing,
        skipped: checkpoint.skipped + page.skipped,
        aborted: checkpoint.aborted + page.aborted,
        bytes: checkpoint.bytes + page.bytes,
      });
    // Counts of the page in progress join the checkpoint's only once the page is done.
    for (let n = checkpoint.done; n < mine.length; n++) {
      const i = mine[n] as number;
      signal?.throwIfAborted();
      const heads = await readHeads(stage, signal);
      if (heads.fingerprint !== manifest.references) throw changed(heads.fingerprint);
      const pageId = manifest.pages[i] as string;
      const page = await readPage(resolved, pageId, i + 1, manifest.pages[i - 1] ?? null, cutoffMs);
      const counts: ApplyCounts = { ...none };
      // The live keep-set first, in key order; then the deletions, some at once.
      const doomed: PlanObject[] = [];
      // Stages nested in this one as the store shows them now: a tenant may have appeared since
      // the plan, or the plan's inventory did not show it (nested.ts).
      const nested = new NestedStages(stage, signal);
      for (const object of page.objects) {
        if ((await live.isReferenced(object.key)) || (await nested.around(object.key))) {
          counts.skipped += 1;
          decided += 1;
        } else {
          doomed.push(object);
        }
      }
      await forEachLimit(
        doomed,
        concurrency,
        async (object, inner) => {
          const outcome = await deleteOne(stage, object, cutoffMs, inner);
          counts[outcome] += 1;
          if (outcome === 'deleted') counts.bytes += object.size;
          decided += 1;
          progress(counts);
        },
        signal,
      );
      for (const upload of page.uploads) {
        signal?.throwIfAborted();
        // A nested stage's uploads are its own.
        if (await nested.around(upload.key)) continue;
        await stage.abortUpload(
          {
            key: fullKey(stage, upload.key),
            upload: upload.upload,
            initiated: new Date(upload.initiated),
            uri: stage.uriOf(upload.key),
          },
          { signal },
        );
        counts.aborted += 1;
      }
      checkpoint.done = n + 1;
      checkpoint.next = manifest.pages[mine[n + 1] ?? manifest.pages.length] ?? null;
      checkpoint.deleted += counts.deleted;
      checkpoint.missing += counts.missing;
      checkpoint.skipped += counts.skipped;
      checkpoint.aborted += counts.aborted;
      checkpoint.bytes += counts.bytes;
      await writeFileAtomic(checkpointFile, canonicalJson(checkpoint));
      applied += 1;
      progress(none);
    }
  } finally {
    await matcher?.close();
    await rm(tmp, { recursive: true, force: true });
  }
  return result(applied);
}
