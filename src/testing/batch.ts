/**
 * The batch part of the conformance suite: `batchPuts(bucket, prefix)` (src/contract/primitives.ts
 * `PutBatch`) for drivers with `flags.batch` — what a batch put makes visible, what `close`
 * ends, what it refuses — and, for every other driver, that it has none (so a driver that gains
 * the primitive must say so and run this part). Durability itself (a crash before `close`) is
 * each driver's own test: it needs the driver's crash model.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PutBatch } from '../contract/primitives.js';
import type { ObjectStore } from '../store/object-store.js';
import { type ConformanceTarget, randomPrefix } from './target.js';

async function bytesOf(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** Register the batch part for one driver. */
export function batchSuite(target: ConformanceTarget): void {
  const { bucket } = target;
  describe('batched puts (batchPuts)', () => {
    let work: string;
    let store: ObjectStore;
    beforeAll(async () => {
      work = await mkdtemp(path.join(tmpdir(), 'provcat-conf-batch-'));
      store = target.store({ cache: path.join(work, 'cache') });
    });
    afterAll(async () => {
      await store.close();
      await rm(work, { recursive: true, force: true });
    });

    it.runIf(target.flags.batch !== true)('a driver without the flag has no batch', () => {
      expect(store.batchPuts(bucket, randomPrefix('batch'))).toBeUndefined();
    });

    describe.runIf(target.flags.batch === true)('with the primitive', () => {
      const open = (prefix: string): PutBatch => {
        const batch = store.batchPuts(bucket, prefix);
        if (batch === undefined) throw new Error('flags.batch is set but batchPuts gave none');
        return batch;
      };

      it('puts are readable and listed, with what put returned, once close resolves', async () => {
        const prefix = randomPrefix('batch');
        const batch = open(prefix);
        const want = new Map<string, Buffer>();
        const infos = await Promise.all(
          ['a.txt', 'sub/b.bin', 'sub/deeper/c', 'z'].map((rel, i) => {
            const body = randomBytes(100 + i * 977);
            want.set(prefix + rel, body);
            return batch.put(prefix + rel, body, { size: body.length });
          }),
        );
        await batch.close();
        for (const info of infos) {
          const body = want.get(info.key) as Buffer;
          expect(info.size).toBe(body.length);
          const head = await store._head(bucket, info.key);
          expect(head.version).toBe(info.version);
          const got = await store._get(bucket, info.key);
          expect((await bytesOf(got.body)).equals(body), info.key).toBe(true);
        }
        const listed: string[] = [];
        for await (const page of store._pages(bucket, prefix)) {
          listed.push(...page.objects.map((o) => o.key));
        }
        expect(listed).toEqual([...want.keys()].sort());
      });

      it('a put from a file path, and a new version over an existing object', async () => {
        const prefix = randomPrefix('batch');
        const key = `${prefix}f.txt`;
        await store._put(bucket, key, Buffer.from('old'));
        const file = path.join(work, `${randomBytes(4).toString('hex')}.txt`);
        await writeFile(file, 'new bytes');
        const batch = open(prefix);
        const info = await batch.put(key, file);
        await batch.close();
        expect(info.size).toBe(9);
        expect((await bytesOf((await store._get(bucket, key)).body)).toString()).toBe('new bytes');
        if (target.flags.versions) {
          const versions: (string | undefined)[] = [];
          for await (const v of store._history(bucket, key)) versions.push(v.versionId);
          expect(versions).toHaveLength(2);
          expect(versions[0]).toBe(info.versionId);
        }
      });

      it('refuses keys outside the prefix and puts after close; close is idempotent', async () => {
        const prefix = randomPrefix('batch');
        const batch = open(prefix);
        await expect(batch.put(`other-${prefix}x`, Buffer.from('x'))).rejects.toThrow(RangeError);
        await batch.put(`${prefix}in`, Buffer.from('in'));
        const closed = batch.close();
        expect(batch.close()).toBe(closed);
        await closed;
        await expect(batch.put(`${prefix}late`, Buffer.from('x'))).rejects.toThrow(RangeError);
        const keys: string[] = [];
        for await (const page of store._pages(bucket, prefix)) {
          keys.push(...page.objects.map((o) => o.key));
        }
        expect(keys).toEqual([`${prefix}in`]);
      });

      it('a source of another size than announced stores nothing', async () => {
        const prefix = randomPrefix('batch');
        const batch = open(prefix);
        await expect(batch.put(`${prefix}k`, Buffer.from('four'), { size: 5 })).rejects.toThrow();
        await batch.close();
        const keys: string[] = [];
        for await (const page of store._pages(bucket, prefix)) {
          keys.push(...page.objects.map((o) => o.key));
        }
        expect(keys).toEqual([]);
      });

      it('an empty batch closes', async () => {
        await open(randomPrefix('batch')).close();
      });
    });
  });
}
