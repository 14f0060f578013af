/**
 * The Azure versions server (servers/azure-versions/), reached only through
 * `@azure/storage-blob` 12.32 over HTTP, with Shared Key credentials and with a connection
 * string: versions minted and listed, reads and copies of one version, deletes that leave
 * versions, conditional creates (409 and 412 modes, and a race of eight), opaque paging in UTF-8
 * byte order, ranges, staged blocks, authorization, and the fault knobs and request log that the
 * Azure driver's tests will lean on.
 */
import { createHash } from 'node:crypto';
import {
  AccountSASPermissions,
  AccountSASResourceTypes,
  AccountSASServices,
  BlobSASPermissions,
  BlobServiceClient,
  type BlockBlobClient,
  type ContainerClient,
  ContainerSASPermissions,
  generateAccountSASQueryParameters,
  generateBlobSASQueryParameters,
  type StoragePipelineOptions,
  StorageSharedKeyCredential,
} from '@azure/storage-blob';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AzureVersionsServer,
  startAzureVersionsServer,
} from '../../servers/azure-versions/index.js';
import { freePort } from '../../servers/azurite.js';
import { dropContainer, newContainer } from '../setup/azure.js';
import { bodyBytes, bodyText, failure, statusAndCode } from '../support/azure-sdk.js';
import { startForeground } from '../support/foreground.js';

let server: AzureVersionsServer;
let service: BlobServiceClient;
let credential: StorageSharedKeyCredential;

function client(options: StoragePipelineOptions = {}): BlobServiceClient {
  return new BlobServiceClient(server.url, credential, {
    retryOptions: { maxTries: 1 },
    ...options,
  });
}

const md5 = (data: string | Buffer) => createHash('md5').update(data).digest();
const blockId = (n: number) =>
  Buffer.from(`block-${String(n).padStart(6, '0')}`).toString('base64');
const hour = () => new Date(Date.now() + 3600_000);

/** Every version of `name` as the listing shows it: [versionId, current?, bytes]. */
async function versionsOf(c: ContainerClient, name: string) {
  const out: Array<{
    versionId: string | undefined;
    current: boolean;
    length: number | undefined;
    etag: string | undefined;
    md5: string | undefined;
  }> = [];
  for await (const b of c.listBlobsFlat({ prefix: name, includeVersions: true })) {
    if (b.name !== name) continue;
    out.push({
      versionId: b.versionId,
      current: b.isCurrentVersion === true,
      length: b.properties.contentLength,
      etag: b.properties.etag,
      md5: b.properties.contentMD5
        ? Buffer.from(b.properties.contentMD5).toString('hex')
        : undefined,
    });
  }
  return out;
}

beforeAll(async () => {
  server = await startAzureVersionsServer();
  credential = new StorageSharedKeyCredential(server.accountName, server.accountKey);
  service = client();
});
afterAll(async () => {
  await server?.close();
});
afterEach(() => {
  server.faults.clear();
  server.settings.existsStatus = 409;
});

describe('Azure versions server: versions', () => {
  let c: ContainerClient;
  beforeAll(async () => {
    c = await newContainer('vers', service);
  });
  afterAll(async () => {
    await dropContainer(c);
  });

  it('mints a new, later version on every write and lists them oldest first', async () => {
    const blob = c.getBlockBlobClient('doc.txt');
    const v1 = await blob.upload('one', 3);
    const v2 = await blob.upload('second', 6);
    await blob.stageBlock(blockId(1), 'third', 5);
    const v3 = await blob.commitBlockList([blockId(1)]);
    const v4 = await blob.setMetadata({ step: 'four' });
    const ids = [v1.versionId, v2.versionId, v3.versionId, v4.versionId];
    for (const id of ids) expect(id).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$/);
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(4);
    expect(new Set([v1.etag, v2.etag, v3.etag, v4.etag]).size).toBe(4);

    const listed = await versionsOf(c, 'doc.txt');
    expect(listed.map((v) => v.versionId)).toEqual(ids);
    expect(listed.map((v) => v.current)).toEqual([false, false, false, true]);
    expect(listed.map((v) => v.length)).toEqual([3, 6, 5, 5]);
    // Listings carry the ETag unquoted, headers quoted; Put Blob stores the MD5 it computed.
    expect(`"${listed[0]?.etag}"`).toBe(v1.etag);
    expect(listed[0]?.md5).toBe(md5('one').toString('hex'));
    const head = await blob.getProperties();
    expect([head.versionId, head.isCurrentVersion, head.metadata]).toEqual([
      v4.versionId,
      true,
      { step: 'four' },
    ]);
  });

  it('heads and gets one version: its bytes, its x-ms-version-id, not current', async () => {
    const blob = c.getBlockBlobClient('pinned.txt');
    const v1 = await blob.upload('version one', 11, { metadata: { n: '1' } });
    const v2 = await blob.upload('version two!', 12);
    const old = blob.withVersion(v1.versionId as string);
    const props = await old.getProperties();
    expect([props.versionId, props.isCurrentVersion, props.contentLength, props.metadata]).toEqual([
      v1.versionId,
      undefined,
      11,
      { n: '1' },
    ]);
    expect(props.etag).toBe(v1.etag);
    const got = await old.download();
    expect(got.versionId).toBe(v1.versionId);
    expect(await bodyText(got.readableStreamBody)).toBe('version one');
    const part = await old.download(8, 3);
    expect([part._response.status, part.contentRange]).toEqual([206, 'bytes 8-10/11']);
    expect(await bodyText(part.readableStreamBody)).toBe('one');
    const cur = await blob.getProperties();
    expect([cur.versionId, cur.isCurrentVersion]).toEqual([v2.versionId, true]);
    const byId = await blob.withVersion(v2.versionId as string).getProperties();
    expect(byId.isCurrentVersion).toBe(true);
  });

  it('refuses an unknown or malformed version id instead of serving the current blob', async () => {
    const blob = c.getBlockBlobClient('strict.txt');
    await blob.upload('current', 7);
    const unknown = await failure(blob.withVersion('2001-01-01T00:00:00.0000000Z').download());
    expect(statusAndCode(unknown)).toEqual([404, 'BlobNotFound']);
    const headUnknown = await failure(
      blob.withVersion('2001-01-01T00:00:00.0000000Z').getProperties(),
    );
    expect(statusAndCode(headUnknown)).toEqual([404, 'BlobNotFound']);
    const malformed = await failure(blob.withVersion('not-a-version').getProperties());
    expect(statusAndCode(malformed)).toEqual([400, 'InvalidQueryParameterValue']);
    const copy = await failure(
      c
        .getBlobClient('strict-copy.txt')
        .beginCopyFromURL(blob.withVersion('2001-01-01T00:00:00.0000000Z').url),
    );
    expect(statusAndCode(copy)).toEqual([404, 'CannotVerifyCopySource']);
  });

  it('deletes the base blob but keeps its versions, none current', async () => {
    const blob = c.getBlockBlobClient('gone.txt');
    const v1 = await blob.upload('a', 1);
    const v2 = await blob.upload('bb', 2);
    await blob.delete();
    expect(statusAndCode(await failure(blob.getProperties()))).toEqual([404, 'BlobNotFound']);
    expect(statusAndCode(await failure(blob.download()))).toEqual([404, 'BlobNotFound']);
    expect(await blob.exists()).toBe(false);
    const current: string[] = [];
    for await (const b of c.listBlobsFlat({ prefix: 'gone' })) current.push(b.name);
    expect(current).toEqual([]);
    expect(await versionsOf(c, 'gone.txt')).toMatchObject([
      { versionId: v1.versionId, current: false },
      { versionId: v2.versionId, current: false },
    ]);
    expect(
      await bodyText(
        (await blob.withVersion(v1.versionId as string).download()).readableStreamBody,
      ),
    ).toBe('a');
    const withDeleted = [];
    for await (const b of c.listBlobsFlat({ prefix: 'gone', includeDeletedWithVersions: true }))
      withDeleted.push(b);
    expect(withDeleted.map((b) => [b.name, b.hasVersionsOnly])).toEqual([['gone.txt', true]]);
    expect(statusAndCode(await failure(blob.delete()))).toEqual([404, 'BlobNotFound']);
    // A new write makes a current version again, after the old ones.
    const v3 = await blob.upload('ccc', 3);
    expect((await versionsOf(c, 'gone.txt')).map((v) => [v.versionId, v.current])).toEqual([
      [v1.versionId, false],
      [v2.versionId, false],
      [v3.versionId, true],
    ]);
  });

  it('deletes one version by versionid and nothing else', async () => {
    const blob = c.getBlockBlobClient('prune.txt');
    const v1 = await blob.upload('1', 1);
    const v2 = await blob.upload('2', 1);
    const v3 = await blob.upload('3', 1);
    await blob.withVersion(v2.versionId as string).delete();
    expect((await versionsOf(c, 'prune.txt')).map((v) => [v.versionId, v.current])).toEqual([
      [v1.versionId, false],
      [v3.versionId, true],
    ]);
    const again = await failure(blob.withVersion(v2.versionId as string).delete());
    expect(statusAndCode(again)).toEqual([404, 'BlobNotFound']);
  });

  it('copies one version into a new current version (beginCopyFromURL), also onto itself', async () => {
    const blob = c.getBlockBlobClient('source.txt');
    const v1 = await blob.upload('the first text', 14, { metadata: { from: 'v1' } });
    await blob.upload('the second text', 15);
    const dest = c.getBlobClient('dest.txt');
    const poller = await dest.beginCopyFromURL(blob.withVersion(v1.versionId as string).url);
    const done = await poller.pollUntilDone();
    expect(done.copyStatus).toBe('success');
    expect(done.versionId).toMatch(/Z$/);
    const props = await dest.getProperties();
    expect([props.versionId, props.isCurrentVersion, props.copyStatus, props.metadata]).toEqual([
      done.versionId,
      true,
      'success',
      { from: 'v1' },
    ]);
    expect(props.copySource).toContain('versionid=');
    expect(await bodyText((await dest.download()).readableStreamBody)).toBe('the first text');
    // Restoring an old version: copy it onto its own blob; the history grows by one.
    const restore = await (
      await blob.beginCopyFromURL(blob.withVersion(v1.versionId as string).url)
    ).pollUntilDone();
    const listed = await versionsOf(c, 'source.txt');
    expect(listed.map((v) => [v.versionId, v.current, v.length])).toEqual([
      [v1.versionId, false, 14],
      [expect.any(String), false, 15],
      [restore.versionId, true, 14],
    ]);
  });

  it('copies with syncCopyFromURL only from a source with a SAS, as Azure requires', async () => {
    const blob = c.getBlockBlobClient('sync-src.txt');
    const v1 = await blob.upload('sync one', 8);
    await blob.upload('sync two', 8);
    const dest = c.getBlobClient('sync-dest.txt');
    const bare = await failure(dest.syncCopyFromURL(blob.withVersion(v1.versionId as string).url));
    expect(statusAndCode(bare)).toEqual([403, 'CannotVerifyCopySource']);
    const sasUrl = await blob
      .withVersion(v1.versionId as string)
      .generateSasUrl({ permissions: BlobSASPermissions.parse('r'), expiresOn: hour() });
    expect(new URL(sasUrl).searchParams.get('sr')).toBe('bv');
    const copied = await dest.syncCopyFromURL(sasUrl);
    expect(copied.copyStatus).toBe('success');
    expect(copied.versionId).toBeDefined();
    expect(await bodyText((await dest.download()).readableStreamBody)).toBe('sync one');
    // The same SAS does not open another version: the version ID is part of what is signed.
    const otherVersion = new URL(sasUrl);
    otherVersion.searchParams.delete('versionid');
    const refused = await failure(dest.syncCopyFromURL(otherVersion.toString()));
    expect(statusAndCode(refused)).toEqual([403, 'CannotVerifyCopySource']);
  });

  it('changes the ETag but mints no version on Set Blob Properties', async () => {
    const blob = c.getBlockBlobClient('props.txt');
    const v1 = await blob.upload('p', 1);
    const set = await blob.setHTTPHeaders({
      blobContentType: 'text/plain',
      blobCacheControl: 'no-cache',
    });
    expect(set.etag).not.toBe(v1.etag);
    const props = await blob.getProperties();
    expect([props.versionId, props.contentType, props.cacheControl, props.etag]).toEqual([
      v1.versionId,
      'text/plain',
      'no-cache',
      set.etag,
    ]);
    expect((await versionsOf(c, 'props.txt')).length).toBe(1);
  });
});

describe('Azure versions server: conditional writes', () => {
  let c: ContainerClient;
  beforeAll(async () => {
    c = await newContainer('cond', service);
  });
  afterAll(async () => {
    await dropContainer(c);
  });

  async function refusedCreates(name: string) {
    const blob = c.getBlockBlobClient(name);
    await blob.upload('first', 5, { conditions: { ifNoneMatch: '*' } });
    const onPut = await failure(blob.upload('again', 5, { conditions: { ifNoneMatch: '*' } }));
    await blob.stageBlock(blockId(1), 'block', 5);
    const onCommit = await failure(
      blob.commitBlockList([blockId(1)], { conditions: { ifNoneMatch: '*' } }),
    );
    const onCopy = await failure(
      c
        .getBlobClient(name)
        .beginCopyFromURL(c.getBlobClient(`${name}-src`).url, { conditions: { ifNoneMatch: '*' } }),
    );
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe('first');
    expect((await versionsOf(c, name)).length).toBe(1);
    return [statusAndCode(onPut), statusAndCode(onCommit), statusAndCode(onCopy)];
  }

  it('refuses If-None-Match: * on an existing blob with 409 BlobAlreadyExists (put, commit, copy)', async () => {
    await c.getBlockBlobClient('exists409-src').upload('src', 3);
    expect(await refusedCreates('exists409')).toEqual([
      [409, 'BlobAlreadyExists'],
      [409, 'BlobAlreadyExists'],
      [409, 'BlobAlreadyExists'],
    ]);
  });

  it('answers 412 ConditionNotMet instead when set to, as some Azure operations do', async () => {
    server.settings.existsStatus = 412;
    await c.getBlockBlobClient('exists412-src').upload('src', 3);
    expect(await refusedCreates('exists412')).toEqual([
      [412, 'ConditionNotMet'],
      [412, 'ConditionNotMet'],
      [412, 'ConditionNotMet'],
    ]);
  });

  it('lets exactly one of eight concurrent creates win', async () => {
    const blob = c.getBlockBlobClient('race.txt');
    const bodies = Array.from({ length: 8 }, (_, i) => `writer ${i}`);
    const results = await Promise.allSettled(
      bodies.map((b) => blob.upload(b, b.length, { conditions: { ifNoneMatch: '*' } })),
    );
    const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    expect(won).toHaveLength(1);
    for (const r of results) {
      if (r.status === 'rejected')
        expect(statusAndCode(r.reason)).toEqual([409, 'BlobAlreadyExists']);
    }
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe(
      bodies[won[0] as number],
    );
    expect((await versionsOf(c, 'race.txt')).length).toBe(1);
  });

  it('checks If-Match on writes and deletes (412 ConditionNotMet when the ETag differs)', async () => {
    const blob = c.getBlockBlobClient('match.txt');
    const v1 = await blob.upload('one', 3);
    const v2 = await blob.upload('two', 3, { conditions: { ifMatch: v1.etag } });
    const stale = await failure(blob.upload('three', 5, { conditions: { ifMatch: v1.etag } }));
    expect(statusAndCode(stale)).toEqual([412, 'ConditionNotMet']);
    const staleDelete = await failure(blob.delete({ conditions: { ifMatch: v1.etag } }));
    expect(statusAndCode(staleDelete)).toEqual([412, 'ConditionNotMet']);
    const absent = await failure(
      c.getBlockBlobClient('absent.txt').upload('x', 1, { conditions: { ifMatch: v1.etag } }),
    );
    expect(statusAndCode(absent)).toEqual([412, 'ConditionNotMet']);
    await blob.delete({ conditions: { ifMatch: v2.etag } });
    expect(await blob.exists()).toBe(false);
  });
});

describe('Azure versions server: listing', () => {
  let c: ContainerClient;
  beforeAll(async () => {
    c = await newContainer('list', service);
  });
  afterAll(async () => {
    await dropContainer(c);
  });

  it('lists in UTF-8 byte order with opaque markers, page by page', async () => {
    const names = ['Z', 'a', 'a/b', 'é', '\u{FF61}', '\u{1F600}', 'ab', 'a-b', '~'];
    for (const n of names) await c.getBlockBlobClient(`bytes/${n}`).upload(n, Buffer.byteLength(n));
    const pages: string[][] = [];
    const markers: string[] = [];
    for await (const page of c.listBlobsFlat({ prefix: 'bytes/' }).byPage({ maxPageSize: 2 })) {
      pages.push(page.segment.blobItems.map((b) => b.name.slice('bytes/'.length)));
      if (page.continuationToken) markers.push(page.continuationToken);
    }
    const byteOrder = [...names].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
    expect(pages.flat()).toEqual(byteOrder);
    expect(byteOrder.indexOf('\u{FF61}')).toBeLessThan(byteOrder.indexOf('\u{1F600}'));
    expect(pages.map((p) => p.length)).toEqual([2, 2, 2, 2, 1]);
    for (const m of markers) for (const n of names) expect(m).not.toContain(`bytes/${n}`);
    // A marker the client made up (a plain name, Azurite's kind) is refused.
    const made = await failure(
      c.listBlobsFlat({ prefix: 'bytes/' }).byPage({ continuationToken: 'bytes/a' }).next(),
    );
    expect(statusAndCode(made)).toEqual([400, 'InvalidQueryParameterValue']);
  });

  it('pages through the versions of one blob, one per page, oldest first', async () => {
    const blob = c.getBlockBlobClient('paged/one');
    const ids: string[] = [];
    for (const text of ['a', 'bb', 'ccc'])
      ids.push((await blob.upload(text, text.length)).versionId as string);
    await c.getBlockBlobClient('paged/two').upload('x', 1);
    const seen: Array<[string, string | undefined, boolean]> = [];
    for await (const page of c
      .listBlobsFlat({ prefix: 'paged/', includeVersions: true })
      .byPage({ maxPageSize: 1 })) {
      expect(page.segment.blobItems).toHaveLength(1);
      for (const b of page.segment.blobItems)
        seen.push([b.name, b.versionId, b.isCurrentVersion === true]);
    }
    expect(seen.slice(0, 3)).toEqual([
      ['paged/one', ids[0], false],
      ['paged/one', ids[1], false],
      ['paged/one', ids[2], true],
    ]);
    expect(seen.slice(3).map(([n, , cur]) => [n, cur])).toEqual([['paged/two', true]]);
  });

  it('lists by hierarchy with prefixes, paging across prefixes and blobs', async () => {
    for (const n of ['h/a/1', 'h/a/2', 'h/b', 'h/c/x/y', 'h/d'])
      await c.getBlockBlobClient(n).upload(n, n.length);
    await c.getBlockBlobClient('h/e/only-deleted').upload('x', 1);
    await c.getBlockBlobClient('h/e/only-deleted').delete();
    const items: string[] = [];
    for await (const page of c
      .listBlobsByHierarchy('/', { prefix: 'h/' })
      .byPage({ maxPageSize: 2 })) {
      expect(
        (page.segment.blobPrefixes ?? []).length + page.segment.blobItems.length,
      ).toBeLessThanOrEqual(2);
      for (const p of page.segment.blobPrefixes ?? []) items.push(`prefix ${p.name}`);
      for (const b of page.segment.blobItems) items.push(`blob ${b.name}`);
    }
    // h/e/ holds only a deleted blob: not listed without versions.
    expect(items).toEqual(['prefix h/a/', 'blob h/b', 'prefix h/c/', 'blob h/d']);
    const withVersions: string[] = [];
    for await (const item of c.listBlobsByHierarchy('/', { prefix: 'h/', includeVersions: true })) {
      if (item.kind === 'prefix') withVersions.push(item.name);
    }
    expect(withVersions).toEqual(['h/a/', 'h/c/', 'h/e/']);
  });

  it('lists metadata on request, and names XML cannot carry round-trip encoded', async () => {
    const names = ['x/a&b<c>"\'', 'x/tab\there', 'x/line\nbreak', 'x/\u0001ctl'];
    for (const n of names)
      await c.getBlockBlobClient(n).upload('m', 1, { metadata: { Key: n.length.toString() } });
    const listed: Array<[string, Record<string, string> | undefined]> = [];
    for await (const b of c.listBlobsFlat({ prefix: 'x/', includeMetadata: true }))
      listed.push([b.name, b.metadata]);
    const sorted = [...names].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
    expect(listed).toEqual(sorted.map((n) => [n, { Key: n.length.toString() }]));
  });
});

describe('Azure versions server: reads, blocks, integrity', () => {
  let c: ContainerClient;
  let ten: BlockBlobClient;
  beforeAll(async () => {
    c = await newContainer('reads', service);
    ten = c.getBlockBlobClient('ten.bin');
    await ten.upload('0123456789', 10);
  });
  afterAll(async () => {
    await dropContainer(c);
  });

  it('answers ranges with 206 and the exact Content-Range, cut at the end', async () => {
    const part = await ten.download(2, 3);
    expect([part._response.status, part.contentRange, part.contentLength]).toEqual([
      206,
      'bytes 2-4/10',
      3,
    ]);
    expect(await bodyText(part.readableStreamBody)).toBe('234');
    const tail = await ten.download(8, 100);
    expect([tail.contentRange, await bodyText(tail.readableStreamBody)]).toEqual([
      'bytes 8-9/10',
      '89',
    ]);
    const open = await ten.download(7);
    expect([open.contentRange, await bodyText(open.readableStreamBody)]).toEqual([
      'bytes 7-9/10',
      '789',
    ]);
    const whole = await ten.download();
    expect([whole._response.status, whole.contentRange]).toEqual([200, undefined]);
  });

  it('refuses ranges at or past the end, and any range of an empty blob, with 416 InvalidRange', async () => {
    expect(statusAndCode(await failure(ten.download(10)))).toEqual([416, 'InvalidRange']);
    expect(statusAndCode(await failure(ten.download(50, 5)))).toEqual([416, 'InvalidRange']);
    const empty = c.getBlockBlobClient('empty.bin');
    await empty.upload('', 0);
    expect(statusAndCode(await failure(empty.download(0, 1)))).toEqual([416, 'InvalidRange']);
    expect((await empty.download()).contentLength).toBe(0);
  });

  it('stages blocks, shows them uncommitted, commits them, shows them committed', async () => {
    const blob = c.getBlockBlobClient('blocks.bin');
    await blob.stageBlock(blockId(1), 'aaaa', 4);
    await blob.stageBlock(blockId(2), 'bb', 2);
    const staged = await blob.getBlockList('all');
    expect(staged.uncommittedBlocks?.map((b) => [b.name, b.size])).toEqual([
      [blockId(1), 4],
      [blockId(2), 2],
    ]);
    expect(staged.committedBlocks).toEqual([]);
    expect(statusAndCode(await failure(blob.getProperties()))).toEqual([404, 'BlobNotFound']);
    const unknown = await failure(blob.commitBlockList([blockId(1), blockId(3)]));
    expect(statusAndCode(unknown)).toEqual([400, 'InvalidBlockList']);
    const wrongLength = await failure(blob.stageBlock(Buffer.from('x').toString('base64'), 'x', 1));
    expect(statusAndCode(wrongLength)).toEqual([400, 'InvalidBlobOrBlock']);
    const commit = await blob.commitBlockList([blockId(2), blockId(1)]);
    expect(commit.versionId).toBeDefined();
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe('bbaaaa');
    const after = await blob.getBlockList('all');
    expect(after.committedBlocks?.map((b) => [b.name, b.size])).toEqual([
      [blockId(2), 2],
      [blockId(1), 4],
    ]);
    expect(after.uncommittedBlocks).toEqual([]);
    expect(after.blobContentLength).toBe(6);
    // A later list may reuse committed blocks next to newly staged ones.
    await blob.stageBlock(blockId(3), 'cc', 2);
    await blob.commitBlockList([blockId(1), blockId(3)]);
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe('aaaacc');
  });

  it('commits a large upload as staged blocks through uploadData', async () => {
    const data = Buffer.alloc(300_000, 7);
    data.write('start', 0);
    const blob = c.getBlockBlobClient('big.bin');
    const res = await blob.uploadData(data, {
      maxSingleShotSize: 64 * 1024,
      blockSize: 64 * 1024,
      concurrency: 3,
    });
    expect(res.versionId).toBeDefined();
    expect((await blob.getBlockList('committed')).committedBlocks).toHaveLength(5);
    expect((await bodyBytes((await blob.download()).readableStreamBody)).equals(data)).toBe(true);
  });

  it('stores and returns Content-MD5, and refuses a body that does not match it', async () => {
    const blob = c.getBlockBlobClient('md5.txt');
    await blob.upload('checked', 7, { blobHTTPHeaders: { blobContentMD5: md5('checked') } });
    expect(Buffer.from((await blob.getProperties()).contentMD5 ?? []).equals(md5('checked'))).toBe(
      true,
    );
    const full = await blob.download();
    expect(Buffer.from(full.contentMD5 ?? []).equals(md5('checked'))).toBe(true);
    const bad = await failure(
      blob.upload('tampered', 8, { blobHTTPHeaders: { blobContentMD5: md5('checked') } }),
    );
    expect(statusAndCode(bad)).toEqual([400, 'Md5Mismatch']);
    const badBlock = await failure(
      blob.stageBlock(blockId(1), 'abc', 3, { transactionalContentMD5: md5('abd') }),
    );
    expect(statusAndCode(badBlock)).toEqual([400, 'Md5Mismatch']);
  });
});

describe('Azure versions server: authorization', () => {
  let c: ContainerClient;
  beforeAll(async () => {
    c = await newContainer('auth', service);
    await c.getBlockBlobClient('private.txt').upload('private', 7);
  });
  afterAll(async () => {
    await dropContainer(c);
  });

  it('works the same through a client made from the connection string', async () => {
    const fromString = BlobServiceClient.fromConnectionString(server.connectionString);
    const blob = fromString
      .getContainerClient(c.containerName)
      .getBlockBlobClient('via-string.txt');
    const put = await blob.upload('conn', 4);
    expect(put.versionId).toBeDefined();
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe('conn');
  });

  it('refuses a bad key with 403 AuthenticationFailed, on every kind of request', async () => {
    const bad = new BlobServiceClient(
      server.url,
      new StorageSharedKeyCredential(server.accountName, Buffer.alloc(64, 9).toString('base64')),
      { retryOptions: { maxTries: 1 } },
    );
    const blob = bad.getContainerClient(c.containerName).getBlockBlobClient('private.txt');
    const attempts = [
      () => blob.download(),
      () => blob.getProperties(),
      () => blob.upload('x', 1),
      () => blob.delete(),
      () => bad.getContainerClient(c.containerName).listBlobsFlat().next(),
    ];
    for (const attempt of attempts) {
      expect(statusAndCode(await failure(attempt()))).toEqual([403, 'AuthenticationFailed']);
    }
    expect(
      await bodyText((await c.getBlobClient('private.txt').download()).readableStreamBody),
    ).toBe('private');
  });

  it('accepts a service SAS within its scope and permissions only', async () => {
    const blobSas = generateBlobSASQueryParameters(
      {
        containerName: c.containerName,
        blobName: 'private.txt',
        permissions: BlobSASPermissions.parse('r'),
        expiresOn: hour(),
      },
      credential,
    ).toString();
    const anonymous = (url: string) =>
      new BlobServiceClient(url, undefined, { retryOptions: { maxTries: 1 } });
    const reader = anonymous(`${server.url}?${blobSas}`).getContainerClient(c.containerName);
    expect(
      await bodyText((await reader.getBlobClient('private.txt').download()).readableStreamBody),
    ).toBe('private');
    const write = await failure(reader.getBlockBlobClient('private.txt').upload('w', 1));
    expect(statusAndCode(write)).toEqual([403, 'AuthorizationPermissionMismatch']);
    const other = await failure(reader.getBlobClient('via-string.txt').download());
    expect(statusAndCode(other)).toEqual([403, 'AuthenticationFailed']);
    const expired = generateBlobSASQueryParameters(
      {
        containerName: c.containerName,
        blobName: 'private.txt',
        permissions: BlobSASPermissions.parse('r'),
        startsOn: new Date(Date.now() - 7200_000),
        expiresOn: new Date(Date.now() - 3600_000),
      },
      credential,
    ).toString();
    const late = await failure(
      anonymous(`${server.url}?${expired}`)
        .getContainerClient(c.containerName)
        .getBlobClient('private.txt')
        .download(),
    );
    expect(statusAndCode(late)).toEqual([403, 'AuthenticationFailed']);
    const containerSas = generateBlobSASQueryParameters(
      {
        containerName: c.containerName,
        permissions: ContainerSASPermissions.parse('rl'),
        expiresOn: hour(),
      },
      credential,
    ).toString();
    const lister = anonymous(`${server.url}?${containerSas}`).getContainerClient(c.containerName);
    const names: string[] = [];
    for await (const b of lister.listBlobsFlat()) names.push(b.name);
    expect(names).toContain('private.txt');
  });

  it('accepts an account SAS for the resource types and permissions it names', async () => {
    const sas = generateAccountSASQueryParameters(
      {
        permissions: AccountSASPermissions.parse('rwl'),
        services: AccountSASServices.parse('b').toString(),
        resourceTypes: AccountSASResourceTypes.parse('co').toString(),
        expiresOn: hour(),
      },
      credential,
    ).toString();
    const viaSas = new BlobServiceClient(`${server.url}?${sas}`, undefined, {
      retryOptions: { maxTries: 1 },
    });
    const blob = viaSas.getContainerClient(c.containerName).getBlockBlobClient('account-sas.txt');
    expect((await blob.upload('acct', 4)).versionId).toBeDefined();
    expect(await bodyText((await blob.download()).readableStreamBody)).toBe('acct');
    expect(statusAndCode(await failure(blob.delete()))).toEqual([
      403,
      'AuthorizationPermissionMismatch',
    ]);
    const services = await failure(viaSas.listContainers().next());
    expect(statusAndCode(services)).toEqual([403, 'AuthorizationResourceTypeMismatch']);
  });

  it('refuses what it does not implement with 501 NotImplemented, never a guess', async () => {
    const blob = c.getBlockBlobClient('private.txt');
    expect(statusAndCode(await failure(blob.createSnapshot()))).toEqual([501, 'NotImplemented']);
    expect(statusAndCode(await failure(blob.getBlobLeaseClient().acquireLease(15)))).toEqual([
      501,
      'NotImplemented',
    ]);
    expect(statusAndCode(await failure(blob.setTags({ a: 'b' })))).toEqual([501, 'NotImplemented']);
  });
});

describe('Azure versions server: faults and the request log', () => {
  let c: ContainerClient;
  beforeAll(async () => {
    c = await newContainer('faults', service);
  });
  afterAll(async () => {
    await dropContainer(c);
  });

  it('answers one 503 when armed; the SDK retries and the log shows both attempts', async () => {
    const retrying = client({
      retryOptions: { maxTries: 3, retryDelayInMs: 1, maxRetryDelayInMs: 5 },
    });
    const blob = retrying.getContainerClient(c.containerName).getBlockBlobClient('busy.txt');
    server.log.clear();
    server.faults.inject({ kind: 'status', op: 'PutBlob', blob: 'busy.txt' });
    const put = await blob.upload('ok', 2);
    const tries = server.log.filter({ op: 'PutBlob', blob: 'busy.txt' });
    expect(tries.map((e) => [e.status, e.errorCode, e.faults])).toEqual([
      [503, 'ServerBusy', ['status']],
      [201, undefined, []],
    ]);
    expect(tries[1]?.responseVersionId).toBe(put.versionId);
    expect(server.faults.pending).toEqual([]);
  });

  it('applies a commit whose response it drops, so a client must check before retrying', async () => {
    const blob = c.getBlockBlobClient('lost-commit.bin');
    await blob.stageBlock(blockId(1), 'committed anyway', 16);
    server.faults.inject({ kind: 'drop-response', op: 'PutBlockList' });
    await failure(blob.commitBlockList([blockId(1)]));
    const props = await blob.getProperties();
    expect(props.contentLength).toBe(16);
    expect(
      server.log.filter({ op: 'PutBlockList', blob: 'lost-commit.bin' }).map((e) => e.status),
    ).toEqual([undefined]);
  });

  it('drops a request before applying it', async () => {
    const blob = c.getBlockBlobClient('never.txt');
    server.faults.inject({ kind: 'drop-request', op: 'PutBlob', blob: 'never.txt' });
    await failure(blob.upload('never', 5));
    expect(await blob.exists()).toBe(false);
  });

  it('cuts a download mid-body; on Node 20 the SDK then fails the stream instead of resuming', async () => {
    const data = Buffer.alloc(100_000);
    for (let i = 0; i < data.length; i++) data[i] = i % 251;
    const blob = c.getBlockBlobClient('cut.bin');
    await blob.upload(data, data.length);
    server.log.clear();
    server.faults.inject({ kind: 'drop-mid-body', op: 'GetBlob', afterBytes: 40_000 });
    // maxRetryRequests would re-request from the cut after an early end, but a dropped
    // connection reaches the SDK as an 'aborted' event, which it turns into an AbortError: a
    // client must resume by itself, with a range from what it has.
    const got = await blob.download(0, undefined, { maxRetryRequests: 3 });
    const received: Buffer[] = [];
    const error = await failure(
      (async () => {
        for await (const chunk of got.readableStreamBody ?? []) received.push(chunk as Buffer);
      })(),
    );
    expect(error.name).toBe('AbortError');
    expect(Buffer.concat(received).equals(data.subarray(0, 40_000))).toBe(true);
    const rest = await blob.download(40_000);
    expect(
      Buffer.concat([...received, await bodyBytes(rest.readableStreamBody)]).equals(data),
    ).toBe(true);
    const gets = server.log.filter({ op: 'GetBlob', blob: 'cut.bin' });
    expect(gets.map((e) => [e.faults, e.headers['x-ms-range']])).toEqual([
      [['drop-mid-body'], undefined],
      [[], 'bytes=40000-'],
    ]);
  });

  it('delays a matching request by the time asked', async () => {
    server.faults.inject({ kind: 'delay', ms: 300, op: 'GetBlobProperties', blob: 'slow.txt' });
    await c.getBlockBlobClient('slow.txt').upload('s', 1);
    const started = Date.now();
    await c.getBlobClient('slow.txt').getProperties();
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    const entry = server.log.filter({ op: 'GetBlobProperties', blob: 'slow.txt' }).at(-1);
    expect([entry?.status, entry?.faults]).toEqual([200, ['delay']]);
  });

  it('logs the headers the SDK sent, for assertions on the wire', async () => {
    server.log.clear();
    await c.getBlockBlobClient('wire.txt').upload('w', 1, { conditions: { ifNoneMatch: '*' } });
    const [entry] = server.log.filter({ op: 'PutBlob' });
    expect(entry?.headers['if-none-match']).toBe('*');
    expect(entry?.headers['x-ms-version']).toBe('2026-04-06');
    expect(entry?.headers.authorization).toMatch(/^SharedKey devstoreaccount1:/);
    expect(entry?.bytesIn).toBe(1);
  });
});

describe('Azure versions server: standalone', () => {
  it('runs with npm run server:azure-versions -- --port PORT, prints its ready line and serves', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/devstoreaccount1`;
    const run = startForeground([
      'run',
      '--silent',
      'server:azure-versions',
      '--',
      '--port',
      String(port),
    ]);
    try {
      await run.waitFor(`azure versions server ready on ${url}\n`, 30_000);
      const standalone = new BlobServiceClient(url, credential, { retryOptions: { maxTries: 1 } });
      const sc = standalone.getContainerClient('standalone');
      await sc.create();
      const put = await sc.getBlockBlobClient('x').upload('x', 1);
      expect(put.versionId).toBeDefined();
    } finally {
      await run.interrupt();
    }
  });
});
