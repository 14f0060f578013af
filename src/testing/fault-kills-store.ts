/**
 * The store commands of the SIGKILL loop (`fetch`, `put`, `commit`, `branch`): each trial kills
 * the CLI at a random moment, looks at what it left, reruns it to completion and checks the result.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { Uri } from '../core/uri.js';
import {
  cacheDataDirs,
  exists,
  judgeFiles,
  readObject,
  sha256,
  treeDiff,
  treeOf,
} from './fault-checks.js';
import { runCli } from './fault-cli.js';
import { type Folder, KillHarness, seedFolder, writeFile_ } from './fault-kills-harness.js';

/** The fetch, put, commit and branch trials. */
export class StoreKills extends KillHarness {
  // ---- fetch -----------------------------------------------------------------------------

  protected async fetchTrial(t: number, lane: number): Promise<void> {
    const folder = this.fetchFolders[lane] as Folder;
    const cache = await mkdtemp(path.join(this.ctx.work, `cache-fetch-${t}-`));
    const args = ['fetch', folder.uri, '--json'];
    const first = await this.first('fetch', args, cache);
    let final = first;
    let changed = false;
    if (first.killed) {
      const rest = await judgeFiles(cacheDataDirs(cache), this.ctx.contents, this.memo);
      for (const f of rest.partial)
        this.figures.violation('partialFiles', `after a killed fetch: ${f}`);
      for (const f of rest.corrupt)
        this.figures.violation('wrongBytes', `after a killed fetch: ${f}`);
      // An interrupted fetch is served offline complete and right, or not at all.
      const offline = await runCli([...args, '--offline'], { env: this.env(cache) });
      if (offline.code === 0) {
        const diff = treeDiff(await treeOf(JSON.parse(offline.stdout).path), folder.files);
        if (diff.length > 0) {
          this.figures.violation(
            'partialFiles',
            `a killed fetch served offline as complete: ${diff.slice(0, 3).join(', ')} — ${this.repro([...args, '--offline'], cache)}`,
            { n: diff.length },
          );
        }
      } else if (offline.code !== 5) {
        this.expectSuccess(
          offline,
          [...args, '--offline'],
          cache,
          'an offline fetch after a kill (0 or 5)',
        );
      }
      // Half the time the folder changes before the rerun: it must then fetch the new state.
      changed = this.ctx.random.chance(0.5);
      if (changed) {
        const rels = [...folder.files.keys()];
        for (let i = 0; i < 2; i++) {
          const rel = this.ctx.random.pick(rels);
          await writeFile_(
            this.ctx,
            this.store,
            folder,
            rel,
            randomBytes(this.ctx.random.int(1, this.ctx.config.smallBytes)),
          );
        }
        await writeFile_(this.ctx, this.store, folder, `new-${t}.bin`, randomBytes(100));
      }
      final = await runCli(args, { env: this.env(cache) });
      this.expectSuccess(final, args, cache, 'the rerun of a killed fetch');
    }
    if (final.code === 0) {
      const diff = treeDiff(await treeOf(JSON.parse(final.stdout).path), folder.files);
      if (diff.length > 0) {
        this.figures.violation(
          'wrongBytes',
          `fetch: ${diff.slice(0, 3).join(', ')} — ${this.repro(args, cache)}`,
          { n: diff.length },
        );
      }
    }
    await this.temps(
      [cache],
      `the cache after ${first.killed ? 'a killed fetch and its rerun' : 'a fetch'}`,
    );
    await rm(cache, { recursive: true, force: true });
  }

  // ---- put -------------------------------------------------------------------------------

  protected async putTrial(): Promise<void> {
    // A new key every few trials, the old one dropped: a versioned store keeps every version.
    if (this.putTurn > 0 && this.putTurn % this.ctx.config.rotateEvery === 0) {
      await this.ctx.purge(`${this.ctx.prefix}kill/put-${this.putGeneration++}/`);
      this.putCurrent = undefined;
    }
    const next = this.putFiles[this.putTurn++ % 2] as { path: string; sha: string };
    const uri = this.ctx.uri(`kill/put-${this.putGeneration}/object.bin`);
    const cache = path.join(this.ctx.work, 'cache-put');
    const args = ['put', next.path, uri, '--json'];
    const first = await this.first('put', args, cache);
    let final = first;
    if (first.killed) {
      const now = await readObject(this.store, uri);
      if (now !== undefined) {
        const sha = sha256(now);
        if (sha !== next.sha && sha !== this.putCurrent) {
          const verdict = this.ctx.contents.judge(now);
          this.figures.violation(
            verdict === 'partial' ? 'partialFiles' : 'wrongBytes',
            `a killed put left ${now.length} bytes at ${uri}, neither the old nor the new object`,
          );
        }
      }
      final = await runCli(args, { env: this.env(cache) });
      this.expectSuccess(final, args, cache, 'the rerun of a killed put');
    }
    if (final.code === 0) {
      const now = await readObject(this.store, uri);
      if (now === undefined || sha256(now) !== next.sha) {
        this.figures.violation(
          'wrongBytes',
          `after put, ${uri} holds ${now?.length ?? 'nothing'} other bytes — ${this.repro(args, cache)}`,
        );
      }
      this.putCurrent = next.sha;
    }
    await this.temps(
      this.ctx.target.localDirs ?? [],
      `the store after ${first.killed ? 'a killed put and its rerun' : 'a put'}`,
    );
  }

  // ---- commit ----------------------------------------------------------------------------

  protected async newCommitFolder(): Promise<void> {
    if (this.commitGeneration > 0) {
      await this.ctx.purge(`${this.ctx.prefix}kill/commit-${this.commitGeneration - 1}/`);
    }
    const uri = this.ctx.uri(`kill/commit-${this.commitGeneration++}/`);
    this.commitFolder = await seedFolder(
      this.ctx,
      this.store,
      uri,
      this.ctx.config.commitFiles,
      this.ctx.config.smallBytes,
    );
    this.commits = 0;
  }

  /** The folder's log read fresh from the store (every commit object re-hashed), or the error. */
  protected log(uri: string) {
    return this.ctx.withDirect(async (store) => {
      try {
        return await store.log(uri);
      } catch (error) {
        return error as Error;
      }
    });
  }

  protected async commitTrial(t: number): Promise<void> {
    // A long log makes every check slower; a fresh folder every 25 commits keeps them short.
    if (this.commits >= 25) await this.newCommitFolder();
    const folder = this.commitFolder;
    const rel = this.ctx.random.pick([...folder.files.keys()]);
    await writeFile_(
      this.ctx,
      this.store,
      folder,
      rel,
      randomBytes(this.ctx.random.int(1, this.ctx.config.smallBytes)),
    );
    const message = `fault trial ${this.ctx.id} ${t}`;
    const cache = path.join(this.ctx.work, 'cache-commit');
    const args = ['commit', folder.uri, '-m', message, '--json'];
    const first = await this.first('commit', args, cache);
    let final = first;
    let landed = false;
    if (first.killed) {
      const log = await this.log(folder.uri);
      if (log instanceof Error) {
        this.figures.violation(
          'lostOrDuplicatedCommits',
          `the log after a killed commit is unreadable: ${log.name}: ${log.message}`,
        );
      } else {
        landed = log[0]?.message === message;
      }
      final = await runCli(args, { env: this.env(cache) });
      // A commit that landed before the kill makes the rerun find nothing new: that is complete too.
      const nothingNew = landed && final.code === 7 && /no change since commit/.test(final.stderr);
      if (!nothingNew) this.expectSuccess(final, args, cache, 'the rerun of a killed commit');
    }
    const log = await this.log(folder.uri);
    if (log instanceof Error) {
      this.figures.violation(
        'lostOrDuplicatedCommits',
        `the log is unreadable: ${log.name}: ${log.message} — ${this.repro(args, cache)}`,
      );
      return;
    }
    const gapless = log.every(
      (e, i) => e.number === log.length - i && e.parent === (log[i + 1]?.id ?? null),
    );
    const mine = log.filter((e) => e.message === message);
    const expected = final.code === 0 || landed ? this.commits + 1 : this.commits;
    if (!gapless || mine.length > 1 || log.length !== expected) {
      this.figures.violation(
        'lostOrDuplicatedCommits',
        `${folder.uri}: ${log.length} commits where ${expected} were made, this one ${mine.length} times${gapless ? '' : ', numbers with a gap'} — ${this.repro(args, cache)}`,
        { n: Math.max(1, Math.abs(log.length - expected)) },
      );
    }
    this.commits = log.length;
    const newest = log[0];
    if (newest?.message === message) {
      const diff = await this.ctx.withDirect(async (store) => {
        const at = await store.fetch(`${folder.uri}?at=commit:${newest.id}`);
        return treeDiff(await treeOf(at.path), folder.files);
      });
      if (diff.length > 0) {
        this.figures.violation(
          'wrongBytes',
          `at commit ${newest.id}: ${diff.slice(0, 3).join(', ')}`,
          {
            n: diff.length,
          },
        );
      }
    }
    await this.temps(
      this.ctx.target.localDirs ?? [],
      `the store after ${first.killed ? 'a killed commit and its rerun' : 'a commit'}`,
    );
  }

  // ---- branch ----------------------------------------------------------------------------

  protected async branchTrial(t: number): Promise<void> {
    const name = `fb-${this.ctx.id}-${t}`;
    try {
      await this.branch(name);
    } finally {
      // The copies are checked: drop them (the branch's record in .provcat/ is small).
      await this.ctx.purge(`${name}/`);
    }
  }

  protected async branch(name: string): Promise<void> {
    const source = this.branchSource as { uri: string; folder: Folder };
    const uri = this.ctx.top(`${name}/`);
    const { bucket } = this.store.locate(Uri.parse(uri));
    const cache = path.join(this.ctx.work, 'cache-branch');
    const args = ['branch', uri, source.uri, '--json'];
    const first = await this.first('branch', args, cache);
    let final = first;
    if (first.killed) {
      // Copies are whole or absent: every file there already is a whole source file.
      let there: Array<{ uri: Uri; size: number | null }> = [];
      try {
        there = await this.store.walk(uri);
      } catch (error) {
        if ((error as Error).name !== 'NotFound') throw error;
      }
      for (const e of there) {
        const rel = e.uri.toString().slice(uri.length);
        if (source.folder.sizes.get(rel) !== e.size) {
          this.figures.violation(
            'partialFiles',
            `a killed branch left ${rel} with ${e.size} bytes in ${uri}`,
          );
        }
      }
      const marked = () => exists(this.store, bucket, `.provcat/branches/${name}.done`);
      const done = await marked();
      final = await runCli(args, { env: this.env(cache) });
      // A rerun of a branch that had finished says it exists: complete. The killed run's last
      // request (its done mark) may reach the store after the kill and after the check above.
      const wasDone =
        final.code === 7 && /already exists/.test(final.stderr) && (done || (await marked()));
      if (!wasDone) this.expectSuccess(final, args, cache, 'the rerun of a killed branch');
    }
    if (!(await exists(this.store, bucket, `.provcat/branches/${name}.done`))) {
      if (final.code === 0)
        this.figures.violation(
          'failedRuns',
          `branch ${uri} exited 0 but is not marked done — ${this.repro(args, cache)}`,
        );
      return;
    }
    const diff = await this.ctx.withDirect(async (store) => {
      const got = await store.fetch(uri);
      return treeDiff(await treeOf(got.path), source.folder.files);
    });
    if (diff.length > 0) {
      this.figures.violation(
        'wrongBytes',
        `branch ${uri}: ${diff.slice(0, 3).join(', ')} — ${this.repro(args, cache)}`,
        {
          n: diff.length,
        },
      );
    }
    await this.temps(
      this.ctx.target.localDirs ?? [],
      `the store after ${first.killed ? 'a killed branch and its rerun' : 'a branch'}`,
    );
  }
}
