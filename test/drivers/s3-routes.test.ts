/**
 * The lean path's routes kept between processes (drivers/s3/route-store.ts): the fingerprint
 * changes with every input of the SDK's endpoint resolution and only then, old entries are
 * ignored, a broken file or cache never fails a call, and on a real server without forced path
 * style a later process goes lean from its first request, while a stale stored route still gives
 * the right answer (through the SDK) and is replaced by the fresh one.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { createServer, Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3Store } from '../../drivers/s3/index.js';
import { LeanPath } from '../../drivers/s3/lean-path.js';
import type { Route } from '../../drivers/s3/route.js';
import {
  ENDPOINT_ENV,
  type EndpointSettings,
  endpointInputs,
  ROUTE_MAX_AGE_MS,
  RouteStore,
  routeFingerprint,
} from '../../drivers/s3/route-store.js';
import { Http1Pool } from '../../src/net/http1-download.js';
import { createTestBucket, describeS3, dropTestBucket, putTestObjects } from '../setup/s3.js';

const run = promisify(execFile);

const tempDir = (label: string) => mkdtempSync(path.join(tmpdir(), `provcat-routes-${label}-`));

describe('route fingerprint', () => {
  const base: EndpointSettings = {
    region: 'us-east-1',
    endpoint: undefined,
    forcePathStyle: false,
    ignoreConfiguredEndpointUrls: false,
  };
  const fingerprint = async (settings: Partial<EndpointSettings>, env: NodeJS.ProcessEnv) =>
    routeFingerprint(await endpointInputs({ ...base, ...settings }, env));

  it('is the same for the same inputs, in any order', async () => {
    const env = { HOME: tempDir('home') };
    const first = await fingerprint({}, env);
    expect(first).toMatch(/^[0-9a-f]{32}$/);
    expect(await fingerprint({}, { ...env })).toBe(first);
    const inputs = await endpointInputs(base, env);
    expect(routeFingerprint(Object.fromEntries(Object.entries(inputs).reverse()))).toBe(first);
    // Variables the SDK does not read for endpoints do not matter.
    expect(await fingerprint({}, { ...env, AWS_SECRET_ACCESS_KEY: 'x', PATH: '/x' })).toBe(first);
  });

  it('changes with the region, the endpoint and the addressing settings', async () => {
    const env = { HOME: tempDir('home') };
    const all = [
      await fingerprint({}, env),
      await fingerprint({ region: 'eu-west-1' }, env),
      await fingerprint({ endpoint: 'http://127.0.0.1:7480' }, env),
      await fingerprint({ endpoint: 'http://127.0.0.1:7481' }, env),
      await fingerprint({ forcePathStyle: true }, env),
      await fingerprint({ ignoreConfiguredEndpointUrls: true }, env),
    ];
    expect(new Set(all).size).toBe(all.length);
  });

  it('changes with each environment input the SDK reads for endpoints', async () => {
    expect(ENDPOINT_ENV).toEqual(
      expect.arrayContaining([
        'AWS_USE_FIPS_ENDPOINT',
        'AWS_USE_DUALSTACK_ENDPOINT',
        'AWS_S3_US_EAST_1_REGIONAL_ENDPOINT',
        'AWS_S3_USE_ARN_REGION',
        'AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS',
        'AWS_PROFILE',
        'AWS_CONFIG_FILE',
      ]),
    );
    const env = { HOME: tempDir('home') };
    const all = [await fingerprint({}, env)];
    for (const name of ENDPOINT_ENV) all.push(await fingerprint({}, { ...env, [name]: 'true' }));
    // A value changed (not only set) changes it too.
    all.push(await fingerprint({}, { ...env, AWS_USE_DUALSTACK_ENDPOINT: 'false' }));
    expect(new Set(all).size).toBe(all.length);
  });

  it('changes when the shared config or credentials file is created or edited', async () => {
    const home = tempDir('home');
    const env = { HOME: home };
    const aws = path.join(home, '.aws');
    mkdirSync(aws);
    const seen = [await fingerprint({}, env)];
    writeFileSync(path.join(aws, 'config'), '[default]\n');
    seen.push(await fingerprint({}, env));
    writeFileSync(path.join(aws, 'config'), '[default]\nuse_fips_endpoint = true\n');
    seen.push(await fingerprint({}, env));
    // Same size, later mtime.
    const later = new Date(Date.now() + 60_000);
    utimesSync(path.join(aws, 'config'), later, later);
    seen.push(await fingerprint({}, env));
    writeFileSync(path.join(aws, 'credentials'), '[default]\n');
    seen.push(await fingerprint({}, env));
    // A config file named by AWS_CONFIG_FILE (with the SDK's `~/`) is the one that counts.
    writeFileSync(path.join(home, 'other-config'), '[default]\n');
    seen.push(await fingerprint({}, { ...env, AWS_CONFIG_FILE: '~/other-config' }));
    expect(new Set(seen).size).toBe(seen.length);
    // Unchanged files: unchanged fingerprint.
    expect(await fingerprint({}, env)).toBe(seen[4]);
  });
});

describe('route store', () => {
  const route = (host: string): Route => ({
    url: new URL(`https://${host}/`),
    signingRegion: 'eu-west-1',
    signingName: 's3',
  });
  const open = (dir: string, clock: { now: number }, said: string[] = []) =>
    new RouteStore({
      dir,
      inputs: async () => ({ region: 'eu-west-1' }),
      debug: (m) => said.push(m),
      now: () => clock.now,
    });

  it('keeps routes for 24 hours, merged across stores, and ignores older or future ones', async () => {
    const dir = tempDir('store');
    const clock = { now: 1_800_000_000_000 };
    const a = open(dir, clock);
    a.save('object:one', route('one.example'));
    await a.flush();
    clock.now += 1000;
    const b = open(dir, clock);
    b.save('bucket:two', route('two.example'));
    await b.flush();
    expect(readdirSync(dir)).toHaveLength(1);

    clock.now += ROUTE_MAX_AGE_MS - 2000;
    const fresh = await open(dir, clock).load();
    expect([...fresh.keys()].sort()).toEqual(['bucket:two', 'object:one']);
    expect(fresh.get('object:one')).toEqual(route('one.example'));

    clock.now += 1500; // 'object:one' is now older than 24 h, 'bucket:two' is not
    expect([...(await open(dir, clock).load()).keys()]).toEqual(['bucket:two']);
    clock.now += ROUTE_MAX_AGE_MS;
    expect((await open(dir, clock).load()).size).toBe(0);
    // Dated in the future (a clock set back): not trusted either.
    expect((await open(dir, { now: 1_700_000_000_000 }).load()).size).toBe(0);
  });

  it('drops a route, and writes nothing for one it does not hold', async () => {
    const dir = tempDir('store');
    const clock = { now: 1_800_000_000_000 };
    const said: string[] = [];
    const s = open(dir, clock, said);
    s.save('object:one', route('one.example'));
    s.save('object:two', route('two.example'));
    s.drop('object:one');
    s.drop('object:none');
    await s.flush();
    expect([...(await open(dir, clock).load()).keys()]).toEqual(['object:two']);
    expect(said.filter((m) => m.includes('written'))).toHaveLength(3);
  });

  it('ignores a corrupt file (logged) and replaces it on the next save', async () => {
    const dir = tempDir('store');
    const clock = { now: 1_800_000_000_000 };
    const said: string[] = [];
    const s = open(dir, clock, said);
    const file = await s.path();
    mkdirSync(dir, { recursive: true });
    for (const text of ['{"format":1,"rou', '[1,2]', '{"format":99,"routes":{}}', 'null']) {
      writeFileSync(file, text);
      expect((await open(dir, clock, said).load()).size).toBe(0);
    }
    expect(said.filter((m) => m.includes('ignoring'))).toHaveLength(4);
    // Malformed entries are skipped, good ones kept.
    writeFileSync(
      file,
      JSON.stringify({
        format: 1,
        routes: {
          'object:ok': {
            url: 'https://ok/',
            signingRegion: 'r',
            signingName: 's3',
            learnedAt: clock.now,
          },
          'object:query': {
            url: 'https://q/?x=1',
            signingRegion: 'r',
            signingName: 's3',
            learnedAt: clock.now,
          },
          'object:ftp': {
            url: 'ftp://f/',
            signingRegion: 'r',
            signingName: 's3',
            learnedAt: clock.now,
          },
          'object:nodate': { url: 'https://n/', signingRegion: 'r', signingName: 's3' },
          'other:kind': {
            url: 'https://k/',
            signingRegion: 'r',
            signingName: 's3',
            learnedAt: clock.now,
          },
        },
      }),
    );
    expect([...(await open(dir, clock).load()).keys()]).toEqual(['object:ok']);
    writeFileSync(file, 'garbage');
    s.save('object:one', route('one.example'));
    await s.flush();
    expect([...(await open(dir, clock).load()).keys()]).toEqual(['object:one']);
  });

  it('never fails when the directory cannot be written or read (logged)', async () => {
    const parent = tempDir('store');
    const blocker = path.join(parent, 'a-file');
    writeFileSync(blocker, 'not a directory');
    const said: string[] = [];
    const s = open(path.join(blocker, 's3-routes'), { now: 1_800_000_000_000 }, said);
    expect((await s.load()).size).toBe(0);
    s.save('object:one', route('one.example'));
    await s.flush();
    expect(said.some((m) => m.includes('could not save object:one'))).toBe(true);
  });
});

describe('lean path on a stored route', () => {
  /**
   * A LeanPath whose only route is one stored hint for `object:b` at a local server answering
   * with `status()`; the calls it makes to the route store are recorded.
   */
  const setup = async (status: () => number) => {
    let asked = 0;
    const server = createServer((_req, res) => {
      asked += 1;
      res.writeHead(status(), { etag: '"e"', 'content-length': '0' }).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const calls: string[] = [];
    const downloads = new Http1Pool();
    const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent() };
    const lean = new LeanPath({
      agents,
      downloads,
      socketTimeoutMs: 5000,
      stored: {
        load: async () => {
          calls.push('load');
          return new Map([
            [
              'object:b',
              { url: new URL(`http://127.0.0.1:${port}/b`), signingRegion: 'r', signingName: 's3' },
            ],
          ]);
        },
        save: (id) => calls.push(`save ${id}`),
        drop: (id) => calls.push(`drop ${id}`),
      },
      signer: async () => ({ sign: async (request) => ({ headers: request.headers }) }),
      clockOffset: () => 0,
      debug: () => {},
    });
    const close = () => {
      server.close();
      downloads.close();
      agents.http.destroy();
    };
    return { lean, calls, asked: () => asked, close };
  };

  it('drops a stored route that fails, and does not ask it again', async () => {
    for (const failing of [403, 301, 400, 500]) {
      const t = await setup(() => failing);
      try {
        expect(await t.lean.head('b', 'k', {})).toBeUndefined();
        expect(await t.lean.get('b', 'k', {})).toBeUndefined();
        expect(await t.lean.head('b', 'k', {})).toBeUndefined();
        expect(t.asked()).toBe(1);
        expect(t.calls).toEqual(['load', 'drop object:b']);
      } finally {
        t.close();
      }
    }
  });

  it('takes a 404 on an unconfirmed stored route to the SDK, and as NotFound once confirmed', async () => {
    const t = await setup(() => 404);
    try {
      // Unconfirmed: not NotFound, the SDK is to answer; the route is dropped.
      expect(await t.lean.head('b', 'k', {})).toBeUndefined();
      expect(t.calls).toEqual(['load', 'drop object:b']);
    } finally {
      t.close();
    }
    let status = 200;
    const u = await setup(() => status);
    try {
      expect(await u.lean.head('b', 'k', {})).toBeDefined();
      status = 404;
      await expect(u.lean.head('b', 'k', {})).rejects.toMatchObject({ name: 'NotFound' });
      await expect(u.lean.get('b', 'k', {})).rejects.toMatchObject({ name: 'NotFound' });
      expect(u.calls).toEqual(['load']);
    } finally {
      u.close();
    }
  });

  it('an aborted request says nothing about the stored route', async () => {
    const t = await setup(() => 200);
    try {
      const aborted = AbortSignal.abort();
      expect(await t.lean.head('b', 'k', { signal: aborted })).toBeUndefined();
      expect(await t.lean.head('b', 'k', {})).toBeDefined();
      expect(t.calls).toEqual(['load']);
    } finally {
      t.close();
    }
  });
});

describeS3('stored routes against the server (no forced path style)', () => {
  let bucket = '';
  let prefix = '';
  const probe = path.join(import.meta.dirname, '..', 'fixtures', 's3-routes-probe.mjs');
  /** Routes not fixed: the SDK's ruleset decides (path style for an IP endpoint). */
  const routeEnv = { PROVCAT_S3_FORCE_PATH_STYLE: '' };

  const runProbe = async (cache: string, ops: string, env: Record<string, string> = {}) => {
    const { stdout } = await run(process.execPath, [probe, bucket, prefix, cache], {
      env: { ...process.env, ...routeEnv, OPS: ops, ...env },
    });
    return JSON.parse(stdout) as Record<string, unknown>;
  };
  const routeDir = (cache: string) => path.join(cache, 'v1', 's3-routes');
  const routeFile = (cache: string) => {
    const files = readdirSync(routeDir(cache));
    expect(files).toHaveLength(1);
    return path.join(routeDir(cache), files[0] as string);
  };
  type RouteFile = { routes: Record<string, { url: string; learnedAt?: number }> };
  /** The stored routes, without when they were learned. */
  const readRoutes = (file: string) => {
    const content = JSON.parse(readFileSync(file, 'utf8')) as RouteFile;
    for (const entry of Object.values(content.routes)) delete entry.learnedAt;
    return content;
  };
  const setRoute = (file: string, id: string, url: string) => {
    const content = JSON.parse(readFileSync(file, 'utf8')) as RouteFile;
    const entry = content.routes[id];
    if (!entry) throw new Error(`no stored route ${id} in ${file}`);
    entry.url = url;
    writeFileSync(file, JSON.stringify(content));
  };
  const a = () => `s3://${bucket}/${prefix}a.txt`;
  const store = (cache: string, said: string[] = []) =>
    new S3Store({ cache, forcePathStyle: false, logger: (m) => said.push(m) });
  const builtClient = (said: string[]) => said.some((m) => m.startsWith('client: region'));

  /** A cache whose route file holds the routes a first store learned; and those routes. */
  const learnedCache = async () => {
    const cache = tempDir('cache');
    const first = store(cache);
    await first.stat(a());
    await first.list(`s3://${bucket}/${prefix}`);
    await first.close();
    const file = routeFile(cache);
    const learned = readRoutes(file).routes;
    expect(Object.keys(learned).sort()).toEqual([`bucket:${bucket}`, `object:${bucket}`]);
    return { cache, file, learned };
  };

  beforeAll(async () => {
    bucket = await createTestBucket('routes');
    prefix = `routes-${Date.now()}/`;
    await putTestObjects(bucket, {
      [`${prefix}a.txt`]: 'hello routes',
      [`${prefix}sub/b.txt`]: 'in a folder',
    });
  }, 60_000);

  afterAll(() => dropTestBucket(bucket, prefix), 60_000);

  it('a later process reads lean from its first request; other endpoint inputs do not reuse the route', async () => {
    const cache = tempDir('cache');
    const first = await runProbe(cache, 'stat,list');
    expect(first).toMatchObject({ stat: { size: 12 }, sdkRequested: true });
    expect(Object.keys(readRoutes(routeFile(cache)).routes).sort()).toEqual([
      `bucket:${bucket}`,
      `object:${bucket}`,
    ]);

    const second = await runProbe(cache, 'stat,file,folder,list');
    expect(second).toEqual({
      stat: first.stat,
      file: 'hello routes',
      folder: { files: 2 },
      list: [`s3://${bucket}/${prefix}a.txt`, `s3://${bucket}/${prefix}sub/`],
      sdkRequested: false,
    });

    // Another endpoint input or region: another fingerprint, so the SDK resolves again.
    const others: Record<string, string>[] = [
      { AWS_S3_USE_ARN_REGION: 'true' },
      { AWS_REGION: 'eu-west-1' },
    ];
    for (const env of others) {
      const other = await runProbe(cache, 'stat', env);
      expect(other).toEqual({ stat: first.stat, sdkRequested: true });
    }
    expect(readdirSync(routeDir(cache))).toHaveLength(3);
  }, 60_000);

  it('a stored route that refuses connections: right answer through the SDK, route replaced', async () => {
    const { cache, file, learned } = await learnedCache();
    setRoute(file, `object:${bucket}`, `http://127.0.0.2:9/${bucket}`);
    const said: string[] = [];
    const s = store(cache, said);
    expect((await s.stat(a())).size).toBe(12);
    expect(said.some((m) => m.includes(`stored route of object:${bucket} failed`))).toBe(true);
    expect(builtClient(said)).toBe(true);
    await s.close();
    expect(readRoutes(file).routes).toEqual(learned);
  });

  it('a stored route with a wrong path (404 for a key that exists) is not taken as NotFound', async () => {
    const { cache, file, learned } = await learnedCache();
    const wrong = (id: string) => {
      const url = new URL(learned[id]?.url as string);
      url.pathname = `${url.pathname.replace(/\/$/, '')}/no-such-${randomBytes(4).toString('hex')}`;
      return url.href;
    };
    setRoute(file, `object:${bucket}`, wrong(`object:${bucket}`));
    setRoute(file, `bucket:${bucket}`, wrong(`bucket:${bucket}`));
    const said: string[] = [];
    const s = store(cache, said);
    expect((await s.stat(a())).size).toBe(12);
    expect((await s.list(`s3://${bucket}/${prefix}`)).map((e) => e.uri.toString()).sort()).toEqual([
      `s3://${bucket}/${prefix}a.txt`,
      `s3://${bucket}/${prefix}sub/`,
    ]);
    await s.close();
    expect(readRoutes(file).routes).toEqual(learned);
    // A fresh store's single-file fetch (one GET) on a wrong stored route still gets the bytes.
    setRoute(file, `object:${bucket}`, wrong(`object:${bucket}`));
    const t = store(cache);
    expect(readFileSync((await t.fetch(a())).path, 'utf8')).toBe('hello routes');
    await t.close();
    expect(readRoutes(file).routes).toEqual(learned);
  });

  it('a failed stored route is not asked again: the next requests use the SDK and what it learned', async () => {
    const { cache, file } = await learnedCache();
    let asked = 0;
    const server = createServer((_req, res) => {
      asked += 1;
      res.writeHead(403).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      setRoute(file, `object:${bucket}`, `http://127.0.0.1:${port}/${bucket}`);
      const s = store(cache);
      expect((await s.stat(a())).size).toBe(12);
      expect((await s.stat(a())).size).toBe(12);
      expect(readFileSync((await s.fetch(a())).path, 'utf8')).toBe('hello routes');
      await s.close();
      expect(asked).toBe(1);
    } finally {
      server.close();
    }
  });

  it('a missing key is NotFound: through the SDK on an unconfirmed stored route, lean once confirmed', async () => {
    const { cache, file, learned } = await learnedCache();
    const missing = `s3://${bucket}/${prefix}no-such-key`;
    const said: string[] = [];
    const s = store(cache, said);
    await expect(s.stat(missing)).rejects.toMatchObject({ name: 'NotFound' });
    // Not confirmed by a 404: the SDK answered (and the route it resolved is stored again).
    expect(builtClient(said)).toBe(true);
    await s.close();
    expect(readRoutes(file).routes).toEqual(learned);

    const saidAfter: string[] = [];
    const t = store(cache, saidAfter);
    expect((await t.stat(a())).size).toBe(12);
    await expect(t.stat(missing)).rejects.toMatchObject({ name: 'NotFound' });
    expect(builtClient(saidAfter)).toBe(false);
    await t.close();
  });

  it('a corrupt route file is ignored and rewritten; an unwritable cache does not fail the call', async () => {
    const { cache, file, learned } = await learnedCache();
    writeFileSync(file, '{"format":1,"routes":{"object:');
    const said: string[] = [];
    const s = store(cache, said);
    expect((await s.stat(a())).size).toBe(12);
    expect(said.some((m) => m.includes('ignoring'))).toBe(true);
    await s.close();
    expect(readRoutes(file).routes[`object:${bucket}`]).toEqual(learned[`object:${bucket}`]);

    const blocker = path.join(tempDir('cache'), 'a-file');
    writeFileSync(blocker, 'not a directory');
    const saidBlocked: string[] = [];
    const u = store(path.join(blocker, 'cache'), saidBlocked);
    expect((await u.stat(a())).size).toBe(12);
    await u.close();
    expect(saidBlocked.some((m) => m.includes(`could not save object:${bucket}`))).toBe(true);
  });
});
