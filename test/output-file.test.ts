/**
 * `provcat cat -o TARGET` through the bundled CLI (`npm run build` first): a regular file is
 * replaced atomically, a new one created, `-o -` is stdout; a device, a FIFO, a symlink or a
 * directory is refused with a usage error (exit 2) before anything is created.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';

const BIN = path.join(import.meta.dirname, '..', 'dist', 'cli', 'provcat.cjs');

function run(args: string[]): { code: number | null; out: Buffer; err: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { env: { ...process.env } });
  return { code: r.status, out: r.stdout, err: r.stderr.toString('utf8') };
}

describe('cat -o TARGET', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-output-'));
  const stage = `file://${dir}/stage/`;
  const bytes = randomBytes(100_000);
  const location = path.join(dir, 'loc.json');
  const out = path.join(dir, 'out');
  const cat = (target: string) => run(['cat', `@${location}`, '--stage', stage, '-o', target]);

  beforeAll(() => {
    mkdirSync(path.join(dir, 'stage'));
    mkdirSync(out);
    writeFileSync(path.join(dir, 'source.bin'), bytes);
    const up = run(['upload', path.join(dir, 'source.bin'), '--stage', stage, '--json']);
    expect(up.code, up.err).toBe(0);
    writeFileSync(location, up.out);
  });

  it('creates a new file, and replaces a regular file atomically (a new inode, no temp left)', () => {
    const fresh = path.join(out, 'fresh.bin');
    expect(cat(fresh).code).toBe(0);
    expect(readFileSync(fresh).equals(bytes)).toBe(true);
    const old = path.join(out, 'old.bin');
    writeFileSync(old, 'previous contents');
    const before = statSync(old).ino;
    const r = cat(old);
    expect(r.code, r.err).toBe(0);
    expect(readFileSync(old).equals(bytes)).toBe(true);
    expect(statSync(old).ino).not.toBe(before);
    expect(readdirSync(out).sort()).toEqual(['fresh.bin', 'old.bin']);
  });

  it('-o - writes to stdout', () => {
    const r = cat('-');
    expect(r.code, r.err).toBe(0);
    expect(r.out.equals(bytes)).toBe(true);
  });

  /** `target` is refused with exit 2 and nothing appears in `parent` (or in `target`). */
  function refused(target: string, parent: string): void {
    const before = readdirSync(parent).sort();
    const r = cat(target);
    expect(r.code, r.err).toBe(2);
    expect(r.err).toMatch(/^provcat: UsageError: /);
    expect(readdirSync(parent).sort()).toEqual(before);
  }

  it('refuses a character device (as root: one made with mknod, like /dev/null)', () => {
    const devices = path.join(dir, 'devices');
    mkdirSync(devices);
    const device = path.join(devices, 'null');
    const made = spawnSync('mknod', [device, 'c', '1', '3']);
    expect(made.status, `mknod needs root: ${made.stderr}`).toBe(0);
    refused(device, devices);
    expect(lstatSync(device).isCharacterDevice()).toBe(true);
  });

  it('refuses a FIFO', () => {
    const fifos = path.join(dir, 'fifos');
    mkdirSync(fifos);
    const fifo = path.join(fifos, 'pipe');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    refused(fifo, fifos);
    expect(lstatSync(fifo).isFIFO()).toBe(true);
  });

  it('refuses a symlink, and leaves the link and its target alone', () => {
    const links = path.join(dir, 'links');
    mkdirSync(links);
    const target = path.join(dir, 'link-target.txt');
    writeFileSync(target, 'pointed to');
    const link = path.join(links, 'link');
    symlinkSync(target, link);
    refused(link, links);
    expect(readlinkSync(link)).toBe(target);
    expect(readFileSync(target, 'utf8')).toBe('pointed to');
  });

  it('refuses a directory and creates nothing beside it or in it', () => {
    const parent = path.join(dir, 'parent');
    const target = path.join(parent, 'adir');
    mkdirSync(target, { recursive: true });
    refused(target, parent);
    expect(readdirSync(target)).toEqual([]);
  });
});
