/**
 * The walk of a local folder that a push reads (src/folders/local-tree.ts): files come one at a
 * time in the UTF-8 byte order of their path below the folder, the order object stores list keys
 * in, including where a folder's name is a prefix of its neighbours' (`a-b`, `a.txt`, `a/…`, `a0`)
 * and where UTF-16 order and UTF-8 order disagree (U+E000 against an astral character).
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SourceError } from '../../src/core/errors.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { walkLocalTree } from '../../src/folders/local-tree.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-local-tree-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function folder(name: string, rels: string[]): string {
  const root = path.join(work, name);
  for (const rel of rels) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), rel);
  }
  return root;
}

describe('walkLocalTree', () => {
  const rels = [
    'a-b',
    'a.txt',
    'a/x',
    'a/b/c/d/deep.bin',
    'a/b-c',
    'a/b.c/e',
    'a0',
    'A',
    ' space',
    '!bang/f',
    'é/1',
    'e\u0301/2',
    '\uE000',
    '😀',
    '😀x/y',
    'z/\uE000/a',
    'z/😀',
    'z/z',
  ];

  it('yields every file in the UTF-8 order of its path, one folder open per level', async () => {
    const root = folder('order', rels);
    const walked: string[] = [];
    await walkLocalTree(root, (f) => {
      walked.push(f.rel);
      expect(f.path).toBe(path.join(root, f.rel));
      expect(f.stamp.size).toBe(Buffer.byteLength(f.rel));
    });
    expect(walked).toEqual([...rels].sort(compareUtf8));
    // UTF-16 order would put the astral character first.
    expect(walked.indexOf('\uE000')).toBeLessThan(walked.indexOf('😀'));
  });

  it('refuses a link to a folder when the walk reaches it, after the files before it', async () => {
    const root = folder('link', ['a/1', 'b/2', 'c/3']);
    symlinkSync(path.join(root, 'a'), path.join(root, 'b/link'));
    const seen: string[] = [];
    await expect(walkLocalTree(root, (f) => void seen.push(f.rel))).rejects.toThrow(
      /b\/link: a link to a folder/,
    );
    expect(seen).toEqual(['a/1', 'b/2']);
    await expect(walkLocalTree(root, () => undefined)).rejects.toThrow(SourceError);
    // A visit that throws ends the walk with its error.
    const stop = new Error('enough');
    const early: string[] = [];
    const walk = walkLocalTree(folder('early', ['x/1', 'y/2']), (f) => {
      early.push(f.rel);
      throw stop;
    });
    await expect(walk).rejects.toBe(stop);
    expect(early).toEqual(['x/1']);
  });
});
