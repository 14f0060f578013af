/**
 * The managed-object CLI verbs (`upload`, `cat`, `verify`) run through their Command objects:
 * output formats, `-o` publishing only verified bytes, ranges, and exit status 6 for integrity
 * failures.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliContext, Command } from '../src/cli/command.js';
import { exitCodeOf, ObjectIntegrityError } from '../src/errors.js';
import {
  type DataLocation,
  type LocalStage,
  lakeCommands,
  parseDataLocation,
  stageFromString,
} from '../src/lake/index.js';
import {
  dropBucket,
  makeBucket,
  sha256sum,
  testClient,
  writeRandomFile,
} from './fixtures/lake-helpers.js';
import { describeS3 } from './setup/s3.js';

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

async function run(
  name: string,
  positionals: string[],
  values: Record<string, string | boolean>,
  json = false,
): Promise<Run> {
  const stdout = new PassThrough();
  const chunks: Buffer[] = [];
  stdout.on('data', (c: Buffer) => chunks.push(c));
  const ctx: CliContext = {
    stdout,
    stderr: new PassThrough(),
    env: process.env,
    json,
    offline: false,
    progress: () => ({ onProgress: undefined, done() {} }),
  };
  try {
    const code = (await command(name).run({ positionals, values }, ctx)) ?? 0;
    return { code, stdout: Buffer.concat(chunks), error: undefined };
  } catch (error) {
    return { code: exitCodeOf(error), stdout: Buffer.concat(chunks), error };
  }
}

let dir: string;
let stageText: string;
let stage: LocalStage;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'lake-cli-'));
  stageText = `file://${dir}/stage/`;
  stage = (await stageFromString(stageText)) as LocalStage;
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

  it('verify accepts the location as JSON or @file', async () => {
    expect((await run('verify', [JSON.stringify(loc)], { stage: stageText })).code).toBe(0);
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

  it('a corrupted object: verify and cat -o exit 6, and -o leaves no file behind', async () => {
    const bad = (await run('upload', [file], { stage: stageText }, true)).stdout.toString();
    const badLoc = parseDataLocation(bad);
    await truncate(stage.pathOf(badLoc.uri), 299_999);
    const v = await run('verify', [bad], { stage: stageText });
    expect(v.code).toBe(6);
    expect(v.error).toBeInstanceOf(ObjectIntegrityError);
    const outDir = path.join(dir, 'bad-out');
    await import('node:fs/promises').then((fs) => fs.mkdir(outDir));
    const c = await run('cat', [bad], { stage: stageText, output: path.join(outDir, 'x') });
    expect(c.code).toBe(6);
    expect(await readdir(outDir)).toEqual([]);
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
  });
});

describeS3('provcat upload / verify on S3', () => {
  it('round-trips a file through an s3:// stage string', async () => {
    const admin = testClient();
    const bucket = await makeBucket(admin, 'cli');
    try {
      const file = path.join(dir, 'small.bin');
      await writeFile(file, randomBytes(1234));
      const up = await run('upload', [file], { stage: `s3://${bucket}/cli/` }, true);
      expect(up.error).toBeUndefined();
      const loc = parseDataLocation(up.stdout.toString());
      expect(loc.uri.startsWith(`s3://${bucket}/cli/`)).toBe(true);
      expect(
        (await run('verify', [JSON.stringify(loc)], { stage: `s3://${bucket}/cli/` })).code,
      ).toBe(0);
      expect(
        (await run('verify', [JSON.stringify(loc)], { stage: `s3://${bucket}/other/` })).code,
      ).toBe(6);
    } finally {
      await dropBucket(admin, bucket);
      admin.destroy();
    }
  });
});
