/**
 * The Azure managed stage: round trips on Azurite whose SHA-256 equals `sha256sum` with the
 * request pattern (one Put Blob for an empty object, staged blocks otherwise), every integrity
 * fault typed (objects planted behind the stage's back, answers broken by a proxy), SAS URLs
 * used with a Range header, cancellation leaving nothing committed, an upload killed with
 * SIGKILL that resumes and sends only the missing blocks, and (on the versions server, which can
 * drop a response) a lost Put Block List recovered by size and SHA-256.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { inspect } from 'node:util';
import type { ContainerClient } from '@azure/storage-blob';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { azureStageKind } from '../../drivers/azure/stage-kind.js';
import { DEV_ACCOUNT_KEY, DEV_ACCOUNT_NAME } from '../../servers/azure-dev-account.js';
import { startAzureVersionsServer } from '../../servers/azure-versions/index.js';
import { ObjectIntegrityError, PermissionDenied, StoreError } from '../../src/core/errors.js';
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
  collect,
  drain,
  drainTo,
  MiB,
  sha256sum,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';
import {
  azureTarget,
  azuriteServiceClient,
  describeAzurite,
  uniqueContainerName,
} from '../setup/azure.js';
import { type AzureProxy, startAzureProxy } from '../support/azure-proxy.js';

const PREFIX = 'managed/v1';
const CHILD = new URL('../fixtures/azure-upload-child.mjs', import.meta.url).pathname;
const BIN = new URL('../../dist/cli/provcat.cjs', import.meta.url).pathname;
/** Credentials as a user's environment gives them (the descriptor never carries any). */
const ENV = { AZURE_STORAGE_ACCOUNT: DEV_ACCOUNT_NAME, AZURE_STORAGE_KEY: DEV_ACCOUNT_KEY };

async function failure(promise: Promise<unknown>): Promise<ObjectIntegrityError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ObjectIntegrityError) return error;
    throw error;
  }
  throw new Error('expected an ObjectIntegrityError');
}

function descriptor(container: string, endpoint: string, prefix = PREFIX) {
  return {
    version: 1,
    kind: 'az',
    account: DEV_ACCOUNT_NAME,
    container,
    prefix,
    endpoint,
  } as const;
}

async function committed(container: ContainerClient, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const b of container.listBlobsFlat({ prefix })) out.push(b.name);
  return out.sort();
}

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

describeAzurite('Azure stage on Azurite', () => {
  let container: ContainerClient;
  let name: string;
  let dir: string;
  let proxy: AzureProxy;
  beforeAll(async () => {
    name = uniqueContainerName('lake');
    container = azuriteServiceClient().getContainerClient(name);
    await container.create();
    dir = await mkdtemp(path.join(tmpdir(), 'lake-azure-'));
    proxy = await startAzureProxy(azureTarget().url);
  });
  afterAll(async () => {
    await proxy?.close();
    await container?.delete();
    await rm(dir, { recursive: true, force: true });
  });

  /** A stage through the counting proxy; `lean: false` reads through the SDK. */
  function stage(o: { partSize?: number; lean?: boolean; tenant?: string } = {}): Stage {
    const d = { ...descriptor(name, proxy.endpoint), ...(o.tenant ? { tenant: o.tenant } : {}) };
    const env = { ...ENV, ...(o.lean === false ? { PROVCAT_AZURE_LEAN: '0' } : {}) };
    return stageFromDescriptor(d, { partSize: o.partSize, env, lockStaleMs: 5000 }) as Stage;
  }
  const keyOf = (loc: DataLocation) => loc.uri.slice(`az://${name}/`.length);

  describe('round trips', () => {
    it.each([
      ['0 B: one Put Blob', 0, { PutBlob: 1, PutBlock: 0, PutBlockList: 0 }],
      ['1 B: one block', 1, { PutBlob: 0, PutBlock: 1, PutBlockList: 1 }],
      ['exactly one 5 MiB block', 5 * MiB, { PutBlob: 0, PutBlock: 1, PutBlockList: 1 }],
      ['one block + 1 byte', 5 * MiB + 1, { PutBlob: 0, PutBlock: 2, PutBlockList: 1 }],
      ['several blocks', 3 * 5 * MiB + 7, { PutBlob: 0, PutBlock: 4, PutBlockList: 1 }],
    ])('%s, from a path and from a stream, byte for byte', async (_label, size, pattern) => {
      const file = path.join(dir, `src-${size}`);
      await writeRandomFile(file, size);
      const expected = await sha256sum(file);
      const bytes = await readFile(file);
      for (const source of [file, chunked(bytes, 100_000)]) {
        const s = stage({ partSize: 5 * MiB });
        proxy.clear();
        const loc = await s.upload(source, { contentType: 'video/mp4' });
        expect(loc).toMatchObject({ sizeBytes: size, sha256: expected, contentType: 'video/mp4' });
        expect(loc.uri).toMatch(new RegExp(`^az://${name}/${PREFIX}/[0-9a-f]{2}/[0-9a-f]{32}$`));
        expect({
          PutBlob: proxy.count('PutBlob'),
          PutBlock: proxy.count('PutBlock'),
          PutBlockList: proxy.count('PutBlockList'),
        }).toEqual(pattern);
        const blob = container.getBlobClient(keyOf(loc));
        expect((await blob.downloadToBuffer()).equals(bytes)).toBe(true);
        expect((await blob.getProperties()).contentType).toBe('video/mp4');
        expect(await drain(await s.open(loc))).toEqual({ size, sha256: expected });
        expect(await drainTo(stage({ lean: false }), loc)).toEqual({ size, sha256: expected });
      }
    });

    it('200 MiB in 64 MiB blocks: 4 blocks, digest equals sha256sum, verified read', async () => {
      const file = path.join(dir, 'big');
      await writeRandomFile(file, 200 * MiB);
      const expected = await sha256sum(file);
      const s = stage();
      expect(s.partSize).toBe(64 * MiB);
      proxy.clear();
      const loc = await s.upload(file);
      expect(loc).toMatchObject({ sizeBytes: 200 * MiB, sha256: expected });
      expect(proxy.count('PutBlock')).toBe(4);
      expect(await drainTo(s, loc)).toEqual({ size: 200 * MiB, sha256: expected });
      await rm(file);
      await container.getBlobClient(keyOf(loc)).delete();
    }, 240_000);
  });

  describe('integrity faults', () => {
    let good: DataLocation;
    let data: Buffer;
    beforeAll(async () => {
      data = randomBytes(200_000);
      good = await stage({ partSize: 5 * MiB }).upload(chunked(data));
    });
    async function planted(body: Buffer): Promise<DataLocation> {
      const key = `${PREFIX}/ff/${randomBytes(16).toString('hex')}`;
      await container.getBlockBlobClient(key).upload(body, body.length);
      return { ...good, uri: `az://${name}/${key}` };
    }

    for (const lean of [true, false]) {
      it(`short, long and flipped objects are PrematureEof, TooLong, DigestMismatch (${lean ? 'lean' : 'SDK'} reads)`, async () => {
        const s = stage({ lean });
        expect(await drain(await s.open(good))).toEqual({ size: data.length, sha256: good.sha256 });
        const short = await planted(data.subarray(0, data.length - 1));
        expect(await failure(drain(await s.open(short)))).toMatchObject({
          kind: 'PrematureEof',
          expected: data.length,
          observed: data.length - 1,
        });
        expect(await failure(drainTo(s, short))).toMatchObject({ kind: 'PrematureEof' });
        const long = await planted(Buffer.concat([data, Buffer.from([1])]));
        expect((await failure(drain(await s.open(long)))).kind).toBe('TooLong');
        expect((await failure(drainTo(s, long))).kind).toBe('TooLong');
        const flipped = Buffer.from(data);
        flipped[123_456] = (flipped[123_456] as number) ^ 1;
        const bad = await planted(flipped);
        expect((await failure(drain(await s.open(bad)))).kind).toBe('DigestMismatch');
        expect((await failure(drainTo(s, bad))).kind).toBe('DigestMismatch');
      });
    }

    it('a bad digest and locations outside the stage are refused before any request', async () => {
      const s = stage();
      proxy.clear();
      expect((await failure(s.open({ ...good, sha256: 'z'.repeat(64) }))).kind).toBe(
        'InvalidDigest',
      );
      for (const uri of [
        `az://${name}/${PREFIX}x/ab/cd`,
        `az://${name}/managed/ab/cd`,
        `az://other-container/${PREFIX}/ab/cd`,
        `az://${name}/${PREFIX}/../v2/ab`,
        `az://${name}/${PREFIX}/%2e%2e/v2/ab`,
        `s3://${name}/${PREFIX}/ab/cd`,
      ]) {
        expect(await failure(s.open({ ...good, uri }))).toMatchObject({ kind: 'OutsideStage' });
        expect(await failure(s.openRange({ ...good, uri }, 0, 1))).toMatchObject({
          kind: 'OutsideStage',
        });
        expect(await failure(s.presign({ ...good, uri }))).toMatchObject({ kind: 'OutsideStage' });
      }
      expect(proxy.names).toEqual([]);
    });

    for (const lean of [true, false]) {
      it(`ranges are exact; a range ignored, a wrong Content-Range, a cut body are typed (${lean ? 'lean' : 'SDK'} reads)`, async () => {
        const s = stage({ lean });
        try {
          for (const [start, end] of [
            [0, 1],
            [500, 1_500],
            [199_999, 200_000],
          ] as const) {
            expect(
              (await collect(await s.openRange(good, start, end))).equals(
                data.subarray(start, end),
              ),
            ).toBe(true);
          }
          proxy.mode = 'strip-range';
          proxy.clear();
          expect((await failure(s.openRange(good, 100, 200))).kind).toBe('RangeMismatch');
          expect(proxy.names).toEqual(['GetBlob']);
          proxy.mode = 'wrong-content-range';
          expect((await failure(s.openRange(good, 100, 200))).kind).toBe('RangeMismatch');
          proxy.mode = 'cut-body';
          const cut = await failure(drain(await s.openRange(good, 0, 150_000)));
          expect(cut).toMatchObject({ kind: 'PrematureEof', expected: 150_000 });
          expect(cut.observed).toBeLessThan(150_000);
        } finally {
          proxy.mode = 'pass';
        }
        // A declared size that is wrong shows in the Content-Range total.
        expect(
          (await failure(s.openRange({ ...good, sizeBytes: good.sizeBytes + 10 }, 0, 10))).kind,
        ).toBe('RangeMismatch');
      });
    }
  });

  it('presigns a read-only SAS of at most an hour, redacted when printed, usable with Range', async () => {
    const data = randomBytes(50_000);
    const s = stage({ partSize: 5 * MiB });
    const loc = await s.upload(chunked(data));
    const url = await s.presign(loc, { expiresIn: 300 });
    expect(String(url)).toBe('[redacted]');
    expect(JSON.stringify({ url })).toBe('{"url":"[redacted]"}');
    expect(inspect(url)).not.toContain('sig=');
    const ranged = await fetch(url.reveal(), { headers: { Range: 'bytes=1000-1999' } });
    expect(ranged.status).toBe(206);
    expect(ranged.headers.get('content-range')).toBe(`bytes 1000-1999/${data.length}`);
    expect(Buffer.from(await ranged.arrayBuffer()).equals(data.subarray(1000, 2000))).toBe(true);
    expect((await fetch(url.reveal(), { method: 'DELETE' })).status).toBe(403);
    await expect(s.presign(loc, { expiresIn: 3601 })).rejects.toThrow(StageConfigError);
    const se = new URL((await s.presign(loc, { expiresIn: 3600 })).reveal()).searchParams.get('se');
    expect(Date.parse(se as string) - Date.now()).toBeLessThanOrEqual(3600_000);
  });

  it('cancellation mid-upload rejects with AbortError and commits nothing', async () => {
    const before = await committed(container, `${PREFIX}/`);
    const s = stage({ partSize: 5 * MiB });
    const controller = new AbortController();
    proxy.clear();
    const upload = s.upload(chunked(randomBytes(40 * MiB), MiB), {
      signal: controller.signal,
      partsInFlight: 2,
      onProgress: () => controller.abort(),
    });
    await expect(upload).rejects.toMatchObject({ name: 'AbortError' });
    expect(proxy.count('PutBlock')).toBeGreaterThan(0);
    expect(await committed(container, `${PREFIX}/`)).toEqual(before);
    // The abort discarded the staged blocks (an empty commit, deleted at once). A block whose
    // request was cancelled after its body was sent can still land after that (as on S3, where
    // AWS says an abort may have to be repeated): it is then listed, and the next abort (what
    // garbage collection runs) removes it.
    for await (const u of s.openUploads()) await s.abortUpload(u);
    const open = [];
    for await (const u of s.openUploads()) open.push(u.key);
    expect(open).toEqual([]);
    expect(await committed(container, `${PREFIX}/`)).toEqual(before);
  });

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
