/**
 * What only the GCS managed stage (`kind: 'gs'`) has, on the GCS test server; the cases every
 * cloud stage shares run from test/drivers/gcs.test.ts (test/support/stage-suite.ts). Here: the
 * gs stage kind, the server's mangle knobs on whole and ranged reads, and resumable uploads —
 * killed with SIGKILL and resumed sending only the bytes the session does not have (counted in
 * the server's log), a failed chunk, a lost completion, a cancellation.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { gcsStageKind } from '../../drivers/gcs/stage-kind.js';
import type { GcsTestServer, RequestRecord } from '../../servers/gcs/server.js';
import { StoreError } from '../../src/core/errors.js';
import { parseCheckpoint } from '../../src/lake/checkpoint.js';
import {
  type DataLocation,
  type Stage,
  StageConfigError,
  stageFromString,
} from '../../src/lake/index.js';
import { chunked, collect, drain, MiB, writeRandomFile } from '../fixtures/lake-helpers.js';
import { integrityFailure as failure, PREFIX } from '../support/stage-suite.js';
import { gcsStageHarness } from '../support/stage-targets.js';

const CHILD = new URL('../fixtures/gcs-upload-child.mjs', import.meta.url).pathname;

const h = gcsStageHarness();
let server: GcsTestServer;
let bucket: string;
let dir: string;
beforeAll(async () => {
  await h.setup();
  server = h.server();
  bucket = h.bucket();
  dir = await mkdtemp(path.join(tmpdir(), 'gcs-lake-'));
});
afterAll(async () => {
  await h.teardown();
  await rm(dir, { recursive: true, force: true });
});
afterEach(() => server.faults.clear());

const descriptor = (extra: Record<string, unknown> = {}) => h.descriptor(extra);
/** A stage in 5 MiB parts. */
const stage = (): Stage => h.stage({ partSize: 5 * MiB });
const logged = <T>(fn: () => Promise<T>): Promise<{ result: T; log: RequestRecord[] }> =>
  h.logged(fn);

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

describe('GCS stage: the server mangling responses', () => {
  const data = randomBytes(300_000);
  let good: DataLocation;
  beforeAll(async () => {
    good = await stage().upload(chunked(data));
  });

  it('the server mangling a response: flipped, short, long, Range ignored, wrong Content-Range', async () => {
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
    expect((await collect(await s.openRange(good, 100, 200))).equals(data.subarray(100, 200))).toBe(
      true,
    );
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
