/**
 * The CLI against S3 (Ceph): make a bucket with and without versioning, then the everyday verbs
 * and a pin on it, exactly as a script would run them.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { GetBucketVersioningCommand } from '@aws-sdk/client-s3';
import { afterAll, expect, it } from 'vitest';
import {
  describeS3,
  removeBucket,
  s3TestTarget,
  testS3Client,
  uniqueBucketName,
} from '../setup/s3.js';

/** The command users run: the bundled executable (scripts/bundle-cli.mjs). */
const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

describeS3('provcat CLI on S3', () => {
  const made: string[] = [];
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-s3cli-'));
  const run = (...args: string[]) => {
    const r = spawnSync(process.execPath, [BIN, ...args], {
      env: { ...process.env, PROVCAT_CACHE_DIR: path.join(dir, 'cache') },
      encoding: 'utf8',
    });
    return { code: r.status, out: r.stdout, err: r.stderr };
  };
  afterAll(async () => {
    const c = testS3Client();
    for (const b of made) await removeBucket(c, b);
    c.destroy();
  });

  it.runIf(process.env.PROVCAT_TEST_S3 === 'ceph')(
    'mb makes buckets with and without versioning; put, fetch and pin work on them',
    async () => {
      expect(s3TestTarget().kind).toBe('ceph');
      const plain = uniqueBucketName('cli');
      const versioned = uniqueBucketName('cliv');
      made.push(plain, versioned);
      const a = run('mb', `s3://${plain}`, '--json');
      expect(a.code, a.err).toBe(0);
      expect(JSON.parse(a.out)).toEqual({ uri: `s3://${plain}/`, versioning: false });
      const b = run('mb', `s3://${versioned}`, '--versioning', '--json');
      expect(b.code, b.err).toBe(0);
      const c = testS3Client();
      const status = async (bucket: string) =>
        (await c.send(new GetBucketVersioningCommand({ Bucket: bucket }))).Status;
      expect(await status(versioned)).toBe('Enabled');
      expect(await status(plain)).toBeUndefined();
      c.destroy();
      expect(run('mb', `s3://${plain}/not-a-bucket/`).code).toBe(2);

      const local = path.join(dir, 'x.txt');
      writeFileSync(local, 'hello');
      for (const bucket of [plain, versioned]) {
        const put = run('put', local, `s3://${bucket}/d/x.txt`, '--json');
        expect(put.code, put.err).toBe(0);
        const f = JSON.parse(run('fetch', `s3://${bucket}/d/`, '--json').out);
        expect(f).toMatchObject({ files: 1, downloaded: 1, bytes: 5 });
      }
      const pin = run('pin', `s3://${versioned}/d/x.txt`, '--json');
      expect(pin.code, pin.err).toBe(0);
      expect(JSON.parse(pin.out).uri).toMatch(/\?at=version:/);
      // No versions on the plain bucket: pin, commit, log and branch are NotSupported (exit
      // 11), as on every driver.
      for (const args of [
        ['pin', `s3://${plain}/d/x.txt`],
        ['commit', `s3://${plain}/d/`, '-m', 'm'],
        ['log', `s3://${plain}/d/`],
        ['branch', `s3://${plain}/dev/`, 'd'],
        ['stat', `s3://${plain}/d/x.txt?at=version:abc`],
      ]) {
        const refused = run(...args);
        expect(refused.code, `${args.join(' ')}: ${refused.err}`).toBe(11);
        expect(refused.err).toMatch(/^provcat: NotSupported: /);
      }
      const missing = run('stat', `s3://${versioned}/d/x.txt?at=version:abc`);
      expect(missing.code).toBe(3);
      expect(missing.err).toContain(`s3://${versioned}/d/x.txt?at=version:abc`);
    },
    120_000,
  );
});
