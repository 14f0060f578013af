/**
 * The managed-object CLI verbs (`upload`, `cat`, `verify`) run through their Command objects:
 * output formats, `-o` publishing only verified bytes, ranges, exit status 6 for integrity
 * failures, and a stdout whose reader goes away. Whole-object reads go through `readTo`, whose
 * chunks may be reused read buffers (S3): the test stdout copies each chunk only when its write
 * calls back, so a `cat` that let go of a chunk too early would print the wrong bytes. The
 * bundled executable is run too, through real pipes (`npm run build` first).
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliContext, Command } from '../../src/cli/command.js';
import { EXIT_OUTPUT_CLOSED, lakeCommands, WritableSink } from '../../src/cli/commands/lake.js';
import { exitCodeOf, NotFound, ObjectIntegrityError } from '../../src/core/errors.js';
import { type DataLocation, parseDataLocation } from '../../src/lake/index.js';
import type { Progress } from '../../src/store/store.js';
import { MiB, sha256sum, testClient, writeRandomFile } from '../fixtures/lake-helpers.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';

/** The command users run: the bundled executable (scripts/bundle-cli.mjs). */
const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

function command(name: string): Command {
  const found = lakeCommands.find((c) => c.name === name);
  if (!found) throw new Error(`no command ${name}`);
  return found;
}

interface Run {
  code: number;
  stdout: Buffer;
  error: unknown;
}

/** How the test stdout behaves (see {@link lateStdout}), and where progress goes. */
interface StdoutOptions {
  /** Collects what the command reports to its progress bar. */
  progress?: Progress[];
  /** The write that would take it past `after` bytes fails with `error`. */
  fail?: { after: number; error: NodeJS.ErrnoException };
  /** How long each write takes; default: one turn of the event loop. */
  delayMs?: number;
}

/**
 * A stdout that copies each chunk only when its write is about to call back, a while after it
 * was written (process.stdout guarantees no more: it is done with a chunk by the callback). A
 * writer that let the chunk's memory be reused before the callback shows here as wrong bytes.
 */
function lateStdout(chunks: Buffer[], options: StdoutOptions = {}): Writable {
  const { fail, delayMs } = options;
  const later = (fn: () => void) =>
    delayMs === undefined ? setImmediate(fn) : setTimeout(fn, delayMs);
  let taken = 0;
  return new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (fail && taken + chunk.length > fail.after) {
        later(() => callback(fail.error));
        return;
      }
      later(() => {
        chunks.push(Buffer.from(chunk));
        taken += chunk.length;
        callback();
      });
    },
  });
}

async function run(
  name: string,
  positionals: string[],
  values: Record<string, string | boolean>,
  json = false,
  stdoutOptions: StdoutOptions = {},
): Promise<Run> {
  const chunks: Buffer[] = [];
  const stdout = lateStdout(chunks, stdoutOptions);
  const ctx: CliContext = {
    stdout,
    stderr: new PassThrough(),
    env: process.env,
    json,
    offline: false,
    progress: () => {
      const seen = stdoutOptions.progress;
      return { onProgress: seen && ((p) => seen.push(p)), done() {} };
    },
    track: (resource) => resource,
  };
  // What was written, once every write called back (a failed stream has nothing more to give).
  const written = () =>
    new Promise<Buffer>((resolve) => {
      if (stdout.destroyed) resolve(Buffer.concat(chunks));
      else stdout.end(() => resolve(Buffer.concat(chunks)));
    });
  try {
    const code = (await command(name).run({ positionals, values }, ctx)) ?? 0;
    return { code, stdout: await written(), error: undefined };
  } catch (error) {
    return { code: exitCodeOf(error), stdout: await written(), error };
  }
}

let dir: string;
let stageText: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'lake-cli-'));
  stageText = `file://${dir}/stage/`;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('provcat upload / cat / verify on a local stage', () => {
  let file: string;
  let loc: DataLocation;
  let locFile: string;

  beforeAll(async () => {
    file = path.join(dir, 'clip.mp4');
    await writeRandomFile(file, 300_000);
  });

  it("upload --json prints exactly one DataLocation with sha256sum's digest", async () => {
    const r = await run('upload', [file], { stage: stageText, 'content-type': 'video/mp4' }, true);
    expect(r.error).toBeUndefined();
    const text = r.stdout.toString();
    expect(text.trim().split('\n')).toHaveLength(1);
    loc = parseDataLocation(text);
    expect(loc).toMatchObject({
      contentType: 'video/mp4',
      sizeBytes: 300_000,
      sha256: await sha256sum(file),
    });
    locFile = path.join(dir, 'loc.json');
    await writeFile(locFile, text);
  });

  it('verify accepts the location as JSON or @file, and reports its progress', async () => {
    const progress: Progress[] = [];
    expect(
      (await run('verify', [JSON.stringify(loc)], { stage: stageText }, false, { progress })).code,
    ).toBe(0);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)).toMatchObject({ bytes: 300_000, totalBytes: 300_000, uri: loc.uri });
    const counts = progress.map((p) => p.bytes);
    expect(counts).toEqual([...counts].sort((a, b) => a - b));
    const r = await run('verify', [`@${locFile}`], { stage: stageText }, true);
    expect(JSON.parse(r.stdout.toString())).toMatchObject({ ok: true, sha256: loc.sha256 });
  });

  it('cat writes the verified bytes to stdout, or a range', async () => {
    const data = await readFile(file);
    expect((await run('cat', [`@${locFile}`], { stage: stageText })).stdout.equals(data)).toBe(
      true,
    );
    const r = await run('cat', [`@${locFile}`], { stage: stageText, range: '1000:1010' });
    expect(r.stdout.equals(data.subarray(1000, 1010))).toBe(true);
  });

  it('cat -o publishes the file only after verification', async () => {
    const out = path.join(dir, 'out', '..', 'copy.mp4');
    expect((await run('cat', [`@${locFile}`], { stage: stageText, output: out })).code).toBe(0);
    expect(await sha256sum(out)).toBe(loc.sha256);
  });

  it('a corrupted object: verify, cat and cat -o exit 6 with its kind, and -o leaves no file behind', async () => {
    const data = await readFile(file);
    const bad = (await run('upload', [file], { stage: stageText }, true)).stdout.toString();
    const where = fileURLToPath(parseDataLocation(bad).uri);
    const outDir = path.join(dir, 'bad-out');
    await mkdir(outDir);
    const flipped = Buffer.from(data);
    flipped[1234] = (flipped[1234] as number) ^ 1;
    const cases: [string, Buffer][] = [
      ['PrematureEof', data.subarray(0, 299_999)],
      ['TooLong', Buffer.concat([data, Buffer.from('x')])],
      ['DigestMismatch', flipped],
    ];
    for (const [kind, body] of cases) {
      await writeFile(where, body);
      const v = await run('verify', [bad], { stage: stageText });
      expect(v.code, kind).toBe(6);
      expect(v.error).toBeInstanceOf(ObjectIntegrityError);
      expect(v.error).toMatchObject({ kind });
      expect(v.stdout.length).toBe(0);
      const c = await run('cat', [bad], { stage: stageText });
      expect(c.error, kind).toMatchObject({ kind });
      expect(c.stdout.length).toBeLessThanOrEqual(300_000);
      const o = await run('cat', [bad], { stage: stageText, output: path.join(outDir, 'x') });
      expect(o.error, kind).toMatchObject({ kind });
      expect(await readdir(outDir)).toEqual([]);
    }
    await rm(where);
    const gone = await run('verify', [bad], { stage: stageText });
    expect(gone.error).toBeInstanceOf(NotFound);
    expect(gone.code).toBe(3);
    expect((await run('cat', [bad], { stage: stageText })).code).toBe(3);
  });

  it('cat to stdout: a reader that goes away (EPIPE) ends it quietly with exit 1; other write errors stay errors', async () => {
    const epipe = Object.assign(new Error('write EPIPE'), { code: 'EPIPE' });
    const closed = await run('cat', [`@${locFile}`], { stage: stageText }, false, {
      fail: { after: 100, error: epipe },
    });
    expect(closed.error).toBeUndefined();
    expect(closed.code).toBe(EXIT_OUTPUT_CLOSED);
    expect(EXIT_OUTPUT_CLOSED).toBe(1);
    const ranged = await run(
      'cat',
      [`@${locFile}`],
      { stage: stageText, range: '0:200000' },
      false,
      { fail: { after: 100, error: epipe } },
    );
    expect(ranged).toMatchObject({ code: 1, error: undefined });
    const eio = Object.assign(new Error('write EIO'), { code: 'EIO' });
    const failed = await run('cat', [`@${locFile}`], { stage: stageText }, false, {
      fail: { after: 100, error: eio },
    });
    expect(failed.error).toBe(eio);
  });

  it('a location outside the stage exits 6; a bad range and a missing --stage are usage errors', async () => {
    const outside = JSON.stringify({ ...loc, uri: `file://${dir}/elsewhere/x` });
    expect((await run('verify', [outside], { stage: stageText })).code).toBe(6);
    expect(
      (await run('cat', [JSON.stringify(loc)], { stage: stageText, range: '10-20' })).error,
    ).toMatchObject({
      name: 'UsageError',
    });
    expect((await run('verify', [JSON.stringify(loc)], {})).error).toMatchObject({
      name: 'UsageError',
    });
    for (const bad of ['0', '1.5', 'soon']) {
      const r = await run('upload', [path.join(dir, 'nothing')], {
        stage: stageText,
        'stall-timeout': bad,
      });
      // The shared numeric-option check: InvalidArgument, a usage error (exit 2).
      expect(r.error).toMatchObject({ name: 'InvalidArgument', message: /--stall-timeout/ });
      expect(exitCodeOf(r.error)).toBe(2);
    }
  });
});

describe('WritableSink', () => {
  it('lets go of a chunk only when the stream called back, one write at a time', async () => {
    const callbacks: (() => void)[] = [];
    const out = new Writable({
      write(_chunk, _encoding, callback) {
        callbacks.push(() => callback());
      },
    });
    const sink = new WritableSink(out).attach();
    let settled = false;
    const first = Promise.resolve(sink.data(Buffer.from('abc'))).then(() => {
      settled = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    expect(callbacks).toHaveLength(1);
    callbacks[0]?.();
    await first;
    expect(sink.written).toBe(3);
    expect(sink.batchBytes).toBe(MiB);
    sink.detach();
    expect(out.listenerCount('error')).toBe(0);
  });

  it('rejects with the stream error; outputClosed only for EPIPE', async () => {
    const failing = (code: string) =>
      new Writable({
        write(_chunk, _encoding, callback) {
          callback(Object.assign(new Error(code), { code }));
        },
      });
    const pipe = failing('EPIPE');
    const closed = new WritableSink(pipe).attach();
    await expect(closed.data(Buffer.from('x'))).rejects.toMatchObject({ code: 'EPIPE' });
    expect(closed.outputClosed).toBe(true);
    // A failed stream may still emit its error: it must not become an uncaught exception.
    closed.detach();
    expect(() => pipe.emit('error', new Error('late'))).not.toThrow();
    const full = new WritableSink(failing('ENOSPC')).attach();
    await expect(full.data(Buffer.from('x'))).rejects.toMatchObject({ code: 'ENOSPC' });
    expect(full.outputClosed).toBe(false);
  });
});

describeS3('provcat upload / cat / verify on S3', () => {
  let bucket = '';
  const prefix = `lake-cli-${randomBytes(4).toString('hex')}/`;
  let stageUri = '';
  let file = '';
  let loc: DataLocation;

  beforeAll(async () => {
    bucket = await createTestBucket('lake-cli');
    stageUri = `s3://${bucket}/${prefix}cli/`;
    file = path.join(dir, 's3-big.bin');
    await writeRandomFile(file, 6 * MiB + 12_345);
    const up = await run('upload', [file], { stage: stageUri }, true);
    expect(up.error).toBeUndefined();
    loc = parseDataLocation(up.stdout.toString());
  });
  afterAll(() => dropTestBucket(bucket, prefix));

  it('round-trips a file through an s3:// stage string; another prefix is outside the stage', async () => {
    expect(loc.uri.startsWith(stageUri)).toBe(true);
    expect(loc.sha256).toBe(await sha256sum(file));
    expect((await run('verify', [JSON.stringify(loc)], { stage: stageUri })).code).toBe(0);
    const other = `s3://${bucket}/${prefix}other/`;
    expect((await run('verify', [JSON.stringify(loc)], { stage: other })).code).toBe(6);
  });

  it("cat to stdout: the driver's reused buffers arrive byte for byte", async () => {
    // Each write takes 40 ms: far slower than the GET, so the driver's four 1 MiB read buffers
    // would be refilled under any chunk the output let go of before its write called back.
    const r = await run('cat', [JSON.stringify(loc)], { stage: stageUri }, false, { delayMs: 40 });
    expect(r.error).toBeUndefined();
    expect(r.stdout.length).toBe(loc.sizeBytes);
    expect(r.stdout.equals(await readFile(file))).toBe(true);
  });

  it('cat to stdout: a reader that goes away ends it quietly with exit 1', async () => {
    const epipe = Object.assign(new Error('write EPIPE'), { code: 'EPIPE' });
    const r = await run('cat', [JSON.stringify(loc)], { stage: stageUri }, false, {
      fail: { after: MiB, error: epipe },
    });
    expect(r).toMatchObject({ code: 1, error: undefined });
    // The connection the GET left behind does not spoil the next read.
    expect((await run('verify', [JSON.stringify(loc)], { stage: stageUri })).code).toBe(0);
  });

  it('a corrupted object: verify and cat exit 6 with its kind; a deleted one is NotFound', async () => {
    const small = path.join(dir, 's3-small.bin');
    await writeRandomFile(small, 2 * MiB + 7);
    const data = await readFile(small);
    const up = await run('upload', [small], { stage: stageUri }, true);
    const bad = up.stdout.toString();
    const key = parseDataLocation(bad).uri.slice(`s3://${bucket}/`.length);
    const admin = testClient();
    try {
      const flipped = Buffer.from(data);
      flipped[MiB + 3] = (flipped[MiB + 3] as number) ^ 0x80;
      const cases: [string, Buffer][] = [
        ['DigestMismatch', flipped],
        ['TooLong', Buffer.concat([data, Buffer.from('x')])],
        ['PrematureEof', data.subarray(0, data.length - 1)],
      ];
      for (const [kind, body] of cases) {
        await admin.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
        const v = await run('verify', [bad], { stage: stageUri });
        expect(v.code, kind).toBe(6);
        expect(v.error).toMatchObject({ kind });
        const c = await run('cat', [bad], { stage: stageUri });
        expect(c.code, kind).toBe(6);
        expect(c.error).toMatchObject({ kind });
      }
      await admin.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
      const gone = await run('verify', [bad], { stage: stageUri });
      expect(gone.error).toBeInstanceOf(NotFound);
      expect(gone.code).toBe(3);
    } finally {
      admin.destroy();
    }
  });

  bundleTests(
    () => stageUri,
    () => ({ file, loc }),
  );
});

describe('the bundled executable on a local stage', () => {
  let file = '';
  let loc: DataLocation;
  beforeAll(async () => {
    file = path.join(dir, 'bundle-big.bin');
    await writeRandomFile(file, 8 * MiB + 99);
    const up = await run('upload', [file], { stage: stageText }, true);
    expect(up.error).toBeUndefined();
    loc = parseDataLocation(up.stdout.toString());
  });
  bundleTests(
    () => stageText,
    () => ({ file, loc }),
  );
});

/** `provcat cat` as users run it: the bundle, its stdout a pipe. */
function bundleTests(stageOf: () => string, objectOf: () => { file: string; loc: DataLocation }) {
  it('the bundle: cat through a pipe delivers a multi-MiB object byte for byte', async () => {
    const { file, loc } = objectOf();
    const child = spawn(process.execPath, [BIN, 'cat', JSON.stringify(loc), '--stage', stageOf()], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const hash = createHash('sha256');
    let size = 0;
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      hash.update(chunk);
      size += chunk.length;
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, err).toBe(0);
    expect(err).toBe('');
    expect(size).toBe(loc.sizeBytes);
    expect(hash.digest('hex')).toBe(await sha256sum(file));
  });

  it('the bundle: cat | head -c 10 gives head its 10 bytes; provcat exits 1, silent', async () => {
    const { file, loc } = objectOf();
    const errFile = path.join(dir, `head-${randomBytes(4).toString('hex')}.err`);
    // $0..$3: node, the bundle, the location, the stage; after head's 10 bytes, provcat's exit
    // status ($PIPESTATUS is its first element).
    const r = spawnSync(
      'bash',
      [
        '-c',
        '"$0" "$1" cat "$2" --stage "$3" 2>"$ERR_FILE" | head -c 10; echo " $PIPESTATUS"',
        process.execPath,
        BIN,
        JSON.stringify(loc),
        stageOf(),
      ],
      { env: { ...process.env, ERR_FILE: errFile }, timeout: 60_000 },
    );
    expect(r.error).toBeUndefined();
    const out = r.stdout;
    expect(out.subarray(0, 10).equals((await readFile(file)).subarray(0, 10))).toBe(true);
    expect(out.subarray(10).toString()).toBe(` ${EXIT_OUTPUT_CLOSED}\n`);
    expect(await readFile(errFile, 'utf8')).toBe('');
  });
}
