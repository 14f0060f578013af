/**
 * The cache's grouped blob installs (src/cache/blob-group.ts): a deferred blob does not exist
 * before its group's flush, and after it exists whole with its temp gone.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BlobGroup } from '../../src/cache/blob-group.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-blob-group-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('BlobGroup', () => {
  it('renames its temps over their blobs only at the flush, and hands back their records', async () => {
    const group = new BlobGroup<number>(work, 3);
    const blobs = [0, 1, 2].map((i) => path.join(work, `blob-${i}`));
    blobs.forEach((blob, i) => {
      writeFileSync(`${blob}.tmp`, `bytes ${i}`);
      group.defer(`${blob}.tmp`, blob, i);
      expect(group.full).toBe(i === 2);
    });
    for (const blob of blobs) {
      expect(group.holds(blob)).toBe(true);
      expect(existsSync(blob)).toBe(false);
    }
    expect(await group.flush()).toEqual([0, 1, 2]);
    blobs.forEach((blob, i) => {
      expect(group.holds(blob)).toBe(false);
      expect(existsSync(`${blob}.tmp`)).toBe(false);
      expect(readFileSync(blob, 'utf8')).toBe(`bytes ${i}`);
    });
    expect(group.full).toBe(false);
    expect(await group.flush()).toEqual([]);
  });

  it('holds a blob while a flush that took it runs, until it is renamed', async () => {
    const group = new BlobGroup<number>(work, 8);
    const blob = path.join(work, 'blob-during');
    writeFileSync(`${blob}.tmp`, 'bytes');
    group.defer(`${blob}.tmp`, blob, 7);
    const flushing = group.flush();
    // The caller that deferred it must leave the link to this flush's caller.
    expect(group.holds(blob)).toBe(true);
    expect(existsSync(blob)).toBe(false);
    expect(await flushing).toEqual([7]);
    expect(group.holds(blob)).toBe(false);
    expect(readFileSync(blob, 'utf8')).toBe('bytes');
  });

  it('flushes after `first` blobs, then after twice as many each time, up to its most', async () => {
    const group = new BlobGroup<number>(work, 8, 2);
    const sizes: number[] = [];
    let held = 0;
    for (let i = 0; i < 27; i++) {
      const blob = path.join(work, `grow-${i}`);
      writeFileSync(`${blob}.tmp`, `${i}`);
      group.defer(`${blob}.tmp`, blob, i);
      held++;
      if (group.full) {
        sizes.push((await group.flush()).length);
        held = 0;
      }
    }
    expect(sizes).toEqual([2, 4, 8, 8]);
    expect(held).toBe(5);
  });

  it('a temp that vanished fails the flush', async () => {
    const group = new BlobGroup(work);
    group.defer(path.join(work, 'gone.tmp'), path.join(work, 'gone'), undefined);
    await expect(group.flush()).rejects.toThrow();
    expect(existsSync(path.join(work, 'gone'))).toBe(false);
  });
});
