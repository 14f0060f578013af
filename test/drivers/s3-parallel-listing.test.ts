/**
 * The parallel listing on a real S3 server: ListObjectVersions started at a KeyMarker for each
 * range, merged back into exactly the sequential listing (versions, delete markers, order), for
 * a folder of subfolders and a flat one, and a commit snapshot that lists that way.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { S3Store } from '../../drivers/s3/index.js';
import { snapshotFolder } from '../../src/commits/snapshot.js';
import type { VersionRecord } from '../../src/contract/primitives.js';
import { historyListing, type ListingStats } from '../../src/folders/parallel-listing.js';
import { createTestBucket, describeS3, dropTestBucket, testS3Client } from '../setup/s3.js';

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

/** Run `fn` over `items`, `width` at a time. */
async function inParallel<T>(
  items: readonly T[],
  width: number,
  fn: (item: T) => Promise<unknown>,
) {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await fn(items[next++] as T);
    }),
  );
}

describeS3('parallel listing on S3', () => {
  let bucket = '';
  const prefix = `parlist-${Date.now()}/`;
  const cache = mkdtempSync(path.join(tmpdir(), 'provcat-s3pl-'));
  // 1,300 files in 13 subfolders (with names around the delimiter) and 1,300 flat hex names.
  const nested = Array.from({ length: 1300 }, (_, i) => {
    const folder = ['a', 'a-b', 'a.c', 'b', 'c', 'dé', 'e', 'f', 'g', 'h', 'i', 'j', 'k😀'][i % 13];
    return `${prefix}nested/${folder}/${String(i).padStart(4, '0')}`;
  });
  const flat = Array.from(
    { length: 1300 },
    (_, i) => `${prefix}flat/${((i * 2654435761) % 2 ** 32).toString(16).padStart(8, '0')}`,
  );

  beforeAll(async () => {
    bucket = await createTestBucket('pl', { versioning: true });
    const client = testS3Client();
    try {
      const put = (Key: string) =>
        client.send(new PutObjectCommand({ Bucket: bucket, Key, Body: Key }));
      await inParallel([...nested, ...flat, `${prefix}nested/a/`], 16, put);
      // Second versions and delete markers, so ranges hold several entries of one key.
      await inParallel(
        [...nested, ...flat].filter((_, i) => i % 50 === 0),
        16,
        put,
      );
      await inParallel(
        [...nested, ...flat].filter((_, i) => i % 70 === 1),
        16,
        (Key) => client.send(new DeleteObjectCommand({ Bucket: bucket, Key })),
      );
    } finally {
      client.destroy();
    }
  }, 300_000);
  afterAll(() => dropTestBucket(bucket, prefix));

  for (const folder of ['nested/', 'flat/']) {
    it(`lists ${folder} in ranges, exactly as one sequential listing`, async () => {
      const store = new S3Store({ cache });
      try {
        const sequential = await collect(store._history(bucket, `${prefix}${folder}`));
        expect(sequential.length).toBeGreaterThan(1300);
        const stats: ListingStats = { ranges: 0, cuts: 0 };
        const parallel = await collect(
          historyListing(store, bucket, `${prefix}${folder}`, {
            stats,
            firstPage: 200,
            buffered: 8 * 200,
          }),
        );
        expect(parallel).toEqual(sequential);
        expect(stats.ranges).toBeGreaterThan(3);
      } finally {
        await store.close();
      }
    }, 120_000);
  }

  it('takes a commit snapshot of a folder longer than a page through ranges', async () => {
    const store = new S3Store({ cache });
    try {
      const where = `${prefix}nested/`;
      const current = (await collect(store._history(bucket, where))).filter(
        (r: VersionRecord) => r.current && r.size !== null && !r.key.endsWith('/'),
      );
      const files = await snapshotFolder(store, bucket, where);
      expect(files.map((f) => [f.key, f.versionId])).toEqual(
        current.map((r) => [r.key, r.versionId]),
      );
    } finally {
      await store.close();
    }
  }, 120_000);
});
