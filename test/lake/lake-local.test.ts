/**
 * The local managed stage: round trips whose SHA-256 equals `sha256sum`, integrity faults on
 * files changed behind the stage's back, range reads, cancellation and web streams.
 */
import { randomBytes } from 'node:crypto';
import {
  appendFile,
  mkdtemp,
  open,
  readdir,
  readFile,
  rm,
  truncate,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NotFound, ObjectIntegrityError } from '../../src/core/errors.js';
import { type DataLocation, type Stage, stageFromDescriptor } from '../../src/lake/index.js';
import {
  chunked,
  collect,
  drain,
  drainTo,
  MiB,
  sha256sum,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';

let dir: string;
let stage: Stage;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'lake-local-'));
  stage = stageFromDescriptor({
    version: 1,
    kind: 'local',
    root: path.join(dir, 'stage'),
  }) as Stage;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function filesUnder(root: string): Promise<string[]> {
  try {
    return (await readdir(root, { recursive: true, withFileTypes: true }))
      .filter((e) => e.isFile())
      .map((e) => path.join(e.parentPath, e.name));
  } catch (error) {
    if ((error as { code?: string }).code === 'ENOENT') return [];
    throw error;
  }
}

async function failure(promise: Promise<unknown>): Promise<ObjectIntegrityError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ObjectIntegrityError) return error;
    throw error;
  }
  throw new Error('expected an ObjectIntegrityError');
}

describe('local stage round trips', () => {
  it.each([
    ['0 B', 0],
    ['1 B', 1],
    ['one 1 MiB chunk', MiB],
    ['one chunk + 1 byte', MiB + 1],
  ])('%s from a path, a Node stream and a web stream', async (_label, size) => {
    const file = path.join(dir, `src-${size}`);
    await writeRandomFile(file, size);
    const expected = await sha256sum(file);
    const data = await readFile(file);
    const sources = [file, chunked(data, 1000), Readable.toWeb(chunked(data, 777))];
    for (const source of sources) {
      const loc = await stage.upload(source as never, { contentType: 'application/x-test' });
      expect(loc.sizeBytes).toBe(size);
      expect(loc.sha256).toBe(expected);
      expect(loc.contentType).toBe('application/x-test');
      expect(loc.uri.startsWith(`file://${dir}/stage/`)).toBe(true);
      expect(await sha256sum(fileURLToPath(loc.uri))).toBe(expected);
      expect(await drain(await stage.open(loc))).toEqual({ size, sha256: expected });
      expect(await drain((await stage.openWeb(loc)) as AsyncIterable<Uint8Array>)).toEqual({
        size,
        sha256: expected,
      });
    }
  });

  it('200 MiB: digest equals sha256sum, read back verified', async () => {
    const file = path.join(dir, 'big');
    await writeRandomFile(file, 200 * MiB);
    const expected = await sha256sum(file);
    const loc = await stage.upload(file);
    expect(loc).toMatchObject({ sizeBytes: 200 * MiB, sha256: expected });
    expect(await drain(await stage.open(loc))).toEqual({ size: 200 * MiB, sha256: expected });
    await rm(file);
    await rm(fileURLToPath(loc.uri));
  }, 120_000);

  it('leaves no temp file behind and reports progress', async () => {
    const seen: number[] = [];
    const loc = await stage.upload(chunked(randomBytes(3 * MiB + 5)), {
      onProgress: (p) => seen.push(p.bytes),
    });
    expect(seen.at(-1)).toBe(3 * MiB + 5);
    const files = await filesUnder(dir);
    expect(files.filter((f) => f.endsWith('.uploading'))).toEqual([]);
    expect(files).toContain(fileURLToPath(loc.uri));
  });
});

describe('local stage integrity faults', () => {
  let loc: DataLocation;
  let data: Buffer;
  beforeAll(async () => {
    data = randomBytes(100_000);
    loc = await stage.upload(chunked(data));
  });

  async function tamper(fn: (file: string) => Promise<void>): Promise<DataLocation> {
    const copy = await stage.upload(chunked(data));
    await fn(fileURLToPath(copy.uri));
    return copy;
  }

  it('one byte short: PrematureEof with expected and observed counts', async () => {
    const bad = await tamper((f) => truncate(f, data.length - 1));
    const error = await failure(drain(await stage.open(bad)));
    expect(error).toMatchObject({ kind: 'PrematureEof', expected: 100_000, observed: 99_999 });
  });

  it('one byte long: TooLong, and no byte beyond the declared size is delivered', async () => {
    const bad = await tamper((f) => appendFile(f, Buffer.from([0])));
    const delivered: Buffer[] = [];
    const stream = await stage.open(bad);
    stream.on('data', (c: Buffer) => delivered.push(c));
    const error = await failure(
      new Promise((resolve, reject) => stream.on('end', resolve).on('error', reject)),
    );
    expect(error.kind).toBe('TooLong');
    expect(Buffer.concat(delivered).length).toBeLessThanOrEqual(data.length);
  });

  it('one flipped byte: DigestMismatch, surfaced through pipeline', async () => {
    const bad = await tamper(async (f) => {
      const handle = await open(f, 'r+');
      const byte = Buffer.alloc(1);
      await handle.read(byte, 0, 1, 5000);
      byte[0] = (byte[0] as number) ^ 0xff;
      await handle.write(byte, 0, 1, 5000);
      await handle.close();
    });
    const out = path.join(dir, 'out');
    const error = await failure(
      pipeline(await stage.open(bad), (await open(out, 'w')).createWriteStream()),
    );
    expect(error.kind).toBe('DigestMismatch');
  });

  it('a declared size or digest that lies is caught the same way', async () => {
    expect(
      (await failure(drain(await stage.open({ ...loc, sizeBytes: loc.sizeBytes + 1 })))).kind,
    ).toBe('PrematureEof');
    expect(
      (await failure(drain(await stage.open({ ...loc, sizeBytes: loc.sizeBytes - 1 })))).kind,
    ).toBe('TooLong');
    expect((await failure(drain(await stage.open({ ...loc, sha256: 'b'.repeat(64) })))).kind).toBe(
      'DigestMismatch',
    );
  });

  it('readTo (the sink read of cat -o) verifies the same way', async () => {
    expect(await drainTo(stage, loc)).toEqual({ size: loc.sizeBytes, sha256: loc.sha256 });
    expect((await failure(drainTo(stage, { ...loc, sizeBytes: loc.sizeBytes + 1 }))).kind).toBe(
      'PrematureEof',
    );
    expect((await failure(drainTo(stage, { ...loc, sizeBytes: loc.sizeBytes - 1 }))).kind).toBe(
      'TooLong',
    );
    expect((await failure(drainTo(stage, { ...loc, sha256: 'b'.repeat(64) }))).kind).toBe(
      'DigestMismatch',
    );
  });

  it('a missing object is NotFound when opened', async () => {
    const gone = await stage.upload(chunked(data));
    await rm(fileURLToPath(gone.uri));
    await expect(stage.open(gone)).rejects.toThrow(NotFound);
  });

  it('a location outside the stage is OutsideStage before any file is touched', async () => {
    const secret = path.join(dir, 'secret');
    await writeFile(secret, 'x');
    for (const uri of [
      `file://${secret}`,
      `file://${dir}/stage/../secret`,
      `file://${dir}/stage/%2e%2e/secret`,
    ]) {
      expect((await failure(stage.open({ ...loc, uri }))).kind).toBe('OutsideStage');
    }
  });
});

describe('local stage ranges', () => {
  let loc: DataLocation;
  let data: Buffer;
  beforeAll(async () => {
    data = randomBytes(300_000);
    loc = await stage.upload(chunked(data));
  });

  it('returns exactly [start, end)', async () => {
    for (const [start, end] of [
      [0, 1],
      [0, 300_000],
      [123_456, 200_001],
      [299_999, 300_000],
    ] as const) {
      expect(
        (await collect(await stage.openRange(loc, start, end))).equals(data.subarray(start, end)),
      ).toBe(true);
    }
  });

  it('a file shorter than its location says: RangeMismatch before any byte, as on every stage', async () => {
    const copy = await stage.upload(chunked(data));
    await truncate(fileURLToPath(copy.uri), 250_000);
    const error = await failure(stage.openRange(copy, 200_000, 260_000));
    expect(error).toMatchObject({ kind: 'RangeMismatch' });
    expect((error as Error).message).toContain('bytes 200000-249999/250000');
  });
});

describe('local stage cancellation', () => {
  it('an abort mid-upload removes the temp file and publishes nothing', async () => {
    const root = path.join(dir, 'cancel');
    const s = stageFromDescriptor({ version: 1, kind: 'local', root });
    const controller = new AbortController();
    let sent = 0;
    // A source that produces 1 MiB, then stalls; the abort comes while the upload waits for it.
    const source = new Readable({
      read() {
        if (sent++ === 0) {
          this.push(randomBytes(MiB));
          setTimeout(() => controller.abort(), 20);
        }
      },
    });
    const upload = s.upload(source, { signal: controller.signal });
    await expect(upload).rejects.toMatchObject({ name: 'AbortError' });
    expect(await filesUnder(root)).toEqual([]);
    expect(source.destroyed).toBe(true);
  });

  it('an already aborted signal uploads nothing', async () => {
    const root = path.join(dir, 'cancel2');
    const s = stageFromDescriptor({ version: 1, kind: 'local', root });
    await expect(
      s.upload(chunked(randomBytes(10)), { signal: AbortSignal.abort() }),
    ).rejects.toMatchObject({
      name: 'AbortError',
    });
    expect(await filesUnder(root)).toEqual([]);
  });

  it('aborting a read destroys the stream with an AbortError', async () => {
    const loc = await stage.upload(chunked(randomBytes(4 * MiB)));
    const controller = new AbortController();
    const stream = await stage.open(loc, { signal: controller.signal });
    let n = 0;
    const reading = (async () => {
      for await (const chunk of stream) {
        n += (chunk as Buffer).length;
        if (n > MiB) controller.abort();
      }
    })();
    await expect(reading).rejects.toMatchObject({ name: 'AbortError' });
  });
});
