/**
 * The local stage's upload markers (`.provcat/uploads/<pid>.<id>`, each naming the key of an
 * upload's `.uploading` temp) are read from the stage, so anyone who can write the stage can
 * write one. Nothing a marker names is removed unless it is contained: a key of this stage (no
 * `..`, inside the tenant, not reserved) whose folders are real folders of the stage (no
 * symlink). Neither the next upload's sweep nor `gc apply` removes anything outside.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectIntegrityError } from '../../../src/core/errors.js';
import { applyGc, planGc, type Stage, stageFromDescriptor } from '../../../src/lake/index.js';

let base: string;
beforeAll(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'gc-markers-'));
});
afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

/** A pid that is certainly not running (a child that has exited). */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '0']).pid as number;
}

/** A fresh work folder: `root` (the stage's), and `work/victim.uploading` beside it. */
async function setup(): Promise<{ dir: string; root: string; victim: string }> {
  const dir = await mkdtemp(path.join(base, 'case-'));
  const root = path.join(dir, 'stage');
  await mkdir(root);
  await mkdir(path.join(dir, 'work'));
  const victim = path.join(dir, 'work', 'victim.uploading');
  await writeFile(victim, 'not the stage’s');
  return { dir, root, victim };
}

/** Plant a marker of a dead writer naming `key`, below `tenant` when given. */
async function marker(root: string, key: string, tenant?: string): Promise<string> {
  const folder = path.join(root, ...(tenant ? [tenant] : []), '.provcat', 'uploads');
  await mkdir(folder, { recursive: true });
  const file = path.join(folder, `${deadPid()}.${randomBytes(6).toString('hex')}`);
  await writeFile(file, `${key}\n`);
  return file;
}

function stageAt(root: string, tenant?: string): Stage {
  return stageFromDescriptor({ version: 1, kind: 'local', root, ...(tenant ? { tenant } : {}) });
}

async function exists(file: string): Promise<boolean> {
  return readFile(file).then(
    () => true,
    () => false,
  );
}

describe('upload markers of a local stage', () => {
  it('a marker naming ../work/victim: the next upload removes nothing outside the stage', async () => {
    const { dir, root, victim } = await setup();
    await marker(root, '../work/victim');
    // Also as an absolute-looking key, an empty one, and one outside the tenant.
    await marker(root, '');
    const stage = stageAt(root);
    const source = path.join(dir, 'source.bin');
    await writeFile(source, randomBytes(1000));
    const location = await stage.upload(source);
    expect(location.sizeBytes).toBe(1000);
    expect(await exists(victim)).toBe(true);
    expect(await exists(`${root}.uploading`)).toBe(false);
    await stage.close();

    // A tenant's marker naming a key of the parent (outside the tenant) is not the tenant's.
    await writeFile(path.join(root, 'parent-temp.uploading'), 'the parent’s');
    await marker(root, 'parent-temp', 'acme');
    const tenant = stageAt(root, 'acme');
    await tenant.upload(source);
    expect(await exists(path.join(root, 'parent-temp.uploading'))).toBe(true);
    await tenant.close();
  });

  it('a symlinked folder of the stage and a marker through it: neither upload nor gc apply removes outside', async () => {
    const { dir, root, victim } = await setup();
    await symlink(path.join(dir, 'work'), path.join(root, 'zz'));
    const planted = await marker(root, 'zz/victim');
    const stage = stageAt(root);
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    // GC lists no upload through the link, so nothing is planned or removed.
    const plan = await planGc(stage, { out: path.join(dir, 'plan'), olderThanMs: 0 });
    expect(plan.uploads).toBe(0);
    expect(await applyGc(stage, plan.dir)).toMatchObject({ aborted: 0, deleted: 0 });
    expect(await exists(victim)).toBe(true);
    // Aborting it directly (as a plan written elsewhere would ask) is refused.
    const error = await stage
      .abortUpload({
        key: 'zz/victim',
        upload: 'zz/victim',
        initiated: new Date(0),
        uri: stage.uriOf('zz/victim'),
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(ObjectIntegrityError);
    expect((error as ObjectIntegrityError).kind).toBe('OutsideStage');
    expect(await exists(victim)).toBe(true);
    // Nor does the next upload's sweep.
    const source = path.join(dir, 'source.bin');
    await writeFile(source, randomBytes(10));
    await stage.upload(source);
    expect(await exists(victim)).toBe(true);
    expect(await exists(planted)).toBe(true);
    await stage.close();
  });

  it("a dead writer's temp inside the stage is still swept and aborted", async () => {
    const { dir, root } = await setup();
    await mkdir(path.join(root, 'ab'));
    const temp = path.join(root, 'ab', 'abc.uploading');
    await writeFile(temp, 'partial');
    await marker(root, 'ab/abc');
    const stage = stageAt(root);
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    const plan = await planGc(stage, { out: path.join(dir, 'plan'), olderThanMs: 0 });
    expect(plan.uploads).toBe(1);
    expect(await applyGc(stage, plan.dir)).toMatchObject({ aborted: 1 });
    expect(await exists(temp)).toBe(false);
    await stage.close();
  });

  it("a dead writer's marker cut short (killed while writing it) is removed by the next upload", async () => {
    const { dir, root } = await setup();
    const folder = path.join(root, '.provcat', 'uploads');
    await mkdir(folder, { recursive: true });
    // Killed between the marker's create and its write, or within the write: no temp was opened.
    const empty = path.join(folder, `${deadPid()}.${randomBytes(6).toString('hex')}`);
    await writeFile(empty, '');
    const cut = path.join(folder, `${deadPid()}.${randomBytes(6).toString('hex')}`);
    await writeFile(cut, 'ab/ab');
    const stage = stageAt(root);
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    // GC lists neither as an open upload.
    const plan = await planGc(stage, { out: path.join(dir, 'plan'), olderThanMs: 0 });
    expect(plan.uploads).toBe(0);
    const source = path.join(dir, 'source.bin');
    await writeFile(source, randomBytes(10));
    await stage.upload(source);
    expect(await exists(empty)).toBe(false);
    expect(await exists(cut)).toBe(false);
    await stage.close();
  });
});
