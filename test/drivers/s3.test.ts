/**
 * The S3 driver: configuration and error mapping (no server), then the whole conformance suite
 * and what only S3 promises, against Ceph radosgw (or a real bucket; see test/setup/s3.ts):
 * paging across 1,000-key pages, multipart uploads with bounded parts that leave nothing behind
 * when they fail, exact byte ranges, 403 versus 404, the If-None-Match probe, and buckets
 * without versioning.
 */
// The shared GC and fault suites on this driver (their setup is in each module).
import './s3/gc.js';
import './s3/faults.js';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import {
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectVersionsCommand,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  copySource,
  DEFAULT_PART_SIZE,
  decodeListedKey,
  mapS3Error,
  PROBE_PREFIX,
  resolveS3Config,
  S3Store,
  type S3StoreOptions,
  SourceError,
} from '../../drivers/s3/index.js';
import type { VersionRecord } from '../../src/contract/primitives.js';
import {
  Exists,
  isAbort,
  NotFound,
  OfflineMiss,
  PermissionDenied,
  StoreError,
} from '../../src/core/errors.js';
import { stageFromDescriptor } from '../../src/lake/index.js';
import { digestsSuite } from '../../src/testing/digests.js';
import { conformance } from '../../src/testing/index.js';
import { rejection } from '../../src/testing/rejection.js';
import { type ConformanceTarget, randomPrefix } from '../../src/testing/target.js';
import { versionsSuite } from '../../src/testing/versions.js';
import { s3Descriptor } from '../fixtures/lake-helpers.js';
import {
  describeS3,
  emptyBucket,
  removeBucket,
  s3Enabled,
  s3TestTarget,
  testS3Client,
  uniqueBucketName,
} from '../setup/s3.js';
import { stageServerSuite } from '../support/stage-suite.js';
import { s3StageHarness } from '../support/stage-targets.js';

const MiB = 1024 * 1024;

async function bytesOf(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** A short fingerprint of bytes: vitest's deep equality on megabytes of Buffer is very slow. */
function digest(bytes: Uint8Array): string {
  return `${bytes.length}:${createHash('sha256').update(bytes).digest('hex')}`;
}

async function sha256Of(body: Readable): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of body) hash.update(chunk as Uint8Array);
  return hash.digest('hex');
}

/** An SDK error as the client throws it. */
function sdkError(name: string, status?: number): Error {
  return Object.assign(new Error(name === 'UnknownError' ? 'UnknownError' : `${name} message`), {
    name,
    $metadata: status === undefined ? {} : { httpStatusCode: status },
  });
}

// ---- no server needed ----------------------------------------------------------------------

describe('s3 configuration', () => {
  it('follows the AWS environment: endpoint S3-specific first, region, path style', () => {
    const c = resolveS3Config(
      {},
      {
        AWS_ENDPOINT_URL_S3: 'http://s3.example:7480',
        AWS_ENDPOINT_URL: 'http://other.example',
        AWS_REGION: 'eu-west-3',
        PROVCAT_S3_FORCE_PATH_STYLE: '1',
      },
    );
    expect(c).toMatchObject({
      endpoint: 'http://s3.example:7480',
      region: 'eu-west-3',
      forcePathStyle: true,
      partSize: 64 * MiB,
      multipartThreshold: 64 * MiB,
      partsInFlight: 4,
      createFallback: 'none',
      requestChecksumCalculation: 'WHEN_REQUIRED',
    });
    expect(resolveS3Config({}, { AWS_ENDPOINT_URL: 'http://other.example' }).endpoint).toBe(
      'http://other.example',
    );
    const plain = resolveS3Config({}, {});
    expect(plain).toMatchObject({
      endpoint: undefined,
      region: 'us-east-1',
      forcePathStyle: false,
    });
    expect(
      resolveS3Config(
        {},
        { AWS_ENDPOINT_URL_S3: 'http://x', AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: 'true' },
      ).endpoint,
    ).toBeUndefined();
  });

  it('lets options override the environment', () => {
    const c = resolveS3Config(
      { region: 'ap-south-1', endpoint: 'http://mine', forcePathStyle: false, partsInFlight: 16 },
      {
        AWS_REGION: 'eu-west-3',
        AWS_ENDPOINT_URL_S3: 'http://env',
        PROVCAT_S3_FORCE_PATH_STYLE: '1',
      },
    );
    expect(c).toMatchObject({
      region: 'ap-south-1',
      endpoint: 'http://mine',
      forcePathStyle: false,
      partsInFlight: 16,
    });
  });

  it('reads the create fallback from the option or PROVCAT_S3_CREATE_FALLBACK, and refuses other values', () => {
    expect(
      resolveS3Config({}, { PROVCAT_S3_CREATE_FALLBACK: 'oldest-version-wins' }).createFallback,
    ).toBe('oldest-version-wins');
    expect(
      resolveS3Config(
        { createFallback: 'none' },
        { PROVCAT_S3_CREATE_FALLBACK: 'oldest-version-wins' },
      ).createFallback,
    ).toBe('none');
    expect(() => resolveS3Config({}, { PROVCAT_S3_CREATE_FALLBACK: 'yolo' })).toThrow(
      /PROVCAT_S3_CREATE_FALLBACK/,
    );
  });

  it('sends requests where the resolved configuration says, whatever process.env holds', async () => {
    /** The host a HeadObject would go to: captured before signing, nothing is sent. */
    async function hostOf(store: S3Store): Promise<string> {
      const client = await store.client();
      client.middlewareStack.add(
        (_next) => async (args) => {
          const request = args.request as { hostname?: string; port?: number; path?: string };
          throw Object.assign(new Error('captured'), {
            where: `${request.hostname}:${request.port ?? ''}${request.path}`,
          });
        },
        { step: 'build', priority: 'low', name: 'provcatTestCapture' },
      );
      const error = await rejection(store._head('bucket-x', 'k'));
      const cause = (error as Error).cause as { where?: string };
      return cause.where ?? String(error);
    }
    const saved = process.env.AWS_ENDPOINT_URL_S3;
    process.env.AWS_ENDPOINT_URL_S3 = 'http://127.0.0.1:7999';
    try {
      const fromEnv = new S3Store({ env: { ...process.env, PROVCAT_S3_FORCE_PATH_STYLE: '1' } });
      expect(await hostOf(fromEnv)).toBe('127.0.0.1:7999/bucket-x/k');
      const isolated = new S3Store({ env: { AWS_REGION: 'eu-west-3' } });
      expect(await hostOf(isolated)).toBe('bucket-x.s3.eu-west-3.amazonaws.com:/k');
      const ignoring = new S3Store({
        env: {
          ...process.env,
          AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: 'true',
          AWS_REGION: 'us-east-1',
          PROVCAT_S3_FORCE_PATH_STYLE: '',
        },
      });
      expect(await hostOf(ignoring)).toMatch(/^bucket-x\.s3\.(us-east-1\.)?amazonaws\.com:\/k$/);
      // Loopback addresses where nothing listens: the lean HEAD is refused at once and the SDK
      // path (captured) takes over, whatever answers on other networks of the test machine.
      const explicit = new S3Store({ endpoint: 'http://127.0.0.2:9', forcePathStyle: true });
      expect(await hostOf(explicit)).toBe('127.0.0.2:9/bucket-x/k');
    } finally {
      if (saved === undefined) delete process.env.AWS_ENDPOINT_URL_S3;
      else process.env.AWS_ENDPOINT_URL_S3 = saved;
    }
  });

  it('refuses out-of-range part settings at construction', () => {
    expect(() => new S3Store({ partSize: 1024, env: {} })).toThrow(RangeError);
    expect(() => new S3Store({ partsInFlight: 17, env: {} })).toThrow(RangeError);
    expect(() => new S3Store({ partsInFlight: 0, env: {} })).toThrow(RangeError);
    expect(() => new S3Store({ endpoint: 'not a url', env: {} })).toThrow(RangeError);
    expect(new S3Store({ env: {} }).partSize).toBe(DEFAULT_PART_SIZE);
  });
});

describe('s3 error mapping', () => {
  const ctx = { bucket: 'b', key: 'dir/a b%.txt', op: 'head' };

  it('maps 404s and NoSuch* to NotFound, with the SDK error as cause', () => {
    for (const e of [
      sdkError('NotFound', 404),
      sdkError('NoSuchKey', 404),
      sdkError('NoSuchBucket', 404),
      sdkError('NoSuchVersion'),
    ]) {
      const mapped = mapS3Error(e, ctx);
      expect(mapped).toBeInstanceOf(NotFound);
      expect(mapped.cause).toBe(e);
      expect(mapped.uri).toBe('s3://b/dir/a%20b%25.txt');
    }
  });

  it('keeps 403 a StoreError with status 403, never NotFound', () => {
    for (const name of [
      'Forbidden',
      'AccessDenied',
      'InvalidAccessKeyId',
      'SignatureDoesNotMatch',
    ]) {
      const e = sdkError(name, 403);
      const mapped = mapS3Error(e, ctx);
      expect(mapped).toBeInstanceOf(PermissionDenied);
      expect(mapped).toBeInstanceOf(StoreError);
      expect(mapped).not.toBeInstanceOf(NotFound);
      expect((mapped as StoreError).status).toBe(403);
      expect(mapped.cause).toBe(e);
      expect(mapped.message).toMatch(/403/);
    }
  });

  it('maps 412 to Exists, and 409 only on creates', () => {
    expect(
      mapS3Error(sdkError('PreconditionFailed', 412), { ...ctx, op: 'create' }),
    ).toBeInstanceOf(Exists);
    expect(
      mapS3Error(sdkError('ConditionalRequestConflict', 409), { ...ctx, op: 'create' }),
    ).toBeInstanceOf(Exists);
    const conflict = mapS3Error(sdkError('OperationAborted', 409), { ...ctx, op: 'put' });
    expect(conflict).toBeInstanceOf(StoreError);
    expect((conflict as StoreError).status).toBe(409);
  });

  it('maps network failures and 5xx to StoreError, and passes provcat errors through', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const mapped = mapS3Error(refused, ctx);
    expect(mapped).toBeInstanceOf(StoreError);
    expect((mapped as StoreError).status).toBeUndefined();
    expect(mapped.cause).toBe(refused);
    expect((mapS3Error(sdkError('SlowDown', 503), ctx) as StoreError).status).toBe(503);
    const own = new NotFound('x');
    expect(mapS3Error(own, ctx)).toBe(own);
  });
});

describe('s3 key encoding', () => {
  it('encodes copy sources byte-exactly and keeps slashes', () => {
    expect(copySource('b', 'a b/c+d%e/ü?#')).toBe('b/a%20b/c%2Bd%25e/%C3%BC%3F%23');
    expect(copySource('b', "x!'()*", 'v/1+')).toBe('b/x%21%27%28%29%2A?versionId=v%2F1%2B');
  });

  it('decodes listed keys from AWS (space as +) and Ceph (space as %20) alike', () => {
    expect(decodeListedKey('a+b%2Bc')).toBe('a b+c');
    expect(decodeListedKey('a%20b%2Bc%01')).toBe('a b+c\u0001');
  });
});

// ---- against the server --------------------------------------------------------------------

const target = s3Enabled() ? s3TestTarget() : undefined;
const onAws = target?.kind === 'aws';
const versioned = target?.bucket ?? uniqueBucketName('v');
const unversioned = onAws ? target?.unversionedBucket : uniqueBucketName('u');
/** Ceph 16 ignores If-None-Match on versioned buckets; AWS honours it. */
const expectedCreateMode = onAws ? 'atomic' : 'none';
const work = mkdtempSync(path.join(tmpdir(), 'provcat-s3-'));
let raw: S3Client;

function store(options: S3StoreOptions = {}): S3Store {
  return new S3Store({ cache: path.join(work, 'cache'), ...options });
}

/** A client that counts the commands it sends (once per command, not per retry). */
function countingClient(): { client: S3Client; counts: Map<string, number> } {
  const counts = new Map<string, number>();
  const client = testS3Client();
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = context.commandName ?? '?';
      counts.set(name, (counts.get(name) ?? 0) + 1);
      return next(args);
    },
    { step: 'initialize', name: 'provcatTestCount' },
  );
  return { client, counts };
}

async function openUploads(bucket: string, prefix: string): Promise<number> {
  const r = await raw.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix }));
  return r.Uploads?.length ?? 0;
}

async function historyOf(s: S3Store, bucket: string, prefix: string): Promise<VersionRecord[]> {
  const out: VersionRecord[] = [];
  for await (const r of s._history(bucket, prefix)) out.push(r);
  return out;
}

/** Run `fn` over `items`, `width` at a time. */
async function inParallel<T>(items: T[], width: number, fn: (item: T) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await fn(items[next++] as T);
    }),
  );
}

/** `size` bytes of a deterministic stream, 1 MiB chunks; `failAfter` bytes then an error. */
function generated(size: number, failAfter?: number): { stream: Readable; sha256: string } {
  const block = randomBytes(MiB);
  // Chunk i is the block with i in its first four bytes: distinct chunks, cheap to make twice.
  function* chunks(): Generator<Buffer> {
    for (let sent = 0, i = 0; sent < size; i++) {
      const n = Math.min(MiB, size - sent);
      const chunk = Buffer.from(block.subarray(0, n));
      chunk.writeUInt32BE(i, 0);
      sent += n;
      yield chunk;
    }
  }
  const hash = createHash('sha256');
  for (const chunk of chunks()) hash.update(chunk);
  async function* stream() {
    let sent = 0;
    for (const chunk of chunks()) {
      if (failAfter !== undefined && sent >= failAfter) throw new Error('source broke on purpose');
      sent += chunk.length;
      yield chunk;
    }
  }
  return { stream: Readable.from(stream(), { objectMode: false }), sha256: hash.digest('hex') };
}

describeS3(`s3 driver on ${target?.kind ?? 's3'}`, () => {
  const s = store();

  beforeAll(async () => {
    raw = testS3Client();
    if (!onAws) {
      await s.makeBucket(versioned, { versioning: true });
      await s.makeBucket(unversioned as string, { versioning: false });
    }
  });

  afterAll(async () => {
    if (onAws) {
      await emptyBucket(raw, versioned, 's3t-');
    } else {
      await removeBucket(raw, versioned);
      await removeBucket(raw, unversioned as string);
    }
    await s.close();
    raw.destroy();
    rmSync(work, { recursive: true, force: true });
  });

  const s3Env = () => ({
    AWS_ENDPOINT_URL_S3: process.env.AWS_ENDPOINT_URL_S3 ?? '',
    AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? '',
    AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? '',
    AWS_REGION: process.env.AWS_REGION ?? '',
    PROVCAT_S3_FORCE_PATH_STYLE: process.env.PROVCAT_S3_FORCE_PATH_STYLE ?? '',
  });
  // The lean read path is an accelerator: the whole suite runs with it on and with it off.
  for (const lean of [true, false]) {
    conformance({
      name: `s3 (${target?.kind ?? 'skipped'}, lean reads ${lean ? 'on' : 'off'})`,
      store: (o) => {
        const store = new S3Store({ lean, ...o });
        if (store.leanReads !== lean && !onAws) throw new Error(`lean reads not ${lean}`);
        return store;
      },
      bucket: versioned,
      unversionedBucket: unversioned,
      flags: {
        versions: true,
        createMode: expectedCreateMode,
        ranges: true,
        hostileKeys: true,
        parts: true,
      },
      env: { ...s3Env(), PROVCAT_S3_LEAN: lean ? '1' : '0' },
      sdk: {
        put: async (key, body) => {
          await raw.send(new PutObjectCommand({ Bucket: versioned, Key: key, Body: body }));
        },
        contentType: async (key) =>
          (await raw.send(new HeadObjectCommand({ Bucket: versioned, Key: key }))).ContentType,
      },
      stage: ({ prefix }) =>
        stageFromDescriptor(s3Descriptor(versioned, prefix), { partSize: 5 * MiB }),
      foreignPut: async (bucket, key, body) => {
        await raw.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
      },
    });
  }

  // Ceph ignores If-None-Match on versioned buckets, so commits there need the opt-in fallback:
  // run commit/log/pin/branch again with it (on AWS this is `atomic` again).
  describe('with createFallback oldest-version-wins', () => {
    const fallback: ConformanceTarget = {
      name: `s3 (${target?.kind ?? 'skipped'}, oldest-version-wins)`,
      store: (o) => new S3Store({ createFallback: 'oldest-version-wins', ...o }),
      bucket: versioned,
      flags: {
        versions: true,
        createMode: onAws ? 'atomic' : 'oldest-version-wins',
        ranges: true,
        hostileKeys: true,
      },
    };
    versionsSuite(fallback);
    // Commit and diff agree (the digests part runs its versioned case where commits work).
    digestsSuite(fallback);
  });

  describe('s3 specifics', () => {
    it('lists 2,500 keys across pages, none lost or repeated, in byte order', async () => {
      const prefix = randomPrefix('s3t-pages');
      const keys = Array.from({ length: 2500 }, (_, i) =>
        i % 5 === 0 ? `${prefix}sub/${String(i).padStart(5, '0')}` : `${prefix}${i} é`,
      );
      await inParallel(keys, 32, async (key) => {
        await s._put(versioned, key, Buffer.from(key));
      });
      const flat: string[] = [];
      let pages = 0;
      for await (const page of s._pages(versioned, prefix)) {
        pages++;
        flat.push(...page.objects.map((o) => o.key));
      }
      expect(pages).toBeGreaterThanOrEqual(3);
      expect(flat).toHaveLength(2500);
      expect(new Set(flat).size).toBe(2500);
      expect(flat).toEqual(
        [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))),
      );
      const level: string[] = [];
      const prefixes: string[] = [];
      for await (const page of s._pages(versioned, prefix, { delimiter: '/', limit: 700 })) {
        level.push(...page.objects.map((o) => o.key));
        prefixes.push(...page.prefixes);
      }
      expect(prefixes).toEqual([`${prefix}sub/`]);
      expect(level).toHaveLength(2000);
      expect(new Set(level).size).toBe(2000);
    });

    it('lists 2,500 versions of one key with delete markers, across pages, newest first', async () => {
      const prefix = randomPrefix('s3t-versions');
      const key = `${prefix}one`;
      const batches: Array<{ versions: Set<string>; marker: string }> = [];
      for (let b = 0; b < 10; b++) {
        const versions = new Set<string>();
        await inParallel(
          Array.from({ length: 250 }, (_, i) => i),
          25,
          async (i) => {
            const info = await s._put(versioned, key, Buffer.from(`${b}.${i}`));
            versions.add(info.versionId as string);
          },
        );
        await s._delete(versioned, key);
        const marker = (await historyOf(s, versioned, key))[0];
        expect(marker?.size).toBeNull();
        batches.push({ versions, marker: marker?.versionId as string });
      }
      const history = await historyOf(s, versioned, prefix);
      expect(history).toHaveLength(2510);
      expect(new Set(history.map((r) => r.versionId)).size).toBe(2510);
      expect(history.every((r) => r.key === key)).toBe(true);
      expect(history.filter((r) => r.current)).toHaveLength(1);
      expect(history[0]?.current).toBe(true);
      // Newest first: batch 9's marker, batch 9's versions, batch 8's marker, ... batch 0's versions.
      let at = 0;
      for (let b = 9; b >= 0; b--) {
        const batch = batches[b] as { versions: Set<string>; marker: string };
        expect(history[at]?.versionId).toBe(batch.marker);
        expect(history[at]?.size).toBeNull();
        at++;
        const slice = history.slice(at, at + 250);
        expect(slice.every((r) => batch.versions.has(r.versionId) && r.size !== null)).toBe(true);
        at += 250;
      }
    });

    it('uploads 200 MiB in 64 MiB parts and reads back the same bytes', async () => {
      const { client, counts } = countingClient();
      const counted = store({ client });
      const key = `${randomPrefix('s3t-big')}big.bin`;
      const size = 200 * MiB;
      const { stream, sha256 } = generated(size);
      let progress = 0;
      const info = await counted._put(versioned, key, stream, {
        size,
        onProgress: (b) => {
          progress = b;
        },
      });
      expect(counts.get('UploadPartCommand')).toBe(4);
      expect(counts.get('PutObjectCommand') ?? 0).toBe(0);
      expect(progress).toBe(size);
      expect(info.size).toBe(size);
      expect(info.version).toMatch(/^"[0-9a-f]{32}-4"$/);
      const head = await s._head(versioned, key);
      expect(head.version).toBe(info.version);
      expect(head.versionId).toBe(info.versionId);
      const got = await s._get(versioned, key);
      expect(await sha256Of(got.body)).toBe(sha256);
      client.destroy();
    });

    it('leaves no multipart upload behind when the source fails after 100 MiB', async () => {
      const prefix = randomPrefix('s3t-fail');
      const { stream } = generated(200 * MiB, 100 * MiB);
      const error = await rejection(
        s._put(versioned, `${prefix}broken.bin`, stream, { size: 200 * MiB }),
      );
      expect(error).toBeInstanceOf(SourceError);
      expect(String((error as Error).message)).toMatch(/source/);
      expect(await openUploads(versioned, prefix)).toBe(0);
      await expect(s._head(versioned, `${prefix}broken.bin`)).rejects.toBeInstanceOf(NotFound);
    });

    it('leaves no multipart upload behind when aborted mid-upload', async () => {
      const prefix = randomPrefix('s3t-abort');
      const small = store({ partSize: 5 * MiB, multipartThreshold: 5 * MiB });
      const controller = new AbortController();
      const { stream } = generated(60 * MiB);
      const error = await rejection(
        small._put(versioned, `${prefix}aborted.bin`, stream, {
          signal: controller.signal,
          onProgress: (b) => {
            if (b >= 10 * MiB) controller.abort();
          },
        }),
      );
      expect(isAbort(error)).toBe(true);
      expect(await openUploads(versioned, prefix)).toBe(0);
    });

    it('uploads files, unknown-size streams and bytes in parts; small streams in one put', async () => {
      const { client, counts } = countingClient();
      const small = store({ client, partSize: 5 * MiB, multipartThreshold: 5 * MiB });
      const prefix = randomPrefix('s3t-parts');
      const file = path.join(work, 'twelve.bin');
      const content = randomBytes(12 * MiB + 1);
      writeFileSync(file, content);
      const fromFile = await small._put(versioned, `${prefix}file`, file);
      expect(fromFile.size).toBe(content.length);
      expect(counts.get('UploadPartCommand')).toBe(3);
      expect(digest(await bytesOf((await s._get(versioned, `${prefix}file`)).body))).toBe(
        digest(content),
      );

      const fromStream = await small._put(versioned, `${prefix}stream`, Readable.from([content]));
      expect(fromStream.size).toBe(content.length);
      expect(counts.get('UploadPartCommand')).toBe(6);
      expect(digest(await bytesOf((await s._get(versioned, `${prefix}stream`)).body))).toBe(
        digest(content),
      );

      await small._put(versioned, `${prefix}bytes`, content);
      expect(counts.get('UploadPartCommand')).toBe(9);
      expect(digest(await bytesOf((await s._get(versioned, `${prefix}bytes`)).body))).toBe(
        digest(content),
      );

      const tiny = randomBytes(3 * MiB);
      await small._put(versioned, `${prefix}tiny`, Readable.from([tiny]));
      expect(counts.get('UploadPartCommand')).toBe(9);
      expect(counts.get('PutObjectCommand')).toBe(1);
      expect(digest(await bytesOf((await s._get(versioned, `${prefix}tiny`)).body))).toBe(
        digest(tiny),
      );
      client.destroy();
    });

    it('refuses a source that is not its declared size, writing nothing', async () => {
      const prefix = randomPrefix('s3t-size');
      const longer = await rejection(
        s._put(versioned, `${prefix}a`, Readable.from([Buffer.from('12345678901')]), { size: 10 }),
      );
      expect(longer).toBeInstanceOf(SourceError);
      const shorter = await rejection(
        s._put(versioned, `${prefix}b`, Readable.from([Buffer.from('123')]), { size: 10 }),
      );
      expect(shorter).toBeInstanceOf(SourceError);
      await expect(s._head(versioned, `${prefix}a`)).rejects.toBeInstanceOf(NotFound);
      await expect(s._head(versioned, `${prefix}b`)).rejects.toBeInstanceOf(NotFound);
    });

    it('reads exact byte ranges with one ranged GET', async () => {
      const key = `${randomPrefix('s3t-range')}r.bin`;
      const content = randomBytes(100_000);
      await s._put(versioned, key, content);
      for (const [start, end] of [
        [0, 1],
        [12_345, 54_321],
        [99_999, 100_000],
        [0, 100_000],
      ] as const) {
        const r = await s._get(versioned, key, { range: { start, end } });
        expect(digest(await bytesOf(r.body))).toBe(digest(content.subarray(start, end)));
        expect(r.contentLength).toBe(end - start);
        expect(r.contentRange).toBe(`bytes ${start}-${end - 1}/100000`);
        expect(r.info.size).toBe(100_000);
      }
      await expect(s._get(versioned, key, { range: { start: 5, end: 5 } })).rejects.toThrow(
        RangeError,
      );
    });

    it('tells 403 (wrong credentials) from 404', async () => {
      const key = `${randomPrefix('s3t-auth')}there`;
      await s._put(versioned, key, Buffer.from('x'));
      const denied = store({
        client: testS3Client({
          credentials: { accessKeyId: 'AKIDTEST', secretAccessKey: 'wrong-secret' },
        }),
      });
      for (const k of [key, `${key}-missing`]) {
        const error = await rejection(denied._head(versioned, k));
        expect(error).toBeInstanceOf(PermissionDenied);
        expect(error).not.toBeInstanceOf(NotFound);
        expect((error as StoreError).status).toBe(403);
      }
      const listError = await rejection(
        denied._pages(versioned, key)[Symbol.asyncIterator]().next(),
      );
      expect((listError as StoreError).status).toBe(403);
      await expect(s._head(versioned, `${key}-missing`)).rejects.toBeInstanceOf(NotFound);
    });

    it('lists a missing bucket as NotFound naming it (history: nothing), NotFound for objects', async () => {
      const missing = uniqueBucketName('missing');
      for (const lean of [true, false]) {
        const listing = await rejection(
          (async () => {
            for await (const _ of store({ lean })._pages(missing, '')) {
              // nothing
            }
          })(),
        );
        expect(listing, `lean ${lean}`).toBeInstanceOf(NotFound);
        expect(String(listing)).toContain(`s3://${missing}/`);
      }
      expect(await historyOf(s, missing, '')).toEqual([]);
      await expect(s._head(missing, 'k')).rejects.toBeInstanceOf(NotFound);
      await expect(s._get(missing, 'k')).rejects.toBeInstanceOf(NotFound);
    });

    it('copies keys with %, +, spaces, non-ASCII and //, current and old versions', async () => {
      const prefix = randomPrefix('s3t-copy');
      for (const name of ['100% sure', 'a+b', 'with space', 'ünïcødé 日本', 'a//b', '..']) {
        const key = `${prefix}${name}`;
        const v1 = await s._put(versioned, key, Buffer.from(`one ${name}`));
        await s._put(versioned, key, Buffer.from(`two ${name}`));
        const current = await s._copy(versioned, key, undefined, `${prefix}copy/${name}`);
        expect(current.size).toBe(Buffer.byteLength(`two ${name}`));
        expect(await bytesOf((await s._get(versioned, `${prefix}copy/${name}`)).body)).toEqual(
          Buffer.from(`two ${name}`),
        );
        const old = await s._copy(versioned, key, v1.versionId, `${prefix}old/${name}`);
        expect(old.versionId).toBeDefined();
        expect(await bytesOf((await s._get(versioned, `${prefix}old/${name}`)).body)).toEqual(
          Buffer.from(`one ${name}`),
        );
      }
      await expect(
        s._copy(versioned, `${prefix}absent`, undefined, `${prefix}x`),
      ).rejects.toBeInstanceOf(NotFound);
    });

    it('copies above the copy threshold with UploadPartCopy parts', async () => {
      const { client, counts } = countingClient();
      const small = store({ client, partSize: 5 * MiB, copyThreshold: 5 * MiB });
      const prefix = randomPrefix('s3t-bigcopy');
      const content = randomBytes(11 * MiB);
      const v1 = await s._put(versioned, `${prefix}src`, content);
      await s._put(versioned, `${prefix}src`, Buffer.from('replaced'));
      const copied = await small._copy(versioned, `${prefix}src`, v1.versionId, `${prefix}dst`);
      expect(counts.get('UploadPartCopyCommand')).toBe(3);
      expect(counts.get('CopyObjectCommand') ?? 0).toBe(0);
      expect(copied.size).toBe(content.length);
      expect(copied.version).toBe((await s._head(versioned, `${prefix}dst`)).version);
      expect(digest(await bytesOf((await s._get(versioned, `${prefix}dst`)).body))).toBe(
        digest(content),
      );
      expect(await openUploads(versioned, prefix)).toBe(0);
      client.destroy();
    });

    it('probes If-None-Match once per bucket, and cleans up the probe', async () => {
      const { client, counts } = countingClient();
      const probing = store({ client });
      expect(await probing._createMode(versioned)).toBe(expectedCreateMode);
      const puts = counts.get('PutObjectCommand');
      expect(await probing._createMode(versioned)).toBe(expectedCreateMode);
      expect(counts.get('PutObjectCommand')).toBe(puts);
      const fallback = store({ createFallback: 'oldest-version-wins' });
      expect(await fallback._createMode(versioned)).toBe(onAws ? 'atomic' : 'oldest-version-wins');
      const left = await raw.send(
        new ListObjectVersionsCommand({ Bucket: versioned, Prefix: PROBE_PREFIX }),
      );
      expect([...(left.Versions ?? []), ...(left.DeleteMarkers ?? [])]).toEqual([]);
      client.destroy();
    });

    it('keeps offline stores off the network', async () => {
      const { client, counts } = countingClient();
      const offline = store({ client, offline: true });
      await expect(offline._head(versioned, 'k')).rejects.toBeInstanceOf(OfflineMiss);
      await expect(
        offline._pages(versioned, '')[Symbol.asyncIterator]().next(),
      ).rejects.toBeInstanceOf(OfflineMiss);
      expect(counts.size).toBe(0);
      client.destroy();
    });

    const withUnversioned = unversioned === undefined ? it.skip : it;
    withUnversioned(
      `on a bucket without versioning: atomic creates, and version primitives refuse${unversioned === undefined ? ' (skipped: set PROVCAT_TEST_S3_UNVERSIONED_BUCKET)' : ''}`,
      async () => {
        const bucket = unversioned as string;
        const prefix = randomPrefix('s3t-unversioned');
        const key = `${prefix}k`;
        const fresh = store();
        expect(await fresh._createMode(bucket)).toBe('atomic');
        await fresh._create(bucket, key, Buffer.from('first'));
        await expect(fresh._create(bucket, key, Buffer.from('second'))).rejects.toBeInstanceOf(
          Exists,
        );
        expect(await bytesOf((await fresh._get(bucket, key)).body)).toEqual(Buffer.from('first'));
        const refusals = [
          fresh._versionOf(bucket, key),
          historyOf(fresh, bucket, prefix),
          fresh._headVersion(bucket, key, 'null'),
          fresh._getVersion(bucket, key, 'null'),
          fresh._copy(bucket, key, 'null', `${prefix}copy`),
        ];
        for (const call of refusals) {
          const error = await rejection(call);
          expect(error).toBeInstanceOf(StoreError);
          expect(String((error as Error).message)).toMatch(/keeps no versions/);
        }
        await fresh._copy(bucket, key, undefined, `${prefix}copy`);
        expect(await bytesOf((await fresh._get(bucket, `${prefix}copy`)).body)).toEqual(
          Buffer.from('first'),
        );
        await fresh._delete(bucket, key);
        await expect(fresh._delete(bucket, key)).rejects.toBeInstanceOf(NotFound);
      },
    );
  });
});

// The managed stage on the server: the cases every cloud stage shares.
stageServerSuite(s3StageHarness());
