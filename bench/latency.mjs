// The latency cases of the benchmark (`node bench/run.mjs --cases L`): a cold folder fetch
// (L1) and an unchanged refetch (L2) of 1,000 × 4 KiB through a delay proxy in front of Ceph at
// 20 ms round trips, provcat against rclone through the same proxy, and the round-trip bound;
// and the cold fetch again at 80 ms (L3), where round trips outweigh this machine's CPU.
//
// - Every other case runs with client and server on one machine (sub-millisecond round trips),
//   where CPU per request decides. Real buckets are 10–50 ms away, where the number of requests
//   in flight decides. The kernel here has no netem, so the delay is the project's own fault
//   proxy (src/testing/fault-proxy.ts, built into dist/ by `npm run bench`) holding every
//   byte 10 ms each way: 20 ms per round trip on a keep-alive connection. It does not delay
//   connection setup (a real network adds one round trip per new connection, and two with TLS).
// - The round trip is measured (median of small GETs on one keep-alive connection through the
//   proxy), and so is one listing page of the folder, so the bound
//   `ceil(1000 / in-flight) × round trip + listing` uses what this run saw, at the in-flight
//   count provcat reached (its `provcat:fetch` debug log says when the window grows) and at 16.
// - The proxy runs in a process of its own (delay-proxy.mjs); its CPU is not charged to any tool.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { rcloneCopy, refetchTools } from './refetch-tools.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** Start delay-proxy.mjs in front of `target`; resolves with its URL and a stop function. */
async function startProxy(target, oneWayMs) {
  const child = spawn(
    process.execPath,
    [path.join(here, 'delay-proxy.mjs'), '--target', target, '--ms', String(oneWayMs)],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
  });
  const deadline = Date.now() + 10_000;
  while (!out.includes('\n')) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill();
      throw new Error(`the delay proxy did not start: ${out}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return {
    url: out.trim(),
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await once(child, 'exit');
    },
  };
}

/** Median milliseconds of `n` GETs of `url` on one keep-alive connection (after one warm-up). */
async function roundTrip(url, n = 21) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const get = () =>
    new Promise((resolve, reject) => {
      const t0 = performance.now();
      http
        .get(url, { agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(performance.now() - t0));
        })
        .on('error', reject);
    });
  await get();
  const xs = [];
  for (let i = 0; i < n; i++) xs.push(await get());
  agent.destroy();
  return median(xs);
}

/** Median milliseconds of one ListObjectsV2 page of the folder, through the proxy. */
async function listingMs(proxyUrl, bucket, prefix, creds) {
  const sdk = await import('@aws-sdk/client-s3');
  const client = new sdk.S3Client({
    endpoint: proxyUrl,
    forcePathStyle: true,
    region: creds.AWS_REGION,
    credentials: {
      accessKeyId: creds.AWS_ACCESS_KEY_ID,
      secretAccessKey: creds.AWS_SECRET_ACCESS_KEY,
    },
  });
  const xs = [];
  for (let i = 0; i < 6; i++) {
    const t0 = performance.now();
    await client.send(new sdk.ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
    if (i > 0) xs.push(performance.now() - t0);
  }
  client.destroy();
  return median(xs);
}

/** The largest window provcat's folder fetch reached (its debug log), else where it starts. */
function windowReached(argv, env) {
  const r = spawnSync(argv[0], argv.slice(1), {
    env: { ...env, NODE_DEBUG: 'provcat:fetch' },
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0) throw new Error(`${argv.join(' ')} exited with ${r.status}: ${r.stderr}`);
  const grown = [...r.stderr.matchAll(/: (\d+) in flight/g)].map((m) => Number(m[1]));
  return grown.length ? Math.max(...grown) : 16;
}

/**
 * Run the latency cases with the harness of run.mjs (`h`: runCase, tool, freshDir,
 * expectFolder, lastJson, runQuiet, rm, env, creds, endpoint, bucket, folder, CLI, runs, log,
 * cleanups); resolves with the cases and the measured figures for the targets.
 */
export async function latencyCases(h) {
  return [
    ...(await latencyRun(h, { oneWayMs: 10, cold: 'L1', refetch: 'L2', fixed: true })),
    // Where round trips do dominate this machine's CPU: the cold fetch alone.
    ...(await latencyRun(h, { oneWayMs: 40, cold: 'L3' })),
  ];
}

/**
 * One delay: a cold fetch case (`cold`; with `fixed`, provcat at a fixed 16 in flight too) and,
 * when `refetch` names one, the unchanged refetch case.
 */
async function latencyRun(h, { oneWayMs, cold: coldId, refetch: refetchId, fixed = false }) {
  const proxy = await startProxy(h.endpoint, oneWayMs);
  h.cleanups.push(() => proxy.stop());
  const rtt = await roundTrip(`${proxy.url}/`);
  const listing = await listingMs(proxy.url, h.bucket, h.folder.prefix, h.creds);
  h.log(
    `latency proxy on ${proxy.url}: round trip ${rtt.toFixed(1)} ms, listing ${listing.toFixed(1)} ms`,
  );
  const env = {
    ...h.env,
    AWS_ENDPOINT_URL_S3: proxy.url,
    RCLONE_CONFIG_CEPH_ENDPOINT: proxy.url,
  };
  const { folder } = h;
  const name = `${folder.files.toLocaleString('en')} × ${folder.size / 1024} KiB`;
  const src = `s3://${h.bucket}/${folder.prefix}`;
  const remote = `ceph:${h.bucket}/${folder.prefix}`;
  const provcat = (cache, ...extra) => [
    'env',
    `PROVCAT_CACHE_DIR=${cache}`,
    'node',
    h.CLI,
    'fetch',
    src,
    ...extra,
    '--json',
  ];
  const rclone = rcloneCopy(remote);
  const provcatCold = (name, ...extra) =>
    h.tool(name, {
      provcat: true,
      prepare: async () => ({ cache: await h.freshDir('latency-cache') }),
      argv: (ctx) => provcat(ctx.cache, ...extra),
      shown: `PROVCAT_CACHE_DIR=$EMPTY_CACHE provcat fetch ${src}${extra.length ? ` ${extra.join(' ')}` : ''} --json`,
      check: async (_ctx, r) => {
        const out = h.lastJson(r.stdout);
        if (out.downloaded !== folder.files)
          throw new Error(`provcat downloaded ${out.downloaded}`);
        await h.expectFolder(out.path, folder);
      },
      cleanup: (ctx) => h.rm(ctx.cache),
    });
  const cold = [
    provcatCold('provcat fetch'),
    ...(fixed ? [provcatCold('provcat fetch --concurrency 16', '--concurrency', '16')] : []),
    h.tool('rclone copy --transfers 16', {
      prepare: async () => ({ dir: await h.freshDir('latency-dest') }),
      argv: (ctx) => rclone(ctx.dir),
      shown: `rclone copy --transfers 16 --checkers 16 ${remote} $DEST`,
      check: (ctx) => h.expectFolder(ctx.dir, folder),
      cleanup: (ctx) => h.rm(ctx.dir),
    }),
  ];
  const reached = windowReached(provcat(await h.freshDir('latency-window')), env);
  const bound = (inFlight) => (Math.ceil(folder.files / inFlight) * rtt + listing) / 1000;
  h.log(
    `provcat's window reached ${reached}: bound ${bound(reached).toFixed(2)} s (at 16: ${bound(16).toFixed(2)} s)`,
  );
  const cases = [];
  cases.push(
    await h.runCase(
      {
        id: coldId,
        title: `cold folder fetch, ${name}, ${2 * oneWayMs} ms round trips`,
        tools: cold,
        runs: h.runs,
        note: `round trip ${rtt.toFixed(1)} ms, listing ${listing.toFixed(1)} ms (measured through the proxy); provcat's window reached ${reached}; bound ceil(${folder.files} / in-flight) × round trip + listing: ${bound(reached).toFixed(2)} s at ${reached}, ${bound(16).toFixed(2)} s at 16`,
      },
      env,
    ),
  );
  const figures = {
    rttMs: rtt,
    listingMs: listing,
    windowReached: reached,
    boundSeconds: bound(reached),
    bound16Seconds: bound(16),
  };
  cases[0].latency = figures;
  if (refetchId === undefined) {
    await proxy.stop();
    return cases;
  }
  const warm = await refetchTools(h, {
    provcat,
    rclone,
    src,
    remote,
    folder,
    env,
    label: 'latency',
  });
  cases.push(
    await h.runCase(
      {
        id: refetchId,
        title: `unchanged refetch, ${name}, ${2 * oneWayMs} ms round trips`,
        tools: warm,
        runs: h.runs,
      },
      env,
    ),
  );
  cases[1].latency = figures;
  await proxy.stop();
  return cases;
}

/** The latency targets of issue 21, added with run.mjs's `add`, `ratio` and `row`. */
export function latencyTargets(add, ratio, row, result) {
  add(
    'latency cold 1,000 × 4 KiB: provcat / rclone',
    ratio('L1', 'provcat fetch', 'rclone copy --transfers 16'),
    0.6,
  );
  const l1 = result.cases.find((c) => c.id === 'L1');
  const provcat = row('L1', 'provcat fetch');
  if (l1?.latency && provcat) {
    add(
      `latency cold 1,000 × 4 KiB: provcat / bound at its window (${l1.latency.windowReached})`,
      provcat.median / l1.latency.boundSeconds,
      1.5,
    );
  }
  const l3 = ratio('L3', 'provcat fetch', 'rclone copy --transfers 16');
  add('latency cold 1,000 × 4 KiB at 80 ms: provcat / rclone (not in the issue)', l3, 0.6);
  add(
    'latency unchanged refetch 1,000 × 4 KiB: provcat / rclone default',
    ratio('L2', 'provcat fetch (cached)', 'rclone copy (default)'),
    0.5,
  );
}
