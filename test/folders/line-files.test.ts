/**
 * The line files of a push (src/folders/line-files.ts): what is written reads back line for line,
 * through the streamed and the synchronous reader alike, with lines and multi-byte characters
 * across the reader's chunk boundaries; a file replaced atomically is the old one or the new
 * one.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  AtomicLineFile,
  CHUNK,
  LineCursor,
  LineWriter,
  lineBatches,
} from '../../src/folders/line-files.js';

const dir = () => mkdtempSync(path.join(tmpdir(), 'provcat-lines-'));

describe('line files', () => {
  it('read back exactly as written, across chunk boundaries, both ways', async () => {
    const file = path.join(dir(), 'lines');
    // Lines of every length around the chunk size, of 1- to 4-byte characters.
    const lines: string[] = [];
    const alphabet = ['a', 'é', '€', '\u{1f600}', '\u2028', '\t'];
    let n = 0;
    while (n < 3 * CHUNK) {
      const length = lines.length % 97 === 0 ? 200_000 : (lines.length * 37) % 300;
      const line = Array.from({ length }, (_, i) => alphabet[(i + lines.length) % 6]).join('');
      lines.push(line);
      n += Buffer.byteLength(line) + 1;
    }
    const w = await LineWriter.create(file);
    for (const line of lines) await w.add(line);
    await w.close();
    const streamed: string[] = [];
    for await (const batch of lineBatches(file)) streamed.push(...batch);
    expect(streamed).toEqual(lines);
    const cursor = new LineCursor(file);
    const synced: string[] = [];
    for (let line = cursor.next(); line !== undefined; line = cursor.next()) synced.push(line);
    expect(synced).toEqual(lines);
    expect(cursor.next()).toBeUndefined();
    // A last line without its newline still counts.
    writeFileSync(file, 'one\ntwo');
    const tail = new LineCursor(file);
    expect([tail.next(), tail.next(), tail.next()]).toEqual(['one', 'two', undefined]);
    // A writer never overwrites a file that exists.
    await expect(LineWriter.create(file)).rejects.toMatchObject({ code: 'EEXIST' });
  });

  it('a file replaced line by line is the old one until commit, and stays it after discard', async () => {
    const d = dir();
    const target = path.join(d, 'index');
    writeFileSync(target, 'old\n');
    const next = await AtomicLineFile.begin(target);
    next.add('new');
    expect(readFileSync(target, 'utf8')).toBe('old\n');
    await next.commit();
    expect(readFileSync(target, 'utf8')).toBe('new\n');
    const dropped = await AtomicLineFile.begin(target);
    dropped.add('never');
    await dropped.discard();
    expect(readFileSync(target, 'utf8')).toBe('new\n');
    expect(readdirSync(d)).toEqual(['index']);
    expect(existsSync(target)).toBe(true);
  });
});
