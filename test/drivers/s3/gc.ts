/**
 * Garbage collection on an S3 stage against the test server (Ceph radosgw): the shared suite
 * (test/support/gc-suite.ts), each test under a fresh prefix of one unversioned bucket (where
 * `If-None-Match: *` is honoured: the `atomic` create mode). Then the `oldest-version-wins` mode
 * on a versioned bucket, where Ceph ignores the condition: concurrent writers of one set still
 * get gapless numbers, and GC deletes through it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  applyGc,
  planGc,
  type Stage,
  stageFromDescriptor,
  writeKeepSet,
} from '../../../src/lake/index.js';
import { testClient } from '../../fixtures/lake-helpers.js';
import { createTestBucket, describeS3, dropTestBucket } from '../../setup/s3.js';
import { gcScaleSuite } from '../../support/gc-scale-suite.js';
import { gcSuite } from '../../support/gc-suite.js';
import { gcTamperSuite } from '../../support/gc-tamper-suite.js';
import { s3Target } from '../../support/gc-targets.js';

describeS3('garbage collection on an S3 stage', () => {
  let bucket: string;
  let versioned: string;
  let base: string;

  beforeAll(async () => {
    bucket = await createTestBucket('gc');
    versioned = await createTestBucket('gc-versioned', { versioning: true });
    base = await mkdtemp(path.join(tmpdir(), 'gc-s3-'));
  });
  afterAll(async () => {
    await dropTestBucket(bucket, 'gc-');
    await dropTestBucket(versioned, 'gc-');
    await rm(base, { recursive: true, force: true });
  });

  const suite = {
    target: async () => s3Target(bucket),
    dir: () => mkdtemp(path.join(base, 'work-')),
  };
  gcSuite(suite);
  gcTamperSuite(suite);
  gcScaleSuite(suite);

  it('on a versioned bucket that ignores If-None-Match (oldest-version-wins)', async () => {
    const target = s3Target(versioned);
    const env = { ...process.env, PROVCAT_S3_CREATE_FALLBACK: 'oldest-version-wins' };
    const make = () =>
      stageFromDescriptor(target.descriptor, { client: testClient(), env }) as Stage;
    const writers = Array.from({ length: 5 }, make);
    expect(await (await (writers[0] as Stage).backend()).createMode()).toBe('oldest-version-wins');
    const results = await Promise.all(
      writers.map((w, i) => w.addReferences('busy', [w.uriOf(`data/w${i}.bin`)])),
    );
    expect(results.map((r) => r.number).sort()).toEqual([1, 2, 3, 4, 5]);
    const stage = make();
    const keep = await writeKeepSet(stage, path.join(base, 'versioned-keep.jsonl'));
    const keys: string[] = [];
    for await (const k of keep.keys()) keys.push(k);
    expect(keys).toEqual(writers.map((_, i) => `data/w${i}.bin`));
    await target.put('data/w1.bin', 'live');
    await target.put('data/orphan.bin', 'orphan');
    await target.settle();
    const plan = await planGc(stage, { out: path.join(base, 'versioned-plan'), olderThanMs: 0 });
    expect(plan.candidates).toBe(1);
    expect(await applyGc(stage, plan.dir)).toMatchObject({ deleted: 1 });
    expect(await target.objects()).toEqual(['data/w1.bin']);
    await Promise.all([...writers, stage].map((w) => w.close()));
  });
});
