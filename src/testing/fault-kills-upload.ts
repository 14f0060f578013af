/**
 * The `upload` trials of the SIGKILL loop: kill an upload, check the stage at rest, rerun it and
 * read the object back (`verify`, `cat -o`, a range).
 *
 * @module
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Uri } from '../core/uri.js';
import { judgeFiles, sha256 } from './fault-checks.js';
import { runCli } from './fault-cli.js';
import type { Upload } from './fault-kills-harness.js';
import { StoreKills } from './fault-kills-store.js';

/** The upload trials. */
export class UploadKills extends StoreKills {
  protected async uploadTrial(t: number): Promise<void> {
    const upload = this.upload as Upload;
    // A new stage every few uploads, the old one dropped: each upload is a new object.
    if (this.stage.uploads >= this.ctx.config.rotateEvery) {
      await this.ctx.purgeStage(this.stage.uri, this.stage.prefix);
      this.nextStage();
    }
    this.stage.uploads++;
    const { uri: stage, local } = this.stage;
    const cache = path.join(this.ctx.work, 'cache-upload');
    const checkpoints = path.join(this.ctx.work, 'checkpoints');
    const args = [
      'upload',
      upload.path,
      '--stage',
      stage,
      '--checkpoint-dir',
      checkpoints,
      '--json',
    ];
    const first = await this.first('upload', args, cache);
    let final = first;
    if (first.killed) {
      await this.stageAtRest(upload, stage, local);
      final = await runCli(args, { env: this.env(cache) });
      this.expectSuccess(final, args, cache, 'the rerun of a killed upload');
    }
    if (final.code === 0) await this.readBack(JSON.parse(final.stdout), upload, stage, t, cache);
    const what = `after ${first.killed ? 'a killed upload and its rerun' : 'an upload'}`;
    if (local) await this.temps([local], `the stage ${what}`);
    await this.temps([checkpoints], `the checkpoint folder ${what}`);
  }

  /** Objects in the stage are whole: a file of the upload's size, or (a local stage) its bytes. */
  protected async stageAtRest(
    upload: Upload,
    stage: string,
    local: string | undefined,
  ): Promise<void> {
    if (local) {
      const rest = await judgeFiles([local], this.ctx.contents, this.memo);
      for (const f of rest.partial)
        this.figures.violation('partialFiles', `after a killed upload: ${f}`);
      for (const f of rest.corrupt)
        this.figures.violation('wrongBytes', `after a killed upload: ${f}`);
      return;
    }
    let there: Array<{ uri: Uri; size: number | null }> = [];
    try {
      there = await this.store.walk(stage);
    } catch (error) {
      if ((error as Error).name !== 'NotFound') throw error;
    }
    for (const e of there) {
      if (e.size !== upload.size) {
        this.figures.violation(
          'partialFiles',
          `after a killed upload: ${e.uri} has ${e.size} bytes`,
        );
      }
    }
  }

  /** The location names the upload's bytes, and `verify`, `cat -o` and a range read agree. */
  protected async readBack(
    location: { sha256: string; sizeBytes: number },
    upload: Upload,
    stage: string,
    t: number,
    cache: string,
  ): Promise<void> {
    if (location.sha256 !== upload.sha || location.sizeBytes !== upload.size) {
      this.figures.violation(
        'wrongBytes',
        `upload returned ${JSON.stringify(location)} for ${upload.size} bytes ${upload.sha}`,
      );
      return;
    }
    const loc = path.join(this.ctx.work, `location-${t}.json`);
    await writeFile(loc, JSON.stringify(location));
    const verify = ['verify', `@${loc}`, '--stage', stage];
    const v = await runCli(verify, { env: this.env(cache) });
    if (v.code !== 0) {
      this.figures.violation(
        'wrongBytes',
        `verify of a fresh upload exited ${v.code}: ${v.stderr.trim()} — ${this.repro(verify, cache)}`,
      );
    }
    const outDir = path.join(this.ctx.work, 'out');
    await mkdir(outDir, { recursive: true });
    const out = path.join(outDir, `upload-${t}.bin`);
    const start = this.ctx.random.int(0, upload.size - 2);
    const end = this.ctx.random.int(start + 1, upload.size);
    const whole = await readFile(upload.path);
    for (const extra of [[], ['--range', `${start}:${end}`]]) {
      const cat = ['cat', `@${loc}`, '--stage', stage, ...extra, '-o', out];
      const c = await runCli(cat, { env: this.env(cache) });
      if (!this.expectSuccess(c, cat, cache, 'cat of a fresh upload')) continue;
      const want = extra.length === 0 ? whole : whole.subarray(start, end);
      if (sha256(await readFile(out)) !== sha256(want)) {
        this.figures.violation('wrongBytes', `cat wrote other bytes — ${this.repro(cat, cache)}`);
      }
      await rm(out, { force: true });
    }
    await rm(loc, { force: true });
    await this.temps([outDir], 'the output folder after cat -o');
  }
}
