/**
 * Managed objects without storage: DataLocation and descriptor parsing, containment, range and
 * option checks, checkpoint parsing, presigned-URL redaction, stage strings. (The part pipeline
 * is the S3 multipart engine's: test/drivers/s3-multipart.test.ts.)
 */
import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ObjectIntegrityError } from '../../src/core/errors.js';
import { checkpointPath, parseCheckpoint } from '../../src/lake/checkpoint.js';
import {
  CheckpointError,
  type DataLocation,
  descriptorFromString,
  InvalidDataLocation,
  InvalidRange,
  PresignedUrl,
  parseDataLocation,
  parseStageDescriptor,
  StageConfigError,
  stageFromDescriptor,
} from '../../src/lake/index.js';

const SHA = 'a'.repeat(64);
const ok = { uri: 's3://bkt/p/x', contentType: 'video/mp4', sizeBytes: 10, sha256: SHA };

function integrityKind(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    if (error instanceof ObjectIntegrityError) return error.kind;
    throw error;
  }
  return undefined;
}

describe('parseDataLocation', () => {
  it('accepts exactly the four fields and returns a frozen, lowercase copy', () => {
    const loc = parseDataLocation(JSON.stringify({ ...ok, sha256: 'AB'.repeat(32) }));
    expect(loc).toEqual({ ...ok, sha256: 'ab'.repeat(32) });
    expect(Object.isFrozen(loc)).toBe(true);
  });

  it.each([
    ['missing field', { uri: ok.uri, contentType: ok.contentType, sizeBytes: 1 }],
    ['extra field', { ...ok, url: 'https://x' }],
    ['negative size', { ...ok, sizeBytes: -1 }],
    ['fractional size', { ...ok, sizeBytes: 1.5 }],
    ['size as string', { ...ok, sizeBytes: '10' }],
    ['empty uri', { ...ok, uri: '' }],
    ['content type with a newline', { ...ok, contentType: 'text/plain\r\nX-Evil: 1' }],
    ['array', [ok]],
  ])('refuses a %s with InvalidDataLocation', (_label, value) => {
    expect(() => parseDataLocation(value)).toThrow(InvalidDataLocation);
  });

  it('refuses text that is not JSON', () => {
    expect(() => parseDataLocation('{uri:')).toThrow(InvalidDataLocation);
  });

  it.each(['a'.repeat(63), 'a'.repeat(65), `${'a'.repeat(63)}g`, ' '.repeat(64), ''])(
    'a digest that is not 64 hex characters is InvalidDigest: %j',
    (sha256) => {
      expect(integrityKind(() => parseDataLocation({ ...ok, sha256 }))).toBe('InvalidDigest');
    },
  );
});

describe('stage descriptors', () => {
  it('parses and normalizes a local and an s3 descriptor', () => {
    expect(parseStageDescriptor({ version: 1, kind: 'local', root: '/srv/lake/' })).toEqual({
      version: 1,
      kind: 'local',
      root: '/srv/lake',
    });
    expect(
      parseStageDescriptor(
        '{"version":1,"kind":"s3","bucket":"lake","prefix":"a/b/","region":"eu-west-1","tenant":"acme"}',
      ),
    ).toEqual({
      version: 1,
      kind: 's3',
      bucket: 'lake',
      prefix: 'a/b',
      region: 'eu-west-1',
      tenant: 'acme',
    });
  });

  it.each([
    ['version 2', { version: 2, kind: 'local', root: '/x' }],
    ['no version', { kind: 'local', root: '/x' }],
    ['unknown kind', { version: 1, kind: 'gcs', bucket: 'b' }],
    ['unknown field', { version: 1, kind: 'local', root: '/x', cache: true }],
    [
      'credentials',
      {
        version: 1,
        kind: 's3',
        bucket: 'lake',
        prefix: '',
        region: 'us-east-1',
        accessKeyId: 'AKID',
      },
    ],
    ['relative root', { version: 1, kind: 'local', root: 'x/y' }],
    ['root with ..', { version: 1, kind: 'local', root: '/x/../y' }],
    [
      'prefix with //',
      { version: 1, kind: 's3', bucket: 'lake', prefix: 'a//b', region: 'us-east-1' },
    ],
    [
      'prefix with ..',
      { version: 1, kind: 's3', bucket: 'lake', prefix: 'a/../b', region: 'us-east-1' },
    ],
    [
      'tenant with /',
      { version: 1, kind: 's3', bucket: 'lake', prefix: 'a', region: 'us-east-1', tenant: 'x/y' },
    ],
    [
      'endpoint with credentials',
      {
        version: 1,
        kind: 's3',
        bucket: 'lake',
        prefix: '',
        region: 'us-east-1',
        endpoint: 'http://u:p@h',
      },
    ],
    ['bad bucket', { version: 1, kind: 's3', bucket: 'Lake_', prefix: '', region: 'us-east-1' }],
    [
      'path style as string',
      {
        version: 1,
        kind: 's3',
        bucket: 'lake',
        prefix: '',
        region: 'us-east-1',
        forcePathStyle: 'yes',
      },
    ],
  ])('refuses %s with StageConfigError', (_label, value) => {
    expect(() => parseStageDescriptor(value)).toThrow(StageConfigError);
  });

  it('builds stage strings from the environment', async () => {
    const env = {
      AWS_REGION: 'eu-central-1',
      AWS_ENDPOINT_URL_S3: 'http://h:1',
      PROVCAT_S3_FORCE_PATH_STYLE: '1',
    };
    expect(await descriptorFromString('s3://lake/managed/v1/', env)).toEqual({
      version: 1,
      kind: 's3',
      bucket: 'lake',
      prefix: 'managed/v1',
      region: 'eu-central-1',
      endpoint: 'http://h:1',
      forcePathStyle: true,
    });
    expect(await descriptorFromString('file:///srv/my%20lake/', env)).toEqual({
      version: 1,
      kind: 'local',
      root: '/srv/my lake',
    });
    await expect(descriptorFromString('file:///srv/../etc/', env)).rejects.toThrow(
      StageConfigError,
    );
    await expect(descriptorFromString('gs://x/', env)).rejects.toThrow(StageConfigError);
  });
});

describe('containment (before any I/O)', () => {
  const s3 = stageFromDescriptor({
    version: 1,
    kind: 's3',
    bucket: 'lake',
    prefix: 'a/b',
    region: 'us-east-1',
    tenant: 't1',
  });
  const local = stageFromDescriptor({ version: 1, kind: 'local', root: '/srv/lake', tenant: 't1' });

  it('accepts locations below the exact prefix and tenant', () => {
    expect(s3.contain('s3://lake/a/b/t1/ab/abc')).toBe('ab/abc');
    expect(local.contain('file:///srv/lake/t1/ab/abc')).toBe('ab/abc');
    expect(local.contain('file:///srv/lake/t1/a%20b')).toBe('a b');
  });

  it.each([
    's3://other/a/b/t1/x',
    's3://lake/a/bc/t1/x',
    's3://lake/a/b/t2/x',
    's3://lake/a/b/t1x/y',
    's3://lake/a/b/t1/',
    's3://lake/a/b/t1',
    's3://lake/a/b/t1/../t2/x',
    's3://lake/a/b/t1/%2e%2e/t2/x',
    's3://lake/a/b/t1//x',
    's3://lake/a/b/t1/x?at=version:1',
    'S3://lake/a/b/t1/x',
    'file:///srv/lake/t1/x',
    'https://lake.s3.amazonaws.com/a/b/t1/x',
  ])('S3 stage refuses %s as OutsideStage', (uri) => {
    expect(integrityKind(() => s3.contain(uri))).toBe('OutsideStage');
  });

  it.each([
    'file:///srv/lake/t1/../t2/x',
    'file:///srv/lake/t1/%2e%2e/t2/x',
    'file:///srv/lake/t1/%2E%2E/%2E%2E/etc/passwd',
    'file:///srv/lake/t1//x',
    'file:///srv/lake//t1/x',
    'file:///srv/lake/t1/a%2Fb',
    'file:///srv/lake/t1/a%00',
    'file:///srv/lakes/t1/x',
    'file:///srv/lake/t2/x',
    'file:///srv/lake/t1',
    'file:///srv/lake/t1/',
    'file://host/srv/lake/t1/x',
    'file:///srv/lake/t1/x?y',
    'file:///srv/lake/t1/%zz',
    's3://lake/a/b/t1/x',
  ])('local stage refuses %s as OutsideStage', (uri) => {
    expect(integrityKind(() => local.contain(uri))).toBe('OutsideStage');
  });
});

describe('checks before I/O', () => {
  const stage = stageFromDescriptor({ version: 1, kind: 'local', root: '/nonexistent/lake' });
  const loc: DataLocation = {
    uri: 'file:///nonexistent/lake/ab/cd',
    contentType: 'a/b',
    sizeBytes: 10,
    sha256: SHA,
  };

  it.each([
    [0, 0, 'empty'],
    [5, 4, 'reversed'],
    [-1, 3, 'negative'],
    [0, 11, 'past the end'],
    [10, 11, 'starting at the end'],
    [0.5, 3, 'fractional'],
  ])('range %d..%d (%s) is InvalidRange', async (start, end) => {
    await expect(stage.openRange(loc, start, end)).rejects.toThrow(InvalidRange);
  });

  it('a bad digest is refused before the (missing) file is opened', async () => {
    await expect(stage.open({ ...loc, sha256: 'xyz' })).rejects.toMatchObject({
      kind: 'InvalidDigest',
    });
    await expect(stage.openRange({ ...loc, sha256: 'xyz' }, 0, 1)).rejects.toMatchObject({
      kind: 'InvalidDigest',
    });
  });

  it('partsInFlight outside 1..16 is refused before the source is opened', async () => {
    for (const partsInFlight of [0, 17, 2.5]) {
      await expect(stage.upload('/nonexistent/source', { partsInFlight })).rejects.toThrow(
        StageConfigError,
      );
    }
  });
});

describe('PresignedUrl', () => {
  it('never shows the URL unless revealed', () => {
    const secret = 'https://h/b/k?X-Amz-Signature=deadbeef';
    const url = new PresignedUrl(secret, 's3://b/k', new Date(0));
    const shown = [
      String(url),
      `${url}`,
      JSON.stringify({ url }),
      inspect(url),
      inspect({ nested: [url] }),
    ];
    for (const text of shown) {
      expect(text).not.toContain('deadbeef');
      expect(text).toContain('[redacted]');
    }
    expect(Object.keys(url)).not.toContain('url');
    expect(url.reveal()).toBe(secret);
  });
});

describe('checkpoints', () => {
  const good = {
    version: 1,
    uploadId: 'u1',
    key: 'p/ab/abc',
    bucket: 'lake',
    source: { path: '/data/x', size: 10, mtimeMs: 1.5 },
    partSize: 5 * 1024 * 1024,
    window: 4,
    parts: [{ number: 1, etag: '"e"', sha256: SHA }],
  };

  it('parses version 1 with a 5 MiB or 64 MiB part size', () => {
    expect(parseCheckpoint(JSON.stringify(good), 'f').parts).toHaveLength(1);
    expect(
      parseCheckpoint(JSON.stringify({ ...good, partSize: 64 * 1024 * 1024 }), 'f').partSize,
    ).toBe(64 * 1024 * 1024);
  });

  it.each([
    ['version 2', { ...good, version: 2 }],
    ['an 8 MiB part size', { ...good, partSize: 8 * 1024 * 1024 }],
    ['an unknown field', { ...good, accessKey: 'x' }],
    ['unordered parts', { ...good, parts: [good.parts[0], good.parts[0]] }],
    ['a relative source path', { ...good, source: { ...good.source, path: 'x' } }],
  ])('fails closed on %s', (_label, value) => {
    expect(() => parseCheckpoint(JSON.stringify(value), 'f')).toThrow(CheckpointError);
  });

  it('names one file per stage and source', () => {
    expect(checkpointPath('/d', 's1', '/a')).not.toBe(checkpointPath('/d', 's2', '/a'));
    expect(checkpointPath('/d', 's1', '/a')).not.toBe(checkpointPath('/d', 's1', '/b'));
    expect(checkpointPath('/d', 's1', '/a')).toMatch(/^\/d\/[0-9a-f]{64}\.json$/);
  });
});
