// The many-files cases of issue 28 inside `npm run bench` (`--cases P`): push and fetch of many
// small files, each against its peer in the same rounds (run.mjs's runner: one warm-up round,
// then counted rounds, whole processes under /usr/bin/time).
//
// P1  push 1,000 × 4 KiB to S3 (Ceph)                      vs rclone copy --transfers 16 --checkers 16
// P2  push 20,000 × 1 KiB into the embedded store           vs cp -r + sync -f
// P3  cold fetch of those 20,000 from the embedded store    vs cp -r + sync -f
// P4  second push of the unchanged 20,000-file folder       vs find -printf + one provcat walk
//
// Every store, cache and copy is made in a fresh directory per run and removed after it, so no
// run finds what the one before left; the source folders are written once, then synced.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** P1's peer, as issue 28 names it: rclone with 16 transfers and 16 checkers. */
export const RCLONE_PUSH = 'rclone copy --transfers 16 --checkers 16';

/** The argv of {@link RCLONE_PUSH} from a folder to an rclone remote path. */
export function rclonePush(from, to) {
  return ['rclone', 'copy', '--transfers', '16', '--checkers', '16', from, to];
}

let setAsideCount = 0;

/**
 * Put `dir` out of the way instead of deleting it (renamed beside itself; the bench's temp
 * directory, removed at the end, takes it). On ext4 without a journal (these machines), inodes
 * freed in the last minutes make every new inode in their block groups scan past them: a
 * `cp -r` of 20,000 files took 1.1 s in a fresh area and 12–15 s where 100,000 files had just
 * been deleted. Deleting between runs would charge one tool's cleanup to the next tool's time.
 */
export function setAside(dir) {
  try {
    renameSync(dir, `${dir}.done-${setAsideCount++}`);
  } catch (error) {
    if (error.code !== 'ENOENT') throw error;
  }
}

/** `n` files of `size` random bytes in 10 sub-folders below `dir`, written once and synced. */
export function seed(dir, n, size) {
  for (let i = 0; i < n; i++) {
    const sub = path.join(dir, `d${String(i % 10).padStart(2, '0')}`);
    if (i < 10) mkdirSync(sub, { recursive: true });
    writeFileSync(path.join(sub, `f${String(i).padStart(6, '0')}.bin`), randomBytes(size));
  }
  spawnSync('sync', ['-f', dir]);
}

/**
 * Cases P1–P4. `h` is run.mjs's kit: runCase, tool, freshDir, rm, log, lastJson, cleanups, env,
 * CLI, runs (P1), heavyRuns (P2–P4), small and many (file counts), makeBucket and deleteBucket,
 * and `s3` (false: P1 is left out, the other cases need no server).
 */
export async function manyFilesCases(h) {
  const cases = [];
  const small = await h.freshDir('many-small');
  const many = await h.freshDir('many-files');
  const provcat = (vars, ...args) => [
    'env',
    ...Object.entries(vars).map(([k, v]) => `${k}=${v}`),
    'node',
    h.CLI,
    ...args,
  ];
  const pushed =
    (want, field = 'uploaded') =>
    (_ctx, r) => {
      const got = h.lastJson(r.stdout)[field];
      if (got !== want) throw new Error(`provcat push: ${field} ${got}, expected ${want}`);
    };
  const copyTool = (from, count) =>
    h.tool('cp -r + sync -f', {
      prepare: async () => ({ dest: path.join(await h.freshDir('many-cp'), 'copy') }),
      argv: (ctx) => ['sh', '-c', 'cp -r "$1" "$2" && sync -f "$2"', 'sh', from, ctx.dest],
      shown: `cp -r ${from} $DEST && sync -f $DEST`,
      check: (ctx) => {
        const r = spawnSync('sh', ['-c', 'find "$1" -type f | wc -l', 'sh', ctx.dest], {
          encoding: 'utf8',
        });
        if (Number(r.stdout) !== count) throw new Error(`cp copied ${r.stdout.trim()} files`);
      },
      cleanup: (ctx) => h.rm(path.dirname(ctx.dest)),
    });

  if (h.s3) {
    h.log(`writing ${h.small} × 4 KiB for case P1`);
    seed(small, h.small, 4096);
    const bucket = `provcat-bench-push-${randomBytes(4).toString('hex')}`;
    await h.makeBucket(bucket, false);
    h.cleanups.push(() => h.deleteBucket(bucket));
    let n = 0;
    const tools = [
      h.tool('provcat push', {
        provcat: true,
        prepare: async () => ({ cache: await h.freshDir('many-cache'), to: `p${n++}` }),
        argv: (ctx) =>
          provcat(
            { PROVCAT_CACHE_DIR: ctx.cache },
            'push',
            small,
            `s3://${bucket}/${ctx.to}/`,
            '--json',
          ),
        shown: `PROVCAT_CACHE_DIR=$EMPTY_CACHE provcat push ${small} s3://${bucket}/$NEW/ --json`,
        check: pushed(h.small),
        cleanup: (ctx) => h.rm(ctx.cache),
      }),
      h.tool(RCLONE_PUSH, {
        prepare: () => ({ to: `r${n++}` }),
        argv: (ctx) => rclonePush(small, `ceph:${bucket}/${ctx.to}/`),
        shown: `${RCLONE_PUSH} ${small} ceph:${bucket}/$NEW/`,
      }),
    ];
    const title = `push ${h.small.toLocaleString('en')} × 4 KiB to S3`;
    cases.push(await h.runCase({ id: 'P1', title, tools, runs: h.runs }, h.env));
  }

  const count = h.many.toLocaleString('en');
  h.log(`writing ${count} × 1 KiB for cases P2–P4`);
  seed(many, h.many, 1024);
  const local = { noServer: true, runs: h.heavyRuns };
  const push = h.tool('provcat push (local://)', {
    provcat: true,
    prepare: async () => ({
      root: await h.freshDir('many-root'),
      cache: await h.freshDir('many-cache'),
    }),
    argv: (ctx) =>
      provcat(
        { PROVCAT_LOCAL_ROOT: ctx.root, PROVCAT_CACHE_DIR: ctx.cache },
        'push',
        many,
        'local://bench/many/',
        '--json',
      ),
    shown: `PROVCAT_LOCAL_ROOT=$EMPTY_ROOT PROVCAT_CACHE_DIR=$EMPTY_CACHE provcat push ${many} local://bench/many/ --json`,
    check: pushed(h.many),
    cleanup: async (ctx) => {
      await h.rm(ctx.root);
      await h.rm(ctx.cache);
    },
  });
  const pushTitle = `push ${count} × 1 KiB into the embedded store`;
  cases.push(
    await h.runCase(
      { id: 'P2', title: pushTitle, tools: [push, copyTool(many, h.many)], ...local },
      h.env,
    ),
  );

  // One store holding the folder, pushed once: the source of P3 and the target of P4.
  const root = await h.freshDir('many-store');
  const cache = await h.freshDir('many-push-cache');
  const vars = { PROVCAT_LOCAL_ROOT: root, PROVCAT_CACHE_DIR: cache };
  const first = spawnSync('env', provcat(vars, 'push', many, 'local://bench/many/').slice(1), {
    env: h.env,
    stdio: 'ignore',
  });
  if (first.status !== 0) throw new Error(`the seeding push exited with ${first.status}`);
  const fetch = h.tool('provcat fetch (local://, cold)', {
    provcat: true,
    prepare: async () => ({ cache: await h.freshDir('many-cache') }),
    argv: (ctx) =>
      provcat(
        { PROVCAT_LOCAL_ROOT: root, PROVCAT_CACHE_DIR: ctx.cache },
        'fetch',
        'local://bench/many/',
        '--json',
      ),
    shown: 'PROVCAT_CACHE_DIR=$EMPTY_CACHE provcat fetch local://bench/many/ --json',
    check: (_ctx, r) => {
      const got = h.lastJson(r.stdout).downloaded;
      if (got !== h.many) throw new Error(`provcat fetch downloaded ${got}`);
    },
    cleanup: (ctx) => h.rm(ctx.cache),
  });
  const fetchTitle = `cold fetch of ${count} × 1 KiB from the embedded store`;
  cases.push(
    await h.runCase(
      { id: 'P3', title: fetchTitle, tools: [fetch, copyTool(many, h.many)], ...local },
      h.env,
    ),
  );

  const again = h.tool('provcat push (unchanged)', {
    provcat: true,
    argv: () => provcat(vars, 'push', many, 'local://bench/many/', '--json'),
    shown: `provcat push ${many} local://bench/many/ --json   # the second time`,
    check: pushed(0),
  });
  const walk = h.tool('find -printf + provcat walk', {
    argv: () => [
      'sh',
      '-c',
      'find "$1" -printf "%s %T@\\n" >/dev/null && env PROVCAT_LOCAL_ROOT="$2" node "$3" walk local://bench/many/ >/dev/null',
      'sh',
      many,
      root,
      h.CLI,
    ],
    shown: `find ${many} -printf '%s %T@\\n' >/dev/null && provcat walk local://bench/many/ >/dev/null`,
  });
  const againTitle = `second push of the unchanged ${count}-file folder (local://)`;
  cases.push(
    await h.runCase({ id: 'P4', title: againTitle, tools: [again, walk], ...local }, h.env),
  );
  await h.rm(root);
  await h.rm(cache);
  await h.rm(many);
  await h.rm(small);
  return cases;
}

/** Issue 28's targets, added with run.mjs's `add`, `ratio` and `row`. */
export function manyFilesTargets(add, ratio, row) {
  const cpu = (id, a, b) => {
    const x = row(id, a);
    const y = row(id, b);
    return x && y ? x.cpuMedian / y.cpuMedian : undefined;
  };
  const rclone = RCLONE_PUSH;
  add('push 1,000 × 4 KiB to S3: provcat / rclone', ratio('P1', 'provcat push', rclone), 1.0);
  add(
    'push 1,000 × 4 KiB to S3: client CPU, provcat / rclone',
    cpu('P1', 'provcat push', rclone),
    1.3,
  );
  add(
    'push many files into the embedded store: provcat / cp -r + sync -f',
    ratio('P2', 'provcat push (local://)', 'cp -r + sync -f'),
    1.5,
  );
  add(
    'cold fetch of many files from the embedded store: provcat / cp -r + sync -f',
    ratio('P3', 'provcat fetch (local://, cold)', 'cp -r + sync -f'),
    1.3,
  );
  add(
    'second push of an unchanged folder: provcat / find + walk',
    ratio('P4', 'provcat push (unchanged)', 'find -printf + provcat walk'),
    2.0,
  );
}
