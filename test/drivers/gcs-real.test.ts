/**
 * The GCS driver against a real bucket, when one is named: `PROVCAT_TEST_GCS_VERSIONED_BUCKET`
 * (object versioning on: the whole conformance suite, versions included) and/or
 * `PROVCAT_TEST_GCS_BUCKET` (any bucket: the suite without versions), with Application Default
 * Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, or `gcloud auth application-default login`),
 * plus a managed upload through a resumable session under a random prefix. Without either
 * variable the suite is reported as skipped, with the reason in its name.
 *
 * Cleanup: every key the tests wrote (the suites' random prefixes, and the commit objects under
 * `.provcat/`) loses every generation afterwards, so nothing is left billed.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Storage } from '@google-cloud/storage';
import { afterAll, describe, expect, it } from 'vitest';
import { GcsStore, type GcsStoreOptions } from '../../drivers/gcs/index.js';
import type {
  ObjectInfo,
  PutOptions,
  PutSource,
  SignalOptions,
} from '../../src/contract/primitives.js';
import { type Stage, stageFromDescriptor } from '../../src/lake/index.js';
import { conformance } from '../../src/testing/index.js';
import { chunked, drain, MiB } from '../fixtures/lake-helpers.js';

const versioned = process.env.PROVCAT_TEST_GCS_VERSIONED_BUCKET || undefined;
const plain = process.env.PROVCAT_TEST_GCS_BUCKET || undefined;
const written = new Map<string, Set<string>>();
const { STORAGE_EMULATOR_HOST: _, ...env } = process.env;

/** A store on Google's endpoint that records every key it writes, for the cleanup. */
class RecordingStore extends GcsStore {
  private record(bucket: string, key: string): void {
    const keys = written.get(bucket) ?? new Set<string>();
    keys.add(key);
    written.set(bucket, keys);
  }
  override _put(b: string, k: string, s: PutSource, o?: PutOptions): Promise<ObjectInfo> {
    this.record(b, k);
    return super._put(b, k, s, o);
  }
  override _create(b: string, k: string, body: Uint8Array, o?: SignalOptions): Promise<ObjectInfo> {
    this.record(b, k);
    return super._create(b, k, body, o);
  }
  override _copy(b: string, k: string, v: string | undefined, to: string, o?: SignalOptions) {
    this.record(b, to);
    return super._copy(b, k, v, to, o);
  }
}

const store = (o: GcsStoreOptions = {}) => new RecordingStore({ env, ...o });

afterAll(async () => {
  const admin = new Storage();
  for (const [bucket, keys] of written) {
    const prefixes = new Set(
      [...keys].map((k) => (k.startsWith('.provcat/') ? k : `${k.split('/')[0]}/`)),
    );
    for (const prefix of prefixes) {
      const [files] = await admin.bucket(bucket).getFiles({ prefix, versions: true });
      for (const f of files) await f.delete({ ignoreNotFound: true });
    }
  }
});

const skipped = versioned === undefined && plain === undefined;
const title = 'real GCS: a managed upload through a resumable session';
const describeReal = skipped
  ? (name: string, fn: () => void) =>
      describe.skip(
        `${name} (skipped: set PROVCAT_TEST_GCS_VERSIONED_BUCKET and/or PROVCAT_TEST_GCS_BUCKET, with ADC)`,
        fn,
      )
  : describe;

if (versioned !== undefined) {
  conformance({
    name: `gcs (real bucket ${versioned})`,
    store,
    bucket: versioned,
    flags: {
      versions: true,
      createMode: 'atomic',
      ranges: true,
      hostileKeys: true,
      parts: true,
      listsUploads: false,
    },
  });
}
if (plain !== undefined) {
  conformance({
    name: `gcs (real bucket ${plain}, versions not used)`,
    store,
    bucket: plain,
    flags: {
      versions: false,
      createMode: 'atomic',
      ranges: true,
      hostileKeys: true,
      parts: true,
      listsUploads: false,
    },
  });
}

describeReal(title, () => {
  const bucket = (versioned ?? plain) as string;
  const prefix = `t-${randomBytes(6).toString('hex')}`;

  it('round-trips 6 MiB + 7 bytes in 5 MiB parts and reads it back verified', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'gcs-real-'));
    try {
      const stage = stageFromDescriptor(
        { version: 1, kind: 'gs', bucket, prefix },
        { partSize: 5 * MiB, env },
      ) as Stage;
      const data = randomBytes(6 * MiB + 7);
      const loc = await stage.upload(chunked(data));
      written.set(bucket, (written.get(bucket) ?? new Set()).add(`${prefix}/x`));
      expect(await drain(await stage.open(loc))).toMatchObject({ size: data.length });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
