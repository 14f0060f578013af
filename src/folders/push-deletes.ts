/**
 * The deletes of a push with `delete` (src/folders/push.ts): after every upload, the objects of
 * the store folder that the local folder lacks, read from the push's plan
 * (src/folders/push-plan.ts) a batch at a time, so their number costs no memory but the actions
 * reported.
 *
 * @module
 */
import type { ObjectInfo } from '../contract/primitives.js';
import type { StoreContext } from '../contract/store-context.js';
import { NotFound } from '../core/errors.js';
import { forEachInOrder } from '../core/ordered.js';
import { owned } from './line-files.js';
import { planBatches } from './push-plan.js';

/** One thing a push did (or, in a dry run, would do). */
export interface PushAction {
  action: 'upload' | 'delete';
  /** The path relative to the folder (the key below it). */
  path: string;
  /** Bytes uploaded; for a delete, the size of the object deleted. */
  size: number;
}

/** The plan's objects that the local folder lacks, a batch at a time. */
async function* extraObjects(planFile: string, prefix: string): AsyncGenerator<ObjectInfo[]> {
  for await (const batch of planBatches(planFile, prefix)) {
    const out: ObjectInfo[] = [];
    for (const r of batch) if (r.local === undefined && r.remote !== undefined) out.push(r.remote);
    yield out;
  }
}

/**
 * Delete the objects of the plan `planFile` that the local folder lacks (none in a dry run), at
 * most `concurrency` at once; the deletes, in key order. An object already gone (deleted
 * meanwhile by someone else) is not reported.
 */
export async function deleteExtra(
  store: Pick<StoreContext, '_delete'>,
  bucket: string,
  prefix: string,
  planFile: string,
  options: { concurrency: number; dryRun: boolean; signal?: AbortSignal | undefined },
): Promise<PushAction[]> {
  const deletes: PushAction[] = [];
  await forEachInOrder(
    extraObjects(planFile, prefix),
    options.concurrency,
    async (info, signal) => {
      if (options.dryRun) return true;
      try {
        await store._delete(bucket, info.key, { signal });
      } catch (error) {
        if (error instanceof NotFound) return false;
        throw error;
      }
      return true;
    },
    (info, outcome) => {
      if (outcome !== undefined && 'value' in outcome && outcome.value) {
        deletes.push({
          action: 'delete',
          path: owned(info.key.slice(prefix.length)),
          size: info.size,
        });
      }
      return undefined;
    },
    { signal: options.signal },
  );
  return deletes;
}
