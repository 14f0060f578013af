/**
 * The managed stage on a server, the same cases for every cloud driver (S3 on Ceph, Azure on
 * Azurite, GCS on the project's test server): round trips whose SHA-256 equals `sha256sum` with
 * the request pattern each size takes, integrity faults on objects planted behind the stage's
 * back, refusals before any request, exact ranges and ranges broken on the way, presigned URLs,
 * cancellation leaving nothing, and tenant stages. A driver's test file calls
 * {@link stageServerSuite} with its {@link StageHarness} (test/support/stage-targets.ts); what
 * only one driver has stays in test/lake/lake-<driver>.test.ts, on the same harness.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectIntegrityError } from '../../src/core/errors.js';
import { type DataLocation, type Stage, StageConfigError } from '../../src/lake/index.js';
import { rejection } from '../../src/testing/rejection.js';
import {
  chunked,
  collect,
  drain,
  drainTo,
  MiB,
  sha256sum,
  writeRandomFile,
} from '../fixtures/lake-helpers.js';

/** The prefix every harness's stage sits at. */
export const PREFIX = 'managed/v1';

/** How a response is broken on its way back (by a proxy or by the server). */
export type RangeFault = 'pass' | 'strip-range' | 'wrong-content-range' | 'cut-body';

/** The requests a driver sent from {@link StageHarness.watch} on. */
export interface RequestWatch {
  /** Every request's name, in order (`GetObject`, `GetBlob`, `GET media`). */
  names(): string[];
  /** The counts an upload's request pattern is compared with ({@link StageHarness.patterns}). */
  pattern(): Record<string, number>;
  /** The part (block, chunk) requests sent. */
  parts(): number;
}

/** Options of {@link StageHarness.stage}. */
export interface HarnessStageOptions {
  partSize?: number | undefined;
  tenant?: string | undefined;
  /** One of {@link StageHarness.readModes} (the read path a stage takes). */
  mode?: string | undefined;
  /** A stage whose answers are broken this way (one of {@link StageHarness.faults}). */
  fault?: RangeFault | undefined;
}

/** One cloud driver's stage on its test server, with access behind the stage's back. */
export interface StageHarness {
  /** `S3`, `Azure`, `GCS`. */
  name: string;
  /** The URI scheme of its locations. */
  scheme: string;
  /** Another driver's scheme (a location of it is outside the stage). */
  foreignScheme: string;
  /** `describe`, or the variant that skips when the server is not there. */
  describe(name: string, fn: () => void): void;
  /** Make the bucket (container), servers and proxies; called in `beforeAll`. */
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /** The bucket (container) the stage is in (after setup). */
  bucket(): string;
  /** A stage at {@link PREFIX}; its part size is the stage's default unless given. */
  stage(options?: HarnessStageOptions): Stage;
  /** Stop any response breaking that {@link HarnessStageOptions.fault} started. */
  heal(): void;
  /** The response faults the driver's server or proxy can make (beyond `pass`). */
  faults: RangeFault[];
  /** The read paths a stage can take (Azure: lean and SDK); one unnamed path when absent. */
  readModes?: string[] | undefined;
  /** Start recording the requests every stage of this harness sends. */
  watch(): RequestWatch;
  /** Request patterns by size: [label, size, {@link RequestWatch.pattern}]. */
  patterns: Array<[string, number, Record<string, number>]>;
  /** {@link RequestWatch.parts} of 200 MiB in 64 MiB parts. */
  bigParts: number;
  /** The name a ranged read's one request has. */
  rangeRequest: string;
  /** The stored bytes of `key`, as another client reads them. */
  read(key: string): Promise<Buffer>;
  /** The Content-Type stored for `key`. */
  contentType(key: string): Promise<string | undefined>;
  /** Write `body` at `key` with the store's own SDK (behind the stage's back). */
  plant(key: string, body: Buffer): Promise<void>;
  /** Delete `key` with the store's own SDK. */
  remove(key: string): Promise<void>;
  /** The committed keys under `prefix`, sorted. */
  keys(prefix: string): Promise<string[]>;
  /** A stage that can presign (GCS: with a signing key). */
  presigner?: (() => Stage) | undefined;
  /** A query parameter of a presigned URL that must not show when it is printed. */
  secret: string;
  /** Seconds until a presigned URL (revealed) expires, as the URL says. */
  expiresIn(url: string): number;
  /** What the driver checks after a cancelled upload (no open upload, no session left). */
  afterAbort(watch: RequestWatch, stage: Stage): Promise<void>;
}

/** The {@link ObjectIntegrityError} `promise` rejects with (any other outcome fails). */
export async function integrityFailure(promise: Promise<unknown>): Promise<ObjectIntegrityError> {
  const error = await rejection(promise);
  if (error instanceof ObjectIntegrityError) return error;
  throw error;
}

/** Register the shared server stage cases for one driver. */
export function stageServerSuite(h: StageHarness): void {
  h.describe(`${h.name} stage on the test server`, () => {
    let dir: string;
    const keyOf = (loc: DataLocation) => loc.uri.slice(`${h.scheme}://${h.bucket()}/`.length);
    const small = (o: HarnessStageOptions = {}) => h.stage({ partSize: 5 * MiB, ...o });
    const modes = h.readModes ?? [''];
    const label = (mode: string) => (mode ? ` (${mode} reads)` : '');

    beforeAll(async () => {
      dir = await mkdtemp(path.join(tmpdir(), `stage-${h.scheme}-`));
      await h.setup();
    });
    afterAll(async () => {
      await h.teardown();
      await rm(dir, { recursive: true, force: true });
    });

    describe('round trips', () => {
      it.each(h.patterns)(
        '%s, from a path and from a stream, byte for byte',
        async (_l, size, pattern) => {
          const file = path.join(dir, `src-${size}`);
          await writeRandomFile(file, size);
          const expected = await sha256sum(file);
          const bytes = await readFile(file);
          for (const source of [file, chunked(bytes, 100_000)]) {
            const s = small();
            const watch = h.watch();
            const loc = await s.upload(source, { contentType: 'video/mp4' });
            expect(watch.pattern()).toEqual(pattern);
            expect(loc).toMatchObject({
              sizeBytes: size,
              sha256: expected,
              contentType: 'video/mp4',
            });
            const uri = `^${h.scheme}://${h.bucket()}/${PREFIX}/[0-9a-f]{2}/[0-9a-f]{32}$`;
            expect(loc.uri).toMatch(new RegExp(uri));
            expect((await h.read(keyOf(loc))).equals(bytes)).toBe(true);
            expect(await h.contentType(keyOf(loc))).toBe('video/mp4');
            expect(await drain(await s.open(loc))).toEqual({ size, sha256: expected });
            for (const mode of modes) {
              expect(await drainTo(small({ mode }), loc)).toEqual({ size, sha256: expected });
            }
          }
        },
      );

      it('200 MiB in 64 MiB parts: 4 parts, digest equals sha256sum, verified read', async () => {
        const file = path.join(dir, 'big');
        await writeRandomFile(file, 200 * MiB);
        const expected = await sha256sum(file);
        const s = h.stage();
        expect(s.partSize).toBe(64 * MiB);
        const watch = h.watch();
        const loc = await s.upload(file);
        expect(loc).toMatchObject({ sizeBytes: 200 * MiB, sha256: expected });
        expect(watch.parts()).toBe(h.bigParts);
        expect(await drain(await s.open(loc))).toEqual({ size: 200 * MiB, sha256: expected });
        expect(await drainTo(s, loc)).toEqual({ size: 200 * MiB, sha256: expected });
        await rm(file);
        await h.remove(keyOf(loc));
      }, 300_000);
    });

    describe('integrity faults on objects planted behind the stage', () => {
      const data = randomBytes(200_000);
      let good: DataLocation;
      beforeAll(async () => {
        good = await small().upload(chunked(data));
      });
      async function planted(body: Buffer): Promise<DataLocation> {
        const key = `${PREFIX}/ff/${randomBytes(16).toString('hex')}`;
        await h.plant(key, body);
        return { ...good, uri: `${h.scheme}://${h.bucket()}/${key}` };
      }

      for (const mode of modes) {
        describe(`planted objects${label(mode)}`, () => {
          let s: Stage;
          beforeAll(() => {
            s = h.stage({ mode });
          });

          it('the intact object verifies, on open and readTo', async () => {
            const whole = { size: data.length, sha256: good.sha256 };
            expect(await drain(await s.open(good))).toEqual(whole);
            expect(await drainTo(s, good)).toEqual(whole);
          });

          it('one byte short: PrematureEof with expected and observed, on open and readTo', async () => {
            const short = await planted(data.subarray(0, data.length - 1));
            const shortfall = {
              kind: 'PrematureEof',
              expected: data.length,
              observed: data.length - 1,
            };
            expect(await integrityFailure(drain(await s.open(short)))).toMatchObject(shortfall);
            expect(await integrityFailure(drainTo(s, short))).toMatchObject(shortfall);
          });

          it('one byte long: TooLong, on open and readTo', async () => {
            const long = await planted(Buffer.concat([data, Buffer.from([1])]));
            expect((await integrityFailure(drain(await s.open(long)))).kind).toBe('TooLong');
            const error = await integrityFailure(drainTo(s, long));
            expect(error).toMatchObject({ kind: 'TooLong', expected: data.length });
          });

          it('one flipped byte: DigestMismatch, on open and readTo', async () => {
            for (const at of [7, 123_456]) {
              const flipped = Buffer.from(data);
              flipped[at] = (flipped[at] as number) ^ 1;
              const bad = await planted(flipped);
              expect((await integrityFailure(drain(await s.open(bad)))).kind).toBe(
                'DigestMismatch',
              );
              expect((await integrityFailure(drainTo(s, bad))).kind).toBe('DigestMismatch');
            }
          });
        });
      }

      it("readTo: the sink's own failure (a full disk) comes out as itself", async () => {
        const full = new Error('ENOSPC: no space left on device');
        const sink = {
          data() {
            throw full;
          },
        };
        await expect(h.stage().readTo(good, sink)).rejects.toBe(full);
      });

      it('a missing object is NotFound, not an integrity error', async () => {
        const gone = { ...good, uri: `${h.scheme}://${h.bucket()}/${PREFIX}/00/${'0'.repeat(32)}` };
        await expect(h.stage().open(gone)).rejects.toMatchObject({ code: 'NotFound' });
        await expect(drainTo(h.stage(), gone)).rejects.toMatchObject({ code: 'NotFound' });
      });

      it('a bad digest, a location outside the stage, a bad range or option: refused before any request', async () => {
        const s = h.stage();
        const b = h.bucket();
        const watch = h.watch();
        for (const sha256 of ['z'.repeat(64), good.sha256.slice(1)]) {
          expect((await integrityFailure(s.open({ ...good, sha256 }))).kind).toBe('InvalidDigest');
        }
        for (const uri of [
          `${h.scheme}://${b}/${PREFIX}x/ab/cd`,
          `${h.scheme}://${b}/managed/ab/cd`,
          `${h.scheme}://other-bucket/${PREFIX}/ab/cd`,
          `${h.scheme}://${b}/${PREFIX}/../v2/ab`,
          `${h.scheme}://${b}/${PREFIX}/%2e%2e/v2/ab`,
          `${h.foreignScheme}://${b}/${PREFIX}/ab/cd`,
        ]) {
          const outside = { kind: 'OutsideStage' };
          expect(await integrityFailure(s.open({ ...good, uri })), uri).toMatchObject(outside);
          expect(await integrityFailure(s.openRange({ ...good, uri }, 0, 1))).toMatchObject(
            outside,
          );
          expect(await integrityFailure(s.presign({ ...good, uri }))).toMatchObject(outside);
        }
        await expect(s.openRange(good, 5, 5)).rejects.toMatchObject({ code: 'InvalidRange' });
        for (const partsInFlight of [0, 17]) {
          await expect(s.upload(chunked(data), { partsInFlight })).rejects.toThrow(
            StageConfigError,
          );
        }
        expect(watch.names()).toEqual([]);
      });

      for (const mode of modes) {
        describe(`ranges${label(mode)}`, () => {
          it('one ranged request returns exactly [start, end)', async () => {
            const s = h.stage({ mode });
            const ranges = [
              [0, 1],
              [0, data.length],
              [500, 1_500],
              [100_000, 100_123],
              [data.length - 1, data.length],
            ] as const;
            const watch = h.watch();
            for (const [start, end] of ranges) {
              const got = await collect(await s.openRange(good, start, end));
              expect(got.equals(data.subarray(start, end))).toBe(true);
            }
            expect(watch.names()).toEqual(ranges.map(() => h.rangeRequest));
          });

          it('a declared size that is wrong is RangeMismatch (the Content-Range total differs)', async () => {
            const wrong = { ...good, sizeBytes: good.sizeBytes + 10 };
            const error = await integrityFailure(h.stage({ mode }).openRange(wrong, 0, 10));
            expect(error.kind).toBe('RangeMismatch');
          });

          it('through a faithful path ranged and whole reads work', async () => {
            const s = h.stage({ mode, fault: 'pass' });
            const got = await collect(await s.openRange(good, 10, 20));
            expect(got.equals(data.subarray(10, 20))).toBe(true);
            expect(await drain(await s.open(good))).toMatchObject({ size: data.length });
          });

          const refused = {
            'strip-range': 'ignored (200, whole body)',
            'wrong-content-range': 'answered with a wrong Content-Range',
          };
          const typed = (['strip-range', 'wrong-content-range'] as const).filter((f) =>
            h.faults.includes(f),
          );
          for (const fault of typed) {
            it(`a Range ${refused[fault]} is RangeMismatch after one request, no second`, async () => {
              try {
                const s = h.stage({ mode, fault });
                const watch = h.watch();
                expect((await integrityFailure(s.openRange(good, 100, 200))).kind).toBe(
                  'RangeMismatch',
                );
                expect(watch.names()).toEqual([h.rangeRequest]);
              } finally {
                h.heal();
              }
            });
          }

          if (h.faults.includes('cut-body')) {
            it('a body cut off mid-range is PrematureEof with the range counts', async () => {
              try {
                const s = h.stage({ mode, fault: 'cut-body' });
                const cut = await integrityFailure(drain(await s.openRange(good, 0, 150_000)));
                expect(cut).toMatchObject({ kind: 'PrematureEof', expected: 150_000 });
                expect(cut.observed).toBeLessThan(150_000);
              } finally {
                h.heal();
              }
            });
          }
        });
      }
    });

    it('presigned URLs work with fetch and a Range header, and are redacted when printed', async () => {
      const data = randomBytes(50_000);
      const s = h.presigner?.() ?? small();
      const loc = await s.upload(chunked(data));
      const url = await s.presign(loc, { expiresIn: 300 });
      expect(String(url)).toBe('[redacted]');
      expect(JSON.stringify({ url })).toBe('{"url":"[redacted]"}');
      expect(inspect(url)).not.toContain(h.secret);
      expect(url.expiresAt.getTime()).toBeGreaterThan(Date.now() + 290_000);
      const whole = await fetch(url.reveal());
      expect(whole.status).toBe(200);
      expect(Buffer.from(await whole.arrayBuffer()).equals(data)).toBe(true);
      const ranged = await fetch(url.reveal(), { headers: { Range: 'bytes=1000-1999' } });
      expect(ranged.status).toBe(206);
      expect(ranged.headers.get('content-range')).toBe(`bytes 1000-1999/${data.length}`);
      expect(Buffer.from(await ranged.arrayBuffer()).equals(data.subarray(1000, 2000))).toBe(true);
      await expect(s.presign(loc, { expiresIn: 3601 })).rejects.toThrow(StageConfigError);
      const hour = h.expiresIn((await s.presign(loc, { expiresIn: 3600 })).reveal());
      expect(hour).toBeLessThanOrEqual(3600);
      expect(hour).toBeGreaterThan(3500);
    });

    it('an abort mid-upload rejects with AbortError and leaves no object', async () => {
      const before = await h.keys(`${PREFIX}/`);
      const s = small();
      const controller = new AbortController();
      const watch = h.watch();
      const upload = s.upload(chunked(randomBytes(40 * MiB), MiB), {
        signal: controller.signal,
        partsInFlight: 2,
        onProgress: () => controller.abort(),
      });
      await expect(upload).rejects.toMatchObject({ name: 'AbortError' });
      expect(watch.parts()).toBeGreaterThan(0);
      expect(watch.parts()).toBeLessThan(8);
      expect(await h.keys(`${PREFIX}/`)).toEqual(before);
      await h.afterAbort(watch, s);
      expect(await h.keys(`${PREFIX}/`)).toEqual(before);
    });

    it('a tenant stage writes below prefix/tenant and refuses its siblings', async () => {
      const s = small({ tenant: 'acme' });
      const loc = await s.upload(chunked(randomBytes(10)));
      expect(loc.uri.startsWith(`${h.scheme}://${h.bucket()}/${PREFIX}/acme/`)).toBe(true);
      const other = { ...loc, uri: loc.uri.replace('/acme/', '/acme2/') };
      expect((await integrityFailure(s.open(other))).kind).toBe('OutsideStage');
    });
  });
}
