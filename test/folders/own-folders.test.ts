/**
 * provcat's own folders (src/core/own-folders.ts) are kept apart from the folders it writes and
 * deletes for a user: how a path overlaps one, and a `fetch --to DIR --delete` over the embedded
 * store's root as the environment names it, whichever store is at work.
 */
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { InvalidArgument } from '../../src/core/errors.js';
import { overlap } from '../../src/core/own-folders.js';

const tmp = (label: string) => mkdtempSync(path.join(tmpdir(), `provcat-own-${label}-`));
const saved = process.env.PROVCAT_LOCAL_ROOT;
afterEach(() => {
  if (saved === undefined) delete process.env.PROVCAT_LOCAL_ROOT;
  else process.env.PROVCAT_LOCAL_ROOT = saved;
});

describe("provcat's own folders", () => {
  it('tells a folder that is, holds or lies inside another from one beside it', () => {
    const top = tmp('paths');
    const own = path.join(top, 'a', 'cache');
    expect(overlap(path.join(top, 'a', 'cache'), own)).toBe('is');
    expect(overlap(path.join(top, 'a'), own)).toBe('holds');
    expect(overlap(path.join(top, 'a', 'cache', 'x', 'not-made'), own)).toBe('is inside');
    // A common prefix of names is not a folder above.
    expect(overlap(path.join(top, 'a', 'cache2'), own)).toBeUndefined();
    expect(overlap(path.join(top, 'a', 'cach'), own)).toBeUndefined();
    expect(overlap(path.join(top, 'b'), own)).toBeUndefined();
  });

  it('fetch --to refuses a DIR holding the embedded store of the environment, from any store', async () => {
    const dir = tmp('dir');
    const other = path.join(dir, 'project-store');
    mkdirSync(other);
    writeFileSync(path.join(other, 'keep'), 'the local buckets');
    process.env.PROVCAT_LOCAL_ROOT = other;
    // The store at work has another root: the environment's store is still provcat's.
    const store = new LocalStore({ root: tmp('root'), cache: tmp('cache') });
    await store.put('local://b/d/a.txt', Buffer.from('a'));
    const refused = await store
      .fetch('local://b/d/', { to: dir, delete: true })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgument);
    expect((refused as Error).message).toMatch(/holds the embedded store .*nothing was written/);
    expect(existsSync(path.join(other, 'keep'))).toBe(true);
    expect(existsSync(path.join(dir, 'a.txt'))).toBe(false);
    // Beside it, the copy is made.
    const beside = path.join(dir, 'data');
    expect(await store.fetch('local://b/d/', { to: beside, delete: true })).toMatchObject({
      files: 1,
    });
    await store.close();
  });
});
