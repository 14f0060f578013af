/**
 * Managed objects on the GCS stage (`kind: 'gs'`) against the GCS test server: round trips
 * whose SHA-256 equals `sha256sum` (0 B, 1 B, one part, one part + 1, 200 MiB) with the request
 * pattern each takes; every integrity fault typed, from objects planted behind the stage's back
 * and from the server's mangle knobs; presigned URLs; cancellation leaving no open session; and
 * resumable uploads — killed with SIGKILL and resumed sending only the bytes the session does
 * not have (counted in the server's log), a failed chunk, a lost completion, a cancellation.
 */
import { spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { inspect } from 'node:util';
import { Storage } from '@google-cloud/storage';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { gcsStageKind } from '../../drivers/gcs/stage-kind.js';
import { type RequestRecord, startGcsServer } from '../../servers/gcs/server.js';
import { ObjectIntegrityError, StoreError } from '../../src/core/errors.js';
import { parseCheckpoint } from '../../src/lake/checkpoint.js';
import {
  type DataLocation,
  type Stage,
  StageConfigError,
  stageFromDescriptor,
  stageFromString,
} from '../../src/lake/index.js';
import { rejection } from '../../src/testing/rejection.js';
import {
  chunked,
  collect,
  drain,
  drainTo,
  MiB,
  sha256sum,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';

const PREFIX = 'managed/v1';
const CHILD = new URL('../fixtures/gcs-upload-child.mjs', import.meta.url).pathname;

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const credentials = {
  client_email: 'signer@test-project.iam.gserviceaccount.com',
  private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
};

const server = await startGcsServer({ signingPublicKey: publicKey });
const admin = new Storage({ apiEndpoint: server.url, projectId: 'test' });
const bucket = `lake-${randomBytes(4).toString('hex')}`;
await admin.createBucket(bucket, { versioning: { enabled: true } });
const dir = await mkdtemp(path.join(tmpdir(), 'gcs-lake-'));
afterAll(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});
afterEach(() => server.faults.clear());

const descriptor = (extra: Record<string, unknown> = {}) => ({
  version: 1,
  kind: 'gs',
  bucket,
  prefix: PREFIX,
  endpoint: server.url,
  ...extra,
});

function stage(options: { partSize?: number; client?: Storage; tenant?: string } = {}): Stage {
  const { tenant, ...rest } = options;
  return stageFromDescriptor(descriptor(tenant ? { tenant } : {}), {
    partSize: 5 * MiB,
    lockStaleMs: 5000,
    ...rest,
  }) as Stage;
}

/** The requests logged while `fn` ran. */
async function logged<T>(fn: () => Promise<T>): Promise<{ result: T; log: RequestRecord[] }> {
  const start = server.log.length;
  const result = await fn();
  return { result, log: server.log.slice(start) };
}

async function failure(promise: Promise<unknown>): Promise<ObjectIntegrityError> {
  const error = await rejection(promise);
  if (error instanceof ObjectIntegrityError) return error;
  throw error;
}

const keyOf = (loc: DataLocation) => loc.uri.slice(`gs://${bucket}/`.length);

async function checkpoints(cpDir: string): Promise<string[]> {
  const names = await readdir(cpDir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [] as string[];
    throw error;
  });
  return names.filter((f) => f.endsWith('.json')).map((f) => path.join(cpDir, f));
}

describe('the gs stage kind', () => {
  it('parses strict descriptors and stage strings, with the endpoint from the environment', async () => {
    expect(gcsStageKind.parse(descriptor({ prefix: 'a/b/' }), 'acme')).toEqual({
      version: 1,
      kind: 'gs',
      bucket,
      prefix: 'a/b',
      endpoint: server.url,
      tenant: 'acme',
    });
    expect(() => gcsStageKind.parse({ ...descriptor(), privateKey: 'x' }, undefined)).toThrow(
      /credentials/,
    );
    expect(() => gcsStageKind.parse({ ...descriptor(), bucket: 'A_b' }, undefined)).toThrow(
      StageConfigError,
    );
    expect(
      gcsStageKind.fromString?.('gs://lake/x/y/', { STORAGE_EMULATOR_HOST: server.url }),
    ).toEqual({
      version: 1,
      kind: 'gs',
      bucket: 'lake',
      prefix: 'x/y',
      endpoint: server.url,
    });
    expect(gcsStageKind.fromString?.('gs://lake', {})).toEqual({
      version: 1,
      kind: 'gs',
      bucket: 'lake',
      prefix: '',
    });
    expect(gcsStageKind.fromString?.('s3://lake/x', {})).toBeUndefined();
    expect((await stageFromString('gs://lake/p/', { env: {} })).kind).toBe('gs');
  });
});

describe('GCS stage on the test server', () => {
  describe('round trips', () => {
    it.each([
      ['0 B: one plain upload', 0, { sessions: 0, chunks: 0, tail: 0 }],
      ['1 B: a session, the byte sent by the completion', 1, { sessions: 1, chunks: 0, tail: 1 }],
      ['exactly one 5 MiB part', 5 * MiB, { sessions: 1, chunks: 1, tail: 0 }],
      ['one part + 1 byte', 5 * MiB + 1, { sessions: 1, chunks: 1, tail: 1 }],
      [
        'several parts, the last under 256 KiB',
        3 * 5 * MiB + 7,
        { sessions: 1, chunks: 3, tail: 7 },
      ],
      [
        'several parts, the last off the 256 KiB grid',
        2 * 5 * MiB + 300 * 1024,
        { sessions: 1, chunks: 3, tail: 300 * 1024 - 256 * 1024 },
      ],
    ])('%s, from a path and from a stream, byte for byte', async (_label, size, pattern) => {
      const file = path.join(dir, `src-${size}`);
      await writeRandomFile(file, size);
      const expected = await sha256sum(file);
      const bytes = await readFile(file);
      for (const source of [file, chunked(bytes, 100_000)]) {
        const s = stage();
        const { result: loc, log } = await logged(() =>
          s.upload(source, { contentType: 'video/mp4' }),
        );
        expect(loc).toMatchObject({ sizeBytes: size, sha256: expected, contentType: 'video/mp4' });
        expect(loc.uri).toMatch(new RegExp(`^gs://${bucket}/${PREFIX}/[0-9a-f]{2}/[0-9a-f]{32}$`));
        const puts = log.filter((r) => r.method === 'PUT' && r.uploadId !== undefined);
        const last = puts.at(-1);
        expect({
          sessions: log.filter((r) => r.query.uploadType === 'resumable' && r.method === 'POST')
            .length,
          chunks: puts.filter((r) => /\/\*$/.test(r.headers['content-range'] ?? '')).length,
          tail: pattern.sessions === 0 ? 0 : (last?.bodyBytes ?? -1),
        }).toEqual(pattern);
        const [stored] = await admin.bucket(bucket).file(keyOf(loc)).download();
        expect(stored.equals(bytes)).toBe(true);
        const [meta] = await admin.bucket(bucket).file(keyOf(loc)).getMetadata();
        expect(meta.contentType).toBe('video/mp4');
        expect(await drain(await s.open(loc))).toEqual({ size, sha256: expected });
      }
    });

    it('200 MiB in 64 MiB parts: 4 chunks, digest equals sha256sum, verified read', async () => {
      const file = path.join(dir, 'big');
      await writeRandomFile(file, 200 * MiB);
      const expected = await sha256sum(file);
      const s = stage({ partSize: 64 * MiB });
      const { result: loc, log } = await logged(() => s.upload(file));
      expect(loc).toMatchObject({ sizeBytes: 200 * MiB, sha256: expected });
      expect(log.filter((r) => r.method === 'PUT' && r.uploadId !== undefined)).toHaveLength(5);
      expect(await drain(await s.open(loc))).toEqual({ size: 200 * MiB, sha256: expected });
      expect(await drainTo(s, loc)).toEqual({ size: 200 * MiB, sha256: expected });
      await rm(file);
      await admin.bucket(bucket).file(keyOf(loc)).delete();
    }, 300_000);
  });

  describe('integrity faults', () => {
    const data = randomBytes(300_000);
    let good: DataLocation;

    async function planted(body: Buffer): Promise<DataLocation> {
      good ??= await stage().upload(chunked(data));
      const key = `${PREFIX}/ff/${randomBytes(16).toString('hex')}`;
      await admin.bucket(bucket).file(key).save(body, { resumable: false });
      return { ...good, uri: `gs://${bucket}/${key}` };
    }

    it('objects planted behind the stage: short, long and flipped are typed, on open and readTo', async () => {
      const s = stage();
      const short = await planted(data.subarray(0, data.length - 1));
      expect(await failure(drain(await s.open(short)))).toMatchObject({
        kind: 'PrematureEof',
        expected: data.length,
        observed: data.length - 1,
      });
      expect((await failure(drainTo(s, short))).kind).toBe('PrematureEof');
      const long = await planted(Buffer.concat([data, Buffer.from([1])]));
      expect((await failure(drain(await s.open(long)))).kind).toBe('TooLong');
      expect((await failure(drainTo(s, long))).kind).toBe('TooLong');
      const flipped = Buffer.from(data);
      flipped[123] = (flipped[123] as number) ^ 1;
      const bad = await planted(flipped);
      expect((await failure(drain(await s.open(bad)))).kind).toBe('DigestMismatch');
      expect((await failure(drainTo(s, bad))).kind).toBe('DigestMismatch');
      expect(await drain(await s.open(good))).toEqual({ size: data.length, sha256: good.sha256 });
    });

    it('the server mangling a response: flipped, short, long, Range ignored, wrong Content-Range', async () => {
      good ??= await stage().upload(chunked(data));
      const s = stage();
      const media = { method: 'GET', path: /\/o\// };
      server.faults.mangle({ ...media, mode: 'flipByte' });
      expect((await failure(drain(await s.open(good)))).kind).toBe('DigestMismatch');
      // A whole read whose length is not the stored size fails at the GET (the driver compares
      // it with x-goog-stored-content-length), before a byte is handed out.
      server.faults.mangle({ ...media, mode: 'truncate' });
      expect((await failure(s.open(good).then(drain))).kind).toBe('PrematureEof');
      server.faults.mangle({ ...media, mode: 'extend' });
      expect((await failure(s.open(good).then(drain))).kind).toBe('TooLong');
      for (const mode of ['ignoreRange', 'wrongContentRange', 'truncate', 'extend'] as const) {
        server.faults.mangle({ ...media, mode });
        const { result, log } = await logged(() =>
          failure(s.openRange(good, 100, 200).then((r) => collect(r))),
        );
        expect(result.kind, mode).toMatch(/^(RangeMismatch|PrematureEof|TooLong)$/);
        if (mode === 'ignoreRange' || mode === 'wrongContentRange')
          expect(result.kind).toBe('RangeMismatch');
        expect(log, mode).toHaveLength(1);
      }
      expect(
        (await collect(await s.openRange(good, 100, 200))).equals(data.subarray(100, 200)),
      ).toBe(true);
    });

    it('a bad digest and a location outside the stage are refused before any request', async () => {
      good ??= await stage().upload(chunked(data));
      const s = stage();
      const { log } = await logged(async () => {
        expect((await failure(s.open({ ...good, sha256: 'z'.repeat(64) }))).kind).toBe(
          'InvalidDigest',
        );
        for (const uri of [
          `gs://${bucket}/${PREFIX}x/ab/cd`,
          `gs://${bucket}/managed/ab/cd`,
          `gs://other-bucket/${PREFIX}/ab/cd`,
          `s3://${bucket}/${PREFIX}/ab/cd`,
          `gs://${bucket}/${PREFIX}/../v2/ab`,
        ]) {
          expect((await failure(s.open({ ...good, uri }))).kind).toBe('OutsideStage');
          expect((await failure(s.presign({ ...good, uri }))).kind).toBe('OutsideStage');
        }
      });
      expect(log).toEqual([]);
      const missing = { ...good, uri: `gs://${bucket}/${PREFIX}/00/${'0'.repeat(32)}` };
      await expect(s.open(missing)).rejects.toMatchObject({ code: 'NotFound' });
    });
  });

  it('presigned URLs are V4, usable with fetch and a Range header, redacted when printed', async () => {
    const data = randomBytes(50_000);
    const client = new Storage({ apiEndpoint: server.url, projectId: 'test', credentials });
    const s = stage({ client });
    const loc = await s.upload(chunked(data));
    const url = await s.presign(loc, { expiresIn: 3600 });
    expect(String(url)).toBe('[redacted]');
    expect(inspect(url)).not.toContain('X-Goog');
    expect(url.reveal()).toContain('X-Goog-Expires=3600');
    const ranged = await fetch(url.reveal(), { headers: { Range: 'bytes=1000-1999' } });
    expect(ranged.status).toBe(206);
    expect(Buffer.from(await ranged.arrayBuffer()).equals(data.subarray(1000, 2000))).toBe(true);
    await expect(s.presign(loc, { expiresIn: 3601 })).rejects.toThrow(StageConfigError);
  });

  it('an abort mid-upload cancels the session: none left open, no object', async () => {
    const before = server.sessions().filter((x) => x.state === 'active').length;
    const controller = new AbortController();
    const upload = stage().upload(chunked(randomBytes(30 * MiB), MiB), {
      signal: controller.signal,
      onProgress: () => controller.abort(),
    });
    await expect(upload).rejects.toMatchObject({ name: 'AbortError' });
    expect(server.sessions().filter((x) => x.state === 'active')).toHaveLength(before);
    const last = server.sessions().at(-1);
    expect(last?.state).toBe('cancelled');
    const [exists] = await admin
      .bucket(bucket)
      .file(last?.name as string)
      .exists();
    expect(exists).toBe(false);
  });

  it('a tenant stage writes below prefix/tenant and refuses its siblings', async () => {
    const s = stage({ tenant: 'acme' });
    const loc = await s.upload(chunked(randomBytes(10)));
    expect(loc.uri.startsWith(`gs://${bucket}/${PREFIX}/acme/`)).toBe(true);
    expect(
      (await failure(s.open({ ...loc, uri: loc.uri.replace('/acme/', '/acme2/') }))).kind,
    ).toBe('OutsideStage');
  });
});

describe('resumable GCS uploads', () => {
  it('an upload killed with SIGKILL resumes and sends only the bytes the session lacks', async () => {
    const file = path.join(dir, 'killed.bin');
    const cpDir = path.join(dir, 'cp-killed');
    const size = 8 * 5 * MiB - 12345;
    const expected = await writeRandomFile(file, size);
    // Slow every chunk down so that the child can be killed in the middle.
    server.faults.delay({
      method: 'PUT',
      path: /\/upload\//,
      ms: 300,
      times: Number.POSITIVE_INFINITY,
    });
    const child = spawn(process.execPath, [CHILD, JSON.stringify(descriptor()), file, cpDir], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
    for await (const line of createInterface({ input: child.stdout })) {
      if (line.startsWith('done')) throw new Error('the child finished before it was killed');
      if (line.startsWith('progress') && Number(line.split(' ')[1]) >= 3 * 5 * MiB) {
        child.kill('SIGKILL');
        break;
      }
    }
    expect(await exited).toBe('SIGKILL');
    server.faults.clear();
    const [cpFile, ...others] = await checkpoints(cpDir);
    expect(others).toEqual([]);
    const checkpoint = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    expect(checkpoint).toMatchObject({ backend: 'gs', bucket, partSize: 5 * MiB });
    expect(checkpoint.parts.length).toBeGreaterThanOrEqual(3);
    expect(checkpoint.parts.every((p) => /^[0-9a-f]{64}$/.test(p.sha256))).toBe(true);
    const session = server.sessions().find((x) => checkpoint.upload.startsWith(x.uri));
    expect(session?.state).toBe('active');
    // Wait for the killed chunk's connection to be over, then read what the session holds.
    await new Promise((r) => setTimeout(r, 500));
    const committed = server.sessions().find((x) => x.id === session?.id)?.committed as number;
    expect(committed).toBeGreaterThanOrEqual(3 * 5 * MiB);
    expect(committed).toBeLessThan(size);

    const { result: loc, log } = await logged(() => stage().upload(file, { checkpointDir: cpDir }));
    expect(loc.sha256).toBe(expected);
    expect(loc.uri).toBe(`gs://${bucket}/${checkpoint.key}`);
    expect(log.filter((r) => r.query.uploadType === 'resumable' && r.method === 'POST')).toEqual(
      [],
    );
    const sent = log.filter((r) => r.uploadId === session?.id).reduce((n, r) => n + r.bodyBytes, 0);
    expect(sent).toBe(size - committed);
    expect(await drain(await stage().open(loc))).toEqual({ size, sha256: expected });
    expect(await checkpoints(cpDir)).toEqual([]);
  }, 120_000);

  it('a chunk cut off mid-body keeps the checkpoint; the retry sends only the bytes the session lacks', async () => {
    const file = path.join(dir, 'failed.bin');
    const cpDir = path.join(dir, 'cp-failed');
    const size = 4 * 5 * MiB;
    const expected = await writeRandomFile(file, size);
    // Every attempt at the third part loses its connection after 1 MiB + 100 bytes; the session
    // keeps what arrived up to a 256 KiB boundary, and each attempt starts from there.
    const startOf = (r: { headers: Record<string, string | string[] | undefined> }) =>
      Number(/^bytes (\d+)-/.exec(String(r.headers['content-range']))?.[1] ?? -1);
    server.faults.dropRequest({
      method: 'PUT',
      path: /\/upload\//,
      when: (r) => startOf(r) >= 2 * 5 * MiB && startOf(r) < 3 * 5 * MiB,
      afterBytes: MiB + 100,
      times: Number.POSITIVE_INFINITY,
    });
    await expect(stage().upload(file, { checkpointDir: cpDir })).rejects.toThrow(StoreError);
    server.faults.clear();
    const [cpFile] = await checkpoints(cpDir);
    const checkpoint = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    expect(checkpoint.parts.map((p) => p.number)).toEqual([1, 2]);
    const session = server.sessions().find((x) => checkpoint.upload.startsWith(x.uri));
    const committed = session?.committed as number;
    expect(session?.state).toBe('active');
    // Three attempts, each keeping 1 MiB more, all inside part 3.
    expect(committed).toBe(2 * 5 * MiB + 3 * MiB);
    const { result: loc, log } = await logged(() => stage().upload(file, { checkpointDir: cpDir }));
    expect(loc.sha256).toBe(expected);
    const mine = log.filter((r) => r.uploadId === session?.id);
    expect(mine.reduce((n, r) => n + r.bodyBytes, 0)).toBe(size - committed);
    expect(mine.map((r) => r.headers['content-range'])).toEqual([
      'bytes */*',
      `bytes ${committed}-${3 * 5 * MiB - 1}/*`,
      `bytes ${3 * 5 * MiB}-${4 * 5 * MiB - 1}/*`,
      `bytes */${size}`,
    ]);
    expect(await drain(await stage().open(loc))).toEqual({ size, sha256: expected });
    expect(await checkpoints(cpDir)).toEqual([]);
  }, 60_000);

  it('a completion whose response was lost is recovered by checking the size and SHA-256', async () => {
    const file = path.join(dir, 'lost.bin');
    const cpDir = path.join(dir, 'cp-lost');
    const size = 2 * 5 * MiB + 7;
    const expected = await writeRandomFile(file, size);
    // The completion is the PUT that names the total; every answer to it is lost.
    server.faults.dropResponse({
      method: 'PUT',
      path: /\/upload\//,
      when: (r) => String(r.headers['content-range']).endsWith(`/${size}`),
      afterBytes: 0,
      times: Number.POSITIVE_INFINITY,
    });
    await expect(stage().upload(file, { checkpointDir: cpDir })).rejects.toThrow(StoreError);
    server.faults.clear();
    const [cpFile] = await checkpoints(cpDir);
    const checkpoint = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    expect(server.sessions().find((x) => checkpoint.upload.startsWith(x.uri))?.state).toBe(
      'completed',
    );
    const { result: loc, log } = await logged(() => stage().upload(file, { checkpointDir: cpDir }));
    expect(loc).toMatchObject({
      uri: `gs://${bucket}/${checkpoint.key}`,
      sha256: expected,
      sizeBytes: size,
    });
    // One status query (the session is done), one GET of the object to verify it.
    expect(
      log.map((r) => `${r.method} ${r.query.alt ?? r.headers['content-range'] ?? ''}`),
    ).toEqual(['PUT bytes */*', 'GET media']);
    expect(await checkpoints(cpDir)).toEqual([]);
  }, 60_000);

  it('cancellation cancels the exact session and removes its checkpoint', async () => {
    const file = path.join(dir, 'cancel.bin');
    const cpDir = path.join(dir, 'cp-cancel');
    await writeRandomFile(file, 6 * 5 * MiB);
    const controller = new AbortController();
    const upload = stage().upload(file, {
      checkpointDir: cpDir,
      signal: controller.signal,
      onProgress: () => controller.abort(),
    });
    await expect(upload).rejects.toMatchObject({ name: 'AbortError' });
    expect(server.sessions().at(-1)?.state).toBe('cancelled');
    expect(
      server.sessions().filter((x) => x.state === 'active' && x.name.startsWith(PREFIX)),
    ).toEqual([]);
    expect(await checkpoints(cpDir)).toEqual([]);
  }, 60_000);
});
