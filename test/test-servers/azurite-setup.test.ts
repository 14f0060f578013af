/**
 * Azurite as the test setup provides it, through `@azure/storage-blob` 12.32: what the Azure
 * driver can rely on, and — pinned as tests, so a change in Azurite shows up here first — where
 * Azurite differs from Azure and the driver must not trust it (no versions at all; any
 * `versionid` reads the current blob; UTF-16 listing order; loose ranges).
 */
import { createHash } from 'node:crypto';
import {
  BlobSASPermissions,
  BlobServiceClient,
  type ContainerClient,
  StorageSharedKeyCredential,
} from '@azure/storage-blob';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { azuriteAnswers, freePort } from '../../servers/azurite.js';
import { azureTarget, describeAzurite, dropContainer, newContainer } from '../setup/azure.js';
import { bodyText, errorCode, failure } from '../support/azure-sdk.js';
import { startForeground } from '../support/foreground.js';

const blockId = (n: number) =>
  Buffer.from(`block-${String(n).padStart(6, '0')}`).toString('base64');

describeAzurite('Azurite from the test setup', () => {
  let container: ContainerClient;

  beforeAll(async () => {
    container = await newContainer('azsetup');
  });
  afterAll(async () => {
    if (container) await dropContainer(container);
  });

  it('exports the blob endpoint and a connection string for the development account', async () => {
    const t = azureTarget();
    expect(t.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/devstoreaccount1$/);
    expect(t.connectionString).toContain(`BlobEndpoint=${t.url};`);
    expect(t.connectionString).toContain('AccountName=devstoreaccount1;');
    const info = await BlobServiceClient.fromConnectionString(t.connectionString).getAccountInfo();
    expect(info._response.status).toBe(200);
  });

  it('uploads and downloads through a client made from the connection string', async () => {
    const blob = container.getBlockBlobClient('hello.txt');
    const put = await blob.upload('hello azurite', 13);
    expect(put.etag).toMatch(/^"0x[0-9A-F]+"$/);
    const got = await blob.download();
    expect(got._response.status).toBe(200);
    expect(got.etag).toBe(put.etag);
    expect(await bodyText(got.readableStreamBody)).toBe('hello azurite');
    const props = await blob.getProperties();
    expect(props.contentLength).toBe(13);
    expect(Buffer.from(props.contentMD5 ?? []).toString('hex')).toBe(
      createHash('md5').update('hello azurite').digest('hex'),
    );
  });

  it('answers a ranged download with 206 and the exact Content-Range, 416 past the end', async () => {
    const blob = container.getBlockBlobClient('range.bin');
    await blob.upload('0123456789', 10);
    const part = await blob.download(2, 5);
    expect(part._response.status).toBe(206);
    expect(part.contentRange).toBe('bytes 2-6/10');
    expect(part.contentLength).toBe(5);
    expect(await bodyText(part.readableStreamBody)).toBe('23456');
    const tail = await blob.download(8, 100);
    expect(tail.contentRange).toBe('bytes 8-9/10');
    expect(await bodyText(tail.readableStreamBody)).toBe('89');
    const past = await failure(blob.download(20, 5));
    expect(past.statusCode).toBe(416);
    expect(errorCode(past)).toBe('InvalidRange');
  });

  it('lists flat in pages of maxPageSize', async () => {
    const c = await newContainer('azflat');
    try {
      const names = ['a', 'b', 'c', 'd', 'e'];
      for (const n of names) await c.getBlockBlobClient(n).upload(n, 1);
      const pages: string[][] = [];
      for await (const page of c.listBlobsFlat().byPage({ maxPageSize: 2 })) {
        pages.push(page.segment.blobItems.map((b) => b.name));
      }
      expect(pages).toEqual([['a', 'b'], ['c', 'd'], ['e']]);
    } finally {
      await dropContainer(c);
    }
  });

  it('lists by hierarchy: prefixes and blobs, paged across both', async () => {
    const c = await newContainer('azhier');
    try {
      for (const n of ['a/1', 'a/2', 'b', 'c/x/y', 'c/z'])
        await c.getBlockBlobClient(n).upload(n, n.length);
      const items: string[] = [];
      for await (const page of c.listBlobsByHierarchy('/').byPage({ maxPageSize: 1 })) {
        for (const p of page.segment.blobPrefixes ?? []) items.push(`prefix ${p.name}`);
        for (const b of page.segment.blobItems) items.push(`blob ${b.name}`);
      }
      expect(items).toEqual(['prefix a/', 'blob b', 'prefix c/']);
      const inC: string[] = [];
      for await (const item of c.listBlobsByHierarchy('/', { prefix: 'c/' })) {
        inC.push(item.kind === 'prefix' ? `prefix ${item.name}` : `blob ${item.name}`);
      }
      expect(inC).toEqual(['prefix c/x/', 'blob c/z']);
    } finally {
      await dropContainer(c);
    }
  });

  it('stages blocks, lists them uncommitted, commits them and lists them committed', async () => {
    const blob = container.getBlockBlobClient('staged.bin');
    await blob.stageBlock(blockId(1), 'first-', 6);
    await blob.stageBlock(blockId(2), 'second', 6);
    const staged = await blob.getBlockList('all');
    expect(staged.uncommittedBlocks?.map((b) => [b.name, b.size])).toEqual([
      [blockId(1), 6],
      [blockId(2), 6],
    ]);
    expect(staged.committedBlocks ?? []).toEqual([]);
    await blob.commitBlockList([blockId(1), blockId(2)]);
    const committed = await blob.getBlockList('all');
    expect(committed.committedBlocks?.map((b) => b.name)).toEqual([blockId(1), blockId(2)]);
    expect(committed.uncommittedBlocks ?? []).toEqual([]);
    expect(committed.blobContentLength).toBe(12);
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe('first-second');
    const unknown = await failure(blob.commitBlockList([blockId(3)]));
    expect(unknown.statusCode).toBe(400);
    expect(errorCode(unknown)).toBe('InvalidBlockList');
  });

  it('refuses If-None-Match: * on an existing blob with 409 BlobAlreadyExists', async () => {
    const blob = container.getBlockBlobClient('exists.txt');
    await blob.upload('first', 5, { conditions: { ifNoneMatch: '*' } });
    const onPut = await failure(blob.upload('again', 5, { conditions: { ifNoneMatch: '*' } }));
    expect([onPut.statusCode, errorCode(onPut)]).toEqual([409, 'BlobAlreadyExists']);
    await blob.stageBlock(blockId(1), 'block', 5);
    const onCommit = await failure(
      blob.commitBlockList([blockId(1)], { conditions: { ifNoneMatch: '*' } }),
    );
    expect([onCommit.statusCode, errorCode(onCommit)]).toEqual([409, 'BlobAlreadyExists']);
    const source = container.getBlobClient('hello.txt');
    await container.getBlockBlobClient('hello.txt').upload('hello azurite', 13);
    const onCopy = await failure(
      blob
        .beginCopyFromURL(source.url, { conditions: { ifNoneMatch: '*' } })
        .then((p) => p.pollUntilDone()),
    );
    expect([onCopy.statusCode, errorCode(onCopy)]).toEqual([409, 'BlobAlreadyExists']);
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe('first');
  });

  it('runs standalone: npm run server:azurite -- --port PORT prints its ready line and serves', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/devstoreaccount1`;
    const run = startForeground([
      'run',
      '--silent',
      'server:azurite',
      '--',
      '--port',
      String(port),
    ]);
    try {
      await run.waitFor(`azurite ready on ${url}\n`, 40_000);
      const service = new BlobServiceClient(
        url,
        new StorageSharedKeyCredential(azureTarget().accountName, azureTarget().accountKey),
      );
      const c = service.getContainerClient('standalone');
      await c.create();
      await c.getBlockBlobClient('x').upload('x', 1);
      expect((await c.getBlobClient('x').getProperties()).contentLength).toBe(1);
    } finally {
      await run.interrupt();
    }
    expect(run.output()).toContain('Azurite exited (0)');
    expect(await azuriteAnswers(url, 1000)).toBe(false);
  });
});

describeAzurite('Azurite gaps the Azure driver must not trust (pinned)', () => {
  let container: ContainerClient;

  beforeAll(async () => {
    container = await newContainer('azgaps');
  });
  afterAll(async () => {
    if (container) await dropContainer(container);
  });

  it('lists in UTF-16 code unit order, not the UTF-8 byte order of Azure', async () => {
    // U+FF61 is EF BD A1 in UTF-8 and U+1F600 is F0 9F 98 80: in bytes U+FF61 comes first; in
    // UTF-16 U+1F600 is the surrogate pair D83D DE00, which sorts before FF61.
    const names = ['\u{FF61}', '\u{1F600}', 'z'];
    for (const n of names)
      await container.getBlockBlobClient(`order/${n}`).upload(n, Buffer.byteLength(n));
    const listed: string[] = [];
    for await (const b of container.listBlobsFlat({ prefix: 'order/' }))
      listed.push(b.name.slice(6));
    const utf16 = [...names].sort();
    const utf8 = [...names].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    expect(utf16).not.toEqual(utf8);
    expect(listed).toEqual(utf16);
    expect(listed).toEqual(['z', '\u{1F600}', '\u{FF61}']);
  });

  it('returns no version id on any write and lists no versions', async () => {
    const blob = container.getBlockBlobClient('nover.txt');
    const put = await blob.upload('one', 3);
    expect(put.versionId).toBeUndefined();
    expect(put._response.headers.get('x-ms-version-id')).toBeUndefined();
    await blob.stageBlock(blockId(1), 'two', 3);
    const commit = await blob.commitBlockList([blockId(1)]);
    expect(commit.versionId).toBeUndefined();
    const source = await blob.generateSasUrl({
      permissions: BlobSASPermissions.parse('r'),
      expiresOn: new Date(Date.now() + 3600_000),
    });
    const copy = await container.getBlobClient('nover-copy.txt').syncCopyFromURL(source);
    expect(copy.versionId).toBeUndefined();
    const items = [];
    for await (const b of container.listBlobsFlat({ prefix: 'nover', includeVersions: true }))
      items.push(b);
    expect(items.map((b) => [b.name, b.versionId, b.isCurrentVersion])).toEqual([
      ['nover-copy.txt', undefined, undefined],
      ['nover.txt', undefined, undefined],
    ]);
  });

  it('serves, and deletes, the current blob for any versionid', async () => {
    const blob = container.getBlockBlobClient('anyversion.txt');
    await blob.upload('old', 3);
    await blob.upload('new', 3);
    const bogus = '2001-01-01T00:00:00.0000000Z';
    const read = await blob.withVersion(bogus).download();
    expect(await bodyText(read.readableStreamBody)).toBe('new');
    expect((await blob.withVersion('not-a-version-id').getProperties()).contentLength).toBe(3);
    await blob.withVersion(bogus).delete();
    expect(await blob.exists()).toBe(false);
  });

  it('refuses a bad key with 403 AuthorizationFailure (Azure says AuthenticationFailed)', async () => {
    const bad = new BlobServiceClient(
      azureTarget().url,
      new StorageSharedKeyCredential(
        azureTarget().accountName,
        Buffer.alloc(64, 7).toString('base64'),
      ),
      { retryOptions: { maxTries: 1 } },
    );
    await container.getBlockBlobClient('secret.txt').upload('s', 1);
    const e = await failure(
      bad.getContainerClient(container.containerName).getBlobClient('secret.txt').download(),
    );
    expect([e.statusCode, errorCode(e)]).toEqual([403, 'AuthorizationFailure']);
  });

  it('answers 206 with a malformed Content-Range for ranges Azure refuses with 416', async () => {
    // Azure: 416 InvalidRange for any range of an empty blob and for a start at the size.
    const empty = container.getBlockBlobClient('empty.bin');
    await empty.upload('', 0);
    const r0 = await empty.download(0, 1);
    expect([r0._response.status, r0.contentRange]).toEqual([206, 'bytes 0--1/0']);
    const ten = container.getBlockBlobClient('ten.bin');
    await ten.upload('0123456789', 10);
    const atEnd = await ten.download(10);
    expect([atEnd._response.status, atEnd.contentRange]).toEqual([206, 'bytes 10-9/10']);
    expect(await bodyText(atEnd.readableStreamBody)).toBe('');
  });
});
