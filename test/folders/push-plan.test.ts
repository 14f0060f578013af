/**
 * The two passes of a push (src/folders/push-plan.ts, push.ts). On a store whose listing is not
 * in key order the merge of the walk and the listing is not trusted: the plan is made again from
 * the whole listing, sorted, and the push does exactly what it does on an ordered listing — the
 * unchanged files skipped, the changed ones sent, the missing objects deleted — leaving no temp
 * file behind. A push that fails midway still writes the push index of what it hashed, and
 * carries over the entries of the files it did not reach.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import type { ListPage, PagesOptions, PutBatch } from '../../src/contract/primitives.js';
import { hostTag, isRunning, tempName } from '../../src/core/fs-atomic.js';
import { RACY_WINDOW_MS } from '../../src/folders/push-index.js';
import { readTree, writeTree } from '../support/folder-flows.js';

const tmp = (label: string) => mkdtempSync(path.join(tmpdir(), `provcat-plan-${label}-`));

/** A local store whose flat listing comes in reverse key order, in one page. */
class ReversedListing extends LocalStore {
  listings = 0;
  override async *_pages(
    bucket: string,
    prefix: string,
    options?: PagesOptions,
  ): AsyncIterable<ListPage> {
    this.listings++;
    const objects = [];
    for await (const page of super._pages(bucket, prefix, options)) objects.push(...page.objects);
    yield { prefixes: [], objects: objects.reverse() };
  }
}

/** A local store whose batched puts of `failing` keys fail. */
class FailingPuts extends LocalStore {
  failing = new Set<string>();
  override batchPuts(bucket: string, prefix: string): PutBatch {
    const inner = super.batchPuts(bucket, prefix);
    return {
      put: async (key, source, options) => {
        if (this.failing.has(key)) throw new Error(`refused put of ${key}`);
        return inner.put(key, source, options);
      },
      close: () => inner.close(),
    };
  }
}

/** A PID no process of this machine runs now. */
function deadPid(): number {
  for (let pid = 4_000_000; ; pid--) if (!isRunning(pid)) return pid;
}

/** A fixed mtime, long before the racy window. */
const OLD = 1_700_000_000;

describe('push plan', () => {
  it('an aborted push stops in its walk, writes nothing and leaves no temp', async () => {
    const store = new ReversedListing({ root: tmp('root'), cache: tmp('cache') });
    await store.makeBucket('b', { versioning: true });
    const dir = tmp('local');
    writeTree(dir, { 'a.txt': 'a', 'b/c.txt': 'c' });
    const controller = new AbortController();
    controller.abort();
    await expect(
      store.push(dir, 'local://b/data/', { signal: controller.signal }),
    ).rejects.toMatchObject({ name: 'AbortError' });
    expect(store.listings).toBe(0); // stopped before the listing
    expect(await store.walk('local://b/')).toEqual([]);
    const temps = path.join(store.cache.root, 'v1', 'push-index');
    expect(readdirSync(temps)).toEqual([]);
    await store.close();
  });

  it('a push that fails midway keeps the index of what it hashed', async () => {
    const store = new FailingPuts({ root: tmp('root'), cache: tmp('cache') });
    await store.makeBucket('b', { versioning: true });
    const dir = tmp('local');
    const names = ['a.txt', 'b.txt', 'c.txt', 'd.txt', 'e.txt', 'f.txt'];
    const write = (rel: string, text: string) => {
      writeFileSync(path.join(dir, rel), text);
      utimesSync(path.join(dir, rel), OLD, OLD);
    };
    for (const rel of names) write(rel, `first ${rel}`);
    // ctime cannot be set back: let it leave the racy window.
    await sleep(RACY_WINDOW_MS + 100);
    const uri = 'local://b/data/';
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 6, hashed: 6 });
    for (const rel of ['a.txt', 'c.txt', 'e.txt']) write(rel, `second ${rel}`);
    await sleep(RACY_WINDOW_MS + 100);
    store.failing.add('data/c.txt');
    await expect(store.push(dir, uri, { concurrency: 1 })).rejects.toThrow(/refused put/);
    store.failing.clear();
    // a.txt was hashed (and sent) before the failure: not hashed again. c.txt was hashed, not
    // sent; e.txt was not reached: its old entry is carried over, and does not match it now.
    const rerun = await store.push(dir, uri, { concurrency: 1 });
    expect(rerun).toMatchObject({ uploaded: 2, skipped: 4, hashed: 2 });
    expect(rerun.actions.map((a) => a.path)).toEqual(['c.txt', 'e.txt']);
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 6, hashed: 0 });
    await store.close();
  }, 30_000);

  it('a listing out of key order: the push is the same as on an ordered one', async () => {
    const store = new ReversedListing({ root: tmp('root'), cache: tmp('cache') });
    await store.makeBucket('b', { versioning: true });
    const dir = tmp('local');
    const tree: Record<string, string> = {};
    for (let i = 0; i < 40; i++) tree[`d${i % 4}/f${i}.txt`] = `file ${i}`;
    tree['a-b.txt'] = 'dash';
    tree['a/b.txt'] = 'slash';
    writeTree(dir, tree);
    const uri = 'local://b/data/';
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 42, skipped: 0 });
    // Unchanged: nothing sent (a plan made from the sorted listing finds every object).
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 42 });
    // One changed, one gone, one new; with delete.
    writeFileSync(path.join(dir, 'd1/f1.txt'), 'changed');
    utimesSync(path.join(dir, 'd1/f1.txt'), 1_700_000_000, 1_700_000_000);
    rmSync(path.join(dir, 'd2/f2.txt'));
    writeFileSync(path.join(dir, 'new.txt'), 'new');
    const before = store.listings;
    const third = await store.push(dir, uri, { delete: true });
    expect(third).toMatchObject({ uploaded: 2, skipped: 40, deleted: 1 });
    expect(third.actions).toEqual([
      { action: 'upload', path: 'd1/f1.txt', size: 7 },
      { action: 'upload', path: 'new.txt', size: 3 },
      { action: 'delete', path: 'd2/f2.txt', size: 6 },
    ]);
    // The merge saw the disorder and listed once more, whole.
    expect(store.listings - before).toBe(2);
    const fetched = (await store.fetch(uri)).path;
    expect(await readTree(fetched)).toEqual(await readTree(dir));
    // A killed push's plan (its writer's PID runs no more) goes at the next push; a live one stays.
    const temps = path.join(store.cache.root, 'v1', 'push-index');
    const dead = path.join(temps, `.tmp-${deadPid()}-${hostTag()}-0000000a1`);
    const live = path.join(temps, tempName());
    writeFileSync(dead, 'plan of a killed push\n');
    writeFileSync(live, 'plan of a running push\n');
    await store.push(dir, uri);
    expect(existsSync(dead)).toBe(false);
    expect(existsSync(live)).toBe(true);
    rmSync(live);
    // No plan is left; at most the push index (none here: the files are too new to trust).
    const left = readdirSync(path.join(store.cache.root, 'v1', 'push-index'));
    expect(left.filter((name) => !/^[0-9a-f]{32}\.tsv$/.test(name))).toEqual([]);
    await store.close();
  });
});
