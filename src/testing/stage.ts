/**
 * The managed-stage part of the conformance suite, for targets that give a `stage` factory: the
 * one stage (src/lake/stage.ts) on the driver's storage — round trips whose SHA-256 is
 * the bytes', verified and ranged reads, integrity faults on objects changed behind the stage's
 * back, containment, cancellation leaving nothing, and the listing and conditional delete that
 * garbage collection relies on.
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NotFound, ObjectIntegrityError, PreconditionFailed } from '../core/errors.js';
import type { DataLocation } from '../lake/data-location.js';
import type { Stage } from '../lake/stage.js';
import { type ConformanceTarget, randomPrefix } from './target.js';

const MiB = 1024 * 1024;

function sha256(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

async function collect(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a failure');
    },
    (error: unknown) => error,
  );
}

function chunked(data: Buffer, chunk = 256 * 1024): Readable {
  const pieces: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunk) pieces.push(data.subarray(i, i + chunk));
  return Readable.from(pieces);
}

/** Register the stage part for one driver (when the target gives a stage). */
export function stageSuite(target: ConformanceTarget): void {
  const make = target.stage;
  describe.runIf(make !== undefined)('managed stage', () => {
    let work: string;
    let stage: Stage;
    let partSize: number;

    beforeAll(async () => {
      work = await mkdtemp(path.join(tmpdir(), 'provcat-conf-stage-'));
      stage = (make as NonNullable<typeof make>)({ prefix: randomPrefix('stage').slice(0, -1) });
      partSize = stage.partSize;
    });
    afterAll(async () => {
      await stage.close();
      await rm(work, { recursive: true, force: true });
    });

    it('round trips 0 B, 1 B, one part and one part + 1, from a file and from a stream', async () => {
      for (const size of [0, 1, partSize, partSize + 1]) {
        const data = randomBytes(size);
        const file = path.join(work, `rt-${size}.bin`);
        await writeFile(file, data);
        for (const source of [file, chunked(data)]) {
          const loc = await stage.upload(source, { contentType: 'video/mp4' });
          expect(loc).toMatchObject({
            sizeBytes: size,
            sha256: sha256(data),
            contentType: 'video/mp4',
          });
          expect(stage.contain(loc.uri)).toMatch(/^[0-9a-f]{2}\/[0-9a-f]{32}$/);
          expect((await collect(await stage.open(loc))).equals(data)).toBe(true);
        }
      }
    }, 180_000);

    it('range reads give exactly [start, end); bad ranges are refused before any I/O', async () => {
      const data = randomBytes(100_000);
      const loc = await stage.upload(chunked(data));
      for (const [start, end] of [
        [0, 1],
        [99_999, 100_000],
        [1234, 56_789],
        [0, 100_000],
      ] as const) {
        expect(
          (await collect(await stage.openRange(loc, start, end))).equals(data.subarray(start, end)),
        ).toBe(true);
      }
      for (const [start, end] of [
        [5, 5],
        [6, 5],
        [0, 100_001],
      ] as const) {
        await expect(stage.openRange(loc, start, end)).rejects.toMatchObject({
          name: 'InvalidRange',
        });
      }
    });

    it('a location that lies about size or digest is caught on read', async () => {
      const data = randomBytes(50_000);
      const loc = await stage.upload(chunked(data));
      const cases: Array<[Partial<DataLocation>, string]> = [
        [{ sizeBytes: loc.sizeBytes + 1 }, 'PrematureEof'],
        [{ sizeBytes: loc.sizeBytes - 1 }, 'TooLong'],
        [{ sha256: sha256(Buffer.from('other')) }, 'DigestMismatch'],
      ];
      for (const [lie, kind] of cases) {
        const error = await failure(collect(await stage.open({ ...loc, ...lie })));
        expect(error).toBeInstanceOf(ObjectIntegrityError);
        expect((error as ObjectIntegrityError).kind).toBe(kind);
      }
      const bad = await failure(stage.open({ ...loc, sha256: 'not-a-digest' }));
      expect((bad as ObjectIntegrityError).kind).toBe('InvalidDigest');
    });

    it('a location outside the stage is OutsideStage, before any I/O', async () => {
      const data = randomBytes(10);
      const loc = await stage.upload(chunked(data));
      const key = stage.contain(loc.uri);
      const sibling = loc.uri.replace(`/${key}`, `x/${key}`);
      for (const uri of [sibling, `${loc.uri}/..`, loc.uri.replace(/\/[^/]+$/, '/%2e%2e')]) {
        const error = await failure(stage.open({ ...loc, uri }));
        expect((error as ObjectIntegrityError).kind).toBe('OutsideStage');
      }
    });

    it('a cancelled upload publishes nothing and leaves no open upload', async () => {
      const before = new Set<string>();
      for await (const o of stage.list()) before.add(o.key);
      const controller = new AbortController();
      let sent = 0;
      const source = new Readable({
        read() {
          if (sent++ < 1) {
            this.push(randomBytes(MiB));
            setTimeout(() => controller.abort(), 30);
          }
        },
      });
      await expect(stage.upload(source, { signal: controller.signal })).rejects.toMatchObject({
        name: 'AbortError',
      });
      const after: string[] = [];
      for await (const o of stage.list()) if (!before.has(o.key)) after.push(o.key);
      expect(after.filter((k) => !k.startsWith('.provcat/'))).toEqual([]);
      const open: string[] = [];
      for await (const u of stage.openUploads()) open.push(u.key);
      expect(open).toEqual([]);
    });

    it('list gives every object with its key and version; deleteIf deletes only that version', async () => {
      const one = await stage.upload(chunked(randomBytes(1000)));
      const two = await stage.upload(chunked(randomBytes(2000)));
      const listed = new Map<string, { uri: string; size: number; version: string }>();
      for await (const o of stage.list()) listed.set(o.uri, o);
      expect(listed.get(one.uri)?.size).toBe(1000);
      expect(listed.get(two.uri)?.size).toBe(2000);
      const keys = [...listed.values()].map((o) => o.uri);
      expect(keys).toContain(one.uri);
      const version = listed.get(one.uri)?.version as string;
      await expect(stage.deleteIf(one.uri, `${version}-not`)).rejects.toBeInstanceOf(
        PreconditionFailed,
      );
      await stage.deleteIf(one.uri, version);
      await expect(stage.open(one)).rejects.toBeInstanceOf(NotFound);
      await expect(stage.deleteIf(one.uri, version)).rejects.toBeInstanceOf(NotFound);
      expect((await collect(await stage.open(two))).length).toBe(2000);
    });
  });
}
