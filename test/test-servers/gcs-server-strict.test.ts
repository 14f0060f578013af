/**
 * The GCS test server (servers/gcs/) as strict as GCS, through @google-cloud/storage 7.22
 * over HTTP (and `fetch()` for paths the SDK never sends): composite objects answered as GCS
 * answers them (CRC32C and componentCount, no MD5, an XML ETag not of an MD5, at most 1,024
 * components); one 501 `notImplemented` in the JSON error shape for every call the server does
 * not serve; 400 for the parameters, headers and body fields GCS would act on and the server
 * would otherwise ignore (matchGlob, softDeleted, lifecycle, retention, CSEK, kmsKeyName ...),
 * and for unknown query parameters; bucket metageneration preconditions. The rest of the
 * server is covered in gcs-server.test.ts.
 */
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { Storage } from '@google-cloud/storage';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GcsTestServer, startGcsServer } from '../../servers/gcs/server.js';
import { crc32c, crc32cBase64 } from '../../src/core/crc32c.js';
import { rejection } from '../../src/testing/rejection.js';

/** The SDK's error fields the tests read. */
interface SdkError {
  code?: number | string;
  message: string;
  errors?: { reason?: string; message?: string }[];
}

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const CLIENT_EMAIL = 'signer@test-project.iam.gserviceaccount.com';
const credentials = {
  client_email: CLIENT_EMAIL,
  private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
};

function uniqueBucket(): string {
  return `t-${randomBytes(6).toString('hex')}`;
}

function md5(data: Buffer): string {
  return createHash('md5').update(data).digest('base64');
}

async function errorOf(call: Promise<unknown>): Promise<SdkError> {
  return (await rejection(call)) as SdkError;
}

describe('GCS test server, as strict as GCS', () => {
  let server: GcsTestServer;
  let storage: Storage;

  beforeAll(async () => {
    server = await startGcsServer({
      signingPublicKey: publicKey,
      signingClientEmail: CLIENT_EMAIL,
    });
    storage = new Storage({
      apiEndpoint: server.url,
      projectId: 'test',
      credentials,
      retryOptions: { maxRetryDelay: 1, retryDelayMultiplier: 1, totalTimeout: 60, maxRetries: 3 },
    });
  });

  afterAll(async () => {
    await server?.close();
  });

  async function bucketWith(versioning: boolean) {
    const [bucket] = await storage.createBucket(uniqueBucket(), {
      versioning: { enabled: versioning },
    });
    return bucket;
  }

  describe('composite objects', () => {
    it('answers a composite as GCS does: CRC32C and componentCount, no MD5, an ETag not of an MD5', async () => {
      const bucket = await bucketWith(false);
      const parts = [randomBytes(1000), randomBytes(2000), randomBytes(3000)];
      for (const [i, part] of parts.entries()) {
        await bucket.file(`p${i}`).save(part, { resumable: false });
      }
      await bucket.combine(['p0', 'p1'], 'ab');
      await bucket.combine(['ab', 'p2'], 'abc'); // a composite source counts with its components
      const data = Buffer.concat(parts);
      const [meta] = await bucket.file('abc').getMetadata();
      expect(meta.md5Hash).toBeUndefined();
      expect(meta.crc32c).toBe(crc32cBase64(crc32c(data)));
      expect(meta.componentCount).toBe(3);
      expect(meta.size).toBe(String(data.length));
      // An ordinary object still has its MD5 and no componentCount.
      const [plainMeta] = await bucket.file('p0').getMetadata();
      expect(plainMeta.md5Hash).toBe(md5(parts[0] as Buffer));
      expect(plainMeta.componentCount).toBeUndefined();

      const media = await fetch(`${server.url}/storage/v1/b/${bucket.name}/o/abc?alt=media`);
      expect(Buffer.from(await media.arrayBuffer()).equals(data)).toBe(true);
      expect(media.headers.get('x-goog-hash')).toBe(`crc32c=${crc32cBase64(crc32c(data))}`);
      expect(media.headers.get('x-goog-component-count')).toBe('3');
      // The SDK's default download validation (CRC32C) passes; MD5 validation has nothing to use.
      expect((await bucket.file('abc').download())[0].equals(data)).toBe(true);

      const [url] = await bucket.file('abc').getSignedUrl({
        version: 'v4',
        action: 'read',
        expires: Date.now() + 60_000,
      });
      const xml = await fetch(url);
      expect(xml.status).toBe(200);
      const md5Hex = createHash('md5').update(data).digest('hex');
      expect(xml.headers.get('etag')).not.toContain(md5Hex);
      expect(xml.headers.get('etag')).toMatch(/^"-.+"$/);
      await xml.arrayBuffer();

      // A copy (rewrite) of a composite is composite too.
      await bucket.file('abc').copy(bucket.file('abc-copy'));
      const [copied] = await bucket.file('abc-copy').getMetadata();
      expect(copied.md5Hash).toBeUndefined();
      expect(copied.componentCount).toBe(3);
    });

    it('refuses a composite of more than 1,024 components', async () => {
      const bucket = await bucketWith(false);
      await bucket.file('one').save('x', { resumable: false });
      await bucket.combine(Array<string>(32).fill('one'), 'c32');
      await bucket.combine(Array<string>(32).fill('c32'), 'c1024');
      expect((await bucket.file('c1024').getMetadata())[0].componentCount).toBe(1024);
      const refused = await errorOf(bucket.combine(['c1024', 'one'], 'c1025'));
      expect(refused.code).toBe(400);
      expect((await bucket.file('c1025').exists())[0]).toBe(false);
    });
  });

  describe('what it does not implement', () => {
    /** The status and JSON body of a raw request. */
    async function raw(method: string, pathAndQuery: string, init: RequestInit = {}) {
      const res = await fetch(`${server.url}${pathAndQuery}`, { method, ...init });
      const text = await res.text();
      return { status: res.status, body: text === '' ? undefined : (JSON.parse(text) as unknown) };
    }

    it('answers 501 notImplemented, in the JSON error shape, to every call it does not serve', async () => {
      const bucket = await bucketWith(false);
      await bucket.file('f').save('f', { resumable: false });
      const b = bucket.name;
      const calls: [string, string][] = [
        ['GET', `/storage/v1/b/${b}/acl`],
        ['GET', `/storage/v1/b/${b}/iam`],
        ['POST', `/storage/v1/b/${b}/lockRetentionPolicy`],
        ['GET', `/storage/v1/b/${b}/o/f/acl`],
        ['POST', `/storage/v1/b/${b}/o/f/restore`],
        ['POST', `/storage/v1/b/${b}/o/watch`],
        ['POST', `/storage/v1/b/${b}/o/f`],
        ['DELETE', `/storage/v1/b/${b}/o`],
        ['DELETE', '/storage/v1/b'],
        ['GET', `/storage/v1/b/${b}/o/a/b`],
        ['GET', '/storage/v1/projects/test/serviceAccount'],
        ['GET', '/storage/v1/projects/test/hmacKeys'],
        ['GET', `/upload/storage/v1/b/${b}/o`],
        ['PUT', `/download/storage/v1/b/${b}/o/f`],
        ['GET', `/${b}/f`], // the XML API without a signature
        ['GET', '/'],
      ];
      for (const [method, where] of calls) {
        const { status, body } = await raw(method, where);
        expect(status, `${method} ${where}`).toBe(501);
        const message = `${method} ${where} is not implemented by the GCS test server (docs/testing-servers.md lists what it implements).`;
        expect(body, `${method} ${where}`).toEqual({
          error: {
            code: 501,
            message,
            errors: [{ domain: 'global', reason: 'notImplemented', message }],
          },
        });
      }
    });

    it('refuses with 400 what GCS would act on and the server would ignore', async () => {
      const bucket = await bucketWith(false);
      await bucket.file('a.txt').save('a', { resumable: false });
      const notImplemented = async (call: Promise<unknown>, what: string) => {
        const error = await errorOf(call);
        expect(error.code, what).toBe(400);
        expect(error.errors?.[0]?.reason, what).toBe('notImplemented');
        expect(error.message, what).toContain('not implemented by the GCS test server');
      };
      await notImplemented(bucket.getFiles({ matchGlob: '**.txt' }), 'matchGlob');
      await notImplemented(bucket.getFiles({ softDeleted: true }), 'softDeleted');
      await notImplemented(
        bucket.file('a.txt').getMetadata({ softDeleted: true }),
        'softDeleted get',
      );
      await notImplemented(
        bucket.setMetadata({
          lifecycle: { rule: [{ action: { type: 'Delete' }, condition: { age: 1 } }] },
        }),
        'lifecycle',
      );
      await notImplemented(bucket.setRetentionPeriod(60), 'retentionPolicy');
      await notImplemented(
        storage.createBucket(uniqueBucket(), { location: 'EUROPE-WEST1' }),
        'bucket location',
      );
      await notImplemented(bucket.file('a.txt').setMetadata({ temporaryHold: true }), 'hold');
      // CSEK: the key travels in x-goog-encryption-* headers, on uploads and reads.
      const key = randomBytes(32);
      await notImplemented(
        bucket.file('csek', { encryptionKey: key }).save('secret', { resumable: false }),
        'CSEK upload',
      );
      // (A download's error carries the status only.)
      expect((await errorOf(bucket.file('a.txt', { encryptionKey: key }).download())).code).toBe(
        400,
      );
      // kmsKeyName: a query parameter of the upload, and of the rewrite's destination.
      const kms = 'projects/p/locations/us/keyRings/r/cryptoKeys/k';
      await notImplemented(
        bucket.file('kms', { kmsKeyName: kms }).save('k', { resumable: false }),
        'kmsKeyName upload',
      );
      await notImplemented(
        bucket.file('a.txt').copy(bucket.file('kms-copy'), { destinationKmsKeyName: kms }),
        'kmsKeyName rewrite',
      );
      // Nothing refused was written or changed.
      const [files] = await bucket.getFiles();
      expect(files.map((f) => f.name)).toEqual(['a.txt']);
      const [meta] = await bucket.getMetadata();
      expect(meta.lifecycle).toBeUndefined();
      expect(meta.metageneration).toBe('1');
      expect((await bucket.file('a.txt').getMetadata())[0].metageneration).toBe('1');
    });

    it('refuses a query parameter it does not know, so a misspelt precondition never passes as none', async () => {
      const bucket = await bucketWith(false);
      await bucket.file('f').save('f', { resumable: false });
      const b = bucket.name;
      const misspelt = await raw('DELETE', `/storage/v1/b/${b}/o/f?ifGenerationMach=1`);
      expect(misspelt.status).toBe(400);
      expect(misspelt.body).toMatchObject({
        error: { code: 400, errors: [{ reason: 'invalidParameter' }] },
      });
      expect((await bucket.file('f').exists())[0]).toBe(true);
      // Standard parameters and the values the server serves anyway are accepted.
      for (const query of ['prettyPrint=false', 'userProject=p', 'projection=noAcl', 'alt=json']) {
        expect((await raw('GET', `/storage/v1/b/${b}/o/f?${query}`)).status, query).toBe(200);
      }
      expect((await raw('GET', `/storage/v1/b/${b}/o?projection=full`)).status).toBe(400);
      expect((await raw('GET', `/storage/v1/b/${b}/o/f?alt=proto`)).status).toBe(400);
      // An unknown x-goog-* header is refused too; an unknown JSON field is ignored, as on GCS.
      const header = await raw('GET', `/storage/v1/b/${b}/o/f`, {
        headers: { 'x-goog-something-new': '1' },
      });
      expect(header.status).toBe(400);
      const patched = await raw('PATCH', `/storage/v1/b/${b}/o/f`, {
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ cacheControl: 'no-store', someFutureField: 1, size: '99' }),
      });
      expect(patched.status).toBe(200);
      expect(patched.body).toMatchObject({ cacheControl: 'no-store', size: '1' });
    });

    it('checks bucket metageneration preconditions on get, patch and delete', async () => {
      const bucket = await bucketWith(false);
      const b = bucket.name;
      expect((await raw('GET', `/storage/v1/b/${b}?ifMetagenerationMatch=2`)).status).toBe(412);
      expect((await raw('GET', `/storage/v1/b/${b}?ifMetagenerationNotMatch=1`)).status).toBe(304);
      expect((await raw('GET', `/storage/v1/b/${b}?ifMetagenerationMatch=1`)).status).toBe(200);
      expect((await raw('DELETE', `/storage/v1/b/${b}?ifMetagenerationNotMatch=1`)).status).toBe(
        412,
      );
      await bucket.setMetadata({ versioning: { enabled: true } }, { ifMetagenerationMatch: 1 });
      expect((await raw('DELETE', `/storage/v1/b/${b}?ifMetagenerationMatch=1`)).status).toBe(412);
      expect((await raw('DELETE', `/storage/v1/b/${b}?ifMetagenerationMatch=2`)).status).toBe(204);
    });
  });
});
