/**
 * Garbage collection on an Azure stage against Azurite, through the official SDK: the shared
 * suite (test/support/gc-suite.ts), each test under a fresh prefix of one container. Azurite keeps
 * no versions, so deletes are Delete Blob with `If-Match` on the planned ETag; open uploads are
 * blobs holding uncommitted blocks only (staged by a writer that never committed), which GC aborts
 * by committing an empty block list. The CLI and the child processes get the development account
 * as a user's environment gives it (AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY and the endpoint).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ContainerClient } from '@azure/storage-blob';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DEV_ACCOUNT_KEY, DEV_ACCOUNT_NAME } from '../../../servers/azure-dev-account.js';
import { applyGc, planGc, type Stage, stageFromDescriptor } from '../../../src/lake/index.js';
import { azureTarget, describeAzurite, dropContainer, newContainer } from '../../setup/azure.js';
import { gcScaleSuite } from '../../support/gc-scale-suite.js';
import { type GcTarget, gcSuite, HOSTILE } from '../../support/gc-suite.js';
import { gcTamperSuite } from '../../support/gc-tamper-suite.js';
import { isReserved } from '../../support/gc-targets.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** An Azure stage under a new prefix of `container`, with raw access through the SDK. */
function azureGcTarget(container: ContainerClient, endpoint: string): GcTarget {
  const prefix = `gc-${randomBytes(5).toString('hex')}`;
  const name = container.containerName;
  const descriptor = {
    version: 1,
    kind: 'az',
    account: DEV_ACCOUNT_NAME,
    container: name,
    prefix,
    endpoint,
  };
  const blob = (key: string) => container.getBlockBlobClient(`${prefix}/${key}`);
  const under = async (options: { includeUncommitedBlobs?: boolean } = {}) => {
    const out: { key: string; size: number | undefined }[] = [];
    for await (const b of container.listBlobsFlat({ prefix: `${prefix}/`, ...options })) {
      out.push({ key: b.name.slice(prefix.length + 1), size: b.properties.contentLength });
    }
    return out;
  };
  return {
    kind: 'az',
    descriptor,
    stageString: `az://${name}/${prefix}/`,
    stage: (options = {}) =>
      stageFromDescriptor(
        options.tenant ? { ...descriptor, tenant: options.tenant } : descriptor,
      ) as Stage,
    async put(key, body) {
      const bytes = typeof body === 'string' ? Buffer.from(body) : body;
      await blob(key).upload(bytes, bytes.length);
    },
    read: (key) => blob(key).downloadToBuffer(),
    async remove(key) {
      await blob(key).delete();
    },
    exists: (key) => blob(key).exists(),
    async objects() {
      const keys = (await under()).map((b) => b.key);
      return keys.filter((k) => !isReserved(k)).sort();
    },
    // Azure reports last-modified times in whole seconds.
    settle: () => sleep(1100),
    async leaveUpload(key) {
      // A writer that staged a block and never committed the list (as a crashed upload does).
      await blob(key).stageBlock(Buffer.from('b-00001').toString('base64'), 'partial', 7);
    },
    async openUploads() {
      const listed = await under({ includeUncommitedBlobs: true });
      const open: string[] = [];
      for (const b of listed) if (b.size === 0 && !(await blob(b.key).exists())) open.push(b.key);
      return open;
    },
    env: { ...process.env },
  };
}

describeAzurite('garbage collection on an Azure stage (Azurite)', () => {
  let container: ContainerClient;
  let base: string;
  let endpoint: string;

  beforeAll(async () => {
    endpoint = azureTarget().url;
    // The stage, the CLI and the child processes find the key where a user's environment has it.
    delete process.env.AZURE_STORAGE_CONNECTION_STRING;
    process.env.AZURE_STORAGE_ACCOUNT = DEV_ACCOUNT_NAME;
    process.env.AZURE_STORAGE_KEY = DEV_ACCOUNT_KEY;
    process.env.PROVCAT_AZURE_ENDPOINT = endpoint;
    container = await newContainer('gc');
    base = await mkdtemp(path.join(tmpdir(), 'gc-azure-'));
  });
  afterAll(async () => {
    await dropContainer(container);
    await rm(base, { recursive: true, force: true });
  });

  const suite = {
    target: async () => azureGcTarget(container, endpoint),
    dir: () => mkdtemp(path.join(base, 'work-')),
    // Azurite answers 500 to a listing that covers a name with U+FFFF (Azure encodes it).
    hostile: HOSTILE.filter((k) => !k.includes('\uffff')),
  };
  gcSuite(suite);
  gcTamperSuite(suite);
  gcScaleSuite(suite);

  it('an inventory row of another container never authorizes a deletion here', async () => {
    const t = azureGcTarget(container, endpoint);
    const stage = t.stage();
    await stage.addReferences('ds', [stage.uriOf('data/kept.bin')]);
    await t.put('data/young.bin', 'written just now');
    const inventory = path.join(base, 'other-container.jsonl');
    const old = new Date(0).toISOString();
    const key = `${t.descriptor.prefix as string}/data/young.bin`;
    await writeFile(
      inventory,
      `${JSON.stringify({ bucket: 'another-container', key, size: 16, last_modified: old })}\n`,
    );
    const plan = await planGc(stage, { out: path.join(base, 'other'), olderThanMs: 0, inventory });
    expect(plan).toMatchObject({ candidates: 0 });
    expect(plan.manifest.totals.outside).toBe(1);
    expect(await applyGc(stage, plan.dir)).toMatchObject({ deleted: 0 });
    expect(await t.objects()).toEqual(['data/young.bin']);
    await stage.close();
  });
});
