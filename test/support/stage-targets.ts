/**
 * Where the server stage suite (stage-suite.ts) runs: the S3 stage on Ceph behind a range proxy,
 * the Azure stage on Azurite behind a counting proxy, the GCS stage on the project's test
 * server. Each harness makes its bucket (container, server) in `setup`, counts the requests its
 * stages send, and reaches the store behind the stage's back with the store's own SDK. The
 * driver-only stage tests (test/lake/lake-<driver>.test.ts) use the same harness.
 *
 * @module
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { ContainerClient } from '@azure/storage-blob';
import { Storage } from '@google-cloud/storage';
import { describe, expect } from 'vitest';
import { DEV_ACCOUNT_KEY, DEV_ACCOUNT_NAME } from '../../servers/azure-dev-account.js';
import {
  type GcsTestServer,
  type RequestRecord,
  startGcsServer,
} from '../../servers/gcs/server.js';
import { type Stage, stageFromDescriptor } from '../../src/lake/index.js';
import {
  MiB,
  openUploads,
  type ProxyMode,
  readObject,
  s3Descriptor,
  s3Endpoint,
  startRangeProxy,
  testClient,
} from '../fixtures/lake-helpers.js';
import {
  azureTarget,
  azuriteServiceClient,
  describeAzurite,
  uniqueContainerName,
} from '../setup/azure.js';
import { createTestBucket, describeS3, dropTestBucket } from '../setup/s3.js';
import { type AzureProxy, startAzureProxy } from './azure-proxy.js';
import {
  type HarnessStageOptions,
  PREFIX,
  type RequestWatch,
  type StageHarness,
} from './stage-suite.js';

const count = (names: string[], name: string) => names.filter((n) => n === name).length;

/**
 * A watch over `log` from its length now on; `parts` names the part request, or counts the parts
 * itself (Azure: distinct block IDs, since a block resent after a timeout is one part).
 */
function watchOf(
  log: () => string[],
  pattern: (names: string[]) => Record<string, number>,
  parts: string | (() => number),
): RequestWatch {
  const start = log().length;
  const names = () => log().slice(start);
  const partCount = typeof parts === 'string' ? () => count(names(), parts) : parts;
  return { names, pattern: () => pattern(names()), parts: partCount };
}

/** The S3 harness, with the SDK client and what only S3 tests need. */
export interface S3StageHarness extends StageHarness {
  /** A client of the test server (not a stage's). */
  admin(): S3Client;
}

/** The S3 stage on the test server (Ceph), its ranges broken by {@link startRangeProxy}. */
export function s3StageHarness(): S3StageHarness {
  let admin: S3Client;
  let bucket: string;
  let mode: ProxyMode = 'pass';
  let proxy: { endpoint: string; close(): Promise<void> } | undefined;
  const names: string[] = [];
  const counted = (endpoint?: string) => {
    const client = testClient(endpoint);
    client.middlewareStack.add(
      (next, context) => async (args) => {
        names.push(String(context.commandName).replace(/Command$/, ''));
        return next(args);
      },
      { step: 'initialize', name: 'stageHarnessCounter' },
    );
    return client;
  };
  return {
    name: 'S3',
    scheme: 's3',
    foreignScheme: 'gs',
    describe: describeS3,
    async setup() {
      admin = testClient();
      bucket = await createTestBucket('lake-s3');
      proxy = await startRangeProxy(
        s3Endpoint(),
        () => mode,
        (b, k) =>
          getSignedUrl(admin, new GetObjectCommand({ Bucket: b, Key: k }), { expiresIn: 60 }),
      );
    },
    async teardown() {
      await proxy?.close();
      await dropTestBucket(bucket, `${PREFIX}/`);
      admin.destroy();
    },
    admin: () => admin,
    bucket: () => bucket,
    stage(o: HarnessStageOptions = {}) {
      if (o.fault !== undefined) mode = o.fault;
      const endpoint = o.fault === undefined ? undefined : proxy?.endpoint;
      const descriptor = {
        ...s3Descriptor(bucket, PREFIX, endpoint),
        ...(o.tenant ? { tenant: o.tenant } : {}),
      };
      return stageFromDescriptor(descriptor, {
        client: counted(endpoint),
        partSize: o.partSize,
      }) as Stage;
    },
    heal() {
      mode = 'pass';
    },
    faults: ['strip-range', 'wrong-content-range', 'cut-body'],
    watch: () =>
      watchOf(
        () => names,
        (n) => ({
          Put: count(n, 'PutObject'),
          Create: count(n, 'CreateMultipartUpload'),
          Part: count(n, 'UploadPart'),
          Complete: count(n, 'CompleteMultipartUpload'),
        }),
        'UploadPart',
      ),
    patterns: [
      ['0 B: one PutObject', 0, { Put: 1, Create: 0, Part: 0, Complete: 0 }],
      ['1 B: one part', 1, { Put: 0, Create: 1, Part: 1, Complete: 1 }],
      ['exactly one 5 MiB part', 5 * MiB, { Put: 0, Create: 1, Part: 1, Complete: 1 }],
      ['one part + 1 byte', 5 * MiB + 1, { Put: 0, Create: 1, Part: 2, Complete: 1 }],
      ['several parts', 3 * 5 * MiB + 7, { Put: 0, Create: 1, Part: 4, Complete: 1 }],
    ],
    bigParts: 4,
    rangeRequest: 'GetObject',
    read: (key) => readObject(admin, bucket, key),
    async contentType(key) {
      return (await admin.send(new HeadObjectCommand({ Bucket: bucket, Key: key }))).ContentType;
    },
    async plant(key, body) {
      await admin.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
    },
    async remove(key) {
      await admin.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
    },
    async keys(prefix) {
      const listed = await admin.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
      return (listed.Contents ?? []).map((o) => o.Key as string).sort();
    },
    secret: 'X-Amz',
    expiresIn: (url) => Number(new URL(url).searchParams.get('X-Amz-Expires')),
    async afterAbort(watch) {
      expect(count(watch.names(), 'AbortMultipartUpload')).toBe(1);
      expect(count(watch.names(), 'CompleteMultipartUpload')).toBe(0);
      expect(await openUploads(admin, bucket, PREFIX)).toEqual([]);
    },
  };
}

/** Credentials as a user's environment gives them (a descriptor never carries any). */
export const AZURE_ENV = {
  AZURE_STORAGE_ACCOUNT: DEV_ACCOUNT_NAME,
  AZURE_STORAGE_KEY: DEV_ACCOUNT_KEY,
};

/** An Azure stage descriptor for `container` at `endpoint`. */
export function azureDescriptor(container: string, endpoint: string, prefix = PREFIX) {
  return {
    version: 1,
    kind: 'az',
    account: DEV_ACCOUNT_NAME,
    container,
    prefix,
    endpoint,
  } as const;
}

/** The Azure harness, with its container and proxy for the Azure-only tests. */
export interface AzureStageHarness extends StageHarness {
  container(): ContainerClient;
  proxy(): AzureProxy;
}

/** The Azure stage on Azurite through the counting proxy (`SDK` reads: `PROVCAT_AZURE_LEAN=0`). */
export function azureStageHarness(): AzureStageHarness {
  let container: ContainerClient;
  let name: string;
  let proxy: AzureProxy;
  let blocksAt = 0;
  return {
    name: 'Azure',
    scheme: 'az',
    foreignScheme: 's3',
    describe: describeAzurite,
    async setup() {
      name = uniqueContainerName('lake');
      container = azuriteServiceClient().getContainerClient(name);
      await container.create();
      proxy = await startAzureProxy(azureTarget().url);
    },
    async teardown() {
      await proxy?.close();
      await container?.delete();
    },
    container: () => container,
    proxy: () => proxy,
    bucket: () => name,
    stage(o: HarnessStageOptions = {}) {
      if (o.fault !== undefined) proxy.mode = o.fault;
      const d = {
        ...azureDescriptor(name, proxy.endpoint),
        ...(o.tenant ? { tenant: o.tenant } : {}),
      };
      const env = { ...AZURE_ENV, ...(o.mode === 'SDK' ? { PROVCAT_AZURE_LEAN: '0' } : {}) };
      return stageFromDescriptor(d, { partSize: o.partSize, env, lockStaleMs: 5000 }) as Stage;
    },
    heal() {
      proxy.mode = 'pass';
    },
    faults: ['strip-range', 'wrong-content-range', 'cut-body'],
    readModes: ['lean', 'SDK'],
    watch() {
      blocksAt = proxy.blocks.length;
      return watchOf(
        () => proxy.names,
        (n) => ({
          PutBlob: count(n, 'PutBlob'),
          // Blocks sent, each once: on a loaded machine the SDK may send a block again when its
          // request times out (the block ID makes that harmless), which the count is not about.
          PutBlock: new Set(proxy.blocks.slice(blocksAt)).size,
          PutBlockList: count(n, 'PutBlockList'),
        }),
        () => new Set(proxy.blocks.slice(blocksAt)).size,
      );
    },
    patterns: [
      ['0 B: one Put Blob', 0, { PutBlob: 1, PutBlock: 0, PutBlockList: 0 }],
      ['1 B: one block', 1, { PutBlob: 0, PutBlock: 1, PutBlockList: 1 }],
      ['exactly one 5 MiB block', 5 * MiB, { PutBlob: 0, PutBlock: 1, PutBlockList: 1 }],
      ['one block + 1 byte', 5 * MiB + 1, { PutBlob: 0, PutBlock: 2, PutBlockList: 1 }],
      ['several blocks', 3 * 5 * MiB + 7, { PutBlob: 0, PutBlock: 4, PutBlockList: 1 }],
    ],
    bigParts: 4,
    rangeRequest: 'GetBlob',
    read: (key) => container.getBlobClient(key).downloadToBuffer(),
    async contentType(key) {
      return (await container.getBlobClient(key).getProperties()).contentType;
    },
    async plant(key, body) {
      await container.getBlockBlobClient(key).upload(body, body.length);
    },
    async remove(key) {
      await container.getBlobClient(key).delete();
    },
    async keys(prefix) {
      const out: string[] = [];
      for await (const b of container.listBlobsFlat({ prefix })) out.push(b.name);
      return out.sort();
    },
    secret: 'sig=',
    expiresIn: (url) =>
      (Date.parse(new URL(url).searchParams.get('se') as string) - Date.now()) / 1000,
    async afterAbort(_watch, s) {
      // The abort discarded the staged blocks (an empty commit, deleted at once). A block whose
      // request was cancelled after its body was sent can still land after that (as on S3, where
      // AWS says an abort may have to be repeated): it is then listed, and the next abort (what
      // garbage collection runs) removes it. Azurite may apply such a block a while after the
      // client gave up on it (seen in CI on a loaded machine), so abort until none is listed,
      // within a bound: a leftover that outlives ten rounds fails.
      let open: string[] = [];
      for (let round = 0; round < 10; round++) {
        open = [];
        for await (const u of s.openUploads()) open.push(u.key);
        if (open.length === 0) break;
        for await (const u of s.openUploads()) await s.abortUpload(u);
        await new Promise((r) => setTimeout(r, 300));
      }
      expect(open).toEqual([]);
    },
  };
}

/** The GCS harness, with its server and SDK client for the GCS-only tests. */
export interface GcsStageHarness extends StageHarness {
  server(): GcsTestServer;
  admin(): Storage;
  /** A stage descriptor on the server (`extra` over the defaults). */
  descriptor(extra?: Record<string, unknown>): Record<string, unknown>;
  /** The requests logged while `fn` ran. */
  logged<T>(fn: () => Promise<T>): Promise<{ result: T; log: RequestRecord[] }>;
}

/** The GCS stage on the project's test server (its mangle knobs break the ranges). */
export function gcsStageHarness(): GcsStageHarness {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const credentials = {
    client_email: 'signer@test-project.iam.gserviceaccount.com',
    private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
  const bucket = `lake-${randomBytes(4).toString('hex')}`;
  let server: GcsTestServer;
  let admin: Storage;
  let active = 0;
  const media = { method: 'GET', path: /\/o\// };
  const nameOf = (r: RequestRecord) =>
    `${r.method} ${r.query.alt ?? r.headers['content-range'] ?? ''}`;
  const session = (r: RequestRecord) => r.query.uploadType === 'resumable' && r.method === 'POST';
  const part = (r: RequestRecord) => r.method === 'PUT' && r.uploadId !== undefined;
  const descriptor = (extra: Record<string, unknown> = {}) => ({
    version: 1,
    kind: 'gs',
    bucket,
    prefix: PREFIX,
    endpoint: server.url,
    ...extra,
  });
  const stage = (o: HarnessStageOptions & { client?: Storage } = {}) => {
    if (o.fault === 'strip-range') server.faults.mangle({ ...media, mode: 'ignoreRange' });
    if (o.fault === 'wrong-content-range')
      server.faults.mangle({ ...media, mode: 'wrongContentRange' });
    const d = descriptor(o.tenant ? { tenant: o.tenant } : {});
    const options = { partSize: o.partSize, lockStaleMs: 5000, client: o.client };
    return stageFromDescriptor(d, options) as Stage;
  };
  return {
    name: 'GCS',
    scheme: 'gs',
    foreignScheme: 's3',
    describe,
    async setup() {
      server = await startGcsServer({ signingPublicKey: publicKey });
      admin = new Storage({ apiEndpoint: server.url, projectId: 'test' });
      await admin.createBucket(bucket, { versioning: { enabled: true } });
    },
    async teardown() {
      await server?.close();
    },
    server: () => server,
    admin: () => admin,
    descriptor,
    async logged(fn) {
      const start = server.log.length;
      const result = await fn();
      return { result, log: server.log.slice(start) };
    },
    bucket: () => bucket,
    stage,
    heal() {
      server.faults.clear();
    },
    faults: ['strip-range', 'wrong-content-range'],
    watch() {
      const start = server.log.length;
      active = server.sessions().filter((x) => x.state === 'active').length;
      const log = () => server.log.slice(start);
      return {
        names: () => log().map(nameOf),
        parts: () => log().filter(part).length,
        pattern() {
          const puts = log().filter(part);
          const sessions = log().filter(session).length;
          const chunks = puts.filter((r) => /\/\*$/.test(r.headers['content-range'] ?? '')).length;
          return { sessions, chunks, tail: sessions === 0 ? 0 : (puts.at(-1)?.bodyBytes ?? -1) };
        },
      };
    },
    patterns: [
      ['0 B: one plain upload', 0, { sessions: 0, chunks: 0, tail: 0 }],
      ['1 B: a session, the byte sent by the completion', 1, { sessions: 1, chunks: 0, tail: 1 }],
      ['exactly one 5 MiB part', 5 * MiB, { sessions: 1, chunks: 1, tail: 0 }],
      ['one part + 1 byte', 5 * MiB + 1, { sessions: 1, chunks: 1, tail: 1 }],
      [
        'several parts, the last under 256 KiB',
        3 * 5 * MiB + 7,
        { sessions: 1, chunks: 3, tail: 7 },
      ],
      [
        'several parts, the last off the 256 KiB grid',
        2 * 5 * MiB + 300 * 1024,
        { sessions: 1, chunks: 3, tail: 300 * 1024 - 256 * 1024 },
      ],
    ],
    bigParts: 5,
    rangeRequest: 'GET media',
    async read(key) {
      const [bytes] = await admin.bucket(bucket).file(key).download();
      return bytes;
    },
    async contentType(key) {
      const [meta] = await admin.bucket(bucket).file(key).getMetadata();
      return meta.contentType;
    },
    async plant(key, body) {
      await admin.bucket(bucket).file(key).save(body, { resumable: false });
    },
    async remove(key) {
      await admin.bucket(bucket).file(key).delete();
    },
    async keys(prefix) {
      const [files] = await admin.bucket(bucket).getFiles({ prefix });
      return files.map((f) => f.name).sort();
    },
    presigner: () =>
      stage({ client: new Storage({ apiEndpoint: server.url, projectId: 'test', credentials }) }),
    secret: 'X-Goog',
    expiresIn: (url) => Number(new URL(url).searchParams.get('X-Goog-Expires')),
    async afterAbort() {
      expect(server.sessions().filter((x) => x.state === 'active')).toHaveLength(active);
      const last = server.sessions().at(-1);
      expect(last?.state).toBe('cancelled');
      const [exists] = await admin
        .bucket(bucket)
        .file(last?.name as string)
        .exists();
      expect(exists).toBe(false);
    },
  };
}
