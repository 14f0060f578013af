/**
 * The S3 driver's lean read path (drivers/s3/lean-*.ts): its route agrees with the SDK's own
 * endpoint resolution, its listing parser reads S3's answer or refuses it, and on a real server
 * the everyday read operations answer correctly without the SDK client ever being loaded, while
 * errors still come out through the SDK's retries and the driver's one error mapping.
 */
import { execFile } from 'node:child_process';
import { createHash, createHmac } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  DeleteObjectCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3Store } from '../../drivers/s3/index.js';
import { httpDate } from '../../drivers/s3/lean-reader.js';
import { cacheSigningKeys, Sha256, signFromPieces } from '../../drivers/s3/lean-signer.js';
import { parseListPage, parseVersionPage } from '../../drivers/s3/list-xml.js';
import { pathStyleRoute } from '../../drivers/s3/route.js';
import type { VersionRecord } from '../../src/contract/primitives.js';
import { forEachLimit } from '../../src/core/concurrency.js';
import { isAbort, NotFound, StoreError } from '../../src/core/errors.js';
import { TEMP_PREFIX } from '../../src/core/fs-atomic.js';
import { watchGets } from '../../src/testing/fetch.js';
import { rejection } from '../../src/testing/rejection.js';
import {
  createTestBucket,
  describeS3,
  dropTestBucket,
  putTestObjects,
  s3TestTarget,
  testS3Client,
} from '../setup/s3.js';

const run = promisify(execFile);

/** The endpoint and auth scheme the SDK resolves for a GetObject, without sending it. */
async function sdkRoute(endpoint: string, region: string, bucket: string) {
  const client = new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
  });
  let seen: { url?: URL; properties?: { authSchemes?: Record<string, unknown>[] } } | undefined;
  client.middlewareStack.add(
    (_next, context) => async () => {
      seen = (context as { endpointV2?: typeof seen }).endpointV2;
      throw new Error('stop before sending');
    },
    { step: 'build', name: 'captureRoute' },
  );
  const { GetObjectCommand } = await import('@aws-sdk/client-s3');
  await expect(client.send(new GetObjectCommand({ Bucket: bucket, Key: 'k' }))).rejects.toThrow(
    'stop before sending',
  );
  client.destroy();
  const scheme = seen?.properties?.authSchemes?.[0];
  return {
    url: seen?.url?.href,
    signingRegion: scheme?.signingRegion,
    signingName: scheme?.signingName,
  };
}

describe('lean route for an explicit endpoint with path style', () => {
  const endpoints = [
    'http://127.0.0.1:7480',
    'http://127.0.0.1:7480/',
    'https://s3.example.com',
    'http://minio.local:9000/base',
    'http://minio.local:9000/base/',
  ];
  const buckets = ['abc', 'my.dotted.bucket', 'a-b-c1'];
  for (const endpoint of endpoints) {
    for (const bucket of buckets) {
      it(`is the SDK's own route: ${endpoint} + ${bucket}`, async () => {
        const region = 'eu-west-3';
        const ours = pathStyleRoute(endpoint, region, bucket);
        expect(ours).toBeDefined();
        expect({
          url: ours?.url.href,
          signingRegion: ours?.signingRegion,
          signingName: ours?.signingName,
        }).toEqual(await sdkRoute(endpoint, region, bucket));
      });
    }
  }

  it('leaves names the SDK treats specially to the SDK', () => {
    for (const bucket of [
      'arn:aws:s3:us-east-1:123456789012:accesspoint/ap',
      'UPPER',
      'a',
      '-ab',
    ]) {
      expect(pathStyleRoute('http://127.0.0.1:7480', 'us-east-1', bucket)).toBeUndefined();
    }
    expect(pathStyleRoute('http://127.0.0.1:7480/?x=1', 'us-east-1', 'abc')).toBeUndefined();
    expect(pathStyleRoute('http://user:pw@127.0.0.1:7480', 'us-east-1', 'abc')).toBeUndefined();
  });
});

describe('lean signing', () => {
  it('Sha256 digests as node:crypto does: none, one or many updates, bytes or text, with or without a key', async () => {
    const text = 'GET\n/k\n\nhost:b\n';
    const bytes = new TextEncoder().encode('bytes \u00e9');
    const view = new DataView(bytes.buffer, 2, 3);
    const cases: [string | Uint8Array | undefined, (string | Uint8Array | DataView)[]][] = [
      [undefined, []],
      [undefined, [text]],
      [undefined, [bytes]],
      [undefined, [text, bytes, view, '']],
      ['key', [text]],
      [bytes, [text, bytes]],
      [bytes, []],
    ];
    for (const [secret, parts] of cases) {
      const ours = new Sha256(secret);
      const reference = secret === undefined ? createHash('sha256') : createHmac('sha256', secret);
      for (const part of parts) {
        ours.update(part);
        reference.update(
          typeof part === 'string'
            ? part
            : new Uint8Array(part.buffer, part.byteOffset, part.byteLength),
        );
      }
      expect(Buffer.from(await ours.digest()).toString('hex')).toBe(reference.digest('hex'));
    }
    const reused = new Sha256();
    reused.update('first');
    reused.reset();
    reused.update('second');
    expect(Buffer.from(await reused.digest()).toString('hex')).toBe(
      createHash('sha256').update('second').digest('hex'),
    );
  });

  it('signs exactly as the SDK signer does, across days and changing credentials', async () => {
    const { SignatureV4 } = await import('@smithy/signature-v4');
    let creds = { accessKeyId: 'AKID1', secretAccessKey: 'secret-1' } as {
      accessKeyId: string;
      secretAccessKey: string;
      sessionToken?: string;
    };
    const make = () =>
      new SignatureV4({
        credentials: async () => creds,
        region: 'eu-west-1',
        service: 's3',
        sha256: Sha256,
        uriEscapePath: false,
      });
    const plain = make();
    // The wrapped method exists: if the SDK renamed it, the key cache would be silently gone.
    expect(typeof (plain as unknown as { getSigningKey: unknown }).getSigningKey).toBe('function');
    const cached = cacheSigningKeys(make());
    const request = (n: number) => ({
      method: 'GET',
      protocol: 'https:',
      hostname: 'b.s3.eu-west-1.amazonaws.com',
      path: `/k${n}`,
      query: {},
      headers: { host: 'b.s3.eu-west-1.amazonaws.com', 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' },
    });
    const dates = ['2026-11-30T10:00:00Z', '2026-11-30T23:59:59Z', '2026-12-01T00:00:01Z'];
    const creds2 = { accessKeyId: 'AKID1', secretAccessKey: 'secret-2', sessionToken: 'tok' };
    let n = 0;
    for (const c of [creds, creds2, creds]) {
      creds = c;
      for (const d of dates) {
        const options = {
          signingDate: new Date(d),
          signingRegion: 'eu-west-1',
          signingService: 's3',
        };
        const a = await plain.sign(request(n), options);
        const b = await cached.sign(request(n), options);
        expect(b.headers).toEqual(a.headers);
        n++;
      }
    }
  });
});

describe("signing from the SDK signer's pieces", () => {
  type Creds = { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  const setup = async (credentials: () => Promise<Creds>) => {
    const sdk = await import('@smithy/signature-v4');
    const make = () =>
      new sdk.SignatureV4({
        credentials,
        region: 'eu-west-1',
        service: 's3',
        sha256: Sha256,
        uriEscapePath: false,
        applyChecksum: false,
      });
    const plain = make();
    const inner = cacheSigningKeys(make());
    // Count what reaches the SDK's own sign: the fast path must not.
    let sdkSigns = 0;
    const sdkSign = inner.sign.bind(inner);
    inner.sign = (request, options) => {
      sdkSigns++;
      return sdkSign(request, options);
    };
    return { plain, fast: signFromPieces(sdk, inner), sdkSigns: () => sdkSigns };
  };
  const empty = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
  const request = (
    path: string,
    query: Record<string, string> = {},
    headers: Record<string, string> = {},
  ) => ({
    method: 'GET',
    protocol: 'http:',
    hostname: '127.0.0.1',
    port: 7480,
    path,
    query,
    headers: { host: '127.0.0.1:7480', 'x-amz-content-sha256': empty, ...headers },
  });

  it('gives the headers the SDK signer gives, for every shape the lean path sends', async () => {
    let creds: Creds = { accessKeyId: 'AKID1', secretAccessKey: 'secret-1' };
    const { plain, fast, sdkSigns } = await setup(async () => creds);
    const shapes = [
      request('/b/k.bin'),
      request('/b/a%20b/%C3%BC/x%2By%21.txt'),
      request('/b/'),
      request('/b/k', { versionId: 'v1/2+3=' }),
      request('/b/', {
        'list-type': '2',
        prefix: 'd/ü ',
        'continuation-token': 'a+b/c=',
        delimiter: '/',
      }),
      request('/b/k', {}, { range: 'bytes=0-99' }),
      request('/b/k', {}, { Range: '  bytes=5-   ', 'If-Match': '"etag"' }),
      { ...request('/b/k'), method: 'HEAD', port: undefined },
    ];
    // Within one second, across a second, across a day.
    const dates = [
      '2026-11-30T10:00:00.000Z',
      '2026-11-30T10:00:00.999Z',
      '2026-11-30T10:00:01.000Z',
      '2026-11-30T23:59:59.500Z',
      '2026-12-01T00:00:00.000Z',
    ];
    let signed = 0;
    for (const c of [
      creds,
      { ...creds, sessionToken: 'tok/en+=' },
      { ...creds, secretAccessKey: 's2' },
    ]) {
      creds = c;
      for (const d of dates) {
        for (const shape of shapes) {
          const options = {
            signingDate: new Date(d),
            signingRegion: 'eu-west-1',
            signingService: 's3',
          };
          const want = await plain.sign(shape, options);
          const got = await fast.sign(shape, options);
          expect(got.headers).toEqual(want.headers);
          signed++;
        }
      }
    }
    expect(signed).toBe(120);
    expect(sdkSigns()).toBe(0);
  });

  it('hands a request it does not cover to the SDK signer', async () => {
    const { plain, fast, sdkSigns } = await setup(async () => ({
      accessKeyId: 'AKID1',
      secretAccessKey: 'secret-1',
    }));
    const options = {
      signingDate: new Date('2026-11-30T10:00:00Z'),
      signingRegion: 'eu-west-1',
      signingService: 's3',
    };
    const noPayloadHash = { ...request('/b/k'), headers: { host: '127.0.0.1:7480' } };
    const withDate = request('/b/k', {}, { 'X-Amz-Date': '20200101T000000Z' });
    const mixedCaseHash = request('/b/k', {}, { 'X-Amz-Content-Sha256': 'UNSIGNED-PAYLOAD' });
    for (const r of [noPayloadHash, withDate, mixedCaseHash]) {
      expect((await fast.sign(r, options)).headers).toEqual((await plain.sign(r, options)).headers);
    }
    expect(sdkSigns()).toBe(3);
  });

  it('fails as the SDK does without usable credentials', async () => {
    const { fast } = await setup(async () => ({ accessKeyId: 'AKID1' }) as Creds);
    await expect(
      fast.sign(request('/b/k'), {
        signingDate: new Date(),
        signingRegion: 'eu-west-1',
        signingService: 's3',
      }),
    ).rejects.toThrow(/credential/i);
  });
});

describe('httpDate', () => {
  it('reads an IMF-fixdate as the general parser does, and hands other forms to it', () => {
    const dates = [
      'Mon, 30 Nov 2026 14:38:58 GMT',
      'Thu, 01 Jan 1970 00:00:00 GMT',
      'Sat, 29 Feb 2020 23:59:59 GMT',
      'Fri, 31 Dec 9999 23:59:59 GMT',
      'Sun, 06 Nov 1994 08:49:37 GMT',
      'Sunday, 06-Nov-94 08:49:37 GMT',
      'Sun Nov  6 08:49:37 1994',
      '2026-11-30T04:00:00.000Z',
    ];
    for (const d of dates) expect(httpDate(d).getTime(), d).toBe(new Date(d).getTime());
    expect(httpDate('Mon, 30 Nov 2026 14:38:58 GMT').toISOString()).toBe(
      '2026-11-30T14:38:58.000Z',
    );
    expect(Number.isNaN(httpDate('not a date').getTime())).toBe(true);
  });
});

describe('lean listing parser', () => {
  const page = (body: string) =>
    `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>${body}</ListBucketResult>`;

  it('reads objects, prefixes, truncation and the token; keys stay as sent', () => {
    const parsed = parseListPage(
      page(
        '<Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><EncodingType>url</EncodingType>' +
          '<IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1</NextContinuationToken>' +
          '<Contents><Key>p/a%20b.txt</Key><LastModified>2026-11-30T04:00:00.000Z</LastModified>' +
          '<ETag>&quot;abc&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>' +
          '<CommonPrefixes><Prefix>p/sub/</Prefix></CommonPrefixes>',
      ),
    );
    expect(parsed).toEqual({
      encodingType: 'url',
      prefixes: ['p/sub/'],
      objects: [
        {
          key: 'p/a%20b.txt',
          size: 12,
          etag: '"abc"',
          lastModified: new Date('2026-11-30T04:00:00.000Z'),
        },
      ],
      isTruncated: true,
      nextToken: 'tok&1',
    });
  });

  it('does not mistake a key that looks like a tag for a field', () => {
    const parsed = parseListPage(
      page(
        '<IsTruncated>false</IsTruncated><Contents><Key>&lt;IsTruncated&gt;true</Key>' +
          '<ETag>"e"</ETag><Size>1</Size></Contents>',
      ),
    );
    expect(parsed?.isTruncated).toBe(false);
    expect(parsed?.objects[0]?.key).toBe('<IsTruncated>true');
  });

  it('refuses anything else, so the SDK reads it', () => {
    const refused = [
      '<Error><Code>NoSuchBucket</Code></Error>',
      page('<IsTruncated>false</IsTruncated><Contents><Key><![CDATA[x]]></Key></Contents>'),
      page('<!-- hi --><IsTruncated>false</IsTruncated>'),
      page('<IsTruncated>false</IsTruncated><Contents><Key>k</Key><ETag>"e"</ETag></Contents>'),
      page(
        '<IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>-1</Size><ETag>"e"</ETag></Contents>',
      ),
      page('<Contents><Key>k</Key><Size>1</Size><ETag>"e"</ETag></Contents>'),
      // Cut after a whole entry: without its end the page may be missing entries.
      page(
        '<IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>1</Size><ETag>"e"</ETag></Contents>',
      ).replace('</ListBucketResult>', ''),
    ];
    for (const xml of refused) expect(parseListPage(xml)).toBeUndefined();
  });
});

describe('lean version listing parser', () => {
  const page = (body: string) =>
    `<?xml version="1.0" encoding="UTF-8"?><ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>${body}</ListVersionsResult>`;
  const owner = '<Owner><ID>o</ID><DisplayName>O</DisplayName></Owner>';

  it('reads versions and delete markers in document order, with the next markers', () => {
    const parsed = parseVersionPage(
      page(
        '<Prefix>p/</Prefix><KeyMarker></KeyMarker><VersionIdMarker></VersionIdMarker>' +
          '<NextKeyMarker>p/b%20c</NextKeyMarker><NextVersionIdMarker>v&amp;3</NextVersionIdMarker>' +
          '<MaxKeys>3</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>' +
          `<DeleteMarker><Key>p/a</Key><VersionId>m1</VersionId><IsLatest>true</IsLatest><LastModified>2026-11-30T04:00:01.000Z</LastModified>${owner}</DeleteMarker>` +
          `<Version><Key>p/a</Key><VersionId>v1</VersionId><IsLatest>false</IsLatest><LastModified>2026-11-30T04:00:01.000Z</LastModified><ETag>&quot;e1&quot;</ETag><Size>5</Size>${owner}<StorageClass>STANDARD</StorageClass></Version>` +
          `<Version><Key>p/b%20c</Key><VersionId>v&amp;3</VersionId><IsLatest>true</IsLatest><LastModified>2026-11-30T04:00:02.000Z</LastModified><ETag>"e3"</ETag><Size>0</Size>${owner}</Version>`,
      ),
    );
    expect(parsed).toEqual({
      encodingType: 'url',
      isTruncated: true,
      nextKeyMarker: 'p/b%20c',
      nextVersionIdMarker: 'v&3',
      entries: [
        {
          kind: 'marker',
          key: 'p/a',
          versionId: 'm1',
          isLatest: true,
          lastModified: new Date('2026-11-30T04:00:01.000Z'),
          size: undefined,
          etag: undefined,
        },
        {
          kind: 'version',
          key: 'p/a',
          versionId: 'v1',
          isLatest: false,
          lastModified: new Date('2026-11-30T04:00:01.000Z'),
          size: 5,
          etag: '"e1"',
        },
        {
          kind: 'version',
          key: 'p/b%20c',
          versionId: 'v&3',
          isLatest: true,
          lastModified: new Date('2026-11-30T04:00:02.000Z'),
          size: 0,
          etag: '"e3"',
        },
      ],
    });
  });

  it('does not mistake a key that looks like a tag for an entry or a field', () => {
    const parsed = parseVersionPage(
      page(
        '<IsTruncated>false</IsTruncated><Version><Key>&lt;Version&gt;&lt;IsTruncated&gt;true</Key>' +
          '<VersionId>v</VersionId><IsLatest>true</IsLatest><ETag>"e"</ETag><Size>1</Size></Version>',
      ),
    );
    expect(parsed?.isTruncated).toBe(false);
    expect(parsed?.entries.map((e) => e.key)).toEqual(['<Version><IsTruncated>true']);
  });

  it('refuses anything else, so the SDK reads it', () => {
    const v = (inner: string) =>
      page(`<IsTruncated>false</IsTruncated><Version>${inner}</Version>`);
    const refused = [
      '<Error><Code>NoSuchBucket</Code></Error>',
      page('<IsTruncated>false</IsTruncated><Version><Key><![CDATA[x]]></Key></Version>'),
      page('<!-- hi --><IsTruncated>false</IsTruncated>'),
      v('<Key>k</Key><IsLatest>true</IsLatest><ETag>"e"</ETag><Size>1</Size>'),
      v('<Key>k</Key><VersionId>v</VersionId><ETag>"e"</ETag><Size>1</Size>'),
      v('<Key>k</Key><VersionId>v</VersionId><IsLatest>true</IsLatest><Size>1</Size>'),
      v('<Key>k</Key><VersionId>v</VersionId><IsLatest>true</IsLatest><ETag>"e"</ETag>'),
      v(
        '<Key>k</Key><VersionId>v</VersionId><IsLatest>yes</IsLatest><ETag>"e"</ETag><Size>1</Size>',
      ),
      page(
        '<IsTruncated>false</IsTruncated><DeleteMarker><Key>k</Key><IsLatest>true</IsLatest></DeleteMarker>',
      ),
      page(
        '<Version><Key>k</Key><VersionId>v</VersionId><IsLatest>true</IsLatest><ETag>"e"</ETag><Size>1</Size></Version>',
      ),
      page('<IsTruncated>false</IsTruncated><Version><Key>k</Key>'),
      // Cut after a whole entry: without its end the page may be missing entries.
      v(
        '<Key>k</Key><VersionId>v</VersionId><IsLatest>true</IsLatest><ETag>"e"</ETag><Size>1</Size>',
      ).replace('</ListVersionsResult>', ''),
    ];
    for (const xml of refused) expect(parseVersionPage(xml)).toBeUndefined();
  });
});

describeS3('lean version listing against the server', () => {
  let bucket = '';
  const prefix = `hist-${Date.now()}/`;
  // Enough versions for a second page (1,000 per page), with its boundary inside one key's
  // versions: the next page must start from a version ID marker, not only a key marker.
  const MANY = 1_010;

  beforeAll(async () => {
    bucket = await createTestBucket('leanv');
    const c = testS3Client();
    try {
      if (s3TestTarget().kind === 'ceph') {
        await c.send(
          new PutBucketVersioningCommand({
            Bucket: bucket,
            VersioningConfiguration: { Status: 'Enabled' },
          }),
        );
      }
      const put = (Key: string, Body: string) =>
        c.send(new PutObjectCommand({ Bucket: bucket, Key, Body }));
      await put(`${prefix}a b+c&d é.txt`, 'one');
      await put(`${prefix}a b+c&d é.txt`, 'two');
      await c.send(new DeleteObjectCommand({ Bucket: bucket, Key: `${prefix}a b+c&d é.txt` }));
      await put(`${prefix}a b+c&d é.txt`, 'three');
      await put(`${prefix}gone`, 'x');
      await c.send(new DeleteObjectCommand({ Bucket: bucket, Key: `${prefix}gone` }));
      await forEachLimit(
        Array.from({ length: MANY }, (_, i) => i),
        16,
        async (i) => {
          await put(`${prefix}many`, String(i));
        },
      );
    } finally {
      c.destroy();
    }
  }, 180_000);

  afterAll(() => dropTestBucket(bucket, prefix), 180_000);

  it('lists every version and delete marker exactly as the SDK path does, across pages', async () => {
    const history = async (store: S3Store) => {
      const out: VersionRecord[] = [];
      try {
        for await (const r of store._history(bucket, prefix)) out.push(r);
      } finally {
        await store.close();
      }
      return out;
    };
    const said: string[] = [];
    const lean = await history(new S3Store({ logger: (m) => said.push(m) }));
    // Every page was read by the lean parser: it says so whenever it hands one to the SDK.
    expect(said.filter((m) => m.includes('asking the SDK'))).toEqual([]);
    const client = testS3Client();
    // An injected client has no lean path: every page goes through the SDK (and history.ts).
    const viaSdk = await history(new S3Store({ client }));
    client.destroy();
    expect(lean.length).toBe(4 + 2 + MANY);
    expect(lean).toEqual(viaSdk);
    const first = lean.filter((r) => r.key === `${prefix}a b+c&d é.txt`);
    expect(first.map((r) => [r.size, r.current])).toEqual([
      [5, true],
      [null, false],
      [3, false],
      [3, false],
    ]);
    expect(lean.filter((r) => r.key === `${prefix}many` && r.current)).toHaveLength(1);
  }, 120_000);
});

describeS3('lean reads against the server', () => {
  let bucket = '';
  let prefix = '';
  const probe = path.join(import.meta.dirname, '..', 'fixtures', 's3-lean-probe.mjs');

  const runProbe = async (env: Record<string, string> = {}) => {
    const cache = mkdtempSync(path.join(tmpdir(), 'provcat-lean-'));
    const { stdout } = await run(process.execPath, [probe, bucket, prefix, cache], {
      env: { ...process.env, ...env },
    });
    return JSON.parse(stdout) as Record<string, unknown>;
  };

  beforeAll(async () => {
    bucket = await createTestBucket('lean', { versioning: true });
    prefix = `lean-${Date.now()}/`;
    await putTestObjects(bucket, {
      [`${prefix}a.txt`]: 'hello lean',
      [`${prefix}sub/b.txt`]: 'in a folder',
    });
  }, 60_000);

  afterAll(() => dropTestBucket(bucket, prefix), 60_000);

  it('stat, list, fetch, refetch and ranges answer right without loading the SDK client', async (ctx) => {
    const t = s3TestTarget();
    const out = await runProbe();
    expect(out).toMatchObject({
      stat: { size: 10 },
      list: [`s3://${bucket}/${prefix}a.txt`, `s3://${bucket}/${prefix}sub/`],
      folder: { files: 2, downloaded: 2 },
      folderText: 'in a folder',
      refetch: { files: 2, downloaded: 0 },
      fileText: 'hello lean',
      noSlash: { files: 1 },
      range: { text: 'llo', contentRange: 'bytes 2-4/10' },
    });
    // On AWS itself the first request to a bucket learns the route from the SDK.
    if (t.endpoint === undefined || !t.forcePathStyle) {
      ctx.annotate('route learned from the SDK on this target: SDK load not asserted');
      return;
    }
    expect(out.sdkRequested).toBe(false);
    if (t.endpoint.startsWith('http:')) expect(out.tlsLoaded).toBe(false);
  }, 60_000);

  it.for(['stat', 'fetch'])(
    '%s of a missing key comes out as NotFound without loading the SDK client',
    { timeout: 60_000 },
    async (op, ctx) => {
      const t = s3TestTarget();
      const out = await runProbe({ MISSING: op });
      expect(out.error).toMatchObject({ name: 'NotFound' });
      expect(String((out.error as { message: string }).message)).toContain('no-such-key');
      if (t.endpoint === undefined || !t.forcePathStyle) {
        ctx.annotate('route learned from the SDK on this target: SDK load not asserted');
        return;
      }
      expect(out.sdkRequested).toBe(false);
    },
  );

  it('reads a small object whole when asked (same info as a HEAD), and streams a bigger one', async () => {
    const store = new S3Store({ cache: mkdtempSync(path.join(tmpdir(), 'provcat-lean-')) });
    const key = `${prefix}a.txt`;
    const head = await store._head(bucket, key);
    const small = await store._get(bucket, key, { wholeUpTo: 10 });
    expect(small.bytes?.toString()).toBe('hello lean');
    expect(small.info).toEqual(head);
    expect(small.contentLength).toBe(10);
    // The stream view of the same bytes stays available.
    expect(Buffer.concat(await small.body.toArray()).toString()).toBe('hello lean');

    // A version is read whole the same way (a fetch at a commit asks so).
    expect(head.versionId).toBeTruthy();
    const version = await store._getVersion(bucket, key, head.versionId as string, {
      wholeUpTo: 10,
    });
    expect(version.bytes?.toString()).toBe('hello lean');
    expect(version.info.versionId).toBe(head.versionId);

    const big = await store._get(bucket, key, { wholeUpTo: 9 });
    expect(big.bytes).toBeUndefined();
    expect(Buffer.concat(await big.body.toArray()).toString()).toBe('hello lean');
    expect(big.info).toEqual(head);

    // A range is never read whole (its size is not the object's).
    const ranged = await store._get(bucket, key, { wholeUpTo: 10, range: { start: 2, end: 5 } });
    expect(ranged.bytes).toBeUndefined();
    expect(Buffer.concat(await ranged.body.toArray()).toString()).toBe('llo');
    await expect(store._get(bucket, `${prefix}missing`, { wholeUpTo: 10 })).rejects.toThrow(
      NotFound,
    );
  }, 60_000);

  it('refused credentials come out as PermissionDenied (a StoreError, 403), through the SDK', async () => {
    const out = await runProbe({ AWS_SECRET_ACCESS_KEY: 'not-the-secret' });
    expect(out.error).toMatchObject({ name: 'PermissionDenied', status: 403 });
    expect(out.sdkRequested).toBe(true);
  }, 60_000);
});

/**
 * A body read whole (`wholeUpTo`, as a folder fetch asks for small objects) that fails after
 * its head, through the driver: against a protocol-level fake S3 (node:http) that lists one
 * object and answers its GET with a full head but only part of the body, then cuts the
 * connection, or stalls so that the caller aborts.
 */
describe('lean whole reads that fail after the head', () => {
  const body = 'whole body';
  let mode: 'ok' | 'cut' | 'stall' | 'list-cut' = 'ok';
  let gets = 0;
  let lists = 0;
  let sentPart: () => void = () => {};
  let server: http.Server;
  let endpoint = '';
  const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

  beforeAll(async () => {
    // The lean path signs with the default credential chain; any keys do for the fake.
    process.env.AWS_ACCESS_KEY_ID ??= 'AKIDFAKE';
    process.env.AWS_SECRET_ACCESS_KEY ??= 'fake-secret';
    server = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://fake');
      if (/^\/fake-bucket\/?$/.test(url.pathname) && url.searchParams.get('list-type') === '2') {
        lists++;
        const xml =
          '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
          '<Name>fake-bucket</Name><Prefix>p/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>' +
          '<IsTruncated>false</IsTruncated><Contents><Key>p/a.txt</Key>' +
          '<LastModified>2026-11-30T12:00:00.000Z</LastModified><ETag>"e1"</ETag>' +
          `<Size>${body.length}</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>`;
        res.writeHead(200, {
          'Content-Type': 'application/xml',
          'Content-Length': xml.length + (mode === 'list-cut' ? 200 : 0),
        });
        if (mode !== 'list-cut') {
          res.end(xml);
          return;
        }
        // The head announces more bytes than come: the connection goes right after the first
        // entry. Read as it stands, the page would be a listing of that one object.
        const cut = xml.indexOf('</Contents>') + '</Contents>'.length;
        res.write(xml.slice(0, cut), () => {
          setTimeout(() => req.socket.destroy(), 20);
        });
        return;
      }
      if (url.pathname === '/fake-bucket/p/a.txt' && req.method === 'GET') {
        gets++;
        res.writeHead(200, {
          'Content-Length': body.length,
          ETag: '"e1"',
          'Last-Modified': 'Mon, 30 Nov 2026 12:00:00 GMT',
        });
        if (mode === 'ok') {
          res.end(body);
          return;
        }
        res.write(body.slice(0, 4), () => {
          sentPart();
          if (mode === 'cut') setTimeout(() => req.socket.destroy(), 20);
        });
        return;
      }
      res.writeHead(404, { 'Content-Type': 'application/xml' });
      res.end('<Error><Code>NoSuchKey</Code></Error>');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    server.close();
    if (saved.id === undefined) delete process.env.AWS_ACCESS_KEY_ID;
    if (saved.secret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
  });

  const fakeStore = () =>
    new S3Store({
      cache: mkdtempSync(path.join(tmpdir(), 'provcat-whole-')),
      endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
    });

  it('a listing cut mid-body is never read as a shorter listing', async () => {
    mode = 'list-cut';
    lists = 0;
    const store = fakeStore();
    await expect(store.list('s3://fake-bucket/p/')).rejects.toThrow();
    // The lean read refused the cut page, and so did the SDK asked after it.
    expect(lists).toBeGreaterThanOrEqual(2);
    mode = 'ok';
    expect(await store.list('s3://fake-bucket/p/')).toHaveLength(1);
    await store.close();
  });

  it('a connection cut mid-body is a StoreError naming the byte counts, sent once', async () => {
    mode = 'cut';
    gets = 0;
    const store = fakeStore();
    const error = await rejection(store._get('fake-bucket', 'p/a.txt', { wholeUpTo: 64 * 1024 }));
    expect(error).toBeInstanceOf(StoreError);
    expect(String(error)).toContain(`after 4 of ${body.length} body bytes`);
    // Not handed to the SDK for a second try: the failure after the head stands.
    expect(gets).toBe(1);
    await store.close();
  });

  it('an abort mid-body rejects with an AbortError', async () => {
    mode = 'stall';
    const store = fakeStore();
    const controller = new AbortController();
    const part = new Promise<void>((resolve) => {
      sentPart = resolve;
    });
    const got = store._get('fake-bucket', 'p/a.txt', {
      wholeUpTo: 64 * 1024,
      signal: controller.signal,
    });
    await part;
    controller.abort();
    expect(isAbort(await rejection(got))).toBe(true);
    await store.close();
  });

  it('a folder fetch whose whole read is cut caches nothing, and the next fetch completes it', async () => {
    mode = 'cut';
    const store = fakeStore();
    const seen = watchGets(store);
    const error = await rejection(store.fetch('s3://fake-bucket/p/'));
    expect(error).toBeInstanceOf(StoreError);
    expect(String(error)).toContain(`after 4 of ${body.length} body bytes`);
    // No blob, no temp file, no view marked done.
    const files = await readdir(store.cache.root, { recursive: true, withFileTypes: true });
    const written = files.filter((f) => f.isFile() && !f.parentPath.includes(`${path.sep}locks`));
    expect(written.filter((f) => f.parentPath.includes(`${path.sep}blobs`))).toEqual([]);
    expect(written.filter((f) => f.name.startsWith(TEMP_PREFIX))).toEqual([]);
    const view = 'tree:s3://fake-bucket/p/';
    expect((await store.cache.readState(view))?.done).not.toBe(true);
    mode = 'ok';
    const done = await store.fetch('s3://fake-bucket/p/');
    expect(done).toMatchObject({ files: 1, downloaded: 1 });
    // The object came whole, the path whose failure was tested above.
    expect(seen.whole).toBe(1);
    expect((await store.cache.readState(view))?.done).toBe(true);
    expect(await readFile(path.join(done.path, 'a.txt'), 'utf8')).toBe(body);
    await store.close();
  });
});
