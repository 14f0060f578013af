/**
 * Issue 20 item 8, where no cache is involved: the temp a killed upload left in its checkpoint
 * folder, and the temp a killed commit left in the local store's commit folder (a key no later
 * write names), are removed by the next operation there; a live writer's temp stays.
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { folderDirName, objectDirName, refOf } from '../../drivers/local/layout.js';
import { checkpointPath, lockCheckpoint } from '../../src/lake/checkpoint.js';
import { deadWriterTemps, liveTempIn, tempsBelow } from '../support/temp-writers.js';

function temp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-killed-${label}-`));
}

describe('temps of killed writers outside the cache', () => {
  it('the next upload to lock a checkpoint removes a killed upload’s checkpoint temp', async () => {
    const dir = temp('checkpoints');
    const file = checkpointPath(dir, 's3://lake/', '/data/episode.mp4');
    const [dead] = deadWriterTemps([dir]);
    const live = liveTempIn(dir);
    expect(tempsBelow(dir)).toEqual([dead, live].sort());

    const release = await lockCheckpoint(file, (error) => {
      throw error;
    });
    try {
      expect(tempsBelow(dir)).toEqual([live]);
    } finally {
      await release();
    }
  });

  it('a write into the commit folder removes a killed commit’s temp from another key; a live one stays', async () => {
    const root = temp('root');
    const store = new LocalStore({ root, cache: temp('cache') });
    const folder = path.join(
      root,
      'b',
      folderDirName(refOf('.provcat')),
      folderDirName(refOf('commits')),
    );
    // As a commit killed while it wrote its commit object leaves it: the object's directory made,
    // the bytes' temp in it, no version published (so no index entry in the folder).
    const killed = path.join(folder, objectDirName(refOf('1111.json')));
    const writing = path.join(folder, objectDirName(refOf('2222.json')));
    mkdirSync(killed, { recursive: true });
    mkdirSync(writing, { recursive: true });
    const [dead] = deadWriterTemps([killed]);
    const live = liveTempIn(writing);
    expect(tempsBelow(root)).toEqual([dead, live].sort());

    // The rerun: a commit (of a new id) writes its object into the same folder.
    await store.put('local://b/data/a.txt', Buffer.from('a'));
    const pinned = await store.commit('local://b/data/', 'the rerun');
    expect(tempsBelow(root)).toEqual([live]);
    expect((await store.list(pinned)).map((e) => e.uri.key)).toEqual(['data/a.txt']);
  });
});
