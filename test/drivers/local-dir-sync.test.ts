/**
 * The local store's shared directory fsync (drivers/local/dir-sync.ts): concurrent publishes in
 * one folder share fsyncs, and none returns before an fsync that started after its call.
 */
import { describe, expect, it } from 'vitest';
import { syncDirShared } from '../../drivers/local/dir-sync.js';

/** A fake fsync: records when each starts and ends when the test says. */
function fakeSync() {
  const syncs: Array<{ startedAt: number; finish: (error?: Error) => void }> = [];
  let clock = 0;
  const sync = () =>
    new Promise<void>((resolve, reject) => {
      syncs.push({ startedAt: clock++, finish: (e) => (e ? reject(e) : resolve()) });
    });
  return { syncs, sync, tick: () => clock++ };
}

const settle = () => new Promise((r) => setImmediate(r));

describe('shared directory fsync', () => {
  it('writers arriving during a sync join the next one, which starts after them', async () => {
    const f = fakeSync();
    const done: string[] = [];
    const a = syncDirShared('/d', 'local://b/a', f.sync).then(() => done.push('a'));
    await settle();
    expect(f.syncs).toHaveLength(1);
    // b and c change the directory while a's sync runs: that sync may not cover them.
    const b = syncDirShared('/d', 'local://b/b', f.sync).then(() => done.push('b'));
    const c = syncDirShared('/d', 'local://b/c', f.sync).then(() => done.push('c'));
    await settle();
    expect(f.syncs).toHaveLength(1);
    f.syncs[0]?.finish();
    await a;
    await settle();
    expect(done).toEqual(['a']);
    // One more sync serves both, started after both calls.
    expect(f.syncs).toHaveLength(2);
    f.syncs[1]?.finish();
    await Promise.all([b, c]);
    expect(done.sort()).toEqual(['a', 'b', 'c']);
    // Idle again: the next writer starts its own sync at once.
    const d = syncDirShared('/d', 'local://b/d', f.sync);
    await settle();
    expect(f.syncs).toHaveLength(3);
    f.syncs[2]?.finish();
    await d;
  });

  it('a failed sync fails the writers that waited on it, and the next sync still runs', async () => {
    const f = fakeSync();
    const a = syncDirShared('/e', 'local://b/a', f.sync);
    await settle();
    const b = syncDirShared('/e', 'local://b/b', f.sync);
    f.syncs[0]?.finish(new Error('disk gone'));
    await expect(a).rejects.toThrow('disk gone');
    await settle();
    expect(f.syncs).toHaveLength(2);
    f.syncs[1]?.finish();
    await expect(b).resolves.toBeUndefined();
  });

  it('directories are synced independently', async () => {
    const f = fakeSync();
    const a = syncDirShared('/x', 'local://b/x', f.sync);
    const b = syncDirShared('/y', 'local://b/y', f.sync);
    await settle();
    expect(f.syncs).toHaveLength(2);
    for (const s of f.syncs) s.finish();
    await Promise.all([a, b]);
  });
});
