/**
 * The SIGKILL loop of the fault suite: run the CLI for `fetch`, `put`, `commit`, `branch` and
 * `upload`, kill it with SIGKILL at a random moment of its run, look at what it left, run the same
 * command again to completion and check the result.
 *
 * The kill lands uniformly within the command's duration, measured by a first, complete run of
 * each command (which is checked like every other) and refreshed by every run that completes.
 * After each trial: nothing partial is visible (an interrupted fetch is never served offline as
 * complete), the rerun completes, its result is byte-exact, the folder's log is gapless with the
 * trial's commit exactly once, and the rerun left no temp of the killed run behind it. Put, commit, branch and upload run one at a time, so a temp
 * seen in the store is never a live one. Fetches write only into caches of their own, so they run
 * beside them, in lanes of their own folder and cache: a killed fetch's lock needs 5 s to go stale,
 * and the lanes wait that out together while the other commands go on.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { closeStore, type SuiteContext } from './fault-config.js';
import type { Figures } from './fault-figures.js';
import { type Command, type Folder, seedFolder, type Upload } from './fault-kills-harness.js';
import { UploadKills } from './fault-kills-upload.js';

/** The SIGKILL loop for one target: `ctx.config.killTrials` trials, then their figures. */
export async function killLoop(ctx: SuiteContext, figures: Figures): Promise<void> {
  const loop = await KillLoop.setup(ctx, figures);
  await loop.run();
}

/** The loop of one target: its setup, and which command each trial runs. */
class KillLoop extends UploadKills {
  static async setup(ctx: SuiteContext, figures: Figures): Promise<KillLoop> {
    const { config } = ctx;
    const store = await ctx.direct();
    const fetchFolders = await Promise.all(
      Array.from({ length: config.lanes }, (_, i) =>
        seedFolder(
          ctx,
          store,
          ctx.uri(`kill/fetch-${i}/`),
          config.folderFiles,
          config.smallBytes,
          config.largeBytes,
        ),
      ),
    );
    const putFiles = [];
    for (const name of ['a', 'b']) {
      const bytes = randomBytes(config.putBytes);
      const file = path.join(ctx.work, `put-${name}.bin`);
      await writeFile(file, bytes);
      putFiles.push({ path: file, sha: ctx.contents.add(bytes) });
    }
    let branchSource: { uri: string; folder: Folder } | undefined;
    if (ctx.target.flags.versions) {
      const folder = await seedFolder(
        ctx,
        store,
        ctx.uri('kill/branch-src/'),
        config.branchFiles,
        config.smallBytes,
      );
      const pinned = await store.commit(folder.uri, 'the source of the branch trials');
      branchSource = { uri: pinned.toString(), folder };
    }
    let upload: Upload | undefined;
    if (ctx.target.stageUri) {
      const bytes = randomBytes(config.uploadBytes);
      const file = path.join(ctx.work, 'upload.bin');
      await writeFile(file, bytes);
      upload = { path: file, sha: ctx.contents.add(bytes), size: bytes.length };
    }
    const loop = new KillLoop(ctx, figures, store, fetchFolders, putFiles, branchSource, upload);
    if (ctx.target.flags.versions) await loop.newCommitFolder();
    return loop;
  }

  private commands(): Command[] {
    const out: Command[] = ['fetch', 'put'];
    if (this.ctx.target.flags.versions) out.push('commit', 'branch');
    if (this.upload) out.push('upload');
    return out;
  }

  async run(): Promise<void> {
    const others = this.commands().filter((c) => c !== 'fetch');
    const { killTrials, lanes } = this.ctx.config;
    // Every command gets its share of the trials; fetches run beside the others (see the module comment).
    const fetches = Math.ceil(killTrials / (others.length + 1));
    let t = 0;
    const fetchLoop = async () => {
      // The first fetch runs alone: it measures the duration the kills of later ones use.
      if (fetches > 0) await this.trial('fetch', t++, 0);
      let done = 1;
      await Promise.all(
        Array.from({ length: lanes }, async (_, lane) => {
          while (done < fetches) {
            done++;
            await this.trial('fetch', t++, lane);
          }
        }),
      );
    };
    const otherLoop = async () => {
      for (let i = 0; i < killTrials - fetches; i++) {
        await this.trial(others[i % others.length] as Command, t++, 0);
      }
    };
    await Promise.all([fetchLoop(), otherLoop()]);
    await this.temps(this.ctx.target.localDirs ?? [], 'the store after the loop', { final: true });
    await closeStore(this.store);
  }

  private async trial(command: Command, t: number, lane: number): Promise<void> {
    const started = performance.now();
    try {
      if (command === 'fetch') await this.fetchTrial(t, lane);
      else if (command === 'put') await this.putTrial();
      else if (command === 'commit') await this.commitTrial(t);
      else if (command === 'branch') await this.branchTrial(t);
      else await this.uploadTrial(t);
    } catch (error) {
      // A check that could not be made is a failure too; the loop goes on (a soak runs for hours).
      this.figures.violation(
        'failedRuns',
        `${command} trial ${t}: the check itself failed: ${(error as Error).stack}`,
      );
    }
    this.figures.timed(command, performance.now() - started);
  }
}
