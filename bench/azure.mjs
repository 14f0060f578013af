// The Azure cases of `npm run bench` (issue 18; not in the default set: `--cases az`): provcat's Azure driver on Azurite, side by side with
// rclone's azureblob backend (`use_emulator`) and a raw @azure/storage-blob loop, as ratios.
//
//   node bench/run.mjs --cases az           these cases only (writes nothing unless --write)
//   node bench/azure.mjs --raw --url URL --container C --prefix P/ --dest DIR
//                                                the raw SDK peer (what run.mjs times)
//
// How: Azurite starts standalone (`npm run server:azurite -- --port PORT`, in-memory) for the
// case and stops after it; its CPU is the "server CPU" column. 1,000 × 4 KiB objects are seeded
// through the SDK in the same layout as the S3 cases. az1 is a cold folder fetch, az2 an unchanged
// refetch. provcat reads with the driver's defaults (lean reads signed with the account key),
// and once more with PROVCAT_AZURE_LEAN=0 (the SDK's reads, what the lean path is measured by);
// one extra, untimed run goes through a counting proxy for the request count. The raw SDK loop is
// plain BlobServiceClient.fromConnectionString, a listing, then download() 16 at a time streamed
// to files, as Microsoft's samples show it: no cache, no fsync, no integrity check.
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { rcloneCopy, refetchTools } from './refetch-tools.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const ACCOUNT = 'devstoreaccount1';
const KEY =
  'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';
const CONTAINER = 'provcat-bench-small-v1';
const connectionString = (url) =>
  `DefaultEndpointsProtocol=http;AccountName=${ACCOUNT};AccountKey=${KEY};BlobEndpoint=${url};`;

/** Start Azurite on `port` (the project's standalone command); resolves when it answers. */
function startAzurite(port, log) {
  const child = spawn('npm', ['run', '--silent', 'server:azurite', '--', '--port', String(port)], {
    cwd: repo,
    detached: true,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.on('exit', (code) => reject(new Error(`Azurite exited with ${code}: ${out}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /azurite ready on (\S+)/.exec(out);
      if (!m) return;
      child.stdout.removeAllListeners('data');
      child.stdout.resume();
      child.removeAllListeners('exit');
      log(`Azurite ready on ${m[1]} (pid ${child.pid})`);
      resolve({
        url: m[1],
        stop: () =>
          new Promise((done) => {
            child.once('exit', done);
            process.kill(-child.pid, 'SIGTERM');
          }),
      });
    });
  });
}

/** The Azurite process's pid (for its CPU time), found by its port. */
async function azuritePids(port) {
  const { readdirSync, readFileSync } = await import('node:fs');
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const argv = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
        return argv.some((a) => a.endsWith('blob/main.js')) && argv.includes(String(port));
      } catch {
        return false; // the process ended while we looked
      }
    });
}

/** A proxy to Azurite that counts requests by method (Shared Key does not sign the host). */
async function countingProxy(target) {
  const upstream = new URL(target);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const counts = {};
  const server = http.createServer((req, res) => {
    counts[req.method] = (counts[req.method] ?? 0) + 1;
    const up = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
        agent,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    up.on('error', (e) => res.destroy(e));
    req.pipe(up);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${server.address().port}${upstream.pathname}`,
    counts,
    close: () => {
      agent.destroy();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * The Azure cases for run.mjs: `h` carries run.mjs's helpers (runCase, tool, freshDir,
 * expectFolder, lastJson, runTimed, runQuiet, setServerPids, log, cleanups) and options.
 */
export async function azureCases(h, env) {
  const { BlobServiceClient } = await import('@azure/storage-blob');
  const port = 20000 + Math.floor(Math.random() * 20000);
  const azurite = await startAzurite(port, h.log);
  h.cleanups.push(async () => {
    h.log('stopping Azurite');
    await azurite.stop();
  });
  h.setServerPids(await azuritePids(port));
  const cs = connectionString(azurite.url);
  const azEnv = {
    ...env,
    AZURE_STORAGE_CONNECTION_STRING: cs,
    RCLONE_CONFIG_AZ_TYPE: 'azureblob',
    RCLONE_CONFIG_AZ_USE_EMULATOR: 'true',
    RCLONE_CONFIG_AZ_ENDPOINT: azurite.url,
  };
  const folder = h.folder;
  const container = BlobServiceClient.fromConnectionString(cs).getContainerClient(CONTAINER);
  await container.createIfNotExists();
  h.log(`seeding ${folder.files} × ${folder.size} B into Azurite`);
  const { randomBytes } = await import('node:crypto');
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < folder.keys.length) {
        await container
          .getBlockBlobClient(folder.keys[next++])
          .upload(randomBytes(folder.size), folder.size);
      }
    }),
  );
  const src = `az://${CONTAINER}/${folder.prefix}`;
  const rcloneSrc = `az:${CONTAINER}/${folder.prefix}`;
  const provcat = (cache, ...settings) => [
    'env',
    `PROVCAT_CACHE_DIR=${cache}`,
    ...settings,
    'node',
    h.CLI,
    'fetch',
    src,
    '--json',
  ];
  const dirTool = (name, argvOf, extra = {}) =>
    h.tool(name, {
      sample: { dir: '$DEST' },
      prepare: async () => ({ dir: await h.freshDir('dest') }),
      argv: (ctx) => argvOf(ctx.dir),
      check: (ctx) => h.expectFolder(ctx.dir, folder),
      cleanup: (ctx) => h.rm(ctx.dir, { recursive: true, force: true }),
      env: azEnv,
      ...extra,
    });
  const rclone = rcloneCopy(rcloneSrc);
  const provcatCold = (name, ...settings) =>
    h.tool(name, {
      provcat: true,
      prepare: async () => ({ cache: await h.freshDir('cache') }),
      argv: (ctx) => provcat(ctx.cache, ...settings),
      shown: `PROVCAT_CACHE_DIR=$EMPTY_CACHE ${settings.map((x) => `${x} `).join('')}provcat fetch ${src} --json`,
      check: async (_ctx, r) => {
        const out = h.lastJson(r.stdout);
        if (out.downloaded !== folder.files)
          throw new Error(`provcat downloaded ${out.downloaded}`);
        await h.expectFolder(out.path, folder);
      },
      cleanup: (ctx) => h.rm(ctx.cache, { recursive: true, force: true }),
      env: azEnv,
    });
  const cold = [
    provcatCold('provcat fetch'),
    // The driver's SDK reads instead of the lean path (what lean.ts is measured against).
    provcatCold('provcat fetch (PROVCAT_AZURE_LEAN=0)', 'PROVCAT_AZURE_LEAN=0'),
    dirTool('rclone copy --transfers 16', (dir) => rclone(dir)),
    dirTool('raw SDK loop (16 at a time)', (dir) => [
      'node',
      path.join(here, 'azure.mjs'),
      '--raw',
      '--url',
      azurite.url,
      '--container',
      CONTAINER,
      '--prefix',
      folder.prefix,
      '--dest',
      dir,
    ]),
    dirTool(
      'rclone copy + sync -f (durable)',
      (dir) => ['sh', '-c', `${rclone('"$1"').join(' ')} && sync -f "$1"`, 'sh', dir],
      { shown: `${rclone('$DEST').join(' ')} && sync -f $DEST` },
    ),
  ];
  const counted = async (argv) => {
    const proxy = await countingProxy(azurite.url);
    try {
      await h.runTimed(argv, { ...azEnv, PROVCAT_AZURE_ENDPOINT: proxy.endpoint });
      return {
        total: Object.values(proxy.counts).reduce((a, b) => a + b, 0),
        byMethod: { ...proxy.counts },
      };
    } finally {
      await proxy.close();
    }
  };
  cold[0].requests = await counted(provcat(await h.freshDir('count')));
  const name = `${folder.files.toLocaleString('en')} × ${folder.size / 1024} KiB`;
  const out = [
    await h.runCase(
      {
        id: 'az1',
        title: `Azure (Azurite): cold folder fetch, ${name}`,
        tools: cold,
        runs: h.RUNS,
      },
      azEnv,
    ),
  ];

  const again = await refetchTools(h, {
    provcat,
    rclone,
    src,
    remote: rcloneSrc,
    folder,
    env: azEnv,
    label: 'az',
  });
  again[0].requests = await counted(again[0].argv());
  // The same refetch on the driver's SDK reads: the listing then loads @azure/storage-blob.
  const [envWord, cacheSetting, ...rest] = again[0].argv();
  again.splice(1, 0, {
    ...again[0],
    name: 'provcat fetch (cached, PROVCAT_AZURE_LEAN=0)',
    argv: () => [envWord, cacheSetting, 'PROVCAT_AZURE_LEAN=0', ...rest],
    shown: again[0].shown.replace('provcat fetch', 'PROVCAT_AZURE_LEAN=0 provcat fetch'),
    requests: undefined,
  });
  out.push(
    await h.runCase(
      {
        id: 'az2',
        title: `Azure (Azurite): unchanged refetch, ${name}`,
        tools: again,
        runs: h.RUNS,
      },
      azEnv,
    ),
  );
  return out;
}

/** The issue-18 targets, added with run.mjs's `add` and `ratio` (as gcs.mjs does). */
export function azureTargets(add, ratio) {
  const cold = (peer) => ratio('az1', 'provcat fetch', peer);
  add('Azure cold 1,000 × 4 KiB: provcat / rclone', cold('rclone copy --transfers 16'), 1.0);
  add('Azure cold 1,000 × 4 KiB: provcat / raw SDK loop', cold('raw SDK loop (16 at a time)'), 0.6);
  add(
    'Azure unchanged refetch 1,000 × 4 KiB: provcat / rclone default',
    ratio('az2', 'provcat fetch (cached)', 'rclone copy (default)'),
    0.5,
  );
}

// ---- the raw SDK peer ---------------------------------------------------------------------------

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values: o } = parseArgs({
    options: {
      raw: { type: 'boolean' },
      url: { type: 'string' },
      container: { type: 'string' },
      prefix: { type: 'string', default: '' },
      dest: { type: 'string' },
    },
  });
  if (!o.raw || !o.url || !o.container || !o.dest) {
    throw new Error('usage: azure.mjs --raw --url URL --container C --prefix P/ --dest DIR');
  }
  const { BlobServiceClient } = await import('@azure/storage-blob');
  const container = BlobServiceClient.fromConnectionString(
    connectionString(o.url),
  ).getContainerClient(o.container);
  const keys = [];
  for await (const b of container.listBlobsFlat({ prefix: o.prefix })) keys.push(b.name);
  let next = 0;
  let bytes = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < keys.length) {
        const key = keys[next++];
        const file = path.join(o.dest, key.slice(o.prefix.length));
        await mkdir(path.dirname(file), { recursive: true });
        const r = await container.getBlobClient(key).download();
        await pipeline(r.readableStreamBody, createWriteStream(file));
        bytes += r.contentLength ?? 0;
      }
    }),
  );
  console.log(JSON.stringify({ files: keys.length, bytes }));
}
