/**
 * The GCS driver on composite objects — objects made by `objects.compose` (the SDK's
 * `bucket.combine`), which GCS gives a CRC32C and a `componentCount` but no MD5
 * (cloud.google.com/storage/docs/composite-objects). provcat takes an object's MD5 from
 * `md5Hash` / `x-goog-hash`; a composite has neither, so:
 *
 * - `stat` and listings report no ETag, and a fetch checks the bytes by their size and the
 *   object's CRC32C (a short, long or flipped body is refused, nothing cached);
 * - `push` cannot prove a composite holds a local file's bytes and uploads the file again
 *   (the driver does not compare CRC32Cs); the object it writes is an ordinary one with an
 *   MD5, so the next push skips it.
 *
 * Against the project's GCS test server, which answers composites as GCS does.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Storage } from '@google-cloud/storage';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { GcsStore } from '../../drivers/gcs/index.js';
import { startGcsServer } from '../../servers/gcs/server.js';
import { crc32c, crc32cBase64 } from '../../src/core/crc32c.js';
import { ObjectIntegrityError } from '../../src/core/errors.js';

const server = await startGcsServer();
const work = await mkdtemp(path.join(tmpdir(), 'provcat-gcs-composite-'));
afterAll(async () => {
  await server.close();
  await rm(work, { recursive: true, force: true });
});
afterEach(() => server.faults.clear());

const sdk = new Storage({ apiEndpoint: server.url, projectId: 'test' });
const bucketName = `composite-${randomBytes(4).toString('hex')}`;
const [bucket] = await sdk.createBucket(bucketName, { versioning: { enabled: true } });

function store(lean: boolean): GcsStore {
  return new GcsStore({
    apiEndpoint: server.url,
    cache: path.join(work, 'cache', randomBytes(4).toString('hex')),
    env: {},
    lean,
  });
}

/** A composite of two parts at `key` (through the SDK, as a user would make one); its bytes. */
async function composite(key: string): Promise<Buffer> {
  const a = randomBytes(3000);
  const b = randomBytes(1234);
  await bucket.file(`${key}.part1`).save(a, { resumable: false });
  await bucket.file(`${key}.part2`).save(b, { resumable: false });
  await bucket.combine([`${key}.part1`, `${key}.part2`], key);
  await bucket.file(`${key}.part1`).delete();
  await bucket.file(`${key}.part2`).delete();
  return Buffer.concat([a, b]);
}

for (const lean of [true, false]) {
  describe(`gcs composite objects (lean ${lean ? 'on' : 'off'})`, () => {
    it('stat and listings give the size and generation, and no ETag (a composite has no MD5)', async () => {
      const key = `stat-${randomBytes(3).toString('hex')}`;
      const data = await composite(key);
      const [meta] = await bucket.file(key).getMetadata();
      expect(meta.componentCount).toBe(2);
      expect(meta.md5Hash).toBeUndefined();
      expect(meta.crc32c).toBe(crc32cBase64(crc32c(data)));
      const s = store(lean);
      const entry = await s.stat(`gs://${bucketName}/${key}`);
      expect(entry.size).toBe(data.length);
      expect(entry.version).toBe(String(meta.generation));
      expect(entry.etag).toBeUndefined();
      const listed = (await s.walk(`gs://${bucketName}/`)).find((e) => e.uri.key === key);
      expect(listed?.etag).toBeUndefined();
      expect(listed?.size).toBe(data.length);
    });

    it('fetches a composite checked by its size and CRC32C: a short, long or flipped body refused', async () => {
      const key = `fetch-${randomBytes(3).toString('hex')}`;
      const data = await composite(key);
      const s = store(lean);
      const uri = `gs://${bucketName}/${key}`;
      const media = { method: 'GET', path: new RegExp(`/o/${key}$`) };
      const kinds = { truncate: 'PrematureEof', extend: 'TooLong', flipByte: 'DigestMismatch' };
      for (const mode of ['truncate', 'extend', 'flipByte'] as const) {
        server.faults.mangle({ ...media, mode, times: 10 }); // more than the driver's retries
        const failed = await s.fetch(uri).then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(failed, mode).toBeInstanceOf(ObjectIntegrityError);
        expect((failed as ObjectIntegrityError).kind).toBe(kinds[mode]);
        server.faults.clear();
      }
      const fetched = await s.fetch(uri);
      expect(await readFile(fetched.path)).toEqual(data);
    });

    it('a pinned composite is checked by its CRC32C too: a flipped byte is never cached', async () => {
      const key = `pinned-${randomBytes(3).toString('hex')}`;
      const data = await composite(key);
      const s = store(lean);
      const pinned = await s.pin(`gs://${bucketName}/${key}`);
      server.faults.mangle({
        method: 'GET',
        path: new RegExp(`/o/${key}$`),
        mode: 'flipByte',
        times: 10,
      });
      const failed = await s.fetch(pinned).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failed).toBeInstanceOf(ObjectIntegrityError);
      expect((failed as ObjectIntegrityError).kind).toBe('DigestMismatch');
      expect((failed as Error).message).toMatch(/CRC32C [0-9a-f]{8}, the store's CRC32C says/);
      server.faults.clear();
      expect(await readFile((await s.fetch(pinned)).path)).toEqual(data);
    });

    it('push uploads a file over a composite of the same bytes (unprovable), then skips it', async () => {
      const folder = `push-${randomBytes(3).toString('hex')}`;
      const data = await composite(`${folder}/same.bin`);
      const local = path.join(work, `local-${randomBytes(3).toString('hex')}`);
      await mkdir(local, { recursive: true });
      await writeFile(path.join(local, 'same.bin'), data);
      const s = store(lean);
      const first = await s.push(local, `gs://${bucketName}/${folder}/`);
      expect(first).toMatchObject({ uploaded: 1, skipped: 0, bytes: data.length });
      // What push wrote is an ordinary object with an MD5: provably the file's bytes.
      const [meta] = await bucket.file(`${folder}/same.bin`).getMetadata();
      expect(meta.componentCount).toBeUndefined();
      expect(meta.md5Hash).toBeDefined();
      const second = await s.push(local, `gs://${bucketName}/${folder}/`);
      expect(second).toMatchObject({ uploaded: 0, skipped: 1 });
    });
  });
}
