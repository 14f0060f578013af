/**
 * A folder of 1,000 small objects on S3: fetched with bounded concurrency, and refetched
 * unchanged from one listing with no GET or HEAD at all. And on a versioned bucket, a first
 * fetch stopped halfway: the refetch downloads only the files whose blobs are missing.
 */
import { mkdtempSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { S3Store } from '../../drivers/s3/index.js';
import { forEachLimit } from '../../src/core/concurrency.js';
import { watchGets } from '../../src/testing/fetch.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';

describeS3('s3 folder fetch of 1,000 small objects', () => {
  let bucket = '';
  let prefix = '';
  const N = 1000;

  beforeAll(async () => {
    bucket = await createTestBucket('f');
    prefix = `fetch-${Date.now()}/`;
    const seeder = new S3Store({ cache: mkdtempSync(path.join(tmpdir(), 'provcat-s3f-')) });
    const keys = Array.from({ length: N }, (_, i) => `${prefix}d${i % 10}/f${i}.txt`);
    await forEachLimit(keys, 32, async (key) => {
      await seeder._put(bucket, key, Buffer.from(`object ${key}\n`));
    });
  }, 180_000);

  afterAll(() => dropTestBucket(bucket, prefix), 180_000);

  it('fetches with at most `concurrency` GETs in flight, then refetches nothing from one listing', async () => {
    const cache = mkdtempSync(path.join(tmpdir(), 'provcat-s3f-'));
    const store = new S3Store({ cache, concurrency: 16 });
    const gets = watchGets(store);
    const uri = `s3://${bucket}/${prefix}`;
    const first = await store.fetch(uri);
    expect(first).toMatchObject({ files: N, downloaded: N });
    expect(gets.most).toBeGreaterThan(1);
    expect(gets.most).toBeLessThanOrEqual(16);
    // Small objects whose size the listing gave come whole: no stream, no sink per file.
    expect(gets.whole).toBe(N);
    const names = await readdir(first.path, { recursive: true });
    expect(names.filter((n) => n.endsWith('.txt'))).toHaveLength(N);
    // Every file holds its own object's bytes (whole bodies share memory that is reused once
    // written, so a mix-up would show here).
    for (let i = 0; i < N; i++) {
      const rel = `d${i % 10}/f${i}.txt`;
      expect(await readFile(path.join(first.path, rel), 'utf8')).toBe(`object ${prefix}${rel}\n`);
    }

    vi.restoreAllMocks();
    const again = new S3Store({ cache });
    const pages = vi.spyOn(again, '_pages');
    const head = vi.spyOn(again, '_head');
    const get2 = vi.spyOn(again, '_get');
    const second = await again.fetch(uri);
    expect(second).toEqual({ path: first.path, files: N, downloaded: 0, bytes: 0 });
    expect(pages).toHaveBeenCalledTimes(1);
    expect(head).not.toHaveBeenCalled();
    expect(get2).not.toHaveBeenCalled();
  }, 180_000);
});

describeS3('s3: a first folder fetch stopped halfway, on a versioned bucket', () => {
  let bucket = '';
  let prefix = '';
  const N = 300;

  beforeAll(async () => {
    bucket = await createTestBucket('fv', { versioning: true });
    prefix = `stopped-${Date.now()}/`;
    const seeder = new S3Store({ cache: mkdtempSync(path.join(tmpdir(), 'provcat-s3f-')) });
    const keys = Array.from({ length: N }, (_, i) => `${prefix}d${i % 5}/f${i}.txt`);
    await forEachLimit(keys, 32, async (key) => {
      await seeder._put(bucket, key, Buffer.from(`object ${key}\n`));
    });
  }, 180_000);

  afterAll(() => dropTestBucket(bucket, prefix), 180_000);

  it('the refetch downloads only what is missing, though listings give no version ID', async () => {
    const cache = mkdtempSync(path.join(tmpdir(), 'provcat-s3f-'));
    const uri = `s3://${bucket}/${prefix}`;
    const stop = new AbortController();
    const first = new S3Store({ cache, concurrency: 8 });
    const stopped = await first
      .fetch(uri, {
        signal: stop.signal,
        onProgress: (p) => {
          if ((p.files ?? 0) >= 100) stop.abort();
        },
      })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(stopped).toBeInstanceOf(Error);
    const blobs = (
      await readdir(path.join(cache, 'v1', 'blobs'), { recursive: true, withFileTypes: true })
    ).filter((e) => e.isFile() && !e.name.startsWith('.tmp-')).length;
    expect(blobs).toBeGreaterThanOrEqual(100);
    expect(blobs).toBeLessThan(N);

    const again = await new S3Store({ cache }).fetch(uri);
    expect(again).toMatchObject({ files: N, downloaded: N - blobs });
  }, 180_000);
});
