/**
 * A byte flipped on the way (part of the fault suite): with the fault proxy between the driver
 * and its server, one byte of a GET's body is inverted, and a fetch must fail with
 * `ObjectIntegrityError` (exit 6) and cache nothing; the next fetch, without a fault, is exact.
 * An object written by a plain put — small, or in parts — must carry a digest the store's answer
 * states: a plain-MD5 ETag (S3 and GCS in one request, GCS's MD5 of a session), a Content-MD5
 * (Azure's Put Blob), the MD5 GCS computes for a session, or the SHA-256 an Azure upload in parts
 * records.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectIntegrityError } from '../core/errors.js';
import { sha256 } from './fault-checks.js';
import { closeStore } from './fault-config.js';
import { type FaultProxy, startFaultProxy } from './fault-proxy.js';
import { type ConformanceTarget, randomPrefix } from './target.js';

/** Register the flipped-byte check for `target` (a target with `network`). */
export function flipChecks(target: ConformanceTarget): void {
  const net = target.network;
  if (!net) return;
  describe('a byte flipped in a GET body', () => {
    let proxy: FaultProxy;
    let work = '';
    const prefix = randomPrefix('faults-flip');
    beforeAll(async () => {
      proxy = await startFaultProxy({ target: net.endpoint });
      work = await mkdtemp(path.join(tmpdir(), 'provcat-fault-flip-'));
    });
    afterAll(async () => {
      await proxy?.close();
      await target.purge?.(prefix);
      if (work) await rm(work, { recursive: true, force: true });
    });

    const sizes = [['a small object', 10_000]] as [string, number][];
    // An object in parts carries a content digest where the protocol records a SHA-256 at
    // completion (Azure) or the store hashes the whole object (a GCS session). An S3 multipart
    // ETag is no content hash, and S3 takes metadata only at create, before the bytes are read:
    // such an object is checked by size only (docs/reliability.md, "What it does not cover").
    const protocol = target.store({ cache: tmpdir() }).partProtocol(target.bucket);
    const digested = protocol?.digestAtComplete === true || protocol?.sequential === true;
    if (net.multipartBytes && digested) {
      sizes.push(['an object put in parts', 2 * net.multipartBytes + 10_000]);
    }
    for (const [what, size] of sizes)
      it(`of ${what}: fails the fetch with ObjectIntegrityError, caches nothing, and the next fetch is exact`, async () => {
        const bytes = randomBytes(size);
        const direct = target.store({ cache: path.join(work, 'direct') });
        const uri = `${direct.scheme}://${target.bucket}/${prefix}${size}.bin`;
        try {
          await direct.put(uri, bytes);
        } finally {
          await closeStore(direct);
        }
        const via = target.store({ cache: path.join(work, 'cache'), endpoint: proxy.url });
        try {
          const flips = proxy.stats().faults.flip;
          proxy.set([{ kind: 'flip', method: 'GET', after: 4321, next: 1 }]);
          const error = await via.fetch(uri).then(
            () => undefined,
            (e: unknown) => e,
          );
          proxy.set([]);
          expect(proxy.stats().faults.flip - flips, 'the flip fired').toBe(1);
          expect(error).toBeInstanceOf(ObjectIntegrityError);
          const again = await via.fetch(uri);
          expect(sha256(await readFile(again.path))).toBe(sha256(bytes));
        } finally {
          proxy.set([]);
          await closeStore(via);
        }
      }, 60_000);
  });
}
