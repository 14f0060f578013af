/**
 * The GCS driver against the project's GCS test server (servers/gcs/), reached only over
 * HTTP: through @google-cloud/storage and the driver's own requests. Configuration and error
 * mapping without a server; the whole conformance suite with the lean read path on and off;
 * then what only GCS promises or risks: which path reads take, refetches counted in the
 * server's log, downloads that lose their connection, retries that stay on, 401/403/404,
 * concurrent creates, rewrites over several calls, resumable puts, conditional deletes, buckets
 * without versioning, bucket creation, V4 signed URLs, the MD5 ETag, offline mode, and commits.
 */
// The shared GC and fault suites on this driver (their setup is in each module).
import './gcs/gc.js';
import './gcs/faults.js';
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { Storage } from '@google-cloud/storage';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  CHUNK_QUANTUM,
  GcsStore,
  type GcsStoreOptions,
  mapGcsError,
  resolveGcsConfig,
} from '../../drivers/gcs/index.js';
import { type RecordFilter, startGcsServer } from '../../servers/gcs/server.js';
import type { ObjectInfo, VersionRecord } from '../../src/contract/primitives.js';
import {
  Exists,
  NotFound,
  OfflineMiss,
  PermissionDenied,
  PreconditionFailed,
  ProvcatError,
  SourceError,
  StoreError,
} from '../../src/core/errors.js';
import { stageFromDescriptor } from '../../src/lake/index.js';
import { conformance } from '../../src/testing/index.js';
import { rejection } from '../../src/testing/rejection.js';
import { randomPrefix } from '../../src/testing/target.js';
import { folderFlows } from '../support/folder-flows.js';
import { stageServerSuite } from '../support/stage-suite.js';
import { gcsStageHarness } from '../support/stage-targets.js';

const KiB = 1024;
const MiB = 1024 * KiB;

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const credentials = {
  client_email: 'signer@test-project.iam.gserviceaccount.com',
  private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
};

const server = await startGcsServer({ signingPublicKey: publicKey });
const work = await mkdtemp(path.join(tmpdir(), 'provcat-gcs-'));
afterAll(async () => {
  await server.close();
  await rm(work, { recursive: true, force: true });
});
afterEach(() => {
  server.faults.clear();
  server.settings.rewriteBytesPerCall = undefined;
});

/** A plain SDK client of the server, for setup and for looking at what the driver did. */
const sdk = new Storage({ apiEndpoint: server.url, projectId: 'test' });
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
const versioned = unique('conf');
const plain = unique('plain');
await sdk.createBucket(versioned, { versioning: { enabled: true } });
await sdk.createBucket(plain);

function store(options: GcsStoreOptions = {}): GcsStore {
  return new GcsStore({
    apiEndpoint: server.url,
    cache: path.join(work, 'cache', randomBytes(4).toString('hex')),
    env: {},
    ...options,
  });
}

async function bytesOf(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** A counter of the requests logged from now on that pass a filter. */
function counter() {
  const start = server.log.length;
  return (filter: RecordFilter = {}) =>
    server.log
      .slice(start)
      .filter(
        (r) =>
          (filter.method === undefined || r.method === filter.method) &&
          (filter.path === undefined || filter.path.test(r.path)) &&
          (filter.status === undefined || r.status === filter.status) &&
          (filter.when === undefined || filter.when(r)),
      ).length;
}

for (const lean of [true, false]) {
  conformance({
    name: `gcs (test server, lean ${lean ? 'on' : 'off'})`,
    store: (o) => store({ lean, ...o }),
    bucket: versioned,
    unversionedBucket: plain,
    flags: {
      versions: true,
      createMode: 'atomic',
      ranges: true,
      hostileKeys: true,
      parts: true,
      listsUploads: false,
    },
    env: { STORAGE_EMULATOR_HOST: server.url, PROVCAT_GCS_LEAN: lean ? '1' : '0' },
    sdk: {
      put: async (key, body) => {
        await sdk.bucket(versioned).file(key).save(Buffer.from(body), { resumable: false });
      },
      contentType: async (key) =>
        (await sdk.bucket(versioned).file(key).getMetadata())[0].contentType,
    },
    stage: ({ prefix }) =>
      stageFromDescriptor(
        { version: 1, kind: 'gs', bucket: versioned, prefix, endpoint: server.url },
        { partSize: MiB },
      ),
    foreignPut: async (bucket, key, body) => {
      await sdk.bucket(bucket).file(key).save(body, { resumable: false });
    },
  });
}

// The everyday folder flows (push, commit --from, diff, rm -r) on GCS.
folderFlows({ name: 'gcs (test server)', store: (o) => store(o), bucket: versioned, scheme: 'gs' });

describe('gcs configuration', () => {
  it('follows the GCS environment: emulator host, project, key file; options win', () => {
    expect(
      resolveGcsConfig(
        {},
        {
          STORAGE_EMULATOR_HOST: 'http://127.0.0.1:4443/',
          GCLOUD_PROJECT: 'p2',
          GOOGLE_CLOUD_PROJECT: 'p1',
          GOOGLE_APPLICATION_CREDENTIALS: '/keys/sa.json',
        },
      ),
    ).toEqual({
      endpoint: 'http://127.0.0.1:4443',
      custom: true,
      auth: false,
      projectId: 'p1',
      keyFilename: '/keys/sa.json',
      lean: true,
      requestTimeoutMs: 60_000,
    });
    expect(resolveGcsConfig({}, { GCLOUD_PROJECT: 'p2' })).toMatchObject({
      endpoint: 'https://storage.googleapis.com',
      custom: false,
      auth: true,
      projectId: 'p2',
    });
    // A bare host gets https://, as the SDK does; the option beats the environment.
    expect(resolveGcsConfig({}, { STORAGE_EMULATOR_HOST: 'gcs.internal:443' }).endpoint).toBe(
      'https://gcs.internal:443',
    );
    expect(
      resolveGcsConfig(
        { apiEndpoint: 'http://mine:1', useAuthWithCustomEndpoint: true, lean: false },
        { STORAGE_EMULATOR_HOST: 'http://env:2', PROVCAT_GCS_LEAN: '1' },
      ),
    ).toMatchObject({ endpoint: 'http://mine:1', auth: true, lean: false, projectId: undefined });
    expect(resolveGcsConfig({}, { PROVCAT_GCS_LEAN: '0' }).lean).toBe(false);
    expect(() => resolveGcsConfig({ apiEndpoint: 'http://[nope' }, {})).toThrow(RangeError);
    expect(() => resolveGcsConfig({ partSize: 5 * MiB + 1 }, {})).toThrow(/256 KiB/);
    expect(resolveGcsConfig({ requestTimeoutMs: 1500 }, {}).requestTimeoutMs).toBe(1500);
    for (const bad of [0, -1, 1.5, Number.NaN])
      expect(() => resolveGcsConfig({ requestTimeoutMs: bad }, {})).toThrow(/requestTimeoutMs/);
    const timeoutEnv = (v: string) => ({ PROVCAT_GCS_REQUEST_TIMEOUT_MS: v });
    expect(resolveGcsConfig({}, timeoutEnv('2500')).requestTimeoutMs).toBe(2500);
    expect(resolveGcsConfig({}, timeoutEnv(' ')).requestTimeoutMs).toBe(60_000);
    expect(resolveGcsConfig({ requestTimeoutMs: 7 }, timeoutEnv('2500')).requestTimeoutMs).toBe(7);
    for (const bad of ['10s', '0', '-5'])
      expect(() => resolveGcsConfig({}, timeoutEnv(bad))).toThrow(
        /PROVCAT_GCS_REQUEST_TIMEOUT_MS.*not/,
      );
    expect(() => new GcsStore({ partSize: 3 * CHUNK_QUANTUM * 5, env: {} })).not.toThrow();
  });

  it('maps SDK and transport errors through the one table, keeping the cause', () => {
    const ctx = { bucket: 'b', key: 'k', op: 'head' };
    const api = (code: number, reason?: string) =>
      Object.assign(new Error(`api ${code}`), {
        code,
        errors: reason ? [{ reason }] : undefined,
      });
    expect(mapGcsError(api(404, 'notFound'), ctx)).toBeInstanceOf(NotFound);
    expect(mapGcsError(api(403, 'forbidden'), ctx)).toBeInstanceOf(PermissionDenied);
    expect(mapGcsError(api(401, 'required'), ctx)).toBeInstanceOf(PermissionDenied);
    expect(mapGcsError(api(412), ctx)).toBeInstanceOf(PreconditionFailed);
    // A resumable session's start reports the status as `status` (the transport's error).
    const gaxios = Object.assign(new Error('precondition'), { status: 412, code: '412' });
    expect(mapGcsError(gaxios, { ...ctx, op: 'create' })).toBeInstanceOf(Exists);
    const busy = mapGcsError(api(503, 'backendError'), ctx) as StoreError;
    expect(busy).toBeInstanceOf(StoreError);
    expect(busy.status).toBe(503);
    expect(busy.cause).toBeInstanceOf(Error);
    expect(busy.message).toContain('gs://b/k');
    const refused = mapGcsError(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }), ctx);
    expect(refused.message).toContain('STORAGE_EMULATOR_HOST');
    const mine = new NotFound('already mapped');
    expect(mapGcsError(mine, ctx)).toBe(mine);
  });
});

describe('gcs specifics', () => {
  const s = store();

  it('reads take the lean path (no SDK request); with lean off, head and list go through the SDK', async () => {
    const key = `${randomPrefix()}lean.txt`;
    await s._put(versioned, key, Buffer.from('lean'));
    const sdkHeader = (r: { headers: Record<string, string> }) =>
      r.headers['x-goog-api-client'] !== undefined;
    for (const [lean, viaSdk] of [
      [true, 0],
      [false, 2],
    ] as const) {
      const count = counter();
      const reader = store({ lean });
      expect(reader.leanReads).toBe(lean);
      await reader._head(versioned, key);
      for await (const _ of reader._pages(versioned, key)) {
        // one page
      }
      expect((await bytesOf((await reader._get(versioned, key)).body)).toString()).toBe('lean');
      expect(count({ method: 'GET' })).toBe(3);
      expect(count({ method: 'GET', when: sdkHeader })).toBe(viaSdk);
    }
  });

  it('fetches a folder from one listing, refetches nothing unchanged without a GET, then one changed file with one GET', async () => {
    const p = randomPrefix();
    for (let i = 0; i < 20; i++)
      await s._put(versioned, `${p}d${i % 3}/f${i}.txt`, Buffer.from(`${i}`));
    const reader = store();
    const media = {
      method: 'GET',
      when: (r: { query: Record<string, string> }) => r.query.alt === 'media',
    };
    let count = counter();
    const first = await reader.fetch(`gs://${versioned}/${p}`);
    expect(first).toMatchObject({ files: 20, downloaded: 20 });
    expect(count(media)).toBe(20);
    count = counter();
    expect(await reader.fetch(`gs://${versioned}/${p}`)).toMatchObject({
      files: 20,
      downloaded: 0,
    });
    expect(count()).toBe(1);
    expect(count(media)).toBe(0);
    await s._put(versioned, `${p}d1/f4.txt`, Buffer.from('changed'));
    count = counter();
    expect(await reader.fetch(`gs://${versioned}/${p}`)).toMatchObject({
      files: 20,
      downloaded: 1,
    });
    expect(count(media)).toBe(1);
  });

  it('a download whose connection drops mid-body fails instead of hanging; a small one is read again', async () => {
    const key = `${randomPrefix()}drop.bin`;
    const data = randomBytes(3 * MiB);
    await s._put(versioned, key, data);
    for (const lean of [true, false]) {
      server.faults.dropResponse({ method: 'GET', path: /\/o\//, afterBytes: 100_000 });
      const got = await store({ lean })._get(versioned, key);
      const error = await rejection(bytesOf(got.body));
      expect(error).toBeInstanceOf(Error);
    }
    const small = `${randomPrefix()}small.bin`;
    await s._put(versioned, small, data.subarray(0, 40_000));
    server.faults.dropResponse({ method: 'GET', path: /\/o\//, afterBytes: 1000 });
    const count = counter();
    const whole = await store()._get(versioned, small, { wholeUpTo: 64 * KiB });
    expect((await bytesOf(whole.body)).equals(data.subarray(0, 40_000))).toBe(true);
    expect(count({ method: 'GET' })).toBe(2);
  });

  it('an SDK answer cut short by a clean close is retried after requestTimeoutMs, not awaited forever', async () => {
    // node-fetch 2, under the SDK, never settles a body that ends before its Content-Length;
    // the SDK's own 60 s bound is dropped on the way (gcs-store.ts passes it again).
    const bucketGet = { method: 'GET', path: new RegExp(`/b/${versioned}$`) };
    const key = `${randomPrefix()}bounded.txt`;
    await s._put(versioned, key, Buffer.from('bounded'));
    for (const lean of [false, true]) {
      const sdkHeader = (r: { headers: Record<string, string> }) =>
        r.headers['x-goog-api-client'] !== undefined;
      server.faults.dropResponse({ ...bucketGet, afterBytes: 20 });
      const count = counter();
      const started = performance.now();
      const bounded = store({ lean, requestTimeoutMs: 1000 });
      // The first version primitive asks the bucket's versioning once.
      expect(await bounded._versionOf(versioned, key)).toMatch(/^\d+$/);
      expect(performance.now() - started).toBeLessThan(20_000);
      // The lean reader asks on its own GET and hands the cut answer to the SDK; the SDK reader
      // asks again itself: either way two bucket GETs, the last one through the SDK.
      expect(count(bucketGet)).toBe(2);
      expect(count({ ...bucketGet, when: sdkHeader })).toBe(lean ? 1 : 2);
    }
  });

  it('retries a 503 on reads, and the SDK still retries after puts and deletes without preconditions', async () => {
    const key = `${randomPrefix()}retry.txt`;
    await s._put(versioned, key, Buffer.from('retry me'));
    server.faults.failWith({ method: 'GET', path: /\/o\//, times: 2 });
    expect((await bytesOf((await store()._get(versioned, key)).body)).toString()).toBe('retry me');
    const sdkStore = store({ lean: false });
    await sdkStore._put(versioned, `${key}.2`, Buffer.from('x'));
    await sdkStore._delete(versioned, `${key}.2`);
    await sdkStore._copy(versioned, key, undefined, `${key}.3`);
    server.faults.failWith({ method: 'GET', path: /\/o\//, times: 2 });
    const count = counter();
    expect((await sdkStore._head(versioned, key)).size).toBe(8);
    expect(count({ method: 'GET', status: 503 })).toBe(2);
  });

  it('keeps 403 and 401 apart from NotFound, and a missing bucket lists as NotFound', async () => {
    const bucket = unique('denied');
    await sdk.createBucket(bucket);
    await s._put(bucket, 'k', Buffer.from('k'));
    for (const status of [403, 401] as const) {
      server.denyBucket(bucket, status);
      for (const lean of [true, false]) {
        const r = store({ lean });
        for (const call of [
          () => r._head(bucket, 'k'),
          () => r._get(bucket, 'k'),
          () => r._put(bucket, 'k2', Buffer.from('x')),
          () => r._delete(bucket, 'k'),
          async () => {
            for await (const _ of r._pages(bucket, '')) {
              // nothing
            }
          },
        ]) {
          const error = await rejection(call());
          expect(error, `${status} lean ${lean}`).toBeInstanceOf(PermissionDenied);
          expect((error as StoreError).status).toBe(status);
        }
      }
      server.allowBucket(bucket);
    }
    const missing = unique('missing');
    for (const lean of [true, false]) {
      const listing = await rejection(
        (async () => {
          for await (const _ of store({ lean })._pages(missing, '')) {
            // nothing
          }
        })(),
      );
      expect(listing, `lean ${lean}`).toBeInstanceOf(NotFound);
      expect(String(listing)).toContain(`gs://${missing}/`);
    }
    expect(await rejection(s._head(missing, 'k'))).toBeInstanceOf(NotFound);
    expect(await rejection(s._versionOf(missing, 'k'))).toBeInstanceOf(NotFound);
  });

  it('eight concurrent creates of one key: exactly one wins, the others are Exists', async () => {
    expect(await s._createMode(versioned)).toBe('atomic');
    const key = `${randomPrefix()}once`;
    const outcomes = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) => store()._create(versioned, key, Buffer.from(`w${i}`))),
    );
    const won = outcomes.filter(
      (o) => o.status === 'fulfilled',
    ) as PromiseFulfilledResult<ObjectInfo>[];
    expect(won).toHaveLength(1);
    for (const o of outcomes) if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(Exists);
    const body = await bytesOf((await s._get(versioned, key)).body);
    expect((await s._head(versioned, key)).version).toBe(won[0]?.value.version);
    expect(body.toString()).toMatch(/^w[0-7]$/);
  });

  it('copies by rewrite, following rewriteToken over several calls, the live object or one generation', async () => {
    server.settings.rewriteBytesPerCall = 100_000;
    const p = randomPrefix();
    const v1 = randomBytes(350_000);
    const first = await s._put(versioned, `${p}src`, v1);
    await s._put(versioned, `${p}src`, Buffer.from('second'));
    const count = counter();
    const copied = await s._copy(versioned, `${p}src`, first.versionId, `${p}dst`);
    expect(count({ method: 'POST', path: /rewriteTo/ })).toBe(4);
    expect(copied).toMatchObject({ key: `${p}dst`, size: 350_000, etag: first.etag });
    expect((await bytesOf((await s._get(versioned, `${p}dst`)).body)).equals(v1)).toBe(true);
    const live = await s._copy(versioned, `${p}src`, undefined, `${p}dst2`);
    expect(live.size).toBe(6);
  });

  it('puts large objects through one resumable session in 256 KiB-multiple chunks, visible only when complete', async () => {
    const big = store({ multipartThreshold: MiB, partSize: MiB });
    const data = randomBytes(3 * MiB + 300 * KiB + 5);
    const file = path.join(work, 'big.bin');
    await writeFile(file, data);
    const md5 = `"${createHash('md5').update(data).digest('hex')}"`;
    for (const [label, source] of [
      ['file', () => file],
      ['stream', () => Readable.from([data.subarray(0, 1000), data.subarray(1000)])],
      ['bytes', () => data],
    ] as const) {
      const key = `${randomPrefix()}${label}.bin`;
      const count = counter();
      const start = server.log.length;
      const info = await big._put(versioned, key, source());
      expect(info).toMatchObject({ key, size: data.length, etag: md5 });
      const chunks = server.log
        .slice(start)
        .filter((r) => r.method === 'PUT' && r.uploadId !== undefined);
      expect(count({ method: 'POST', path: /\/upload\// })).toBe(1);
      // Four parts: 1 MiB × 3 with `/*`, then the completion with the last 300 KiB + 5 bytes.
      expect(chunks.map((r) => r.headers['content-range'])).toEqual([
        'bytes 0-1048575/*',
        'bytes 1048576-2097151/*',
        'bytes 2097152-3145727/*',
        `bytes 3145728-3407871/*`,
        `bytes 3407872-${data.length - 1}/${data.length}`,
      ]);
      expect((await bytesOf((await s._get(versioned, key)).body)).equals(data)).toBe(true);
    }
    // A source that fails part-way: no object, and the session is cancelled.
    const key = `${randomPrefix()}failing.bin`;
    async function* failing() {
      yield data.subarray(0, 2 * MiB + 10);
      throw new Error('the source broke');
    }
    const error = await rejection(big._put(versioned, key, Readable.from(failing())));
    expect(error).toBeInstanceOf(ProvcatError);
    expect(await rejection(s._head(versioned, key))).toBeInstanceOf(NotFound);
    const session = server.sessions().find((x) => x.name === key);
    expect(session?.state).toBe('cancelled');
    // A stream shorter than its declared size fails as a source error, writing nothing.
    const short = `${randomPrefix()}short.bin`;
    const shortError = await rejection(
      s._put(versioned, short, Readable.from([Buffer.alloc(10)]), { size: 11 }),
    );
    expect(shortError).toBeInstanceOf(SourceError);
    expect(await rejection(s._head(versioned, short))).toBeInstanceOf(NotFound);
  });

  it('a chunk that loses its connection is sent again from what the session kept, from a file and from memory', async () => {
    const big = store({ multipartThreshold: MiB, partSize: MiB });
    const data = randomBytes(3 * MiB);
    const file = path.join(work, 'drop.bin');
    await writeFile(file, data);
    for (const source of [() => file, () => data]) {
      const key = `${randomPrefix()}drop.bin`;
      // The second chunk's connection breaks after 300 KiB: the session keeps 256 KiB of it.
      server.faults.dropRequest({
        method: 'PUT',
        path: /\/upload\//,
        when: (r) => String(r.headers['content-range']).startsWith(`bytes ${MiB}-`),
        afterBytes: 300 * KiB,
      });
      const start = server.log.length;
      expect((await big._put(versioned, key, source())).size).toBe(data.length);
      const ranges = server.log
        .slice(start)
        .filter((r) => r.method === 'PUT' && r.uploadId !== undefined)
        .map((r) => r.headers['content-range']);
      expect(ranges).toEqual([
        `bytes 0-${MiB - 1}/*`,
        `bytes ${MiB}-${2 * MiB - 1}/*`,
        'bytes */*',
        `bytes ${MiB + 256 * KiB}-${2 * MiB - 1}/*`,
        `bytes ${2 * MiB}-${3 * MiB - 1}/*`,
        `bytes */${data.length}`,
      ]);
      expect((await bytesOf((await s._get(versioned, key)).body)).equals(data)).toBe(true);
    }
  });

  it('deletes conditionally: a moved generation is PreconditionFailed, a versionId deletes exactly that generation', async () => {
    const key = `${randomPrefix()}cond.txt`;
    const a = await s._put(versioned, key, Buffer.from('a'));
    const b = await s._put(versioned, key, Buffer.from('bb'));
    expect(await rejection(s._deleteIf(versioned, key, { version: a.version }))).toBeInstanceOf(
      PreconditionFailed,
    );
    await s._deleteIf(versioned, key, { version: a.version, versionId: a.versionId });
    expect(await rejection(s._headVersion(versioned, key, a.version))).toBeInstanceOf(NotFound);
    expect((await s._head(versioned, key)).version).toBe(b.version);
    await s._deleteIf(versioned, key, { version: b.version });
    expect(await rejection(s._head(versioned, key))).toBeInstanceOf(NotFound);
    expect(await rejection(s._deleteIf(versioned, key, { version: b.version }))).toBeInstanceOf(
      NotFound,
    );
  });

  it('on a bucket without versioning: objects work, version primitives refuse with StoreError', async () => {
    const key = `${randomPrefix()}plain.txt`;
    const put = await s._put(plain, key, Buffer.from('plain'));
    expect((await s._head(plain, key)).version).toBe(put.version);
    for (const call of [
      () => s._versionOf(plain, key),
      () => s._headVersion(plain, key, put.version),
      () => s._getVersion(plain, key, put.version),
      () => s._copy(plain, key, put.version, `${key}.copy`),
      async () => {
        for await (const _ of s._history(plain, '')) {
          // nothing
        }
      },
    ]) {
      const error = await rejection(call());
      expect(error).toBeInstanceOf(StoreError);
      expect(error).not.toBeInstanceOf(NotFound);
    }
    await expect(s.commit(`gs://${plain}/${key.split('/')[0]}/`, 'no')).rejects.toThrow(StoreError);
  });

  it('makes buckets with versioning, idempotently, turning versioning on for an existing one', async () => {
    const bucket = unique('made');
    await s.makeBucket(bucket, { versioning: false });
    expect((await sdk.bucket(bucket).getMetadata())[0].versioning?.enabled).not.toBe(true);
    await s.makeBucket(bucket, { versioning: true });
    expect((await sdk.bucket(bucket).getMetadata())[0].versioning?.enabled).toBe(true);
    await s.makeBucket(bucket, { versioning: true });
    const key = 'v.txt';
    const put = await s._put(bucket, key, Buffer.from('v'));
    expect(await s._versionOf(bucket, key)).toBe(put.version);
  });

  it('presigns V4 URLs the server verifies, usable with a Range header', async () => {
    const signer = store({
      client: new Storage({ apiEndpoint: server.url, projectId: 'test', credentials }),
    });
    const key = `${randomPrefix()}signed é.bin`;
    const data = randomBytes(5000);
    await signer._put(versioned, key, data);
    const url = await signer._presign(versioned, key, { expiresIn: 600 });
    expect(url).toContain('X-Goog-Algorithm=GOOG4-RSA-SHA256');
    expect(url).toContain('X-Goog-Expires=600');
    const whole = await fetch(url);
    expect(Buffer.from(await whole.arrayBuffer()).equals(data)).toBe(true);
    const ranged = await fetch(url, { headers: { Range: 'bytes=10-19' } });
    expect(ranged.status).toBe(206);
    expect(Buffer.from(await ranged.arrayBuffer()).equals(data.subarray(10, 20))).toBe(true);
    // One hex digit of the signature changed (to another digit: a no-op would prove nothing).
    const tampered = await fetch(
      url.replace(
        /X-Goog-Signature=([0-9a-f])/,
        (_m, d: string) => `X-Goog-Signature=${d === '0' ? '1' : '0'}`,
      ),
    );
    expect(tampered.status).toBeGreaterThanOrEqual(400);
  });

  it('reports the MD5 as the ETag, in S3 form, on put, head, get, list and history', async () => {
    const key = `${randomPrefix()}md5.txt`;
    const data = Buffer.from('md5 me');
    const md5 = `"${createHash('md5').update(data).digest('hex')}"`;
    const put = await s._put(versioned, key, data);
    expect(put.etag).toBe(md5);
    expect((await s._head(versioned, key)).etag).toBe(md5);
    expect((await s._get(versioned, key)).info.etag).toBe(md5);
    for await (const page of s._pages(versioned, key)) expect(page.objects[0]?.etag).toBe(md5);
    for await (const r of s._history(versioned, key)) expect(r.etag).toBe(md5);
  });

  it('keeps one key whose generations straddle a listing page, newest first, behind its delete marker', async () => {
    const p = randomPrefix();
    const fill = Array.from({ length: 998 }, (_, i) => `${p}a${String(i).padStart(4, '0')}`);
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < fill.length) {
          await sdk
            .bucket(versioned)
            .file(fill[next++] as string)
            .save('x', { resumable: false });
        }
      }),
    );
    const ids: string[] = [];
    for (let i = 0; i < 4; i++)
      ids.push((await s._put(versioned, `${p}b`, Buffer.from(`${i}`))).version);
    await s._delete(versioned, `${p}b`);
    const count = counter();
    const history: VersionRecord[] = [];
    for await (const r of s._history(versioned, p)) history.push(r);
    expect(count({ method: 'GET', path: /\/o$/ })).toBe(2);
    const b = history.filter((r) => r.key === `${p}b`);
    expect(b.map((r) => [r.versionId, r.size, r.current])).toEqual([
      [`deleted@${ids[3]}`, null, true],
      [ids[3], 1, false],
      [ids[2], 1, false],
      [ids[1], 1, false],
      [ids[0], 1, false],
    ]);
    expect(history).toHaveLength(998 + 5);
  });

  it('offline: no primitive and no part-protocol call sends a request', async () => {
    const off = store({ offline: true });
    const count = counter();
    for (const call of [
      () => off._head(versioned, 'k'),
      () => off._get(versioned, 'k'),
      () => off._put(versioned, 'k', Buffer.from('x')),
      () => off._delete(versioned, 'k'),
      () => off._create(versioned, 'k', Buffer.from('x')),
      () => off._presign(versioned, 'k', { expiresIn: 60 }),
      () => off.partProtocol(versioned).create('k', {}),
      () => off.partProtocol(versioned).listParts('k', `${server.url}/x`, { partSize: MiB }),
      () => off.makeBucket('newbucket'),
      async () => {
        for await (const _ of off._pages(versioned, '')) {
          // nothing
        }
      },
    ]) {
      expect(await rejection(call())).toBeInstanceOf(OfflineMiss);
    }
    expect(count()).toBe(0);
  });
});

describe('commits on GCS', () => {
  const url = (p: string, rel = '') => `gs://${versioned}/${p}${rel}`;

  it('eight committers at once get the numbers 1..8, each the parent of the next', async () => {
    const p = randomPrefix();
    await store()._put(versioned, `${p}f.txt`, Buffer.from('x'));
    const made = await Promise.all(
      Array.from({ length: 8 }, (_, i) => store().commit(url(p), `c${i}`, { allowEmpty: true })),
    );
    const log = await store().log(url(p));
    expect(log.map((e) => e.number)).toEqual([8, 7, 6, 5, 4, 3, 2, 1]);
    expect(new Set(log.map((e) => e.id))).toEqual(new Set(made.map((u) => u.at?.id)));
    for (let i = 0; i + 1 < log.length; i++) expect(log[i]?.parent).toBe(log[i + 1]?.id);
  });

  it('a pinned commit reads the committed generations after the files change, and branches from it', async () => {
    const s = store();
    const p = randomPrefix('main');
    await s._put(versioned, `${p}a.txt`, Buffer.from('a1'));
    await s._put(versioned, `${p}sub/b.txt`, Buffer.from('b1'));
    const pinned = await s.commit(url(p), 'first');
    await s._put(versioned, `${p}a.txt`, Buffer.from('a2 changed'));
    await s._delete(versioned, `${p}sub/b.txt`);
    await s._put(versioned, `${p}c.txt`, Buffer.from('new'));
    const reader = store();
    const fetched = await reader.fetch(pinned);
    expect(fetched.files).toBe(2);
    const { readFile } = await import('node:fs/promises');
    expect(await readFile(path.join(fetched.path, 'a.txt'), 'utf8')).toBe('a1');
    expect(await readFile(path.join(fetched.path, 'sub/b.txt'), 'utf8')).toBe('b1');
    const branch = await s.branch(`gs://${versioned}/${unique('br')}/`, pinned.toString());
    const files = await s.walk(branch);
    expect(files.map((e) => branch.relative(e.uri))).toEqual(['a.txt', 'sub/b.txt']);
    const a = files[0] as (typeof files)[number];
    expect((await bytesOf((await s._get(versioned, a.uri.key)).body)).toString()).toBe('a1');
  });
});

// The managed stage on the server: the cases every cloud stage shares.
stageServerSuite(gcsStageHarness());
