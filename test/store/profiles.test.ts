/**
 * Named endpoints (src/store/profiles.ts): a config file's profiles select endpoints and
 * credentials per store, so one process reads two servers side by side; environment variables
 * win where both are given; a bad file is an error naming its line; no secret is ever taken
 * from the file or printed.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startGcsServer } from '../../servers/gcs/server.js';
import { InvalidArgument, StoreError } from '../../src/core/errors.js';
import { configPath, parseProfiles, profileOptions } from '../../src/store/profiles.js';
import { storeFor } from '../../src/store/registry.js';
import { rejection } from '../../src/testing/rejection.js';
import {
  describeS3,
  removeBucket,
  s3TestTarget,
  testS3Client,
  uniqueBucketName,
} from '../setup/s3.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-profiles-'));

/** A config file with `text`, and the environment that points at it. */
function config(text: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const file = path.join(mkdtempSync(path.join(work, 'cfg-')), 'config');
  writeFileSync(file, text);
  return { PROVCAT_CONFIG: file, PROVCAT_CACHE_DIR: path.join(work, 'cache'), ...extra };
}

describe('the config file', () => {
  it('is PROVCAT_CONFIG, else config in the platform config folder', () => {
    expect(configPath({ PROVCAT_CONFIG: '/x/y' })).toBe('/x/y');
    expect(configPath({})).toMatch(/provcat[/\\]config$/);
  });

  it('refuses a bad file with an error naming the file and the line', () => {
    const cases: [string, number, RegExp][] = [
      ['[profile a]\nscheme = s3\nendpoint http://x\n', 3, /expected "key = value"/],
      ['endpoint = http://x\n', 1, /before any \[profile NAME\]/],
      ['# c\n[profile a]\nendpoint = http://x\n', 2, /has no 'scheme/],
      ['[profile a]\nscheme = ftp\n', 1, /unknown scheme 'ftp'/],
      ['[profile a]\nscheme = s3\nproject = p\n', 3, /'project' is not a setting of a s3 profile/],
      ['[profile a]\nscheme = s3\n[profile a]\nscheme = s3\n', 3, /defined twice/],
      ['[profile a]\nscheme = s3\nregion = x\nregion = y\n', 4, /set twice/],
      ['[remote a]\n', 1, /a section is '\[profile NAME\]'/],
      ['[profile a]\nscheme = s3\nsecret-access-key = abc\n', 3, /would hold a secret/],
      ['[profile a]\nscheme = s3\naws_secret_access_key = abc\n', 3, /would hold a secret/],
      ['[profile a]\nscheme = az\naccount-key = abc\n', 3, /would hold a secret/],
    ];
    for (const [text, line, why] of cases) {
      let error: unknown;
      try {
        parseProfiles(text, '/etc/provcat.conf');
      } catch (e) {
        error = e;
      }
      expect(error, text).toBeInstanceOf(InvalidArgument);
      expect((error as Error).message, text).toMatch(new RegExp(`^/etc/provcat.conf:${line}: `));
      expect((error as Error).message, text).toMatch(why);
      // A secret in the file is never echoed back.
      expect((error as Error).message).not.toContain('abc');
    }
  });

  it('parses profiles with comments, a BOM and CRLF', () => {
    const text =
      '\uFEFF# lab\r\n[profile lab]\r\nscheme = s3\r\nendpoint = http://rgw:7480  # the lab\r\n; x\r\n[profile g]\nscheme=gs\nproject = p\n';
    const profiles = parseProfiles(text, 'f');
    expect([...profiles.keys()]).toEqual(['lab', 'g']);
    expect(profiles.get('lab')?.settings.get('endpoint')).toBe('http://rgw:7480');
    expect(profiles.get('lab')?.where).toBe('f:2');
  });

  it('environment variables win over the profile; explicit options over both', () => {
    const p = parseProfiles(
      '[profile a]\nscheme = s3\nendpoint = http://p\nregion = eu-west-1\naccess-key-id-env = K\nsecret-access-key-env = S\n',
      'f',
    ).get('a');
    if (!p) throw new Error('no profile');
    expect(profileOptions(p, { K: 'kk', S: 'ss' }, { cache: '/c' })).toEqual({
      endpoint: 'http://p',
      region: 'eu-west-1',
      credentials: { accessKeyId: 'kk', secretAccessKey: 'ss', sessionToken: undefined },
    });
    const env = { K: 'kk', S: 'ss', AWS_ENDPOINT_URL_S3: 'http://env', AWS_ACCESS_KEY_ID: 'e' };
    expect(profileOptions(p, env, { cache: '/c' })).toEqual({ region: 'eu-west-1' });
    const missing = (() => {
      try {
        profileOptions(p, {}, { cache: '/c' });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(missing).toBeInstanceOf(InvalidArgument);
    expect(missing?.message).toMatch(/access-key-id-env names K, which is not set/);
  });

  it('maps gs, az and local settings to their drivers, variables winning', () => {
    const profiles = parseProfiles(
      [
        '[profile g]',
        'scheme = gs',
        'endpoint = http://127.0.0.1:4443',
        'project = p',
        'key-file = /k.json',
        '[profile z]',
        'scheme = az',
        'endpoint = https://a.blob',
        'account = a',
        'account-key-env = AK',
        '[profile l]',
        'scheme = local',
        'root = /r',
      ].join('\n'),
      'f',
    );
    const of = (name: string, env: NodeJS.ProcessEnv) => {
      const p = profiles.get(name);
      if (!p) throw new Error(name);
      return profileOptions(p, env, { cache: '/c' });
    };
    expect(of('g', {})).toEqual({
      apiEndpoint: 'http://127.0.0.1:4443',
      projectId: 'p',
      keyFilename: '/k.json',
    });
    expect(of('g', { STORAGE_EMULATOR_HOST: 'x' })).toEqual({
      projectId: 'p',
      keyFilename: '/k.json',
    });
    expect(of('z', { AK: 'key' })).toEqual({
      endpoint: 'https://a.blob',
      account: 'a',
      accountKey: 'key',
    });
    expect(of('z', { AZURE_STORAGE_CONNECTION_STRING: 'cs' })).toEqual({});
    expect(of('l', {})).toEqual({ root: '/r' });
    expect(of('l', { PROVCAT_LOCAL_ROOT: '/env' })).toEqual({});
    // Without a cache of the caller's, the profile's store caches apart.
    const p = profiles.get('l');
    if (!p) throw new Error('l');
    expect(profileOptions(p, { PROVCAT_CACHE_DIR: '/cache' }, {})).toMatchObject({
      cache: '/cache-profile-l',
    });
  });

  it('storeFor: a missing or unknown profile, or one of another scheme, is InvalidArgument', async () => {
    const env = config('[profile l]\nscheme = local\nroot = /tmp/x\n');
    const other = await rejection(storeFor('s3://b/k', { profile: 'l', env }));
    expect(other).toBeInstanceOf(InvalidArgument);
    expect((other as Error).message).toMatch(/profile l \(.*config:1\) is for local:\/\/ URIs/);
    const unknown = await rejection(storeFor('local://b/k', { profile: 'm', env }));
    expect((unknown as Error).message).toMatch(/no profile m in .* \(profiles: l\)/);
    const noFile = await rejection(
      storeFor('local://b/k', { env: { PROVCAT_CONFIG: path.join(work, 'none') }, profile: 'l' }),
    );
    expect((noFile as Error).message).toMatch(/does not exist/);
    // PROVCAT_PROFILE selects too.
    const viaEnv = await rejection(storeFor('s3://b/k', { env: { ...env, PROVCAT_PROFILE: 'l' } }));
    expect((viaEnv as Error).message).toMatch(/is for local:\/\//);
  });
});

describe('two profiles in one process', () => {
  it('two local roots: the same URI names two different files, each cached apart', async () => {
    const a = path.join(work, 'root-a');
    const b = path.join(work, 'root-b');
    mkdirSync(a);
    mkdirSync(b);
    const env = config(
      `[profile a]\nscheme = local\nroot = ${a}\n\n[profile b]\nscheme = local\nroot = ${b}\n`,
    );
    const sa = await storeFor('local://data/x.txt', { profile: 'a', env });
    const sb = await storeFor('local://data/x.txt', { profile: 'b', env });
    await sa.put('local://data/x.txt', Buffer.from('from a'));
    await sb.put('local://data/x.txt', Buffer.from('from b'));
    expect(await sa.readText('local://data/x.txt')).toBe('from a');
    expect(await sb.readText('local://data/x.txt')).toBe('from b');
    expect(sa.cache.root).not.toBe(sb.cache.root);
  });

  describeS3('Ceph and the GCS test server', () => {
    const gcs = startGcsServer();
    afterAll(async () => (await gcs).close());

    it.runIf(process.env.PROVCAT_TEST_S3 === 'ceph')(
      'reads s3:// on Ceph and gs:// on the GCS server, each with its own credentials',
      async () => {
        const server = await gcs;
        const t = s3TestTarget();
        // The credentials live in variables the profile names; the store sees no AWS_* variable.
        const env = config(
          [
            '[profile lab]',
            'scheme = s3',
            `endpoint = ${t.endpoint}`,
            `region = ${t.region}`,
            'path-style = true',
            'access-key-id-env = LAB_ID',
            'secret-access-key-env = LAB_SECRET',
            '',
            '[profile wrong]',
            'scheme = s3',
            `endpoint = ${t.endpoint}`,
            'path-style = true',
            'access-key-id-env = LAB_ID',
            'secret-access-key-env = WRONG_SECRET',
            '',
            '[profile emu]',
            'scheme = gs',
            `endpoint = ${server.url}`,
            'project = test',
          ].join('\n'),
          {
            LAB_ID: process.env.AWS_ACCESS_KEY_ID ?? '',
            LAB_SECRET: process.env.AWS_SECRET_ACCESS_KEY ?? '',
            WRONG_SECRET: 'not-the-secret',
          },
        );
        const bucket = uniqueBucketName('prof');
        const s3 = await storeFor(`s3://${bucket}/`, { profile: 'lab', env });
        const gs = await storeFor(`gs://${bucket}/`, { profile: 'emu', env });
        const wrong = await storeFor(`s3://${bucket}/`, { profile: 'wrong', env });
        try {
          await s3.makeBucket(bucket);
          await gs.makeBucket(bucket);
          await s3.put(`s3://${bucket}/k.txt`, Buffer.from('ceph'));
          await gs.put(`gs://${bucket}/k.txt`, Buffer.from('gcs'));
          expect(await s3.readText(`s3://${bucket}/k.txt`)).toBe('ceph');
          expect(await gs.readText(`gs://${bucket}/k.txt`)).toBe('gcs');
          const refused = await rejection(wrong.stat(`s3://${bucket}/k.txt`));
          expect(refused).toBeInstanceOf(StoreError);
          expect((refused as Error).message).not.toContain('not-the-secret');
          await s3.delete(`s3://${bucket}/k.txt`);
        } finally {
          await Promise.all([s3.close(), gs.close(), wrong.close()]);
          await removeBucket(testS3Client(), bucket);
        }
      },
    );
  });
});
