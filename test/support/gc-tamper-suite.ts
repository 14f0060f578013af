/**
 * Garbage collection against what others do to a stage behind provcat's back (issue #25), run on
 * every stage kind beside the main suite (gc-suite.ts) by test/drivers/NAME/gc.ts
 * (local, s3, gcs, azure):
 *
 * - a reference set's newest log entry deleted, or its whole log: `refs ls` and `gc plan` fail
 *   closed (exit 7) and nothing is deleted; a writer's lost race is no such deletion, and a
 *   writer that stopped between its delta and its entry is resolved by rerunning its add;
 * - a tenant stage inside a parent stage: a plan of the parent from an inventory file (which
 *   need not list the tenant's `.provcat/`) never plans the tenant's objects, and apply checks
 *   each page against the store again.
 *
 * @module
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect, it } from 'vitest';
import { sha256Hex } from '../../src/core/digest.js';
import {
  deltaBytes,
  deltaKey,
  entryKey,
  type ReferenceDelta,
  setHash,
} from '../../src/lake/gc/refs-format.js';
import { applyGc, planGc, writeKeepSet } from '../../src/lake/index.js';
import {
  cli,
  entryId,
  type GcTarget,
  planned,
  refusal,
  type SuiteContext,
  seed,
} from './gc-suite.js';

/** A DataLocation file for `key` (what `upload --json` prints), for `@file.json` arguments. */
async function locationFile(t: GcTarget, dir: string, key: string): Promise<string> {
  const stage = t.stage();
  const body = `bytes of ${key}`;
  const file = path.join(dir, `${path.basename(key)}.json`);
  await writeFile(
    file,
    JSON.stringify({
      uri: stage.uriOf(key),
      contentType: 'application/octet-stream',
      sizeBytes: Buffer.byteLength(body),
      sha256: sha256Hex(body),
    }),
  );
  await stage.close();
  return file;
}

/** The delta entry `number` of set `name` names, parsed. */
async function deltaOf(t: GcTarget, name: string, number: number): Promise<ReferenceDelta> {
  const id = await entryId(t, name, number);
  return JSON.parse((await t.read(deltaKey(id))).toString('utf8')) as ReferenceDelta;
}

/** Put a delta object (no log entry), as a writer does before it creates its entry. */
async function putDelta(t: GcTarget, delta: ReferenceDelta): Promise<string> {
  const bytes = deltaBytes(delta);
  const id = sha256Hex(bytes);
  await t.put(deltaKey(id), bytes);
  return id;
}

/** Register the tests; `ctx` makes targets. */
export function gcTamperSuite(ctx: SuiteContext): void {
  it("a set's newest log entry deleted: refs ls and gc plan fail closed (exit 7), nothing deleted", async () => {
    const t = await ctx.target();
    const stage = t.stage();
    await seed(t, ['data/loc1.bin', 'data/loc2.bin', 'data/other.bin']);
    const dir = await ctx.dir();
    const loc1 = await locationFile(t, dir, 'data/loc1.bin');
    const loc2 = await locationFile(t, dir, 'data/loc2.bin');
    for (const loc of [loc1, loc2]) {
      const add = await cli(t, ['refs', 'add', 'setA', `@${loc}`, '--stage', t.stageString]);
      expect(add.code, add.stderr).toBe(0);
    }
    await stage.addReferences('setB', [stage.uriOf('data/other.bin')]);
    const newest = entryKey(setHash('setA'), 2);
    const kept = await t.read(newest);
    await t.remove(newest);

    const ls = await cli(t, ['refs', 'ls', '--stage', t.stageString]);
    expect(ls.code, ls.stdout).toBe(7);
    expect(ls.stderr).toMatch(/Missing: .*entry 2 of set "setA", whose log ends at entry 1/);
    const out = path.join(dir, 'plan');
    const plan = await cli(t, [
      'gc',
      'plan',
      '--stage',
      t.stageString,
      '--older-than',
      '0s',
      '--out',
      out,
    ]);
    expect(plan.code, plan.stdout).toBe(7);
    expect(plan.stderr).toMatch(/ReferenceSetError: Missing/);
    await refusal(stage.referenceSets(), 'Missing');
    await refusal(writeKeepSet(stage, path.join(dir, 'keep.jsonl')), 'Missing');
    expect(await t.objects()).toEqual(['data/loc1.bin', 'data/loc2.bin', 'data/other.bin']);

    // Restored, the same plan keeps both locations.
    await t.put(newest, kept);
    const good = await planGc(stage, { out: path.join(dir, 'good'), olderThanMs: 0 });
    expect(good.candidates).toBe(0);

    // A plan made while the log was whole cannot be applied once an entry is gone.
    await seed(t, ['data/orphan.bin']);
    const sound = await planGc(stage, { out: path.join(dir, 'sound'), olderThanMs: 0 });
    expect(await planned(sound.dir)).toEqual(['data/orphan.bin']);
    await t.remove(newest);
    await refusal(applyGc(stage, sound.dir), 'Missing');

    // Every entry of setA gone (its whole log folder): its deltas are left, and name it.
    await t.remove(entryKey(setHash('setA'), 1));
    const error = await refusal(stage.referenceSets(), 'Missing');
    expect(error.message).toMatch(/set "setA", which has no log in the stage/);
    await refusal(planGc(stage, { out: path.join(dir, 'no-log'), olderThanMs: 0 }), 'Missing');
    // With no log left at all, the deltas still say references were deleted.
    await t.remove(entryKey(setHash('setB'), 1));
    await refusal(planGc(stage, { out: path.join(dir, 'no-logs'), olderThanMs: 0 }), 'Missing');
    expect(await t.objects()).toEqual([
      'data/loc1.bin',
      'data/loc2.bin',
      'data/orphan.bin',
      'data/other.bin',
    ]);
    await stage.close();
  });

  it("a lost race's delta is accounted for; a stopped writer's delta fails closed until rerun", async () => {
    const t = await ctx.target();
    const stage = t.stage();
    await seed(t, ['data/a.bin', 'data/b.bin', 'data/c.bin', 'data/orphan.bin']);
    await stage.addReferences('ds', [stage.uriOf('data/a.bin')]);
    await stage.addReferences('ds', [stage.uriOf('data/b.bin')]);
    const d2 = await deltaOf(t, 'ds', 2);
    const id2 = await entryId(t, 'ds', 2);
    const dir = await ctx.dir();
    const plan = (name: string) => planGc(stage, { out: path.join(dir, name), olderThanMs: 0 });

    // A writer that lost the race for entry 2: same parent, other bytes, entry 2 names another.
    await putDelta(t, { ...d2, add: ['data/c.bin'], time: new Date().toISOString() });
    expect((await plan('lost-race')).candidates).toBe(2);

    // A writer stopped after its delta for entry 3, before the entry: as if entry 3 was deleted.
    const stopped = await putDelta(t, {
      ...d2,
      number: 3,
      parent: id2,
      add: ['data/c.bin'],
      time: new Date(Date.now() + 1000).toISOString(),
    });
    await refusal(plan('stopped'), 'Missing');
    await refusal(stage.referenceSets(), 'Missing');
    // Its add rerun takes entry 3: the stopped writer's delta is now a lost race.
    await stage.addReferences('ds', [stage.uriOf('data/c.bin')]);
    expect(await entryId(t, 'ds', 3)).not.toBe(stopped);
    expect(await planned((await plan('rerun')).dir)).toEqual(['data/orphan.bin']);

    // A delta whose parent is no entry of the log belongs to another history.
    await putDelta(t, { ...d2, parent: 'f'.repeat(64), add: ['data/orphan.bin'] });
    await refusal(plan('foreign'), 'NonMonotonic');
    await t.remove(
      deltaKey(sha256Hex(deltaBytes({ ...d2, parent: 'f'.repeat(64), add: ['data/orphan.bin'] }))),
    );
    // Something in the deltas folder that is not a delta.
    await t.put('.provcat/refs/deltas/notes.txt', 'hello');
    await refusal(plan('junk'), 'Corrupt');
    expect(await t.objects()).toEqual([
      'data/a.bin',
      'data/b.bin',
      'data/c.bin',
      'data/orphan.bin',
    ]);
    await stage.close();
  });

  it("a parent stage's plan from an inventory never plans a tenant's objects; apply re-checks", async () => {
    const t = await ctx.target();
    const parent = t.stage();
    const tenant = t.stage({ tenant: 'acme' });
    const dir = await ctx.dir();
    await seed(t, ['acme/ab/referenced.bin', 'acme/ab/later.bin', 'data/orphan.bin']);
    await parent.addReferences('parent', [parent.uriOf('data/kept.bin')]);
    // The parent's full key prefix (as an inventory of the bucket names keys).
    const full = (key: string) => (parent.keyPrefix === '' ? key : `${parent.keyPrefix}/${key}`);
    const rows = async (keys: string[]) => {
      const lines: string[] = [];
      for (const key of keys) {
        lines.push(
          JSON.stringify({
            key: full(key),
            size: Buffer.byteLength(`bytes of ${key}`),
            last_modified: new Date(Date.now() - 3_600_000).toISOString(),
          }),
        );
      }
      const file = path.join(dir, `inventory-${lines.length}-${Math.random()}.jsonl`);
      await writeFile(file, `${lines.join('\n')}\n`);
      return file;
    };
    // Before the tenant has anything in `acme/.provcat/`, nothing marks it: it is the parent's.
    const before = await planGc(parent, {
      out: path.join(dir, 'before'),
      olderThanMs: 0,
      inventory: await rows(['acme/ab/later.bin', 'data/orphan.bin']),
    });
    expect(await planned(before.dir)).toEqual(['acme/ab/later.bin', 'data/orphan.bin']);

    // The tenant references its object; an inventory of the parent lists only that object.
    await tenant.addReferences('tenant', [tenant.uriOf('ab/referenced.bin')]);
    const plan = await planGc(parent, {
      out: path.join(dir, 'parent'),
      olderThanMs: 0,
      inventory: await rows(['acme/ab/referenced.bin', 'data/orphan.bin']),
    });
    expect(await planned(plan.dir)).toEqual(['data/orphan.bin']);
    expect(plan.manifest.totals.reserved).toBe(1);
    // The CLI plans the same.
    const csv = path.join(dir, 'n.csv');
    await writeFile(
      csv,
      `key,size,last_modified\n${full('acme/ab/referenced.bin')},24,${new Date(0).toISOString()}\n`,
    );
    const r = await cli(t, [
      'gc',
      'plan',
      '--stage',
      t.stageString,
      '--older-than',
      '0s',
      '--inventory',
      csv,
      '--out',
      path.join(dir, 'cli'),
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ candidates: 0 });

    // The plan made before the tenant existed: apply checks each page against the store again.
    const applied = await applyGc(parent, before.dir);
    expect(applied).toMatchObject({ deleted: 1, skipped: 1 });
    expect(await t.objects()).toEqual(['acme/ab/later.bin', 'acme/ab/referenced.bin']);
    await parent.close();
    await tenant.close();
  });
}
