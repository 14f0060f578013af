/**
 * The store operations of the network trials (fetch a file, a folder or a large file; put small
 * and multipart; commit), each run through the fault proxy in this process and checked from the
 * server directly.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { cacheDataDirs, judgeFiles, readObject, sha256, treeDiff, treeOf } from './fault-checks.js';
import { closeStore } from './fault-config.js';
import { failure, NetworkHarness, type Outcome, type Trial } from './fault-network-harness.js';

/** The fetch, put and commit trials. */
export class StoreTrials extends NetworkHarness {
  // ---- fetch -----------------------------------------------------------------------------

  protected async fetchTrial(trial: Trial, forever: boolean): Promise<void> {
    const { op } = trial;
    const name = op === 'fetch-file' ? this.ctx.random.pick([...this.small.keys()]) : 'large.bin';
    const rel =
      op === 'fetch-folder'
        ? 'net/folder/'
        : op === 'fetch-large'
          ? 'net/large.bin'
          : `net/small/${name}`;
    const uri = this.ctx.uri(rel);
    const want =
      op === 'fetch-folder'
        ? this.folder
        : new Map([[name, op === 'fetch-large' ? this.large : (this.small.get(name) as string)]]);
    const cache = await mkdtemp(path.join(this.ctx.work, 'cache-net-'));
    const store = this.viaProxy(cache);
    const fetchAndCompare = async (options: { signal?: AbortSignal }) => {
      const r = await store.fetch(uri, options);
      const got =
        op === 'fetch-folder'
          ? await treeOf(r.path)
          : new Map([[path.basename(r.path), sha256(await readFile(r.path))]]);
      return treeDiff(got, want);
    };
    try {
      let served = false;
      const outcome = await this.faulted(
        trial,
        async () => {
          const diff = await fetchAndCompare(forever ? { signal: AbortSignal.timeout(1500) } : {});
          if (diff.length > 0) throw new WrongBytes(diff);
        },
        forever,
      );
      if (!outcome.ok && outcome.error instanceof WrongBytes) {
        served = true;
        this.figures.violation(
          'wrongBytes',
          this.repro(trial, `fetch of ${uri} returned with ${outcome.what}`),
        );
      } else {
        this.failed(trial, outcome, `fetch ${uri}`);
      }
      // What is at rest in the cache is whole (a corrupt copy already served counts once).
      const rest = await judgeFiles(cacheDataDirs(cache), this.ctx.contents, this.memo);
      for (const f of rest.partial)
        this.figures.violation('partialFiles', this.repro(trial, `in the cache: ${f}`));
      if (!served && rest.corrupt.length > 0) {
        this.figures.violation(
          'wrongBytes',
          this.repro(trial, `corrupt in the cache: ${rest.corrupt[0]}`),
          { n: rest.corrupt.length },
        );
      }
      // The next fetch, without a fault, through the same cache.
      try {
        const diff = await fetchAndCompare({});
        if (diff.length > 0) {
          this.figures.violation(
            'wrongBytes',
            this.repro(trial, `the next fetch of ${uri}: ${diff.slice(0, 3).join(', ')}`),
            { n: diff.length },
          );
        }
      } catch (error) {
        this.figures.violation(
          'failedRuns',
          this.repro(
            trial,
            `the next fetch failed: ${(error as Error).name}: ${(error as Error).message}`,
          ),
        );
      }
      await this.temps([cache], this.repro(trial, 'the cache after the next fetch'));
    } finally {
      await closeStore(store);
      await rm(cache, { recursive: true, force: true });
    }
  }

  // ---- put -------------------------------------------------------------------------------

  protected async putTrial(trial: Trial): Promise<void> {
    const multipart = trial.op === 'put-multipart';
    const generation = await this.rotate(trial.op, (gen) =>
      this.ctx.purge(`${this.ctx.prefix}net/${trial.op}-${gen}/`),
    );
    const rel = `net/${trial.op}-${generation}/object.bin`;
    const uri = this.ctx.uri(rel);
    const size = multipart
      ? (this.ctx.target.network?.multipartBytes ?? 0) + 64 * 1024
      : this.ctx.random.int(1, 256 * 1024);
    const bytes = randomBytes(size);
    const sha = this.ctx.contents.add(bytes);
    const old = this.puts.get(rel);
    const cache = await mkdtemp(path.join(this.ctx.work, 'cache-net-'));
    const store = this.viaProxy(cache);
    try {
      const outcome = await this.faulted(trial, async () => {
        await store.put(uri, bytes);
      });
      this.failed(trial, outcome, `put ${uri}`);
      const now = await readObject(this.direct, uri);
      const nowSha = now && sha256(now);
      if (outcome.ok && nowSha !== sha) {
        this.figures.violation(
          'wrongBytes',
          this.repro(
            trial,
            `put succeeded but ${uri} holds ${now?.length ?? 'nothing'} other bytes`,
          ),
        );
      } else if (!outcome.ok && now !== undefined && nowSha !== sha && nowSha !== old) {
        const verdict = this.ctx.contents.judge(now);
        this.figures.violation(
          verdict === 'partial' ? 'partialFiles' : 'wrongBytes',
          this.repro(trial, `a failed put left ${now.length} bytes, neither old nor new`),
        );
      }
      // The next put of the same key, without a fault.
      try {
        await store.put(uri, bytes);
        const again = await readObject(this.direct, uri);
        if (!again || sha256(again) !== sha)
          this.figures.violation(
            'wrongBytes',
            this.repro(trial, `the next put left other bytes at ${uri}`),
          );
        this.puts.set(rel, sha);
      } catch (error) {
        this.figures.violation(
          'failedRuns',
          this.repro(
            trial,
            `the next put failed: ${(error as Error).name}: ${(error as Error).message}`,
          ),
        );
      }
      await this.temps(
        [cache, ...(this.ctx.target.localDirs ?? [])],
        this.repro(trial, 'after the next put'),
      );
    } finally {
      await closeStore(store);
      await rm(cache, { recursive: true, force: true });
    }
  }

  // ---- commit ----------------------------------------------------------------------------

  protected async commitTrial(trial: Trial): Promise<void> {
    const files = this.commitFolder as Map<string, string>;
    const folder = this.ctx.uri('net/commit/');
    const rel = this.ctx.random.pick([...files.keys()]);
    const bytes = randomBytes(this.ctx.random.int(1, this.ctx.config.smallBytes));
    await this.direct.put(`${folder}${rel}`, bytes);
    files.set(rel, this.ctx.contents.add(bytes));
    const message = `network trial ${this.ctx.id} ${this.figures.trials} ${this.ctx.random.int(0, 1e9)}`;
    const cache = await mkdtemp(path.join(this.ctx.work, 'cache-net-'));
    const store = this.viaProxy(cache);
    try {
      const outcome = await this.faulted(trial, async () => {
        await store.commit(folder, message);
      });
      this.failed(trial, outcome, `commit ${folder}`);
      // The next commit, without a fault: it commits, or finds that the first one landed.
      let next: Outcome = { ok: true };
      try {
        await store.commit(folder, message);
      } catch (error) {
        next = failure(error, true, false);
      }
      const log = await this.log(folder);
      if (log instanceof Error) {
        this.figures.violation(
          'lostOrDuplicatedCommits',
          this.repro(trial, `the log is unreadable: ${log.name}: ${log.message}`),
        );
        return;
      }
      const mine = log.filter((e) => e.message === message);
      const landedFirst = !next.ok && /no change since commit/.test(next.what);
      if (!next.ok && !landedFirst)
        this.figures.violation(
          'failedRuns',
          this.repro(trial, `the next commit failed: ${next.what}`),
        );
      const gapless = log.every(
        (e, i) => e.number === log.length - i && e.parent === (log[i + 1]?.id ?? null),
      );
      const made = outcome.ok ? 1 + (next.ok ? 1 : 0) : next.ok || landedFirst ? 1 : 0;
      if (!gapless || log.length !== this.commits + made || mine.length !== made) {
        this.figures.violation(
          'lostOrDuplicatedCommits',
          this.repro(
            trial,
            `${log.length} commits where ${this.commits + made} were made, this message ${mine.length} times${gapless ? '' : ', with a gap'}`,
          ),
          { n: Math.max(1, Math.abs(log.length - this.commits - made)) },
        );
      }
      this.commits = log.length;
      const newest = log[0];
      if (newest?.message === message) {
        const diff = await this.ctx.withDirect(async (check) => {
          const at = await check.fetch(`${folder}?at=commit:${newest.id}`);
          return treeDiff(await treeOf(at.path), files);
        });
        if (diff.length > 0) {
          this.figures.violation(
            'wrongBytes',
            this.repro(trial, `at commit ${newest.id}: ${diff.slice(0, 3).join(', ')}`),
            { n: diff.length },
          );
        }
      }
    } finally {
      await closeStore(store);
      await rm(cache, { recursive: true, force: true });
    }
  }

  protected log(folder: string) {
    return this.ctx.withDirect(async (store) => {
      try {
        return await store.log(folder);
      } catch (error) {
        return error as Error;
      }
    });
  }
}

/** A fetch that returned with bytes other than those written. */
class WrongBytes extends Error {
  constructor(readonly diff: string[]) {
    super(diff.slice(0, 3).join(', '));
    this.name = 'WrongBytes';
  }
}
