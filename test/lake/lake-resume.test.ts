/**
 * Resumable S3 uploads against the test server: an upload killed with SIGKILL resumes from its
 * checkpoint and sends only the missing parts; a failed upload keeps its checkpoint; a lost
 * completion response is recovered by verifying the destination; unknown checkpoints fail
 * closed before any I/O; cancellation aborts the exact upload and removes the checkpoint; a
 * changed source starts afresh.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import { checkpointPath, parseCheckpoint } from '../../src/lake/checkpoint.js';
import {
  CheckpointError,
  type Stage,
  StageConfigError,
  stageFromDescriptor,
} from '../../src/lake/index.js';
import {
  countCalls,
  drain,
  MiB,
  openUploads,
  refusingClient,
  s3Descriptor,
  sha256sum,
  testClient,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';

const PREFIX = 'resumable';
const CHILD = new URL('../fixtures/lake-upload-child.mjs', import.meta.url).pathname;

async function checkpoints(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).filter((f) => f.endsWith('.json')).map((f) => path.join(dir, f));
  } catch (error) {
    if ((error as { code?: string }).code === 'ENOENT') return [];
    throw error;
  }
}

/** A client whose `n`-th call of `command` fails after (or before) reaching the server. */
function failingClient(command: string, n: number, when: 'before' | 'after'): S3Client {
  const client = testClient();
  let seen = 0;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== `${command}Command` || ++seen !== n) return next(args);
      const error = Object.assign(new Error(`injected: ${command} ${when} the server`), {
        name: 'TimeoutError',
        $metadata: {},
      });
      if (when === 'before') throw error;
      await next(args);
      throw error;
    },
    { step: 'initialize', name: 'injectFailure' },
  );
  return client;
}

/**
 * A client on which every attempt to send part `part` times out before reaching the server (a
 * part that fails once is sent again, so one failure would not fail the upload). `attempts`
 * counts them.
 */
function failingPart(part: number): { client: S3Client; attempts: () => number } {
  const client = testClient();
  let attempts = 0;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as { PartNumber?: number };
      if (context.commandName !== 'UploadPartCommand' || input.PartNumber !== part) {
        return next(args);
      }
      attempts++;
      throw Object.assign(new Error(`injected: UploadPart ${part} timed out`), {
        name: 'TimeoutError',
        $metadata: {},
      });
    },
    { step: 'initialize', name: 'injectPartFailure' },
  );
  return { client, attempts: () => attempts };
}

describeS3('resumable S3 uploads', () => {
  let admin: S3Client;
  let bucket: string;
  let dir: string;

  beforeAll(async () => {
    admin = testClient();
    bucket = await createTestBucket('lake-resume');
    dir = await mkdtemp(path.join(tmpdir(), 'lake-resume-'));
  });
  afterAll(async () => {
    await dropTestBucket(bucket, `${PREFIX}/`);
    admin.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  function stage(client: S3Client = testClient()) {
    const calls = countCalls(client);
    const s = stageFromDescriptor(s3Descriptor(bucket, PREFIX), {
      client,
      partSize: 5 * MiB,
      lockStaleMs: 5000,
    }) as Stage;
    return { stage: s, calls };
  }

  it('an upload killed with SIGKILL resumes and sends only the missing parts', async () => {
    const file = path.join(dir, 'killed.bin');
    const cpDir = path.join(dir, 'cp-killed');
    const total = 12;
    await writeRandomFile(file, total * 5 * MiB - 12345);
    const expected = await sha256sum(file);
    const child = spawn(
      process.execPath,
      [CHILD, JSON.stringify(s3Descriptor(bucket, PREFIX)), file, cpDir, '150'],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.on('exit', (_code, signal) => resolve(signal)),
    );
    for await (const line of createInterface({ input: child.stdout })) {
      if (line.startsWith('done')) throw new Error('the child finished before it was killed');
      if (line.startsWith('progress') && Number(line.split(' ')[1]) >= 3 * 5 * MiB) {
        child.kill('SIGKILL');
        break;
      }
    }
    expect(await exited).toBe('SIGKILL');
    const [cpFile, ...others] = await checkpoints(cpDir);
    expect(others).toEqual([]);
    const checkpoint = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    const recorded = checkpoint.parts.length;
    expect(recorded).toBeGreaterThanOrEqual(3);
    expect(recorded).toBeLessThan(total);
    expect(checkpoint).toMatchObject({
      version: 2,
      backend: 's3',
      partSize: 5 * MiB,
      window: 2,
      bucket,
    });
    expect(JSON.stringify(checkpoint)).not.toMatch(/SECRET|AKID/);

    const { stage: s, calls } = stage();
    const loc = await s.upload(file, { checkpointDir: cpDir, partsInFlight: 2 });
    expect(loc.sha256).toBe(expected);
    expect(loc.uri).toBe(`s3://${bucket}/${checkpoint.key}`);
    expect(calls.count('CreateMultipartUpload')).toBe(0);
    expect(calls.count('ListParts')).toBeGreaterThanOrEqual(1);
    expect(calls.count('UploadPart')).toBe(total - recorded);
    expect(new Set(calls.parts)).toEqual(
      new Set(
        Array.from({ length: total }, (_, i) => i + 1).filter(
          (n) => !checkpoint.parts.some((p) => p.number === n),
        ),
      ),
    );
    expect(await drain(await s.open(loc))).toEqual({ size: loc.sizeBytes, sha256: expected });
    expect(await checkpoints(cpDir)).toEqual([]);
    expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
  }, 120_000);

  it('a failed part keeps the checkpoint; the retry sends only what is missing', async () => {
    const file = path.join(dir, 'failed.bin');
    const cpDir = path.join(dir, 'cp-failed');
    const expected = await writeRandomFile(file, 6 * 5 * MiB);
    const failing = failingPart(3);
    const first = stage(failing.client);
    await expect(
      first.stage.upload(file, { checkpointDir: cpDir, partsInFlight: 1 }),
    ).rejects.toThrow(StoreError);
    // Part 3 was tried as often as the client allows (3 attempts), then the upload failed.
    expect(failing.attempts()).toBe(3);
    expect(first.calls.parts).toEqual([1, 2]);
    expect(first.calls.count('AbortMultipartUpload')).toBe(0);
    const [cpFile] = await checkpoints(cpDir);
    const checkpoint = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    expect(checkpoint.parts.map((p) => p.number)).toEqual([1, 2]);
    expect(await openUploads(admin, bucket, PREFIX)).toHaveLength(1);

    const retry = stage();
    const loc = await retry.stage.upload(file, { checkpointDir: cpDir });
    expect(loc.sha256).toBe(expected);
    expect(retry.calls.parts.sort((a, b) => a - b)).toEqual([3, 4, 5, 6]);
    expect(await checkpoints(cpDir)).toEqual([]);
    expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
  }, 60_000);

  it('a checkpoint written by an earlier release (version 1) still resumes, sending only what is missing', async () => {
    const file = path.join(dir, 'old-format.bin');
    const cpDir = path.join(dir, 'cp-old-format');
    const expected = await writeRandomFile(file, 5 * 5 * MiB + 3);
    const failing = failingPart(4);
    const first = stage(failing.client);
    await expect(
      first.stage.upload(file, { checkpointDir: cpDir, partsInFlight: 1 }),
    ).rejects.toThrow(StoreError);
    const [cpFile] = await checkpoints(cpDir);
    const now = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    expect(now.parts.map((p) => p.number)).toEqual([1, 2, 3]);
    // Rewrite it in the version 1 format of earlier releases: S3 only, uploadId, part etags.
    const v1 = {
      version: 1,
      uploadId: now.upload,
      key: now.key,
      bucket: now.bucket,
      source: now.source,
      partSize: now.partSize,
      window: now.window,
      parts: now.parts.map((p) => ({ number: p.number, etag: p.token, sha256: p.sha256 })),
    };
    await writeFile(cpFile as string, JSON.stringify(v1, null, 1));
    expect(parseCheckpoint(JSON.stringify(v1), 'v1')).toMatchObject({
      version: 2,
      backend: 's3',
      upload: now.upload,
      parts: now.parts,
    });

    const retry = stage();
    const loc = await retry.stage.upload(file, { checkpointDir: cpDir });
    expect(loc).toMatchObject({ uri: `s3://${bucket}/${now.key}`, sha256: expected });
    expect(retry.calls.parts.sort((a, b) => a - b)).toEqual([4, 5, 6]);
    expect(retry.calls.count('CreateMultipartUpload')).toBe(0);
    expect(await drain(await retry.stage.open(loc))).toEqual({
      size: loc.sizeBytes,
      sha256: expected,
    });
    expect(await checkpoints(cpDir)).toEqual([]);
    expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
  }, 60_000);

  it('a completion whose response was lost is recovered by verifying the destination', async () => {
    const file = path.join(dir, 'lost.bin');
    const cpDir = path.join(dir, 'cp-lost');
    const expected = await writeRandomFile(file, 2 * 5 * MiB + 7);
    const first = stage(failingClient('CompleteMultipartUpload', 1, 'after'));
    await expect(first.stage.upload(file, { checkpointDir: cpDir })).rejects.toThrow(StoreError);
    const [cpFile] = await checkpoints(cpDir);
    const checkpoint = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    expect(checkpoint.parts).toHaveLength(3);

    const retry = stage();
    const loc = await retry.stage.upload(file, { checkpointDir: cpDir });
    expect(loc).toMatchObject({
      uri: `s3://${bucket}/${checkpoint.key}`,
      sha256: expected,
      sizeBytes: 2 * 5 * MiB + 7,
    });
    expect(retry.calls.names).toEqual(['ListParts', 'GetObject']);
    expect(await checkpoints(cpDir)).toEqual([]);
  }, 60_000);

  it('an unknown checkpoint version or part size fails closed before any I/O', async () => {
    const cpDir = path.join(dir, 'cp-unknown');
    await mkdir(cpDir, { recursive: true });
    const source = path.join(dir, 'never-read.bin'); // does not exist: reading it would be NotFound
    const s = stageFromDescriptor(s3Descriptor(bucket, PREFIX), {
      client: refusingClient(),
      partSize: 5 * MiB,
    }) as Stage;
    const cpFile = checkpointPath(cpDir, s.identity, source);
    const base = {
      version: 1,
      uploadId: 'u',
      key: `${PREFIX}/ab/cd`,
      bucket,
      source: { path: source, size: 1, mtimeMs: 1 },
      partSize: 5 * MiB,
      window: 4,
      parts: [],
    };
    for (const bad of [
      { ...base, version: 3 },
      { ...base, partSize: 16 * MiB },
      { ...base, key: 'elsewhere/ab/cd' },
    ]) {
      await writeFile(cpFile, JSON.stringify(bad));
      await expect(s.upload(source, { checkpointDir: cpDir })).rejects.toThrow(CheckpointError);
    }
    const odd = stageFromDescriptor(s3Descriptor(bucket, PREFIX), {
      client: refusingClient(),
      partSize: 6 * MiB,
    });
    await expect(odd.upload(source, { checkpointDir: cpDir })).rejects.toThrow(StageConfigError);
  });

  it('cancellation aborts the exact upload and removes its checkpoint', async () => {
    const file = path.join(dir, 'cancel.bin');
    const cpDir = path.join(dir, 'cp-cancel');
    await writeRandomFile(file, 8 * 5 * MiB);
    const controller = new AbortController();
    const { stage: s, calls } = stage();
    const upload = s.upload(file, {
      checkpointDir: cpDir,
      partsInFlight: 2,
      signal: controller.signal,
      onProgress: () => controller.abort(),
    });
    await expect(upload).rejects.toMatchObject({ name: 'AbortError' });
    expect(calls.count('AbortMultipartUpload')).toBe(1);
    expect(await checkpoints(cpDir)).toEqual([]);
    expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
  }, 60_000);

  it('a source changed since its checkpoint starts afresh and aborts the old upload', async () => {
    const file = path.join(dir, 'changed.bin');
    const cpDir = path.join(dir, 'cp-changed');
    await writeRandomFile(file, 3 * 5 * MiB);
    const first = stage(failingPart(2).client);
    await expect(
      first.stage.upload(file, { checkpointDir: cpDir, partsInFlight: 1 }),
    ).rejects.toThrow(StoreError);
    const [cpFile] = await checkpoints(cpDir);
    const old = parseCheckpoint(await readFile(cpFile as string, 'utf8'), cpFile as string);
    await new Promise((r) => setTimeout(r, 20));
    const expected = await writeRandomFile(file, 2 * 5 * MiB + 4321);
    const retry = stage();
    const loc = await retry.stage.upload(file, { checkpointDir: cpDir });
    expect(loc.sha256).toBe(expected);
    expect(loc.uri).not.toContain(old.key);
    expect(retry.calls.count('AbortMultipartUpload')).toBe(1);
    expect(retry.calls.count('CreateMultipartUpload')).toBe(1);
    expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
    expect(await checkpoints(cpDir)).toEqual([]);
  }, 60_000);
});
