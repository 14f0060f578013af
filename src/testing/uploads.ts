/**
 * The uploads part of the conformance suite: the driver contract's own rules for reads
 * (`wholeUpTo` is a hint, never a cut), and — for drivers with a part protocol — `put` of large
 * sources through the one upload engine, and the protocol itself called directly (create, parts
 * in any order, listParts, complete in number order, abort, listUploads).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PartProtocol } from '../contract/primitives.js';
import { isAbort, NotFound } from '../core/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import { type ConformanceTarget, randomPrefix } from './target.js';

async function bytesOf(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** A stream of `data` in chunks of `chunk` bytes, of unknown size to its reader. */
function chunked(data: Buffer, chunk = 64 * 1024): Readable {
  const pieces: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunk) pieces.push(data.subarray(i, i + chunk));
  return Readable.from(pieces);
}

async function openUploads(protocol: PartProtocol, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const u of protocol.listUploads(prefix)) out.push(u.key);
  return out;
}

/** Register the uploads part for one driver. */
export function uploadsSuite(target: ConformanceTarget): void {
  describe('uploads', () => {
    let work: string;
    let store: ObjectStore;
    const prefix = randomPrefix('up');
    const { bucket } = target;

    beforeAll(async () => {
      work = await mkdtemp(path.join(tmpdir(), 'provcat-conf-up-'));
      store = target.store({ cache: path.join(work, 'cache'), offline: false });
    });
    afterAll(async () => {
      await store.close();
      await rm(work, { recursive: true, force: true });
    });

    it('wholeUpTo is a hint: a longer body still streams, whole; a short one may come whole', async () => {
      const big = randomBytes(200_000);
      await store._put(bucket, `${prefix}big.bin`, big);
      const out = await store._get(bucket, `${prefix}big.bin`, { wholeUpTo: 1000 });
      expect(out.bytes).toBeUndefined();
      expect(out.contentLength).toBe(big.length);
      expect((await bytesOf(out.body)).equals(big)).toBe(true);

      const small = randomBytes(500);
      await store._put(bucket, `${prefix}small.bin`, small);
      const whole = await store._get(bucket, `${prefix}small.bin`, { wholeUpTo: 1000 });
      if (whole.bytes !== undefined) {
        expect(whole.bytes.length).toBe(whole.contentLength);
        expect(Buffer.from(whole.bytes).equals(small)).toBe(true);
        whole.release?.();
        whole.release?.(); // idempotent
      } else {
        expect((await bytesOf(whole.body)).equals(small)).toBe(true);
      }
    });
  });

  describe.runIf(target.flags.parts === true)('uploads in parts (the upload engine)', () => {
    let work: string;
    let store: ObjectStore;
    let protocol: PartProtocol;
    let partSize: number;
    let parted: ObjectStore;
    const prefix = randomPrefix('parts');
    const { bucket } = target;

    beforeAll(async () => {
      work = await mkdtemp(path.join(tmpdir(), 'provcat-conf-parts-'));
      store = target.store({ cache: path.join(work, 'cache'), offline: false });
      protocol = store.partProtocol(bucket) as PartProtocol;
      partSize = Math.max(protocol.minPartSize, 256 * 1024);
      parted = target.store({
        cache: path.join(work, 'cache'),
        offline: false,
        partSize: Math.max(partSize, 1024 * 1024),
        multipartThreshold: 0,
      });
    });
    afterAll(async () => {
      await parted.close();
      await store.close();
      await rm(work, { recursive: true, force: true });
    });
    it('the protocol declares its limits', () => {
      expect(protocol.maxParts).toBeGreaterThanOrEqual(1000);
      expect(protocol.minPartSize).toBeGreaterThanOrEqual(1);
      expect(protocol.maxPartSize).toBeGreaterThanOrEqual(protocol.minPartSize);
      expect(typeof protocol.leftover).toBe('string');
    });

    it('put of a file and of an unknown-size stream of several parts, byte for byte', async () => {
      const size = Math.max(partSize, 1024 * 1024) * 2 + 12_345;
      const data = randomBytes(size);
      const file = path.join(work, 'parts.bin');
      await writeFile(file, data);
      const uri = (key: string) => `${store.scheme}://${bucket}/${prefix}${key}`;
      const fromFile = await parted.put(uri('from-file.bin'), file);
      expect(fromFile.size).toBe(size);
      const fromStream = await parted.put(uri('from-stream.bin'), chunked(data));
      expect(fromStream.size).toBe(size);
      for (const key of ['from-file.bin', 'from-stream.bin']) {
        const head = await store._head(bucket, `${prefix}${key}`);
        expect(head.size).toBe(size);
        const back = await bytesOf((await store._get(bucket, `${prefix}${key}`)).body);
        expect(back.equals(data)).toBe(true);
      }
      expect(await openUploads(protocol, prefix)).toEqual([]);
    }, 120_000);

    it('a put cancelled mid-upload leaves no object and no open upload', async () => {
      const data = randomBytes(Math.max(partSize, 1024 * 1024) * 3);
      const controller = new AbortController();
      const key = `${prefix}cancelled.bin`;
      const error = await parted
        .put(`${store.scheme}://${bucket}/${key}`, chunked(data), {
          signal: controller.signal,
          onProgress: () => controller.abort(),
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(isAbort(error)).toBe(true);
      await expect(store._head(bucket, key)).rejects.toBeInstanceOf(NotFound);
      expect(await openUploads(protocol, prefix)).toEqual([]);
    }, 120_000);

    it('the protocol: parts sent in any order complete in number order; abort leaves nothing', async () => {
      const sequential = protocol.sequential === true;
      const key = `${prefix}direct.bin`;
      const a = randomBytes(partSize);
      const b = randomBytes(1000);
      const upload = await protocol.create(key, { contentType: 'application/x-test' });
      const signal = new AbortController().signal;
      const send = (number: number, body: Buffer, offset: number) =>
        protocol.putPart(key, upload, { number, offset, size: body.length, body, signal });
      const order = sequential
        ? [
            [1, a, 0],
            [2, b, partSize],
          ]
        : [
            [2, b, partSize],
            [1, a, 0],
          ];
      const tokens = new Map<number, string>();
      for (const [n, body, offset] of order as Array<[number, Buffer, number]>) {
        tokens.set(n, await send(n, body, offset));
      }
      if (protocol.resumable) {
        const listed = await protocol.listParts(key, upload, { partSize });
        expect(listed).not.toBe('gone');
        const parts = listed as Map<number, { token: string; size: number }>;
        // A store that commits by offset may hold back the unfinished last part.
        expect(parts.get(1)?.size).toBe(a.length);
        if (!sequential) expect(parts.get(2)?.size).toBe(b.length);
      }
      // GC aborts stale uploads it finds listed; a resumable protocol must list them.
      if (protocol.resumable && target.flags.listsUploads !== false) {
        expect(await openUploads(protocol, prefix)).toContain(key);
      }
      await protocol.complete(
        key,
        upload,
        [
          { number: 1, token: tokens.get(1) as string, size: a.length },
          { number: 2, token: tokens.get(2) as string, size: b.length },
        ],
        { size: a.length + b.length, contentType: 'application/x-test' },
      );
      const back = await bytesOf((await store._get(bucket, key)).body);
      expect(back.equals(Buffer.concat([a, b]))).toBe(true);
      expect(await openUploads(protocol, prefix)).not.toContain(key);

      const gone = `${prefix}aborted.bin`;
      const second = await protocol.create(gone, {});
      await protocol.putPart(gone, second, {
        number: 1,
        offset: 0,
        size: a.length,
        body: a,
        signal,
      });
      await protocol.abort(gone, second);
      await protocol.abort(gone, second); // already gone: not an error
      await expect(store._head(bucket, gone)).rejects.toBeInstanceOf(NotFound);
      expect(await openUploads(protocol, prefix)).not.toContain(gone);
    }, 120_000);
  });
}
