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
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';

const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

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
    expect(r.err).toMatch(/^provcat: InvalidArgument: /);
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

describe('the same routine for gc keep-set --out and gc plan --out', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-gc-output-'));
  const root = path.join(dir, 'stage');
  const stage = `file://${root}/`;
  const keepSet = (target: string) =>
    run(['gc', 'keep-set', '--stage', stage, '--out', target, '--json']);
  const plan = (target: string) =>
    run(['gc', 'plan', '--stage', stage, '--older-than', '0s', '--out', target, '--json']);

  beforeAll(() => {
    mkdirSync(path.join(root, 'ab'), { recursive: true });
    // An orphan, an hour old: a plan has a page.
    const orphan = path.join(root, 'ab', 'orphan.bin');
    writeFileSync(orphan, 'orphan');
    const old = new Date(Date.now() - 3_600_000);
    utimesSync(orphan, old, old);
    const add = run(['refs', 'add', 'ds', `${stage}data/`, '--stage', stage, '--json']);
    expect(add.code, add.err).toBe(0);
  });

  /** `args` is refused with exit 2, a usage error matching `message`, nothing new in `parent`. */
  function refused(r: ReturnType<typeof run>, parent: string, before: string[], message: RegExp) {
    expect(r.code, r.err).toBe(2);
    expect(r.err).toMatch(/^provcat: InvalidArgument: /);
    expect(r.err).toMatch(message);
    expect(readdirSync(parent).sort()).toEqual(before);
  }

  it('keep-set --out refuses a device, a FIFO, a symlink and a directory, replacing none', () => {
    const parent = path.join(dir, 'targets');
    mkdirSync(parent);
    const device = path.join(parent, 'null');
    expect(spawnSync('mknod', [device, 'c', '1', '3']).status, 'mknod needs root').toBe(0);
    const fifo = path.join(parent, 'pipe');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const target = path.join(dir, 'link-target.txt');
    writeFileSync(target, 'pointed to');
    const link = path.join(parent, 'link');
    symlinkSync(target, link);
    const folder = path.join(parent, 'folder');
    mkdirSync(folder);
    const before = readdirSync(parent).sort();
    refused(keepSet(device), parent, before, /is a device: --out takes a new or regular file/);
    expect(lstatSync(device).isCharacterDevice()).toBe(true);
    refused(keepSet(fifo), parent, before, /is a FIFO/);
    expect(lstatSync(fifo).isFIFO()).toBe(true);
    refused(keepSet(link), parent, before, /is a symbolic link/);
    expect(readlinkSync(link)).toBe(target);
    expect(readFileSync(target, 'utf8')).toBe('pointed to');
    refused(keepSet(folder), parent, before, /is a directory/);
    expect(readdirSync(folder)).toEqual([]);
    // A folder that does not exist, or a file where a folder should be: clear, not ENOENT.
    refused(keepSet(path.join(parent, 'nowhere', 'k.jsonl')), parent, before, /does not exist/);
    refused(
      keepSet(path.join(target, 'k.jsonl')),
      parent,
      before,
      /a file where a folder should be/,
    );
    // A regular file is replaced atomically.
    const file = path.join(parent, 'keep.jsonl');
    writeFileSync(file, 'old');
    expect(keepSet(file).code).toBe(0);
    expect(readFileSync(file, 'utf8')).toMatch(/^\{"fingerprint"/);
  });

  it('plan --out refuses a file, a device, a FIFO and a symlink with a clear usage error', () => {
    const parent = path.join(dir, 'plans');
    mkdirSync(parent);
    const file = path.join(parent, 'a-file');
    writeFileSync(file, 'not a plan');
    const fifo = path.join(parent, 'pipe');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const elsewhere = path.join(dir, 'elsewhere');
    mkdirSync(elsewhere);
    const link = path.join(parent, 'link');
    symlinkSync(elsewhere, link);
    const before = readdirSync(parent).sort();
    refused(plan(file), parent, before, /is a file: --out takes a new or empty directory/);
    expect(readFileSync(file, 'utf8')).toBe('not a plan');
    refused(plan(fifo), parent, before, /is a FIFO/);
    refused(plan(link), parent, before, /is a symbolic link/);
    expect(readdirSync(elsewhere)).toEqual([]);
    refused(plan(path.join(file, 'sub')), parent, before, /a file where a folder should be/);
  });

  it('a plan whose pages entry is a file is refused clearly by apply (exit 7, no ENOTDIR)', () => {
    const out = path.join(dir, 'plan-with-file');
    const made = plan(out);
    expect(made.code, made.err).toBe(0);
    rmSync(path.join(out, 'pages'), { recursive: true });
    writeFileSync(path.join(out, 'pages'), 'a file');
    expect(JSON.parse(made.out.toString())).toMatchObject({ candidates: 1 });
    const r = run(['gc', 'apply', out, '--stage', stage, '--json']);
    expect(r.code, r.err).toBe(7);
    expect(r.err).toMatch(/GcPlanError: Corrupt: .*is not a directory/);
    expect(r.err).not.toMatch(/ENOTDIR/);
    expect(readFileSync(path.join(root, 'ab', 'orphan.bin'), 'utf8')).toBe('orphan');
  });
});
