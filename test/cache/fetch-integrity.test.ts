/**
 * Every fetch checks the bytes it downloads against the digest the store states (a recorded
 * `sha256`, or an ETag that is a plain MD5) before they are cached: a body whose bytes do not
 * hash to it is `ObjectIntegrityError('DigestMismatch')` and leaves nothing in the cache — on
 * S3's lean path and its SDK path, small bodies read whole and streamed ones, single files and
 * folders, and the local store's kernel copy. An S3 object whose GET says it is encrypted with
 * SSE-KMS or SSE-C has a 32-hex ETag that is not its MD5, and is accepted.
 *
 * Against a small S3 stub (node:http, reached through the driver's lean path and through the
 * SDK), against Ceph through the fault proxy flipping a byte in transit, and against the local
 * store with a version file changed behind its back.
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { S3Store } from '../../drivers/s3/index.js';
import { etagNotMd5 } from '../../drivers/s3/s3-store.js';
import {
  checkableWith,
  DigestsDiffer,
  md5OfEtag,
  statedDigest,
} from '../../src/cache/content-digest.js';
import { ObjectIntegrityError } from '../../src/core/errors.js';
import type { ObjectStore } from '../../src/store/object-store.js';
import { type FaultProxy, startFaultProxy } from '../../src/testing/fault-proxy.js';
import { rejection } from '../../src/testing/rejection.js';
import { createTestBucket, describeS3, dropTestBucket, s3TestTarget } from '../setup/s3.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-fetch-integrity-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const md5 = (b: Uint8Array) => createHash('md5').update(b).digest('hex');
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

let caches = 0;
/** A fresh cache folder. */
const freshCache = () => path.join(work, `cache-${++caches}`);

/** Every file below the cache's data folders (blobs and views), temps included. */
async function cachedFiles(cache: string): Promise<string[]> {
  const out: string[] = [];
  for (const dir of ['blobs', 'tree', 'file', 'pin', 'commit']) {
    try {
      const entries = await readdir(path.join(cache, 'v1', dir), {
        recursive: true,
        withFileTypes: true,
      });
      for (const e of entries) if (!e.isDirectory()) out.push(path.join(e.parentPath, e.name));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  return out;
}

/** Expect a DigestMismatch that names both digests, and a cache holding nothing. */
async function expectRefused(fetching: Promise<unknown>, cache: string, algorithm = 'md5') {
  const error = await rejection(fetching);
  expect(error).toBeInstanceOf(ObjectIntegrityError);
  expect((error as ObjectIntegrityError).kind).toBe('DigestMismatch');
  expect((error as Error).message).toContain('nothing was cached');
  const cause = (error as Error).cause;
  expect(cause).toBeInstanceOf(DigestsDiffer);
  expect((cause as DigestsDiffer).algorithm).toBe(algorithm);
  expect((cause as DigestsDiffer).actual).not.toBe((cause as DigestsDiffer).expected);
  expect(await cachedFiles(cache)).toEqual([]);
  return error as ObjectIntegrityError;
}

// ---- the rule --------------------------------------------------------------------------

describe('the digest a GET states', () => {
  const info = (etag: string | undefined, sha?: string) => ({
    key: 'k',
    size: 1,
    version: etag ?? 'v',
    etag,
    sha256: sha,
  });
  const m = 'a'.repeat(32);
  const s = 'b'.repeat(64);

  it('is the recorded sha256, else a plain-MD5 ETag, else none', () => {
    expect(statedDigest({ info: info(`"${m}"`, s) })).toEqual({ algorithm: 'sha256', hex: s });
    expect(statedDigest({ info: info(`"${m.toUpperCase()}"`) })).toEqual({
      algorithm: 'md5',
      hex: m,
    });
    expect(statedDigest({ info: info(`"${m}-3"`) })).toBeUndefined();
    expect(statedDigest({ info: info('"0x8DCAFE"') })).toBeUndefined();
    expect(statedDigest({ info: info(undefined) })).toBeUndefined();
    expect(md5OfEtag(m)).toBe(m);
  });

  it('drops the MD5, never the sha256, when the GET says its ETag is no MD5', () => {
    expect(statedDigest({ info: info(`"${m}"`), etagNotMd5: true })).toBeUndefined();
    expect(statedDigest({ info: info(`"${m}"`, s), etagNotMd5: true })).toEqual({
      algorithm: 'sha256',
      hex: s,
    });
    expect(checkableWith({ algorithm: 'md5', hex: m }, { etagNotMd5: true })).toBeUndefined();
    expect(checkableWith({ algorithm: 'md5', hex: m }, {})).toEqual({ algorithm: 'md5', hex: m });
    expect(checkableWith({ algorithm: 'sha256', hex: s }, { etagNotMd5: true })).toEqual({
      algorithm: 'sha256',
      hex: s,
    });
  });

  it('S3: SSE-KMS (also dual-layer) and SSE-C mark the ETag as no MD5; SSE-S3 and none do not', () => {
    expect(etagNotMd5('aws:kms', undefined)).toBe(true);
    expect(etagNotMd5('aws:kms:dsse', undefined)).toBe(true);
    expect(etagNotMd5('AES256', 'AES256')).toBe(true);
    expect(etagNotMd5(undefined, 'AES256')).toBe(true);
    expect(etagNotMd5('AES256', undefined)).toBeUndefined();
    expect(etagNotMd5(undefined, undefined)).toBeUndefined();
  });
});

// ---- an S3 stub ------------------------------------------------------------------------

interface StubObject {
  body: Buffer;
  /** The ETag sent, unquoted. */
  etag: string;
  headers?: Record<string, string> | undefined;
}

/**
 * An S3 stub in one bucket (`stub`): GET and HEAD of an object with the ETag and headers the test
 * gives, and a one-page ListObjectsV2 of everything. No signature is checked.
 */
async function startStub(objects: Map<string, StubObject>) {
  const gets: string[] = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://stub');
    req.resume();
    if (url.pathname === '/stub' || url.pathname === '/stub/') {
      const prefix = url.searchParams.get('prefix') ?? '';
      const items = [...objects]
        .filter(([k]) => k.startsWith(prefix))
        .map(
          ([k, o]) =>
            `<Contents><Key>${k}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;${o.etag}&quot;</ETag><Size>${o.body.length}</Size><StorageClass>STANDARD</StorageClass></Contents>`,
        )
        .join('');
      const xml = `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>stub</Name><Prefix>${prefix}</Prefix><KeyCount>${objects.size}</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>${items}</ListBucketResult>`;
      res.writeHead(200, { 'content-type': 'application/xml', 'content-length': xml.length });
      res.end(xml);
      return;
    }
    const key = decodeURIComponent(url.pathname.slice('/stub/'.length));
    const o = objects.get(key);
    if (o === undefined) {
      const xml =
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no</Message></Error>';
      res.writeHead(404, { 'content-type': 'application/xml', 'content-length': xml.length });
      res.end(req.method === 'HEAD' ? undefined : xml);
      return;
    }
    if (req.method === 'GET') gets.push(key);
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': o.body.length,
      etag: `"${o.etag}"`,
      'last-modified': 'Thu, 01 Jan 2026 00:00:00 GMT',
      ...o.headers,
    });
    res.end(req.method === 'HEAD' ? undefined : o.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    gets,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('a fetch from S3 of bytes whose MD5 is not their ETag (a stub)', () => {
  const small = randomBytes(3000);
  const big = randomBytes(300 * 1024);
  const kms = { 'x-amz-server-side-encryption': 'aws:kms' };
  const objects = new Map<string, StubObject>([
    // Not their MD5: what S3 sends for SSE-KMS, and what a byte flipped on the way looks like.
    ['bad/small.bin', { body: small, etag: md5(big) }],
    ['bad/big.bin', { body: big, etag: md5(small) }],
    ['kms/small.bin', { body: small, etag: md5(big), headers: kms }],
    ['kms/big.bin', { body: big, etag: md5(small), headers: kms }],
    [
      'kms/dsse.bin',
      { body: small, etag: md5(big), headers: { 'x-amz-server-side-encryption': 'aws:kms:dsse' } },
    ],
    [
      'ssec/big.bin',
      {
        body: big,
        etag: md5(small),
        headers: { 'x-amz-server-side-encryption-customer-algorithm': 'AES256' },
      },
    ],
    [
      'kms-sha/big.bin',
      { body: big, etag: md5(small), headers: { ...kms, 'x-amz-meta-sha256': sha256(small) } },
    ],
    ['good/big.bin', { body: big, etag: md5(big) }],
  ]);
  let stub: Awaited<ReturnType<typeof startStub>>;
  const saved: Record<string, string | undefined> = {};
  const stores: ObjectStore[] = [];

  beforeAll(async () => {
    stub = await startStub(objects);
    // The stub checks no signature; the SDK's chain only needs some credentials to sign with.
    for (const name of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY']) {
      saved[name] = process.env[name];
      process.env[name] ??= 'STUBKEY';
    }
  });
  afterEach(async () => {
    for (const s of stores.splice(0)) await (s as { close?: () => Promise<void> }).close?.();
  });
  afterAll(async () => {
    await stub.close();
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
    }
  });

  const storeOf = (lean: boolean, cache: string) => {
    const store = new S3Store({
      endpoint: stub.endpoint,
      forcePathStyle: true,
      region: 'us-east-1',
      lean,
      cache,
      env: {},
    });
    stores.push(store);
    return store;
  };

  for (const lean of [true, false]) {
    const pathName = lean ? 'the lean path' : 'the SDK';
    it(`through ${pathName}: a small body (read whole) and a streamed one are refused; nothing cached`, async () => {
      const store = storeOf(lean, freshCache());
      expect(store.leanReads).toBe(lean);
      for (const key of ['bad/small.bin', 'bad/big.bin']) {
        const cache = store.cache.root;
        const error = await expectRefused(store.fetch(`s3://stub/${key}`), cache);
        expect(error.uri).toBe(`s3://stub/${key}`);
        expect(error.message).toContain("the store's ETag");
      }
    });

    it(`through ${pathName}: a folder fetch refuses the bad files and caches no view`, async () => {
      const store = storeOf(lean, freshCache());
      await expectRefused(store.fetch('s3://stub/bad/'), store.cache.root);
    });

    it(`through ${pathName}: SSE-KMS, dual-layer KMS and SSE-C objects are fetched (no MD5 check)`, async () => {
      const store = storeOf(lean, freshCache());
      for (const [key, body] of [
        ['kms/small.bin', small],
        ['kms/big.bin', big],
        ['kms/dsse.bin', small],
        ['ssec/big.bin', big],
      ] as const) {
        const r = await store.fetch(`s3://stub/${key}`);
        expect(readFileSync(r.path).equals(body)).toBe(true);
      }
      const folder = await store.fetch('s3://stub/kms/');
      expect(folder.files).toBe(3);
    });

    it(`through ${pathName}: a recorded sha256 still stands for an SSE-KMS object`, async () => {
      const store = storeOf(lean, freshCache());
      await expectRefused(store.fetch('s3://stub/kms-sha/big.bin'), store.cache.root, 'sha256');
    });

    it(`through ${pathName}: a cached file whose object changed to bad bytes is refused, the old copy kept`, async () => {
      const cache = freshCache();
      const store = storeOf(lean, cache);
      const first = await store.fetch('s3://stub/good/big.bin');
      expect(readFileSync(first.path).equals(big)).toBe(true);
      const good = objects.get('good/big.bin') as StubObject;
      const changed = randomBytes(big.length);
      // A new version (new ETag) whose bytes are not its MD5: a HEAD, then the GET.
      objects.set('good/big.bin', { body: changed, etag: md5(small) });
      try {
        await rejection(store.fetch('s3://stub/good/big.bin')).then((error) => {
          expect(error).toBeInstanceOf(ObjectIntegrityError);
        });
        // The copy fetched before is what the view still holds; no new blob or temp appeared.
        expect(readFileSync(first.path).equals(big)).toBe(true);
        expect(
          (await cachedFiles(cache)).filter((f) => f.includes(`${path.sep}blobs${path.sep}`)),
        ).toHaveLength(1);
      } finally {
        objects.set('good/big.bin', good);
      }
    });
  }
});

// ---- Ceph through the fault proxy --------------------------------------------------------

describeS3('a fetch from S3 with a byte flipped in transit (Ceph, fault proxy)', () => {
  let bucket: string;
  let proxy: FaultProxy;
  const prefix = `integrity-${randomBytes(4).toString('hex')}/`;
  const files = new Map<string, Buffer>([
    ['one.bin', randomBytes(2000)],
    ['two.bin', randomBytes(200 * 1024)],
    ['three.bin', randomBytes(1)],
  ]);
  const multipart = randomBytes(6 * 1024 * 1024);
  const stores: ObjectStore[] = [];

  const direct = (cache: string) => {
    const store = new S3Store({ cache, multipartThreshold: 5 * 1024 * 1024 });
    stores.push(store);
    return store;
  };
  const viaProxy = (cache: string, lean = true) => {
    const store = new S3Store({ cache, endpoint: proxy.url, lean });
    stores.push(store);
    return store;
  };

  beforeAll(async () => {
    bucket = await createTestBucket('integrity');
    const endpoint = s3TestTarget().endpoint;
    if (endpoint === undefined || !endpoint.startsWith('http://')) {
      throw new Error('the fault proxy needs an http:// S3 endpoint');
    }
    proxy = await startFaultProxy({ target: endpoint });
    const store = direct(freshCache());
    for (const [name, body] of files) await store.put(`s3://${bucket}/${prefix}f/${name}`, body);
    // In parts (a multipart ETag, no MD5), with the SHA-256 recorded as metadata.
    await store._put(bucket, `${prefix}mp.bin`, multipart, {
      size: multipart.length,
      sha256: sha256(multipart),
    });
  });
  afterEach(async () => {
    proxy.set([]);
    for (const s of stores.splice(0)) await (s as { close?: () => Promise<void> }).close?.();
  });
  afterAll(async () => {
    await proxy?.close();
    await dropTestBucket(bucket, prefix);
  });

  const flip = (name: string) => [
    {
      kind: 'flip' as const,
      method: 'GET',
      path: new RegExp(`/${name.replace('.', '\\.')}`),
      next: 1,
    },
  ];

  for (const lean of [true, false]) {
    const pathName = lean ? 'the lean path' : 'the SDK';
    it(`through ${pathName}: each file fetched alone, a flipped byte is refused, and the next fetch is exact`, async () => {
      for (const [name, body] of files) {
        const cache = freshCache();
        const store = viaProxy(cache, lean);
        const uri = `s3://${bucket}/${prefix}f/${name}`;
        const flipsBefore = proxy.stats().faults.flip;
        proxy.set(flip(name));
        await expectRefused(store.fetch(uri), cache);
        expect(proxy.stats().faults.flip).toBe(flipsBefore + 1);
        proxy.set([]);
        const r = await store.fetch(uri);
        expect(readFileSync(r.path).equals(body)).toBe(true);
      }
    });
  }

  it('a folder fetch with a byte flipped in one file is refused and caches no view', async () => {
    const cache = freshCache();
    const store = viaProxy(cache);
    proxy.set(flip('two.bin'));
    const error = await rejection(store.fetch(`s3://${bucket}/${prefix}f/`));
    expect(error).toBeInstanceOf(ObjectIntegrityError);
    expect((error as ObjectIntegrityError).uri).toBe(`s3://${bucket}/${prefix}f/two.bin`);
    // Files fetched whole beside it may be cached; the bad one is not, nor any temp.
    for (const f of await cachedFiles(cache)) {
      expect(path.basename(f)).not.toMatch(/^\.tmp-/);
      expect(readFileSync(f).equals(files.get('two.bin') as Buffer)).toBe(false);
    }
    proxy.set([]);
    const r = await store.fetch(`s3://${bucket}/${prefix}f/`);
    for (const [name, body] of files) {
      expect((await readFile(path.join(r.path, name))).equals(body)).toBe(true);
    }
  });

  it('a file already cached and then refetched (a HEAD first) is checked too', async () => {
    const cache = freshCache();
    const store = viaProxy(cache);
    const uri = `s3://${bucket}/${prefix}f/one.bin`;
    const first = await store.fetch(uri);
    // A new version behind the cache's back: the next fetch HEADs, then GETs it.
    const next = randomBytes(2000);
    await direct(freshCache()).put(uri, next);
    files.set('one.bin', next);
    proxy.set(flip('one.bin'));
    const error = await rejection(store.fetch(uri));
    expect(error).toBeInstanceOf(ObjectIntegrityError);
    expect(readFileSync(first.path).equals(next)).toBe(false);
    proxy.set([]);
    expect(readFileSync((await store.fetch(uri)).path).equals(next)).toBe(true);
  });

  it('an object in parts with a recorded sha256 is checked against it', async () => {
    const cache = freshCache();
    const store = viaProxy(cache);
    const uri = `s3://${bucket}/${prefix}mp.bin`;
    proxy.set(flip('mp.bin'));
    const error = await expectRefused(store.fetch(uri), cache, 'sha256');
    expect(error.message).toContain('recorded sha256');
    proxy.set([]);
    expect(readFileSync((await store.fetch(uri)).path).equals(multipart)).toBe(true);
  });

  it('without a fault, single-part objects (their ETags are MD5s) fetch directly', async () => {
    const store = direct(freshCache());
    const r = await store.fetch(`s3://${bucket}/${prefix}f/`);
    expect(r.files).toBe(files.size);
    for (const [name, body] of files) {
      expect((await readFile(path.join(r.path, name))).equals(body)).toBe(true);
    }
  });
});

// ---- the local store's kernel copy -------------------------------------------------------

describe('a fetch from the local store of a version file changed behind its back', () => {
  const root = path.join(work, 'local-root');

  /** The one version file of `name` (its name carries the MD5 of the bytes put). */
  async function versionFile(name: string): Promise<string> {
    const found = (await readdir(root, { recursive: true, withFileTypes: true })).filter(
      (e) => e.isFile() && e.parentPath.endsWith(`${path.sep}o.${name}`) && /^\d{17}-/.test(e.name),
    );
    expect(found).toHaveLength(1);
    const f = found[0] as (typeof found)[number];
    return path.join(f.parentPath, f.name);
  }

  it.each([
    ['a small file (copied directly)', 1000],
    ['a large file (copied through the thread pool)', 3 * 1024 * 1024],
  ])('%s: the kernel copy is read back and refused; nothing cached', async (_label, size) => {
    const name = `f${size}.bin`;
    const folder = `local://b${size}/`;
    const bytes = randomBytes(size);
    const store = new LocalStore({ root, cache: freshCache() });
    await store.put(`${folder}${name}`, bytes);
    const file = await versionFile(name);
    expect(path.basename(file)).toContain(md5(bytes));
    // Bit rot on the store's disk: one byte of the immutable version file changes.
    chmodSync(file, 0o644);
    const rotten = Buffer.from(bytes);
    rotten[size >> 1] = (rotten[size >> 1] as number) ^ 0x01;
    writeFileSync(file, rotten);
    const cache = freshCache();
    const fresh = new LocalStore({ root, cache });
    await expectRefused(fresh.fetch(`${folder}${name}`), cache);
    await expectRefused(fresh.fetch(folder), cache);
    // Put right again, the same version fetches.
    writeFileSync(file, bytes);
    expect(readFileSync((await fresh.fetch(`${folder}${name}`)).path).equals(bytes)).toBe(true);
  });
});
