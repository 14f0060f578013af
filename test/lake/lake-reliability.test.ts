/**
 * Reliability of the local managed stage through the command users run (issue 20, items 5, 8
 * and 9): a symlink planted inside the stage cannot reach outside it; the temp of an upload
 * killed with SIGKILL is removed by the next upload (a stopped, live writer's is not); a source
 * that cannot be read is a SourceError (exit 1) before anything is written.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeRandomFile } from '../fixtures/lake-helpers.js';

const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

function provcat(...args: string[]): { code: number | null; out: string; err: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** Every file below `dir` (relative), recursively. */
function filesUnder(dir: string, rel = ''): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
    const name = path.join(rel, entry.name);
    if (entry.isDirectory()) out.push(...filesUnder(dir, name));
    else out.push(name);
  }
  return out;
}

async function until(check: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 5));
  }
}

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

let dir: string;
let big: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'lake-reliability-'));
  big = path.join(dir, 'big.bin');
  await writeRandomFile(big, 400 * 1024 * 1024);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the local stage through the CLI', () => {
  it('a symlink inside the stage (ab -> outside) is OutsideStage for cat and verify', () => {
    const root = path.join(dir, 'linked');
    const outside = path.join(dir, 'outside');
    mkdirSync(root, { recursive: true });
    mkdirSync(outside, { recursive: true });
    writeFileSync(path.join(outside, 'secret'), 'not yours');
    symlinkSync(outside, path.join(root, 'ab'));
    const location = JSON.stringify({
      uri: `${pathToFileURL(root).href}/ab/secret`,
      contentType: 'application/octet-stream',
      sizeBytes: 9,
      sha256: execFileSync('sha256sum', [path.join(outside, 'secret')], { encoding: 'utf8' }).slice(
        0,
        64,
      ),
    });
    for (const verb of ['cat', 'verify']) {
      const r = provcat(verb, location, '--stage', `${pathToFileURL(root).href}/`);
      expect(r.code, r.err).toBe(6);
      expect(r.err).toContain('OutsideStage');
      expect(r.out).not.toContain('not yours');
    }
  });

  it('the temp of an upload killed with SIGKILL is gone after the next upload; a stopped writer keeps its own', async () => {
    const root = path.join(dir, 'killed');
    const stage = `${pathToFileURL(root).href}/`;
    const temps = () => filesUnder(root).filter((f) => f.endsWith('.uploading'));
    mkdirSync(root, { recursive: true });

    // A live writer, stopped mid-upload, has a temp.
    const stopped = spawn(process.execPath, [BIN, 'upload', big, '--stage', stage, '--json'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let out = '';
    stopped.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    await until(() => temps().length === 1);
    stopped.kill('SIGSTOP');
    const live = temps();

    // A writer killed mid-upload leaves its temp behind (its own start swept nothing live).
    const killed = spawn(process.execPath, [BIN, 'upload', big, '--stage', stage], {
      stdio: 'ignore',
    });
    await until(() => temps().length === 2);
    killed.kill('SIGKILL');
    await exited(killed);
    expect(temps()).toHaveLength(2);

    // The next upload removes the dead writer's temp, not the live one's.
    const small = path.join(dir, 'small.bin');
    await writeRandomFile(small, 1000);
    const next = provcat('upload', small, '--stage', stage, '--json');
    expect(next.code, next.err).toBe(0);
    expect(temps()).toEqual(live);

    stopped.kill('SIGCONT');
    expect(await exited(stopped)).toBe(0);
    expect(JSON.parse(out).sizeBytes).toBe(statSync(big).size);
    expect(temps()).toEqual([]);
    expect(filesUnder(root).filter((f) => f.includes(`.provcat${path.sep}uploads`))).toEqual([]);
  }, 120_000);

  it('a source that cannot be read is a SourceError, exit 1, and nothing is written', () => {
    const root = path.join(dir, 'sources');
    const stage = `${pathToFileURL(root).href}/`;
    const fifo = path.join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    for (const source of [path.join(dir, 'no-such-file'), fifo, dir]) {
      const r = provcat('upload', source, '--stage', stage);
      expect(r.err).toContain('SourceError');
      expect(r.code, r.err).toBe(1);
    }
    const put = provcat('put', path.join(dir, 'no-such-file'), `local://b/k`);
    expect(put.err).toContain('SourceError');
    expect(put.code).toBe(1);
    expect(() => filesUnder(root)).toThrow(/ENOENT/);
  });
});
