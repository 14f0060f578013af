/**
 * Garbage collection on the local stage: the shared suite (test/support/gc-suite.ts), each
 * test on a fresh stage root, then the gc commands in process with a recording progress bar.
 * The bundled CLI and the child processes import dist/ (`npm run build` first).
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliContext } from '../../../src/cli/command.js';
import { gcCommands } from '../../../src/cli/commands/gc.js';
import { hostTag } from '../../../src/core/fs-atomic.js';
import { applyGc, planGc } from '../../../src/lake/index.js';
import type { Progress } from '../../../src/store/store.js';
import { gcScaleSuite } from '../../support/gc-scale-suite.js';
import { cli, gcSuite } from '../../support/gc-suite.js';
import { gcTamperSuite } from '../../support/gc-tamper-suite.js';
import { localTarget } from '../../support/gc-targets.js';

const CHILD = path.join(import.meta.dirname, '..', '..', 'fixtures', 'gc-child.mjs');

let base: string;
beforeAll(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'gc-local-'));
});
afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('garbage collection on the local stage', () => {
  const suite = {
    target: () => localTarget(base),
    dir: () => mkdtemp(path.join(base, 'work-')),
  };
  gcSuite(suite);
  gcTamperSuite(suite);
  gcScaleSuite(suite);
});

describe('temp folders of killed GC runs', () => {
  it("a SIGKILLed apply's temp folder (its keep.jsonl) is swept by the next run; a live one stays", async () => {
    const t = await localTarget(base);
    const stage = t.stage();
    const orphans = Array.from({ length: 6 }, (_, i) => `data/o${i}.bin`);
    for (const k of orphans) await t.put(k, 'x');
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    await t.settle();
    const plan = await planGc(stage, { out: path.join(base, 'killed-plan'), olderThanMs: 0 });
    const tmp = await mkdtemp(path.join(base, 'tmp-'));
    const child = spawn(
      process.execPath,
      [CHILD, 'apply', JSON.stringify(t.descriptor), plan.dir, '2000'],
      { env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    // Killed while it deletes: its keep-set is on disk in its temp folder.
    await new Promise<void>((resolve, reject) => {
      const poll = setInterval(async () => {
        const names = await readdir(tmp);
        const dir = names.find((n) => n.startsWith('provcat-gc-apply-'));
        if (dir && (await readdir(path.join(tmp, dir))).includes('keep.jsonl')) {
          clearInterval(poll);
          child.kill('SIGKILL');
        }
      }, 20);
      child.on('close', (_code, signal) => {
        clearInterval(poll);
        if (signal === 'SIGKILL') resolve();
        else reject(new Error('the apply ended before it was killed'));
      });
    });
    const left = await readdir(tmp);
    expect(left.filter((n) => n.startsWith('provcat-gc-apply-'))).toHaveLength(1);
    // A live run's folder (this process's) stays whatever its age.
    const live = path.join(tmp, `provcat-gc-apply-${process.pid}-${hostTag()}-0123abcd`);
    await mkdir(live);
    // The next run (here the resumed apply) sweeps the dead one and removes its own.
    expect(await applyGc(stage, plan.dir, { tmpDir: tmp })).toMatchObject({ skipped: 0 });
    expect(await readdir(tmp)).toEqual([path.basename(live)]);
    await stage.close();
  });
});

describe('usage errors of the gc commands (exit 2)', () => {
  it('an --older-than past what a date can hold, and a bad set name, are usage errors', async () => {
    const t = await localTarget(base);
    const stage = t.stage();
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    const out = path.join(base, 'huge-plan');
    const huge = await cli(t, [
      'gc',
      'plan',
      '--stage',
      t.stageString,
      '--older-than',
      '9007199254740991ms',
      '--out',
      out,
    ]);
    expect(huge.code, huge.stderr).toBe(2);
    expect(huge.stderr).toMatch(/^provcat: InvalidArgument: .*at most 36525d/);
    expect(huge.stderr).not.toMatch(/RangeError/);
    for (const name of [' ', 'tab\tname', 'x'.repeat(1025)]) {
      const add = await cli(t, [
        'refs',
        'add',
        name,
        stage.uriOf('data/a.bin'),
        '--stage',
        t.stageString,
      ]);
      expect(add.code, add.stderr).toBe(2);
      expect(add.stderr).toMatch(/^provcat: UsageError: .*set name/);
      const retire = await cli(t, ['refs', 'retire', name, '--stage', t.stageString]);
      expect(retire.code, retire.stderr).toBe(2);
    }
    // A location file that starts with a byte-order mark is read as JSON.
    const loc = path.join(base, 'bom-loc.json');
    await writeFile(
      loc,
      `\ufeff${JSON.stringify({ uri: stage.uriOf('data/bom.bin'), contentType: 'application/octet-stream', sizeBytes: 1, sha256: 'b'.repeat(64) })}`,
    );
    const bom = await cli(t, ['refs', 'add', 'ds', `@${loc}`, '--stage', t.stageString]);
    expect(bom.code, bom.stderr).toBe(0);
    expect(JSON.parse(bom.stdout)).toEqual({ name: 'ds', number: 2, added: 1 });
    await stage.close();
  });
});

describe('the gc commands in process', () => {
  /** Run one gc command with a context whose progress bar records what it is told. */
  async function run(name: string, positionals: string[], values: Record<string, string>) {
    const command = gcCommands.find((c) => c.name === name);
    if (!command) throw new Error(`no command ${name}`);
    let stdout = '';
    const progress: Progress[] = [];
    let done = 0;
    const ctx: CliContext = {
      stdout: new Writable({
        write(chunk, _e, cb) {
          stdout += chunk;
          cb();
        },
      }),
      stderr: new Writable({ write: (_c, _e, cb) => cb() }),
      env: process.env,
      json: true,
      offline: false,
      progress: () => ({
        onProgress: (p) => progress.push(p),
        done: () => {
          done += 1;
        },
      }),
      track: (r) => r,
    };
    const code = await command.run({ positionals, values }, ctx);
    return { code, json: JSON.parse(stdout), progress, done };
  }

  it('report progress of long plans and applies, and clear the bar', async () => {
    const t = await localTarget(base);
    const stage = t.stage();
    const orphans = Array.from({ length: 2500 }, (_, i) => `data/o${i}.bin`);
    for (const k of orphans) await t.put(k, 'x');
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    await t.settle();
    const out = path.join(base, 'progress-plan');
    const plan = await run('gc plan', [], { stage: t.stageString, out, 'older-than': '0s' });
    expect(plan.json).toMatchObject({ candidates: orphans.length, scanned: orphans.length + 2 });
    expect(plan.done).toBe(1);
    const phases = new Set(plan.progress.map((p) => p.operation));
    expect(phases).toEqual(
      new Set([
        'gc plan (references)',
        'gc plan (inventory)',
        'gc plan (merge)',
        'gc plan (uploads)',
      ]),
    );
    expect(Math.max(...plan.progress.map((p) => p.files ?? 0))).toBeGreaterThanOrEqual(2000);
    const apply = await run('gc apply', [out], { stage: t.stageString });
    expect(apply.json).toEqual({ deleted: orphans.length, missing: 0, aborted: 0, skipped: 0 });
    expect(apply.done).toBe(1);
    const last = apply.progress.at(-1) as Progress;
    expect(last).toMatchObject({
      operation: 'gc apply',
      files: orphans.length,
      totalFiles: orphans.length,
    });
    expect(last.bytes).toBe(last.totalBytes);
    await stage.close();
  });
});
