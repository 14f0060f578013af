/**
 * The fault suite (src/testing/faults.ts) on GCS through the GCS driver, against the
 * project's GCS test server (servers/gcs/) in this process: network faults with the fault
 * proxy between the driver and the server (resumable sessions included: the server builds the
 * session URI from the Host the client reached, so chunks go through the proxy too), the part
 * resends, and the SIGKILL loop over the CLI with a `gs://` managed-object stage. Short in
 * `npm test`; `npm run soak` runs it long (docs/reliability.md). And, with the server's fault
 * knobs (it checks no credentials), credentials refused in the middle of an upload in parts.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Storage } from '@google-cloud/storage';
import { afterAll, describe, expect, it } from 'vitest';
import { GcsStore } from '../../../drivers/gcs/index.js';
import { startGcsServer } from '../../../servers/gcs/server.js';
import { exitCodeOf, PermissionDenied } from '../../../src/core/errors.js';
import { faultSuite } from '../../../src/testing/faults.js';

const MiB = 1024 * 1024;
/** Each SDK request's bound in the trials (the driver's default is 60 s). */
const REQUEST_TIMEOUT_MS = 8000;
const server = await startGcsServer();
const admin = new Storage({ apiEndpoint: server.url, projectId: 'test' });
const bucket = `faults-${randomBytes(4).toString('hex')}`;
await admin.createBucket(bucket, { versioning: { enabled: true } });
afterAll(async () => {
  await server.close();
});

faultSuite({
  name: 'gcs (test server)',
  store: ({ endpoint, ...o } = {}) =>
    new GcsStore({
      apiEndpoint: endpoint ?? server.url,
      env: {},
      multipartThreshold: MiB,
      partSize: MiB,
      // Under the suite's 30 s hang watch (fault-network-harness.ts HANG_MS): a cut SDK answer
      // is retried within it (the CLI's trials get the same bound from the environment).
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      ...o,
    }),
  bucket,
  flags: { versions: true, createMode: 'atomic', ranges: true, hostileKeys: true },
  env: {
    STORAGE_EMULATOR_HOST: server.url,
    PROVCAT_GCS_LEAN: '1',
    PROVCAT_GCS_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
  },
  network: {
    endpoint: server.url,
    env: (url) => ({
      STORAGE_EMULATOR_HOST: url,
      PROVCAT_GCS_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
    }),
    multipartBytes: MiB,
  },
  stageUri: (prefix) => `gs://${bucket}/${prefix}`,
  purge: async (prefix) => {
    const [files] = await admin.bucket(bucket).getFiles({ prefix, versions: true });
    await Promise.all(
      files.map((f) =>
        admin
          .bucket(bucket)
          .file(f.name, { generation: Number(f.metadata.generation) })
          .delete({ ignoreNotFound: true }),
      ),
    );
  },
});

describe('gcs: credentials refused during an upload in parts', () => {
  it('a 403 on a chunk and on the cancel is PermissionDenied (exit 9), said in one sentence', async () => {
    const forbidden = { kind: 'status', status: 403, reason: 'forbidden' } as const;
    const session = /^\/upload\//;
    const ids = [
      server.faults.add({ ...forbidden, method: 'PUT', path: session, times: Infinity }),
      server.faults.add({ ...forbidden, method: 'DELETE', path: session, times: Infinity }),
    ];
    const cache = await mkdtemp(path.join(tmpdir(), 'provcat-faults-gcs-403-'));
    const store = new GcsStore({
      apiEndpoint: server.url,
      env: {},
      multipartThreshold: MiB,
      partSize: MiB,
      cache,
    });
    try {
      const error = await store.put(`gs://${bucket}/refused/object.bin`, randomBytes(3 * MiB)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(PermissionDenied);
      expect(exitCodeOf(error)).toBe(9);
      expect((error as Error).message).toMatch(
        /permission denied.*; aborting resumable session .* failed too, so it remains until GCS drops the unfinished session, a week after it was started$/,
      );
    } finally {
      for (const id of ids) server.faults.remove(id);
      await store.close();
      await rm(cache, { recursive: true, force: true });
    }
  });
});
