/**
 * What only the Azure managed stage has; the cases every cloud stage shares run from
 * test/drivers/azure.test.ts (test/support/stage-suite.ts). Here: az descriptors and stage
 * strings, a wrong account key (PermissionDenied, CLI exit 9), the uncommitted uploads a crash
 * leaves, an upload killed with SIGKILL that resumes and sends only the missing blocks, and (on
 * the versions server, which can drop a response) a lost Put Block List recovered by size and
 * SHA-256.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { ContainerClient } from '@azure/storage-blob';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { azureStageKind } from '../../drivers/azure/stage-kind.js';
import { DEV_ACCOUNT_KEY, DEV_ACCOUNT_NAME } from '../../servers/azure-dev-account.js';
import { startAzureVersionsServer } from '../../servers/azure-versions/index.js';
import { PermissionDenied, StoreError } from '../../src/core/errors.js';
import { parseCheckpoint } from '../../src/lake/checkpoint.js';
import {
  type DataLocation,
  type Stage,
  StageConfigError,
  stageFromDescriptor,
  stageFromString,
} from '../../src/lake/index.js';
import {
  chunked,
  drain,
  drainTo,
  MiB,
  sha256sum,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';
import { azureTarget, describeAzurite, uniqueContainerName } from '../setup/azure.js';
import type { AzureProxy } from '../support/azure-proxy.js';
import { PREFIX } from '../support/stage-suite.js';
import {
  azureStageHarness,
  azureDescriptor as descriptor,
  AZURE_ENV as ENV,
} from '../support/stage-targets.js';

const CHILD = new URL('../fixtures/azure-upload-child.mjs', import.meta.url).pathname;
const BIN = new URL('../../dist/cli/provcat.cjs', import.meta.url).pathname;

describe('az stage descriptors', () => {
  it('parse strictly, read az:// stage strings from the environment, and never carry credentials', () => {
    const d = azureStageKind.parse(
      { ...descriptor('lake', 'http://127.0.0.1:1/acct/'), version: undefined },
      'acme',
    );
    expect(d).toEqual({
      version: 1,
      kind: 'az',
      account: DEV_ACCOUNT_NAME,
      container: 'lake',
      prefix: PREFIX,
      endpoint: 'http://127.0.0.1:1/acct',
      tenant: 'acme',
    });
    expect(() =>
      azureStageKind.parse({ container: 'lake', prefix: '', accountKey: 'x' }, undefined),
    ).toThrow(/credentials/);
    expect(() =>
      azureStageKind.parse({ container: 'Bad_Name', prefix: '', account: 'a1b' }, undefined),
    ).toThrow(StageConfigError);
    expect(() => azureStageKind.parse({ container: 'lake', prefix: '' }, undefined)).toThrow(
      /account or an endpoint/,
    );
    const env = {
      AZURE_STORAGE_CONNECTION_STRING: `DefaultEndpointsProtocol=https;AccountName=acct9;AccountKey=${DEV_ACCOUNT_KEY}`,
    };
    expect(azureStageKind.fromString?.('az://lake/raw/v2/', env)).toEqual({
      version: 1,
      kind: 'az',
      account: 'acct9',
      container: 'lake',
      prefix: 'raw/v2',
    });
    expect(
      azureStageKind.fromString?.('az://lake/x/', {
        ...env,
        PROVCAT_AZURE_ENDPOINT: 'http://127.0.0.1:9/acct9',
      }),
    ).toMatchObject({ endpoint: 'http://127.0.0.1:9/acct9' });
    expect(azureStageKind.fromString?.('s3://lake/x/', env)).toBeUndefined();
    expect(() => azureStageKind.fromString?.('az://lake/x/', {})).toThrow(StageConfigError);
    expect(azureStageKind.identity(d)).toBe(`az|http://127.0.0.1:1/acct|lake|${PREFIX}/acme`);
    expect(JSON.stringify(d)).not.toContain(DEV_ACCOUNT_KEY);
  });
});

describeAzurite('Azure stage: what only Azure has', () => {
  const h = azureStageHarness();
  let container: ContainerClient;
  let name: string;
  let dir: string;
  let proxy: AzureProxy;
  beforeAll(async () => {
    await h.setup();
    container = h.container();
    name = h.bucket();
    proxy = h.proxy();
    dir = await mkdtemp(path.join(tmpdir(), 'lake-azure-'));
  });
  afterAll(async () => {
    await h.teardown();
    await rm(dir, { recursive: true, force: true });
  });

  /** A stage through the counting proxy. */
  const stage = (o: { partSize?: number } = {}): Stage => h.stage(o);
  const keyOf = (loc: DataLocation) => loc.uri.slice(`az://${name}/`.length);

  it('a wrong account key during block uploads is PermissionDenied (CLI exit 9), its message whole', async () => {
    const wrong = {
      ...ENV,
      AZURE_STORAGE_KEY: Buffer.from('not the account key').toString('base64'),
    };
    const d = descriptor(name, azureTarget().url);
    const s = stageFromDescriptor(d, { partSize: MiB, env: wrong, lockStaleMs: 5000 }) as Stage;
    const file = path.join(dir, 'wrong-key');
    await writeRandomFile(file, 3 * MiB);
    const error = await s.upload(file).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(PermissionDenied);
    const text = (error as Error).message;
    expect(text).toMatch(/PutBlock/);
    // The failed abort is said in a sentence of Azure's (not "until nothing: ... removes it").
    expect(text).not.toMatch(/until nothing|removes it$/);
    // The CLI (the stage's 64 MiB parts: two blocks): exit 9, PermissionDenied.
    await rm(file);
    await writeRandomFile(file, 64 * MiB + 1);
    const cli = await new Promise<{ code: number | null; err: string }>((resolve) => {
      const env = { ...process.env, ...wrong, PROVCAT_AZURE_ENDPOINT: azureTarget().url };
      const args = [BIN, 'upload', file, '--stage', `az://${name}/wrong-key/`];
      const child = spawn(process.execPath, args, {
        env: { ...env, PROVCAT_CACHE_DIR: path.join(dir, 'cache-wrong-key') },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let err = '';
      child.stderr.on('data', (d: Buffer) => {
        err += d.toString();
      });
      child.on('close', (code) => resolve({ code, err }));
    });
    expect(cli.err).toMatch(/^provcat: PermissionDenied: .*PutBlock/m);
    expect(cli.err).not.toMatch(/until nothing|removes it$/m);
    expect(cli.code, cli.err).toBe(9);
    await rm(file);
  }, 60_000);

  it('lists the uncommitted uploads a crash leaves (include=uncommittedblobs)', async () => {
    const key = `${PREFIX}/aa/${randomBytes(16).toString('hex')}`;
    await container
      .getBlockBlobClient(key)
      .stageBlock(Buffer.from('x-00001').toString('base64'), Buffer.from('x'), 1);
    const open = [];
    for await (const u of stage().openUploads()) open.push(u.key);
    expect(open).toContain(key);
    expect(open).not.toContain(keyOf(await stage().upload(chunked(Buffer.alloc(0)))));
  });

  it('an upload killed with SIGKILL resumes and sends only the missing blocks', async () => {
    const file = path.join(dir, 'killed.bin');
    const cpDir = path.join(dir, 'cp-killed');
    const total = 12;
    await writeRandomFile(file, total * 5 * MiB - 12345);
    const expected = await sha256sum(file);
    proxy.blockDelayMs = 150;
    const child = spawn(
      process.execPath,
      [CHILD, JSON.stringify(descriptor(name, proxy.endpoint)), file, cpDir],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: { ...process.env, ...ENV },
      },
    );
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.on('exit', (_c, signal) => resolve(signal)),
    );
    try {
      for await (const line of createInterface({ input: child.stdout })) {
        if (line.startsWith('done')) throw new Error('the child finished before it was killed');
        if (line.startsWith('progress') && Number(line.split(' ')[1]) >= 3 * 5 * MiB) {
          child.kill('SIGKILL');
          break;
        }
      }
    } finally {
      proxy.blockDelayMs = 0;
    }
    expect(await exited).toBe('SIGKILL');
    const files = (await readdir(cpDir)).filter((f) => f.endsWith('.json'));
    expect(files).toHaveLength(1);
    const cpFile = path.join(cpDir, files[0] as string);
    const checkpoint = parseCheckpoint(await readFile(cpFile, 'utf8'), cpFile);
    const recorded = checkpoint.parts.length;
    expect(recorded).toBeGreaterThanOrEqual(3);
    expect(recorded).toBeLessThan(total);
    expect(checkpoint).toMatchObject({
      version: 2,
      backend: 'az',
      bucket: name,
      partSize: 5 * MiB,
    });
    expect(JSON.stringify(checkpoint)).not.toContain(DEV_ACCOUNT_KEY);

    proxy.clear();
    const loc = await stage({ partSize: 5 * MiB }).upload(file, {
      checkpointDir: cpDir,
      partsInFlight: 2,
    });
    expect(loc.sha256).toBe(expected);
    expect(loc.uri).toBe(`az://${name}/${checkpoint.key}`);
    expect(proxy.count('GetBlockList')).toBe(1);
    expect(proxy.count('PutBlob')).toBe(0);
    const missing = Array.from({ length: total }, (_, i) => i + 1).filter(
      (n) => !checkpoint.parts.some((p) => p.number === n),
    );
    // Only the missing blocks were sent (a loaded machine may make the SDK resend one).
    expect([...new Set(proxy.blocks)].sort((a, b) => a - b)).toEqual(missing);
    expect(proxy.count('PutBlockList')).toBe(1);
    expect(await drainTo(stage(), loc)).toEqual({ size: loc.sizeBytes, sha256: expected });
    expect((await readdir(cpDir)).filter((f) => f.endsWith('.json'))).toEqual([]);
  }, 120_000);

  it('az:// stage strings name the same stage (CLI form), credentials from the environment', async () => {
    const s = await stageFromString(`az://${name}/${PREFIX}/`, {
      env: { ...ENV, PROVCAT_AZURE_ENDPOINT: azureTarget().url },
    });
    const data = randomBytes(1000);
    const loc = await s.upload(chunked(data));
    expect(await drain(await stage().open(loc))).toMatchObject({ size: 1000 });
  });
});

describe('Azure stage on the versions server: a lost commit response', () => {
  it('is recovered on retry by checking the blob size and SHA-256', async () => {
    const server = await startAzureVersionsServer();
    const dir = await mkdtemp(path.join(tmpdir(), 'lake-azure-lost-'));
    try {
      const name = uniqueContainerName('lost');
      const { BlobServiceClient } = await import('@azure/storage-blob');
      await BlobServiceClient.fromConnectionString(server.connectionString)
        .getContainerClient(name)
        .create();
      const file = path.join(dir, 'src.bin');
      const expected = await writeRandomFile(file, 3 * 5 * MiB + 1);
      const cpDir = path.join(dir, 'cp');
      const s = () =>
        stageFromDescriptor(descriptor(name, server.url), { partSize: 5 * MiB, env: ENV }) as Stage;
      // Applied, then the connection closes: every attempt the SDK makes loses its answer.
      server.faults.inject({ kind: 'drop-response', op: 'PutBlockList', times: 10 });
      await expect(s().upload(file, { checkpointDir: cpDir })).rejects.toThrow(StoreError);
      server.faults.clear();
      const commits = server.log.filter({ op: 'PutBlockList' });
      expect(commits.length).toBeGreaterThan(0);
      expect(commits.every((e) => e.status === undefined)).toBe(true); // applied, answer lost
      server.log.clear();
      const loc = await s().upload(file, { checkpointDir: cpDir });
      expect(loc.sha256).toBe(expected);
      expect(server.log.count({ op: 'PutBlock' })).toBe(0);
      expect(server.log.count({ op: 'PutBlockList' })).toBe(0);
      expect(server.log.count({ op: 'GetBlob' })).toBe(1);
      expect((await readdir(cpDir)).filter((f) => f.endsWith('.json'))).toEqual([]);
    } finally {
      await server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
