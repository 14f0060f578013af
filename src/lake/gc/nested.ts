/**
 * Stages nested in a stage, found in the store itself: what keeps a parent stage's GC off a
 * tenant's objects when the inventory it plans from does not show the tenant.
 *
 * A stage nested in this one (a tenant `acme/`, a stage whose prefix lies below this one's) is
 * recognized by its reserved folder: a `.provcat` segment below the top (keys.ts
 * `nestedStageOf`). A listing of the stage shows those keys, so a plan from a listing knows every
 * nested stage. An inventory file need not: it may list only some keys, or come from a tool that
 * leaves folders out. So for a key that would be a candidate, {@link NestedStages} asks the store
 * whether any folder above it (`acme/`, `acme/ab/` for `acme/ab/x`) holds a `.provcat/` folder —
 * one short listing per folder, remembered per instance. Apply makes a new instance for each
 * page, so a tenant that appeared after the plan keeps its objects.
 *
 * @module
 */
import { fullKey, type RefStage } from './refs-log.js';

/** The nested stages above keys, as the store shows them now (see the module comment). */
export class NestedStages {
  private readonly known = new Map<string, Promise<boolean>>();

  constructor(
    private readonly stage: RefStage,
    private readonly signal?: AbortSignal | undefined,
  ) {}

  /**
   * The folder of a stage nested in this one that holds `key` (stage-relative), e.g. `acme/`, or
   * `undefined` when no folder above `key` has a `.provcat/` folder in the store.
   */
  async around(key: string): Promise<string | undefined> {
    for (let i = key.indexOf('/'); i >= 0 && i < key.length - 1; i = key.indexOf('/', i + 1)) {
      const folder = key.slice(0, i + 1);
      if (await this.holdsStage(folder)) return folder;
    }
    return undefined;
  }

  /** True when `folder` (stage-relative, ending in `/`) has anything below `.provcat/`. */
  private holdsStage(folder: string): Promise<boolean> {
    let answer = this.known.get(folder);
    if (answer === undefined) {
      answer = (async () => {
        const backend = await this.stage.backend();
        for await (const _ of backend.list(fullKey(this.stage, `${folder}.provcat/`), {
          signal: this.signal,
        })) {
          return true;
        }
        return false;
      })();
      this.known.set(folder, answer);
    }
    return answer;
  }
}
