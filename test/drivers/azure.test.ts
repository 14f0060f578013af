/**
 * The Azure driver: configuration, error mapping and the lean parser (no server);
 * the conformance suite on Azurite (no versions there; with the lean reads on and off) and on the
 * versions server (versions, commits, branches); and what only Azure needs: versions that fail
 * closed on Azurite and on a store that ignores `versionid`, listings in byte order from
 * Azurite's UTF-16 order, downloads cut mid-body, 409 and 412 on create, concurrent commits.
 */
// The shared GC and fault suites on this driver (their setup is in each module).
import './azure/gc.js';
import './azure/faults.js';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { PipelinePolicy } from '@azure/core-rest-pipeline';
import type { BlobServiceClient, ContainerClient } from '@azure/storage-blob';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AzureStore,
  type AzureStoreOptions,
  encodeBlobName,
  mapAzureError,
  parseBlobList,
  resolveAzureConfig,
} from '../../drivers/azure/index.js';
import { DEV_ACCOUNT_NAME } from '../../servers/azure-dev-account.js';
import type { AzureVersionsServer } from '../../servers/azure-versions/index.js';
import { startAzureVersionsServer } from '../../servers/azure-versions/index.js';
import { commitFolder } from '../../src/commits/commit.js';
import { logFolder } from '../../src/commits/log.js';
import { pinUri } from '../../src/commits/pin.js';
import { loadCommit } from '../../src/commits/read.js';
import {
  Exists,
  NotFound,
  NotSupported,
  PermissionDenied,
  PreconditionFailed,
  SourceError,
  StoreError,
} from '../../src/core/errors.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { type Stage, stageFromDescriptor } from '../../src/lake/index.js';
import { conformance } from '../../src/testing/index.js';
import { rejection } from '../../src/testing/rejection.js';
import { tempCache } from '../../src/testing/store.js';
import { randomPrefix, type TargetSdk } from '../../src/testing/target.js';
import {
  azureTarget,
  azuriteServiceClient,
  describeAzurite,
  uniqueContainerName,
} from '../setup/azure.js';
import { stageServerSuite } from '../support/stage-suite.js';
import { azureStageHarness } from '../support/stage-targets.js';

async function text(body: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks).toString('utf8');
}

// ---- no server needed ----------------------------------------------------------------------

describe('azure configuration', () => {
  it('reads a connection string, then account and key, and lets the endpoint variable win', () => {
    const cs =
      'DefaultEndpointsProtocol=https;AccountName=acct1;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn';
    expect(resolveAzureConfig({}, { AZURE_STORAGE_CONNECTION_STRING: cs })).toMatchObject({
      endpoint: 'https://acct1.blob.core.chinacloudapi.cn',
      account: 'acct1',
      auth: { kind: 'key', account: 'acct1', key: 'a2V5' },
      leanReads: true,
    });
    const withEndpoint = `${cs};BlobEndpoint=http://127.0.0.1:1/acct1/`;
    expect(resolveAzureConfig({}, { AZURE_STORAGE_CONNECTION_STRING: withEndpoint }).endpoint).toBe(
      'http://127.0.0.1:1/acct1',
    );
    expect(
      resolveAzureConfig(
        {},
        {
          AZURE_STORAGE_CONNECTION_STRING: withEndpoint,
          PROVCAT_AZURE_ENDPOINT: 'http://proxy:2/x',
        },
      ).endpoint,
    ).toBe('http://proxy:2/x');
    expect(
      resolveAzureConfig({}, { AZURE_STORAGE_ACCOUNT: 'acct2', AZURE_STORAGE_KEY: 'c2Vj' }),
    ).toMatchObject({
      endpoint: 'https://acct2.blob.core.windows.net',
      auth: { kind: 'key', account: 'acct2', key: 'c2Vj' },
    });
    // No key: a token credential (DefaultAzureCredential, made on first use).
    expect(resolveAzureConfig({}, { AZURE_STORAGE_ACCOUNT: 'acct3' }).auth).toEqual({
      kind: 'token',
      credential: undefined,
    });
    expect(
      resolveAzureConfig({}, { AZURE_STORAGE_CONNECTION_STRING: 'UseDevelopmentStorage=true' }),
    ).toMatchObject({
      endpoint: 'http://127.0.0.1:10000/devstoreaccount1',
      auth: { kind: 'key', account: 'devstoreaccount1' },
    });
    const sas = resolveAzureConfig(
      {},
      {
        AZURE_STORAGE_CONNECTION_STRING:
          'BlobEndpoint=https://x.example/;SharedAccessSignature=?sv=1&sig=2',
      },
    );
    expect(sas.auth).toEqual({ kind: 'sas', sas: 'sv=1&sig=2' });
    expect(
      resolveAzureConfig({}, { AZURE_STORAGE_ACCOUNT: 'a', PROVCAT_AZURE_LEAN: '0' }).leanReads,
    ).toBe(false);
  });

  it('refuses a configuration without an account, and an endpoint that is not a URL', () => {
    expect(() => resolveAzureConfig({}, {})).toThrow(/AZURE_STORAGE_CONNECTION_STRING/);
    expect(() => resolveAzureConfig({}, { PROVCAT_AZURE_ENDPOINT: 'not a url' })).toThrow(
      RangeError,
    );
    expect(() => new AzureStore({ env: {} })).toThrow(RangeError);
  });

  it('maps service errors: 404 NotFound, 403 PermissionDenied, 409/412 on create Exists', () => {
    const err = (statusCode: number, code?: string) =>
      Object.assign(new Error(code ?? 'x'), { statusCode, details: { errorCode: code } });
    const ctx = { container: 'c', key: 'a b', op: 'get' };
    expect(mapAzureError(err(404, 'BlobNotFound'), ctx)).toBeInstanceOf(NotFound);
    expect(mapAzureError(err(400, 'ContainerNotFound'), ctx)).toBeInstanceOf(NotFound);
    const denied = mapAzureError(err(403, 'AuthorizationFailure'), ctx);
    expect(denied).toBeInstanceOf(PermissionDenied);
    expect(denied.message).toMatch(/az:\/\/c\/a%20b.*AuthorizationFailure.*AZURE_STORAGE/);
    for (const status of [409, 412]) {
      expect(mapAzureError(err(status), { ...ctx, op: 'create' })).toBeInstanceOf(Exists);
    }
    expect(mapAzureError(err(412, 'ConditionNotMet'), { ...ctx, op: 'delete' })).toBeInstanceOf(
      PreconditionFailed,
    );
    const busy = mapAzureError(err(503, 'ServerBusy'), ctx);
    expect(busy).toBeInstanceOf(StoreError);
    expect((busy as StoreError).status).toBe(503);
  });

  it('encodes blob names as the SDK does, and dot segments whole', () => {
    expect(encodeBlobName("a b/c'd/é+%")).toBe('a%20b/c%27d/%C3%A9%2B%25');
    expect(encodeBlobName('x/../y')).toBe('x%2F..%2Fy');
    expect(encodeBlobName('a//b')).toBe('a//b');
  });

  it('parses a List Blobs page: entities, Encoded names, prefixes, quoted ETags, the marker', () => {
    const xml =
      '<?xml version="1.0"?><EnumerationResults><Blobs><BlobPrefix><Name>p/&amp;/</Name></BlobPrefix>' +
      '<Blob><Name>p/a&lt;b&#x1F600;</Name><Properties><Last-Modified>Tue, 01 Dec 2026 15:20:28 GMT</Last-Modified>' +
      '<Etag>0x8D1</Etag><Content-Length>12</Content-Length></Properties>' +
      `<Metadata><sha256>${'ab'.repeat(32)}</sha256></Metadata></Blob>` +
      '<Blob><Name Encoded="true">p%2Fc%01</Name><Properties><Etag>0x8D2</Etag><Content-Length>0</Content-Length></Properties></Blob>' +
      '</Blobs><NextMarker>p/a&amp;</NextMarker></EnumerationResults>';
    const page = parseBlobList(xml);
    expect(page?.prefixes).toEqual(['p/&/']);
    expect(page?.objects.map((b) => [b.key, b.size, b.version])).toEqual([
      ['p/a<b\u{1F600}', 12, '"0x8D1"'],
      ['p/c\u0001', 0, '"0x8D2"'],
    ]);
    expect(page?.objects.map((b) => b.sha256)).toEqual(['ab'.repeat(32), undefined]);
    expect(page?.next).toBe('p/a&');
    expect(parseBlobList('<Error/>')).toBeUndefined();
    expect(
      parseBlobList('<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>')?.next,
    ).toBe(undefined);
  });
});

/** The official SDK's writes and HEADs in a container, for the conformance suite. */
function blobSdk(container: () => ContainerClient): TargetSdk {
  return {
    put: async (key, body) => {
      await container().getBlockBlobClient(key).upload(body, body.length);
    },
    contentType: async (key) =>
      (await container().getBlockBlobClient(key).getProperties()).contentType,
  };
}

// ---- Azurite --------------------------------------------------------------------------------

describeAzurite('azure driver on Azurite', () => {
  const name = uniqueContainerName('conf');
  let container: ContainerClient;
  const options = (): AzureStoreOptions => ({
    connectionString: azureTarget().connectionString,
    env: {},
  });
  beforeAll(async () => {
    container = azuriteServiceClient().getContainerClient(name);
    await container.create();
  });
  afterAll(async () => {
    await container?.delete();
  });

  // The lean read path is an accelerator: the whole suite runs with it on and with it off.
  for (const lean of [true, false]) {
    conformance({
      name: `azure on Azurite (lean reads ${lean ? 'on' : 'off'})`,
      store: (o) => {
        const store = new AzureStore({ ...options(), leanReads: lean, ...o });
        if (store.leanReads !== lean) throw new Error(`lean reads not ${lean}`);
        return store;
      },
      bucket: name,
      flags: {
        versions: false,
        createMode: 'atomic',
        ranges: true,
        hostileKeys: true,
        parts: true,
      },
      sdk: blobSdk(() => container),
      foreignPut: async (c, key, body) => {
        const blob = azuriteServiceClient().getContainerClient(c).getBlockBlobClient(key);
        await blob.upload(body, body.length);
      },
      env: {
        AZURE_STORAGE_CONNECTION_STRING: process.env.PROVCAT_TEST_AZURITE_CONNECTION_STRING ?? '',
        PROVCAT_AZURE_LEAN: lean ? '1' : '0',
      },
      stage: ({ prefix }) =>
        stageFromDescriptor(
          {
            version: 1,
            kind: 'az',
            account: DEV_ACCOUNT_NAME,
            container: name,
            prefix,
            endpoint: azureTarget().url,
          },
          {
            partSize: 1024 * 1024,
            env: {
              ...options().env,
              AZURE_STORAGE_CONNECTION_STRING: azureTarget().connectionString,
              PROVCAT_AZURE_LEAN: lean ? '1' : '0',
            },
          },
        ) as Stage,
    });
  }

  describe('azure specifics on Azurite', () => {
    let store: AzureStore;
    beforeAll(() => {
      store = new AzureStore({ ...options(), cache: tempCache() });
    });

    it('fails closed on versions: reads at any versionid, history, versionOf, pin and commit are refused', async () => {
      const p = randomPrefix();
      const key = `${p}v.txt`;
      const put = await store._put(name, key, Buffer.from('current'));
      expect(put.versionId).toBeUndefined();
      for (const id of ['2026-01-01T00:00:00.0000000Z', 'not-a-version']) {
        const read = await rejection(store._getVersion(name, key, id));
        expect(read).toBeInstanceOf(NotSupported);
        expect((read as Error).message).toMatch(/keeps no versions.*no version ID/);
        await expect(store._headVersion(name, key, id)).rejects.toBeInstanceOf(NotSupported);
        await expect(store._copy(name, key, id, `${p}copy.txt`)).rejects.toBeInstanceOf(
          NotSupported,
        );
      }
      await expect(store._versionOf(name, key)).rejects.toBeInstanceOf(NotSupported);
      const history = store._history(name, p)[Symbol.asyncIterator]();
      await expect(history.next()).rejects.toBeInstanceOf(NotSupported);
      await expect(pinUri(store, `az://${name}/${key}`)).rejects.toThrow(/keeps no versions/);
      const commit = await rejection(commitFolder(store, `az://${name}/${p}`, 'refused'));
      expect(commit).toBeInstanceOf(NotSupported);
      expect((commit as Error).message).toMatch(/blob versioning/);
      // A log of a container without versions is no answer: it is refused too (never `[]`).
      expect(await rejection(logFolder(store, `az://${name}/${p}`))).toBeInstanceOf(NotSupported);
      // The lean read path checks the same: a current blob is never taken for a version.
      const sdkOnly = new AzureStore({ ...options(), leanReads: false, cache: tempCache() });
      await expect(sdkOnly._getVersion(name, key, 'x')).rejects.toBeInstanceOf(NotSupported);
    });

    it('lists in UTF-8 byte order across pages although Azurite sorts in UTF-16 order', async () => {
      const p = randomPrefix();
      // U+FF61 sorts before U+1F600 in UTF-8 and after it in UTF-16; both also as folders.
      const names = ['\u{1F600}a', '\u{1F600}b', '\uff61', 'z', '\u{1F600}/x', '\uff61/y', 'a'];
      for (const n of names) await store._put(name, `${p}${n}`, Buffer.from(n));
      const raw: string[] = [];
      for await (const b of container.listBlobsFlat({ prefix: p }))
        raw.push(b.name.slice(p.length));
      expect(raw).toEqual([...names].sort()); // Azurite's own order: UTF-16
      for (const limit of [1, 2, 3, 100]) {
        const keys: string[] = [];
        for await (const page of store._pages(name, p, { limit })) {
          expect(page.objects.length).toBeLessThanOrEqual(limit);
          keys.push(...page.objects.map((o) => o.key.slice(p.length)));
        }
        expect(keys).toEqual([...names].sort(compareUtf8));
        const files: string[] = [];
        const folders: string[] = [];
        for await (const page of store._pages(name, p, { limit, delimiter: '/' })) {
          expect(page.objects.length + page.prefixes.length).toBeLessThanOrEqual(limit);
          folders.push(...page.prefixes.map((x) => x.slice(p.length)));
          files.push(...page.objects.map((o) => o.key.slice(p.length)));
        }
        expect(files).toEqual(['a', 'z', '\uff61', '\u{1F600}a', '\u{1F600}b']);
        expect(folders).toEqual(['\uff61/', '\u{1F600}/']);
      }
    });

    it('a folder fetch and refetch with lean reads never load the SDK; with PROVCAT_AZURE_LEAN=0 they do', async () => {
      const p = randomPrefix();
      for (const k of ['a.txt', 'sub/b.txt']) await store._put(name, `${p}${k}`, Buffer.from(k));
      const probe = new URL('../fixtures/azure-lean-probe.mjs', import.meta.url).pathname;
      for (const lean of ['1', '0']) {
        const env = {
          ...process.env,
          AZURE_STORAGE_CONNECTION_STRING: azureTarget().connectionString,
          PROVCAT_CACHE_DIR: tempCache(),
          PROVCAT_AZURE_LEAN: lean,
        };
        const out = await new Promise<string>((resolve, reject) =>
          execFile(process.execPath, [probe, `az://${name}/${p}`], { env }, (error, stdout) =>
            error ? reject(error) : resolve(stdout),
          ),
        );
        const r = JSON.parse(out);
        expect(r.first).toMatchObject({ files: 2, downloaded: 2 });
        expect(r.again).toMatchObject({ files: 2, downloaded: 0 });
        expect(r.sdk).toBe(lean === '0');
      }
    });

    it('creates only if absent (409 from Azurite is Exists), presigns a read-only SAS usable with Range', async () => {
      const key = `${randomPrefix()}created.bin`;
      const data = randomBytes(5000);
      await store._create(name, key, data);
      await expect(store._create(name, key, Buffer.from('again'))).rejects.toBeInstanceOf(Exists);
      const url = await store._presign(name, key, { expiresIn: 60 });
      expect(url).toMatch(/sig=.*sp=r|sp=r.*sig=/);
      const ranged = await fetch(url, { headers: { Range: 'bytes=100-199' } });
      expect(ranged.status).toBe(206);
      expect(Buffer.from(await ranged.arrayBuffer()).equals(data.subarray(100, 200))).toBe(true);
      const write = await fetch(url, {
        method: 'PUT',
        body: 'x',
        headers: { 'x-ms-blob-type': 'BlockBlob' },
      });
      expect(write.status).toBe(403);
    });

    it('refuses a source that is shorter or longer than its declared size, writing nothing', async () => {
      const p = randomPrefix();
      for (const [bytes, size] of [
        ['abc', 10],
        ['abcdefghijkl', 10],
      ] as const) {
        const error = await rejection(
          store._put(name, `${p}x.bin`, Readable.from([Buffer.from(bytes)]), { size }),
        );
        expect(error).toBeInstanceOf(SourceError);
        await expect(store._head(name, `${p}x.bin`)).rejects.toBeInstanceOf(NotFound);
      }
      // Bytes are their own size: another one given is a caller's mistake (putObject says so).
      await expect(
        store._put(name, `${p}x.bin`, Buffer.from('abc'), { size: 10 }),
      ).rejects.toBeInstanceOf(RangeError);
    });

    it('deletes conditionally: a moved ETag is PreconditionFailed and keeps the blob', async () => {
      const key = `${randomPrefix()}gc.txt`;
      const first = await store._put(name, key, Buffer.from('one'));
      await store._put(name, key, Buffer.from('two'));
      await expect(store._deleteIf(name, key, { version: first.version })).rejects.toBeInstanceOf(
        PreconditionFailed,
      );
      const now = await store._head(name, key);
      await store._deleteIf(name, key, { version: now.version });
      await expect(store._head(name, key)).rejects.toBeInstanceOf(NotFound);
    });

    it('makes containers idempotently, and refuses --versioning where writes get no version ID', async () => {
      const c = uniqueContainerName('mb');
      try {
        await store.makeBucket(c);
        await store.makeBucket(c);
        const refused = await rejection(store.makeBucket(c, { versioning: true }));
        expect(refused).toBeInstanceOf(NotSupported);
        expect((refused as Error).message).toMatch(/enable-versioning/);
        const left: string[] = [];
        for await (const b of azuriteServiceClient().getContainerClient(c).listBlobsFlat())
          left.push(b.name);
        expect(left).toEqual([]);
      } finally {
        await azuriteServiceClient().getContainerClient(c).deleteIfExists();
      }
    });

    it('reports a missing container as NotFound for listings and blobs, a bad key as PermissionDenied', async () => {
      const c = uniqueContainerName('none');
      const listing = await rejection(
        (async () => {
          for await (const _ of store._pages(c, '')) {
            // nothing
          }
        })(),
      );
      expect(listing).toBeInstanceOf(NotFound);
      expect(String(listing)).toContain(`az://${c}/`);
      await expect(store._head(c, 'x')).rejects.toBeInstanceOf(NotFound);
      await expect(store._get(c, 'x')).rejects.toBeInstanceOf(NotFound);
      const wrong = new AzureStore({
        account: 'devstoreaccount1',
        accountKey: Buffer.from('not the key').toString('base64'),
        endpoint: azureTarget().url,
        env: {},
        cache: tempCache(),
      });
      await expect(wrong._head(name, 'x')).rejects.toBeInstanceOf(PermissionDenied);
      await expect(wrong._get(name, 'x')).rejects.toBeInstanceOf(PermissionDenied);
    });
  });
});

// ---- the versions server ---------------------------------------------------------------------

/** A pipeline policy that drops `versionid` from every request before it is signed. */
const ignoreVersionId: PipelinePolicy = {
  name: 'ignoreVersionId',
  async sendRequest(request, next) {
    const url = new URL(request.url);
    url.searchParams.delete('versionid');
    request.url = url.toString();
    return next(request);
  },
};

describe('azure driver on the versions server', () => {
  let server: AzureVersionsServer;
  let service: BlobServiceClient;
  const name = uniqueContainerName('vers');
  const options = (): AzureStoreOptions => ({ connectionString: server.connectionString, env: {} });
  beforeAll(async () => {
    server = await startAzureVersionsServer();
    const { BlobServiceClient } = await import('@azure/storage-blob');
    service = BlobServiceClient.fromConnectionString(server.connectionString, {
      retryOptions: { maxTries: 1 },
    });
    await service.getContainerClient(name).create();
  });
  afterAll(async () => {
    await server?.close();
  });

  // Uploads in parts and the stage are tested on Azurite: this server refuses
  // `include=uncommittedblobs` (501), which listing open uploads needs.
  for (const lean of [true, false]) {
    conformance({
      name: `azure on the versions server (lean reads ${lean ? 'on' : 'off'})`,
      store: (o) => new AzureStore({ ...options(), leanReads: lean, ...o }),
      bucket: name,
      flags: { versions: true, createMode: 'atomic', ranges: true, hostileKeys: true },
      sdk: blobSdk(() => service.getContainerClient(name)),
      foreignPut: async (c, key, body) => {
        await service.getContainerClient(c).getBlockBlobClient(key).upload(body, body.length);
      },
    });
  }

  describe('azure specifics on the versions server', () => {
    let store: AzureStore;
    beforeAll(() => {
      store = new AzureStore({ ...options(), cache: tempCache() });
    });

    it('takes 409 and 412 on a failed create as Exists', async () => {
      const key = `${randomPrefix()}c.txt`;
      await store._create(name, key, Buffer.from('1'));
      for (const status of [409, 412] as const) {
        server.settings.existsStatus = status;
        await expect(store._create(name, key, Buffer.from('2'))).rejects.toBeInstanceOf(Exists);
      }
      server.settings.existsStatus = 409;
      expect(await text((await store._get(name, key)).body)).toBe('1');
    });

    it('refuses a store that ignores versionid: the answer names another version', async () => {
      const { BlobServiceClient } = await import('@azure/storage-blob');
      const ignoring = BlobServiceClient.fromConnectionString(server.connectionString);
      // Every client made from this service shares its core pipeline: add the policy there.
      type Core = {
        pipeline: { _corePipeline: { addPolicy(p: PipelinePolicy, o: object): void } };
      };
      (ignoring as unknown as Core).pipeline._corePipeline.addPolicy(ignoreVersionId, {
        phase: 'Serialize',
      });
      const p = randomPrefix();
      const v1 = await store._put(name, `${p}f.txt`, Buffer.from('old'));
      await store._put(name, `${p}f.txt`, Buffer.from('new'));
      const fooled = new AzureStore({ client: ignoring, cache: tempCache() });
      for (const read of [
        () => fooled._getVersion(name, `${p}f.txt`, v1.versionId as string),
        () => fooled._headVersion(name, `${p}f.txt`, v1.versionId as string),
        () => fooled._copy(name, `${p}f.txt`, v1.versionId as string, `${p}g.txt`),
      ]) {
        const error = await rejection(read());
        expect(error).toBeInstanceOf(NotSupported);
        expect((error as Error).message).toContain(`asked for version ${v1.versionId}`);
      }
      await expect(store._head(name, `${p}g.txt`)).rejects.toBeInstanceOf(NotFound);
      // The honest store reads it.
      expect(
        await text((await store._getVersion(name, `${p}f.txt`, v1.versionId as string)).body),
      ).toBe('old');
    });

    for (const lean of [true, false]) {
      it(`a download cut mid-body is a StoreError, never a short body (${lean ? 'lean' : 'SDK'} reads)`, async () => {
        const reader = new AzureStore({ ...options(), leanReads: lean, cache: tempCache() });
        const key = `${randomPrefix()}big.bin`;
        const data = randomBytes(2 * 1024 * 1024);
        await store._put(name, key, data);
        server.faults.inject({
          kind: 'drop-mid-body',
          op: 'GetBlob',
          blob: key,
          afterBytes: 100_000,
          times: 10,
        });
        try {
          const got = await reader._get(name, key);
          const error = await rejection(text(got.body));
          expect(error).toBeInstanceOf(StoreError);
        } finally {
          server.faults.clear();
        }
        await reader.close();
      });
    }

    it('eight concurrent committers get gapless numbers; a pinned commit reads the committed bytes after changes; a branch copies a commit', {
      timeout: 60_000,
    }, async () => {
      const p = randomPrefix('main').slice(0, -1);
      await store._put(name, `${p}/a.txt`, Buffer.from('a1'));
      await store._put(name, `${p}/d/b.txt`, Buffer.from('b1'));
      const made = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          commitFolder(
            new AzureStore({ ...options(), cache: tempCache() }),
            `az://${name}/${p}/`,
            `c${i}`,
            { allowEmpty: true },
          ),
        ),
      );
      const log = await logFolder(store, `az://${name}/${p}/`);
      expect(log.map((e) => e.number)).toEqual([8, 7, 6, 5, 4, 3, 2, 1]);
      expect(new Set(log.map((e) => e.id))).toEqual(new Set(made.map((u) => u.at?.id)));
      const pinned = made[0] as NonNullable<(typeof made)[0]>;
      const commit = await loadCommit(store, name, pinned.at?.id as string);
      expect(commit.files.map((f) => [f.key.slice(p.length), f.size, f.etag])).toEqual([
        ['/a.txt', 2, undefined],
        ['/d/b.txt', 2, undefined],
      ]);
      await store._put(name, `${p}/a.txt`, Buffer.from('a2, changed'));
      await store._delete(name, `${p}/d/b.txt`);
      const reader = new AzureStore({ ...options(), cache: tempCache() });
      const fetched = await reader.fetch(pinned);
      expect(fetched).toMatchObject({ files: 2, downloaded: 2 });
      expect(
        await text(
          (await reader._getVersion(name, `${p}/a.txt`, commit.files[0]?.versionId as string)).body,
        ),
      ).toBe('a1');
      const branch = randomPrefix('br').slice(0, -1);
      await store.branch(`az://${name}/${branch}/`, pinned.at?.id as string);
      expect(await text((await store._get(name, `${branch}/a.txt`)).body)).toBe('a1');
      expect(await text((await store._get(name, `${branch}/d/b.txt`)).body)).toBe('b1');
    });
  });
});

// The managed stage on the server: the cases every cloud stage shares.
stageServerSuite(azureStageHarness());
