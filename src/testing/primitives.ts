/**
 * The primitives part of the conformance suite: the twelve driver primitives, called directly,
 * with the semantics src/store/object-store.ts and src/contract/primitives.ts document.
 *
 * Every test writes under its own {@link randomPrefix}, so the suite runs against a shared bucket.
 * The version tests run only when `flags.versions`; the "exactly one creator" test only when
 * `flags.createMode` is `atomic`; ranged reads only when `flags.ranges`.
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ListPage, ObjectInfo, VersionRecord } from '../contract/primitives.js';
import { Exists, NotFound, StoreError } from '../core/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import { type ConformanceTarget, randomPrefix } from './target.js';

/** Every byte of a stream (test helper; test objects are small). */
async function bytesOf(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** Every page of a listing. */
async function pagesOf(
  store: ObjectStore,
  bucket: string,
  prefix: string,
  options: { delimiter?: string; limit?: number } = {},
): Promise<ListPage[]> {
  const pages: ListPage[] = [];
  for await (const page of store._pages(bucket, prefix, options)) pages.push(page);
  return pages;
}

/** The keys and prefixes of a listing, in the order the store gave them. */
async function namesOf(
  store: ObjectStore,
  bucket: string,
  prefix: string,
  options: { delimiter?: string; limit?: number } = {},
): Promise<{ prefixes: string[]; keys: string[] }> {
  const pages = await pagesOf(store, bucket, prefix, options);
  return {
    prefixes: pages.flatMap((p) => p.prefixes),
    keys: pages.flatMap((p) => p.objects.map((o) => o.key)),
  };
}

async function historyOf(
  store: ObjectStore,
  bucket: string,
  prefix: string,
): Promise<VersionRecord[]> {
  const out: VersionRecord[] = [];
  for await (const record of store._history(bucket, prefix)) out.push(record);
  return out;
}

/** Sort strings in UTF-8 byte order (what S3 uses), not JavaScript's UTF-16 order. */
function byteOrder(keys: readonly string[]): string[] {
  return [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

async function expectNotFound(call: Promise<unknown>): Promise<void> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(NotFound);
  expect(error).not.toBeInstanceOf(StoreError);
}

/** Run `fn` over `items` with at most `width` calls in flight. */
async function inParallel<T>(
  items: readonly T[],
  width: number,
  fn: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
}

/** Register the primitives tests for one driver. */
export function primitivesSuite(target: ConformanceTarget): void {
  describe('primitives', () => {
    const bucket = target.bucket;
    let work: string;
    let store: ObjectStore;

    beforeAll(async () => {
      work = await mkdtemp(path.join(tmpdir(), 'provcat-prim-'));
      store = target.store({ cache: path.join(work, 'cache'), offline: false });
    });
    afterAll(async () => {
      if (work !== undefined) await rm(work, { recursive: true, force: true });
    });

    describe('core', () => {
      it('puts from a path, a stream and bytes; heads, gets and deletes each', async () => {
        const p = randomPrefix();
        const file = path.join(work, 'source.bin');
        const fromPath = randomBytes(3000);
        await writeFile(file, fromPath);
        const fromStream = randomBytes(70_000);
        const fromBytes = new Uint8Array(randomBytes(123));
        const cases: [string, Uint8Array, () => Parameters<ObjectStore['_put']>[2]][] = [
          [`${p}path.bin`, fromPath, () => file],
          [
            `${p}stream.bin`,
            fromStream,
            () => Readable.from([fromStream.subarray(0, 1000), fromStream.subarray(1000)]),
          ],
          [`${p}bytes.bin`, fromBytes, () => fromBytes],
          [`${p}empty.bin`, new Uint8Array(0), () => new Uint8Array(0)],
        ];
        for (const [key, bytes, source] of cases) {
          const put = await store._put(bucket, key, source());
          expect(put.key).toBe(key);
          expect(put.size).toBe(bytes.length);
          expect(put.version).toBeTruthy();

          const head = await store._head(bucket, key);
          expect(head).toMatchObject({ key, size: bytes.length, version: put.version });

          const got = await store._get(bucket, key);
          expect(got.info).toMatchObject({ key, size: bytes.length, version: put.version });
          expect(got.contentLength).toBe(bytes.length);
          expect((await bytesOf(got.body)).equals(Buffer.from(bytes))).toBe(true);
        }
        for (const [key] of cases) {
          await store._delete(bucket, key);
          await expectNotFound(store._head(bucket, key));
          await expectNotFound(store._get(bucket, key));
        }
      });

      it('reports the progress of a put', async () => {
        const key = `${randomPrefix()}progress.bin`;
        const bytes = randomBytes(50_000);
        const seen: number[] = [];
        await store._put(bucket, key, Readable.from([bytes]), {
          size: bytes.length,
          onProgress: (n) => seen.push(n),
        });
        expect(seen.at(-1)).toBe(bytes.length);
        expect(seen).toEqual([...seen].sort((a, b) => a - b));
      });

      it('records the SHA-256 a put passes and heads it back (drivers with sha256Metadata)', async (ctx) => {
        if (store.capabilities.sha256Metadata !== true) {
          ctx.skip(`${store.driver} does not record PutOptions.sha256 (sha256Metadata unset)`);
        }
        const p = randomPrefix();
        const small = randomBytes(1000);
        const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
        await store._put(bucket, `${p}small.bin`, small, { sha256: sha(small) });
        expect((await store._head(bucket, `${p}small.bin`)).sha256).toBe(sha(small));
        // In parts: 11 MiB through parts of 5 MiB (the smallest S3 allows).
        const MiB = 1024 * 1024;
        const parted = target.store({
          cache: path.join(work, 'cache'),
          multipartThreshold: 5 * MiB,
          partSize: 5 * MiB,
        });
        const big = randomBytes(11 * MiB);
        await parted._put(bucket, `${p}big.bin`, Readable.from([big]), { sha256: sha(big) });
        expect((await parted._head(bucket, `${p}big.bin`)).sha256).toBe(sha(big));
        // Without one, none is reported.
        await store._put(bucket, `${p}none.bin`, small);
        expect((await store._head(bucket, `${p}none.bin`)).sha256).toBeUndefined();
        await parted.close();
      }, 120_000);

      it('overwrites: the newest put is what head and get see', async () => {
        const key = `${randomPrefix()}over.txt`;
        const first = await store._put(bucket, key, Buffer.from('first'));
        const second = await store._put(bucket, key, Buffer.from('second, longer'));
        expect(second.version).not.toBe(first.version);
        const head = await store._head(bucket, key);
        expect(head).toMatchObject({ size: 14, version: second.version });
        expect((await bytesOf((await store._get(bucket, key)).body)).toString()).toBe(
          'second, longer',
        );
      });

      it('raises NotFound (not StoreError) for a missing key on head, get and delete', async () => {
        const key = `${randomPrefix()}missing.txt`;
        await expectNotFound(store._head(bucket, key));
        await expectNotFound(store._get(bucket, key));
        await expectNotFound(store._delete(bucket, key));
      });

      it('raises NotFound when deleting a key a second time', async () => {
        const key = `${randomPrefix()}twice.txt`;
        await store._put(bucket, key, Buffer.from('x'));
        await store._delete(bucket, key);
        await expectNotFound(store._delete(bucket, key));
      });

      it('lists one level with a delimiter, and everything without', async () => {
        const p = randomPrefix();
        const keys = [`${p}a.txt`, `${p}b/c.txt`, `${p}b/d.txt`, `${p}e/f/g.txt`, `${p}z.txt`];
        for (const key of keys) await store._put(bucket, key, Buffer.from(key));

        const level = await namesOf(store, bucket, p, { delimiter: '/' });
        expect(level.keys).toEqual([`${p}a.txt`, `${p}z.txt`]);
        expect(level.prefixes).toEqual([`${p}b/`, `${p}e/`]);

        const flat = await namesOf(store, bucket, p);
        expect(flat.prefixes).toEqual([]);
        expect(flat.keys).toEqual(keys);

        const deeper = await namesOf(store, bucket, `${p}b/`, { delimiter: '/' });
        expect(deeper).toEqual({ prefixes: [], keys: [`${p}b/c.txt`, `${p}b/d.txt`] });

        // A prefix that ends inside a name matches the names that start with it.
        const partial = await namesOf(store, bucket, `${p}b/c`);
        expect(partial.keys).toEqual([`${p}b/c.txt`]);

        // Objects in the listing carry their size and version.
        const [page] = await pagesOf(store, bucket, `${p}a`);
        const a = page?.objects[0] as ObjectInfo;
        expect(a).toMatchObject({ key: `${p}a.txt`, size: `${p}a.txt`.length });
        expect(a.version).toBe((await store._head(bucket, `${p}a.txt`)).version);
      });

      it('leaves deleted keys, and folders holding only deleted keys, out of listings', async () => {
        const p = randomPrefix();
        await store._put(bucket, `${p}keep.txt`, Buffer.from('k'));
        await store._put(bucket, `${p}gone.txt`, Buffer.from('g'));
        await store._put(bucket, `${p}dir/deep/only.txt`, Buffer.from('o'));
        await store._delete(bucket, `${p}gone.txt`);
        await store._delete(bucket, `${p}dir/deep/only.txt`);
        expect(await namesOf(store, bucket, p, { delimiter: '/' })).toEqual({
          prefixes: [],
          keys: [`${p}keep.txt`],
        });
        expect((await namesOf(store, bucket, p)).keys).toEqual([`${p}keep.txt`]);
      });

      it('yields nothing for a prefix with no keys', async () => {
        const p = randomPrefix();
        await store._put(bucket, `${p}x/y.txt`, Buffer.from('y'));
        for (const prefix of [`${p}none/`, `${p}x/z`, `${p}y`]) {
          for (const delimiter of ['/', undefined]) {
            const pages = await pagesOf(store, bucket, prefix, { delimiter });
            expect(pages.flatMap((page) => [...page.prefixes, ...page.objects])).toEqual([]);
          }
        }
      });

      it('pages 50 keys 7 at a time, in byte order, none lost or repeated', async () => {
        const p = randomPrefix();
        // Names whose UTF-8 byte order differs from JavaScript's string order (U+FF61 sorts
        // after U+1F600 in bytes, before it in UTF-16), plus '-', '/' and '0' around a folder.
        const names = [
          'k-',
          'k0',
          'K',
          'k.txt',
          '\uff61',
          '\u{1F600}',
          'é',
          'z',
          '~',
          ...Array.from({ length: 35 }, (_, i) => `n${String(i).padStart(2, '0')}`),
          'k/a',
          'k/b',
          'k/\u{1F600}',
          'k/\uff61',
          'm/x',
          'm/y/z',
        ];
        expect(names).toHaveLength(50);
        const keys = names.map((n) => p + n);
        await inParallel(keys, 8, (key) => store._put(bucket, key, Buffer.from(key)));

        const flatPages = await pagesOf(store, bucket, p, { limit: 7 });
        for (const page of flatPages) {
          expect(page.objects.length + page.prefixes.length).toBeLessThanOrEqual(7);
        }
        const flat = flatPages.flatMap((page) => page.objects.map((o) => o.key));
        expect(flat).toEqual(byteOrder(keys));
        expect(flatPages.length).toBeGreaterThanOrEqual(8);

        const levelPages = await pagesOf(store, bucket, p, { delimiter: '/', limit: 7 });
        for (const page of levelPages) {
          expect(page.objects.length + page.prefixes.length).toBeLessThanOrEqual(7);
        }
        const levelKeys = levelPages.flatMap((page) => page.objects.map((o) => o.key));
        const levelPrefixes = levelPages.flatMap((page) => page.prefixes);
        expect(levelKeys).toEqual(byteOrder(keys.filter((k) => !k.slice(p.length).includes('/'))));
        expect(levelPrefixes).toEqual([`${p}k/`, `${p}m/`]);
      });

      it.runIf(target.flags.ranges)(
        'reads byte ranges: first byte, middle, last byte, with Content-Range',
        async () => {
          const key = `${randomPrefix()}ranged.bin`;
          const bytes = randomBytes(1000);
          await store._put(bucket, key, bytes);
          for (const [start, end] of [
            [0, 1],
            [400, 600],
            [999, 1000],
            [0, 1000],
          ] as const) {
            const got = await store._get(bucket, key, { range: { start, end } });
            const body = await bytesOf(got.body);
            expect(body.equals(bytes.subarray(start, end))).toBe(true);
            expect(got.contentLength).toBe(end - start);
            expect(got.contentRange).toBe(`bytes ${start}-${end - 1}/1000`);
            expect(got.info.size).toBe(1000);
          }
        },
      );

      it('keeps keys with %, +, spaces and non-ASCII characters exactly', async () => {
        const p = randomPrefix();
        const keys = [
          `${p}100% sure.txt`,
          `${p}a+b=c.txt`,
          `${p}%2F not a slash`,
          `${p}dir with space/ünïcödé 日本語 ✓.csv`,
          `${p}%25 and + and %20`,
        ];
        for (const key of keys) {
          await store._put(bucket, key, Buffer.from(key));
          expect((await store._head(bucket, key)).key).toBe(key);
          const got = await store._get(bucket, key);
          expect((await bytesOf(got.body)).toString()).toBe(key);
        }
        expect((await namesOf(store, bucket, p)).keys).toEqual(byteOrder(keys));
        expect((await namesOf(store, bucket, p, { delimiter: '/' })).prefixes).toEqual([
          `${p}dir with space/`,
        ]);
      });

      it('holds a file a and a folder a/ side by side', async () => {
        const p = randomPrefix();
        await store._put(bucket, `${p}a`, Buffer.from('file'));
        await store._put(bucket, `${p}a/b`, Buffer.from('below'));
        expect((await store._head(bucket, `${p}a`)).size).toBe(4);
        expect((await store._head(bucket, `${p}a/b`)).size).toBe(5);
        expect(await namesOf(store, bucket, p, { delimiter: '/' })).toEqual({
          prefixes: [`${p}a/`],
          keys: [`${p}a`],
        });
        expect((await namesOf(store, bucket, p)).keys).toEqual([`${p}a`, `${p}a/b`]);
        await store._delete(bucket, `${p}a`);
        expect((await store._head(bucket, `${p}a/b`)).size).toBe(5);
      });
    });

    describe.runIf(target.flags.versions)('versions', () => {
      it('gives the version ID of the current object', async () => {
        const key = `${randomPrefix()}v.txt`;
        const put = await store._put(bucket, key, Buffer.from('one'));
        expect(put.versionId).toBeTruthy();
        expect(await store._versionOf(bucket, key)).toBe(put.versionId);
        expect((await store._head(bucket, key)).versionId).toBe(put.versionId);
        await store._delete(bucket, key);
        await expectNotFound(store._versionOf(bucket, key));
      });

      it('lists history with delete markers, newest first, in key order', async () => {
        const p = randomPrefix();
        const a = `${p}a.txt`;
        const b = `${p}b/c.txt`;
        const a1 = await store._put(bucket, a, Buffer.from('a1'));
        const a2 = await store._put(bucket, a, Buffer.from('a2!'));
        await store._delete(bucket, a);
        const b1 = await store._put(bucket, b, Buffer.from('b'));

        const history = await historyOf(store, bucket, p);
        expect(history.map((r) => r.key)).toEqual([a, a, a, b]);
        const [marker, v2, v1, only] = history as [
          VersionRecord,
          VersionRecord,
          VersionRecord,
          VersionRecord,
        ];
        expect(marker).toMatchObject({ key: a, size: null, current: true });
        expect(v2).toMatchObject({ key: a, versionId: a2.versionId, size: 3, current: false });
        expect(v1).toMatchObject({ key: a, versionId: a1.versionId, size: 2, current: false });
        expect(only).toMatchObject({ key: b, versionId: b1.versionId, size: 1, current: true });
        expect(new Set(history.map((r) => r.versionId)).size).toBe(4);

        // A narrower prefix gives only its keys.
        expect((await historyOf(store, bucket, `${p}b/`)).map((r) => r.versionId)).toEqual([
          b1.versionId,
        ]);
        expect(await historyOf(store, bucket, randomPrefix())).toEqual([]);
      });

      it('lists history after a key (capabilities.startAfter)', async (ctx) => {
        if (store.capabilities.startAfter !== true) {
          ctx.skip('the driver does not start a listing after a key: listings stay sequential');
        }
        const p = randomPrefix();
        const keys = [`${p}a`, `${p}a-b`, `${p}a/`, `${p}a/b`, `${p}b\u00e9`, `${p}b\u{1f600}`];
        for (const key of keys) await store._put(bucket, key, Buffer.from(key));
        await store._put(bucket, `${p}a/b`, Buffer.from('again'));
        await store._delete(bucket, `${p}a-b`);
        const listAfter = async (startAfter: string) => {
          const out: VersionRecord[] = [];
          for await (const r of store._history(bucket, p, { startAfter })) out.push(r);
          return out;
        };
        const all = await historyOf(store, bucket, p);
        const rest = (k: string) =>
          all.filter((r) => Buffer.compare(Buffer.from(r.key), Buffer.from(k)) > 0);
        // After a key: every version of each later key, and none of its own (a version ID
        // marker is never implied); after a string that is no key; after everything; unicode.
        for (const k of [`${p}a`, `${p}a-`, `${p}a/`, `${p}b`, `${p}b\u00e9`, `${p}c`, p]) {
          expect(await listAfter(k), k).toEqual(rest(k));
        }
        expect((await listAfter(`${p}a`)).map((r) => r.key)).toEqual([
          `${p}a-b`,
          `${p}a-b`,
          `${p}a/`,
          `${p}a/b`,
          `${p}a/b`,
          `${p}b\u00e9`,
          `${p}b\u{1f600}`,
        ]);
        expect(await listAfter(`${p}c`)).toEqual([]);
      });

      it('heads and gets an old version after an overwrite and after a delete', async () => {
        const key = `${randomPrefix()}old.txt`;
        const v1 = await store._put(bucket, key, Buffer.from('version one'));
        const v2 = await store._put(bucket, key, Buffer.from('v2'));
        const check = async (info: ObjectInfo, text: string): Promise<void> => {
          const id = info.versionId as string;
          expect(await store._headVersion(bucket, key, id)).toMatchObject({
            key,
            size: text.length,
            versionId: id,
          });
          const got = await store._getVersion(bucket, key, id);
          expect(got.info.versionId).toBe(id);
          expect((await bytesOf(got.body)).toString()).toBe(text);
        };
        await check(v1, 'version one');
        await check(v2, 'v2');
        await store._delete(bucket, key);
        await check(v1, 'version one');
        await check(v2, 'v2');
        if (target.flags.ranges) {
          const got = await store._getVersion(bucket, key, v1.versionId as string, {
            range: { start: 8, end: 11 },
          });
          expect((await bytesOf(got.body)).toString()).toBe('one');
          expect(got.contentRange).toBe('bytes 8-10/11');
        }
      });

      it('raises NotFound for a version the key never had', async () => {
        const p = randomPrefix();
        const other = await store._put(bucket, `${p}other.txt`, Buffer.from('o'));
        await store._put(bucket, `${p}this.txt`, Buffer.from('t'));
        const id = other.versionId as string;
        await expectNotFound(store._headVersion(bucket, `${p}this.txt`, id));
        await expectNotFound(store._getVersion(bucket, `${p}this.txt`, id));
        await expectNotFound(store._headVersion(bucket, `${p}never.txt`, id));
      });

      it('creates only when there is no current object, and again after a delete', async () => {
        const key = `${randomPrefix()}created.txt`;
        const first = await store._create(bucket, key, Buffer.from('first'));
        expect(first.size).toBe(5);
        if (target.flags.createMode === 'atomic') {
          await expect(store._create(bucket, key, Buffer.from('second'))).rejects.toBeInstanceOf(
            Exists,
          );
          expect((await bytesOf((await store._get(bucket, key)).body)).toString()).toBe('first');
        }
        await store._delete(bucket, key);
        const again = await store._create(bucket, key, Buffer.from('again'));
        expect(again.versionId).not.toBe(first.versionId);
        expect((await bytesOf((await store._get(bucket, key)).body)).toString()).toBe('again');
        expect(await store._versionOf(bucket, key)).toBe(again.versionId);
      });

      it('copies the current object and an old version to new versions of another key', async () => {
        const p = randomPrefix();
        const src = `${p}src.txt`;
        const dst = `${p}dst/copy.txt`;
        const v1 = await store._put(bucket, src, Buffer.from('old bytes'));
        await store._put(bucket, src, Buffer.from('new bytes!'));

        const c1 = await store._copy(bucket, src, undefined, dst);
        expect(c1).toMatchObject({ key: dst, size: 10 });
        expect((await bytesOf((await store._get(bucket, dst)).body)).toString()).toBe('new bytes!');

        const c2 = await store._copy(bucket, src, v1.versionId, dst);
        expect(c2).toMatchObject({ key: dst, size: 9 });
        expect(c2.versionId).not.toBe(c1.versionId);
        expect((await bytesOf((await store._get(bucket, dst)).body)).toString()).toBe('old bytes');
        expect(await store._versionOf(bucket, dst)).toBe(c2.versionId);

        const history = await historyOf(store, bucket, dst);
        expect(history.map((r) => [r.versionId, r.current])).toEqual([
          [c2.versionId, true],
          [c1.versionId, false],
        ]);
        // The source is untouched, and the copied versions stay readable.
        expect((await bytesOf((await store._get(bucket, src)).body)).toString()).toBe('new bytes!');
        const old = await store._getVersion(bucket, dst, c1.versionId as string);
        expect((await bytesOf(old.body)).toString()).toBe('new bytes!');
      });

      it('raises NotFound when copying a missing key', async () => {
        const p = randomPrefix();
        await expectNotFound(store._copy(bucket, `${p}nothing`, undefined, `${p}to`));
      });
    });
  });
}
