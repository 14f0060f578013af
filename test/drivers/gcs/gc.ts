/**
 * Garbage collection on a GCS stage against the GCS test server, through the official SDK: the
 * shared suite (test/support/gc-suite.ts), each test under a fresh prefix of one bucket without
 * object versioning, then on a versioned bucket, where a deletion only makes the live generation
 * noncurrent and the conditional delete is `ifGenerationMatch`. GCS has no call that lists open
 * resumable sessions (they expire after a week), so the target reports its uploads `unlisted`.
 * The CLI reaches the server through STORAGE_EMULATOR_HOST, as a script would.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Storage } from '@google-cloud/storage';
import { afterAll, describe, expect, it } from 'vitest';
import { startGcsServer } from '../../../servers/gcs/server.js';
import { applyGc, planGc, type Stage, stageFromDescriptor } from '../../../src/lake/index.js';
import { gcScaleSuite } from '../../support/gc-scale-suite.js';
import { type GcTarget, gcSuite } from '../../support/gc-suite.js';
import { gcTamperSuite } from '../../support/gc-tamper-suite.js';
import { isReserved } from '../../support/gc-targets.js';

const server = await startGcsServer();
const admin = new Storage({ apiEndpoint: server.url, projectId: 'test' });
const bucket = `gc-${randomBytes(4).toString('hex')}`;
const versioned = `gc-v-${randomBytes(4).toString('hex')}`;
await admin.createBucket(bucket);
await admin.createBucket(versioned, { versioning: { enabled: true } });
const base = await mkdtemp(path.join(tmpdir(), 'gc-gcs-'));
afterAll(async () => {
  await server.close();
  await rm(base, { recursive: true, force: true });
});

/** A GCS stage under a new prefix of `name`, with raw access through the SDK. */
function gcsTarget(name: string): GcTarget {
  const prefix = `gc-${randomBytes(5).toString('hex')}`;
  const descriptor = { version: 1, kind: 'gs', bucket: name, prefix, endpoint: server.url };
  const b = admin.bucket(name);
  const file = (key: string) => b.file(`${prefix}/${key}`);
  return {
    kind: 'gs',
    descriptor,
    stageString: `gs://${name}/${prefix}/`,
    stage: (options = {}) =>
      stageFromDescriptor(
        options.tenant ? { ...descriptor, tenant: options.tenant } : descriptor,
      ) as Stage,
    async put(key, body) {
      await file(key).save(typeof body === 'string' ? body : Buffer.from(body), {
        resumable: false,
      });
    },
    read: async (key) => (await file(key).download())[0],
    async remove(key) {
      await file(key).delete();
    },
    exists: async (key) => (await file(key).exists())[0],
    async objects() {
      const [files] = await b.getFiles({ prefix: `${prefix}/` });
      const keys = files.map((f) => f.name.slice(prefix.length + 1));
      return keys.filter((k) => !isReserved(k)).sort();
    },
    // The server's clock has milliseconds.
    settle: () => new Promise((r) => setTimeout(r, 50)),
    async leaveUpload(key) {
      await file(key).createResumableUpload();
    },
    openUploads: async () => 'unlisted',
    env: { ...process.env, STORAGE_EMULATOR_HOST: server.url },
  };
}

describe('garbage collection on a GCS stage', () => {
  const suite = {
    target: async () => gcsTarget(bucket),
    dir: () => mkdtemp(path.join(base, 'work-')),
  };
  gcSuite(suite);
  gcTamperSuite(suite);
  gcScaleSuite(suite);

  it('leaves the sessions it cannot list open (they expire on their own)', async () => {
    const t = gcsTarget(bucket);
    const stage = t.stage();
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    const before = server.sessions().filter((s) => s.state === 'active').length;
    await t.leaveUpload('ab/ab00000000000000000000000000000002');
    const plan = await planGc(stage, { out: path.join(base, 'sessions'), olderThanMs: 0 });
    expect(plan.uploads).toBe(0);
    await applyGc(stage, plan.dir);
    expect(server.sessions().filter((s) => s.state === 'active')).toHaveLength(before + 1);
    await stage.close();
  });
});

describe('garbage collection on a GCS stage in a versioned bucket', () => {
  it('deletes live generations conditionally; noncurrent ones are not objects', async () => {
    const t = gcsTarget(versioned);
    const stage = t.stage();
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    await t.put('data/kept.bin', 'kept v1');
    await t.put('data/kept.bin', 'kept v2');
    await t.put('data/orphan.bin', 'orphan v1');
    await t.put('data/orphan.bin', 'orphan v2');
    await t.put('data/rewritten.bin', 'before the plan');
    await t.settle();
    const plan = await planGc(stage, { out: path.join(base, 'versioned'), olderThanMs: 0 });
    expect(plan.candidates).toBe(2);
    // Rewritten after the plan: a new generation, which the plan's ifGenerationMatch refuses.
    await t.put('data/rewritten.bin', 'after the plan');
    expect(await applyGc(stage, plan.dir)).toMatchObject({ deleted: 1, skipped: 1, missing: 0 });
    expect(await t.objects()).toEqual(['data/kept.bin', 'data/rewritten.bin']);
    expect((await t.read('data/rewritten.bin')).toString()).toBe('after the plan');
    // The orphan's generations are still in the bucket, none of them live.
    const [all] = await admin.bucket(versioned).getFiles({
      prefix: `${t.descriptor.prefix as string}/data/orphan.bin`,
      versions: true,
    });
    expect(all).toHaveLength(2);
    expect(all.every((f) => f.metadata.timeDeleted !== undefined)).toBe(true);
    // A second plan finds only the rewritten object (unreferenced, past a `0s` cutoff).
    await t.settle();
    const again = await planGc(stage, { out: path.join(base, 'versioned-again'), olderThanMs: 0 });
    expect(again.candidates).toBe(1);
    expect(await applyGc(stage, again.dir)).toMatchObject({ deleted: 1, skipped: 0 });
    expect(await t.objects()).toEqual(['data/kept.bin']);
    await stage.close();
  });
});
