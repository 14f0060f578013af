/**
 * The CLI with `az://` URIs, as a script runs it: `mb` on Azurite (and its refusal of
 * `--versioning` there), put, stat, ls, walk, fetch (a refetch transfers nothing), push (a second
 * push of an unchanged folder sends nothing), rm, a pin
 * refused with the reason, managed upload/cat/verify with an `az://` stage; and on the versions
 * server pin, commit, log and branch. Configuration comes from AZURE_STORAGE_CONNECTION_STRING,
 * as a user's would.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AzureVersionsServer } from '../../servers/azure-versions/index.js';
import { startAzureVersionsServer } from '../../servers/azure-versions/index.js';
import {
  azureTarget,
  azuriteServiceClient,
  describeAzurite,
  uniqueContainerName,
} from '../setup/azure.js';

const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

function cli(connectionString: () => string) {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-azcli-'));
  // Asynchronously: the versions server answers from this process's event loop.
  const run = (...args: string[]) =>
    new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const env = {
        ...process.env,
        PROVCAT_CACHE_DIR: path.join(dir, 'cache'),
        AZURE_STORAGE_CONNECTION_STRING: connectionString(),
      };
      execFile(process.execPath, [BIN, ...args], { env }, (error, out, err) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, out, err }),
      );
    });
  const json = async (...args: string[]) => {
    const r = await run(...args, '--json');
    expect(r.code, r.err).toBe(0);
    return JSON.parse(r.out);
  };
  return { dir, run, json };
}

describeAzurite('provcat CLI on Azurite (az://)', () => {
  const { dir, run, json } = cli(() => azureTarget().connectionString);
  const c = uniqueContainerName('cli');
  afterAll(async () => {
    await azuriteServiceClient().getContainerClient(c).deleteIfExists();
  });

  it('mb, put, stat, ls, walk, fetch, rm; --versioning and pin refused with the reason', async () => {
    expect(await json('mb', `az://${c}`)).toEqual({ uri: `az://${c}/`, versioning: false });
    const refused = await run('mb', `az://${c}`, '--versioning');
    expect(refused.code).toBe(11); // NotSupported
    expect(refused.err).toMatch(/keeps no versions.*enable-versioning/);
    const local = path.join(dir, 'x.txt');
    writeFileSync(local, 'hello');
    for (const key of ['d/x.txt', 'd/sub/y.txt', 'd/\u{1F600}.txt', 'd/\uff61.txt']) {
      expect(
        await json('put', local, `az://${c}/${encodeURIComponent(key).replaceAll('%2F', '/')}`),
      ).toMatchObject({ size: 5 });
    }
    expect(await json('stat', `az://${c}/d/x.txt`)).toMatchObject({ kind: 'file', size: 5 });
    const ls = await json('ls', `az://${c}/d/`);
    expect(
      ls.map((e: { uri: string }) => decodeURIComponent(e.uri.slice(`az://${c}/d/`.length))),
    ).toEqual(
      ['x.txt', '\uff61.txt', '\u{1F600}.txt', 'sub/'].sort((a, b) =>
        Buffer.compare(Buffer.from(a), Buffer.from(b)),
      ),
    );
    expect(await json('walk', `az://${c}/d/`)).toHaveLength(4);
    const first = await json('fetch', `az://${c}/d/`);
    expect(first).toMatchObject({ files: 4, downloaded: 4, bytes: 20 });
    expect(readFileSync(path.join(first.path, 'sub/y.txt'), 'utf8')).toBe('hello');
    expect(await json('fetch', `az://${c}/d/`)).toMatchObject({
      files: 4,
      downloaded: 0,
      bytes: 0,
    });
    const pin = await run('pin', `az://${c}/d/x.txt`);
    expect(pin.code).toBe(11);
    expect(pin.err).toMatch(/^provcat: NotSupported: .*keeps no versions/);
    // push: the SHA-256 each put records (blob metadata, in the listing) skips what is unchanged.
    const tree = path.join(dir, 'tree');
    mkdirSync(path.join(tree, 'sub'), { recursive: true });
    writeFileSync(path.join(tree, 'a.txt'), 'a');
    writeFileSync(path.join(tree, 'sub', 'b.txt'), 'b');
    expect(await json('push', tree, `az://${c}/pushed/`)).toMatchObject({ uploaded: 2 });
    expect(await json('push', tree, `az://${c}/pushed/`)).toMatchObject({
      uploaded: 0,
      skipped: 2,
    });
    expect(await json('rm', `az://${c}/d/x.txt`)).toMatchObject({ deleted: true });
    expect((await run('stat', `az://${c}/d/x.txt`)).code).toBe(3);
  });

  it('upload, cat and verify a managed object on an az:// stage', async () => {
    const local = path.join(dir, 'big.bin');
    writeFileSync(local, Buffer.alloc(300_000, 7));
    const loc = await json('upload', local, '--stage', `az://${c}/managed/`);
    expect(loc).toMatchObject({ sizeBytes: 300_000 });
    expect(loc.uri).toMatch(new RegExp(`^az://${c}/managed/[0-9a-f]{2}/[0-9a-f]{32}$`));
    const locFile = path.join(dir, 'loc.json');
    writeFileSync(locFile, JSON.stringify(loc));
    const out = path.join(dir, 'out.bin');
    const cat = await run('cat', `@${locFile}`, '--stage', `az://${c}/managed/`, '-o', out);
    expect(cat.code, cat.err).toBe(0);
    expect(readFileSync(out).equals(readFileSync(local))).toBe(true);
    expect((await run('verify', `@${locFile}`, '--stage', `az://${c}/managed/`)).code).toBe(0);
  });
});

describe('provcat CLI on the versions server (az://)', () => {
  let server: AzureVersionsServer;
  const { dir, run, json } = cli(() => server.connectionString);
  const c = uniqueContainerName('cliv');
  beforeAll(async () => {
    server = await startAzureVersionsServer();
  });
  afterAll(async () => {
    await server?.close();
  });

  it('mb --versioning, pin, commit, log and branch', async () => {
    expect(await json('mb', `az://${c}`, '--versioning')).toEqual({
      uri: `az://${c}/`,
      versioning: true,
    });
    const local = path.join(dir, 'x.txt');
    writeFileSync(local, 'one');
    await json('put', local, `az://${c}/main/x.txt`);
    const pin = await json('pin', `az://${c}/main/x.txt`);
    expect(pin.uri).toMatch(/\?at=version:/);
    const commit = await json('commit', `az://${c}/main/`, '-m', 'first');
    expect(commit.uri).toMatch(/\?at=commit:[0-9a-f]{64}$/);
    writeFileSync(local, 'two!');
    await json('put', local, `az://${c}/main/x.txt`);
    const log = await json('log', `az://${c}/main/`);
    expect(log.map((e: { number: number }) => e.number)).toEqual([1]);
    const fetched = await json('fetch', commit.uri);
    expect(readFileSync(path.join(fetched.path, 'x.txt'), 'utf8')).toBe('one');
    const id = commit.uri.split('?at=commit:')[1];
    expect((await run('branch', `az://${c}/old/`, id)).code).toBe(0);
    const old = await json('fetch', `az://${c}/old/`);
    expect(readFileSync(path.join(old.path, 'x.txt'), 'utf8')).toBe('one');
  });
});
