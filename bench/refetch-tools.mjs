// The tools of an unchanged-refetch case, the same for every store's cases (run.mjs's 3a/3b,
// gcs.mjs, azure.mjs, latency.mjs): provcat fetching a folder its cache already holds, and
// rclone copying into a folder that already holds it, by default (a HEAD per file for its
// modification time) and with `--use-server-modtime` (the listing alone).

/** `rclone copy` from `remote` the way every case runs it: `(dir, ...extra) => argv`. */
export function rcloneCopy(remote) {
  return (dir, ...extra) => [
    'rclone',
    'copy',
    ...extra,
    '--transfers',
    '16',
    '--checkers',
    '16',
    remote,
    dir,
  ];
}

/**
 * Populate a provcat cache and an rclone folder with `folder` (untimed), then return the three
 * tools. `provcat(cache)` and `rclone(dir, ...extra)` give the commands, `src` and `remote`
 * the names shown; `env`, when given, is set on every tool. The provcat tool's check fails the
 * run unless it was a no-op that saw every file.
 */
export async function refetchTools(h, { provcat, rclone, src, remote, folder, env, label }) {
  const cache = await h.freshDir(`${label}-refetch-cache`);
  const dir = await h.freshDir(`${label}-refetch-rclone`);
  h.runQuiet(provcat(cache), env ?? h.env);
  h.runQuiet(rclone(dir), env ?? h.env);
  await h.expectFolder(dir, folder);
  const shownRclone = (...extra) => rcloneCopy(remote)('$DEST', ...extra).join(' ');
  const withEnv = env === undefined ? {} : { env };
  return [
    h.tool('provcat fetch (cached)', {
      provcat: true,
      argv: () => provcat(cache),
      shown: `PROVCAT_CACHE_DIR=$CACHE provcat fetch ${src} --json`,
      check: (_ctx, r) => {
        const out = h.lastJson(r.stdout);
        if (out.downloaded !== 0 || out.files !== folder.files) {
          throw new Error(`provcat refetch was not a no-op: ${r.stdout}`);
        }
      },
      ...withEnv,
    }),
    h.tool('rclone copy (default)', {
      argv: () => rclone(dir),
      shown: shownRclone(),
      ...withEnv,
    }),
    h.tool('rclone copy --use-server-modtime', {
      argv: () => rclone(dir, '--use-server-modtime'),
      shown: shownRclone('--use-server-modtime'),
      ...withEnv,
    }),
  ];
}
