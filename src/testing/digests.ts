/**
 * The digests part of the conformance suite: what provcat knows of an object's bytes and how
 * push, diff and commit compare them, and the Content-Type of what it writes.
 *
 * - `diff` against now and `commit`'s "no change" check use one rule, so they agree (versioned
 *   targets);
 * - `push` skips an object another client wrote (the target's {@link TargetSdk}) when a digest
 *   its listing states matches the local file, and sends one of other bytes of the same size;
 * - `put`, `push` and `upload` store the Content-Type of the name's extension, in one request
 *   and in parts, unless `contentType` says otherwise; the store's own SDK reads it back.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { StoreError } from '../core/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import { runCli } from './fault-cli.js';
import { rejection } from './rejection.js';
import { type ConformanceTarget, randomPrefix, type TargetSdk } from './target.js';

/** Register the digests part for one driver. */
export function digestsSuite(target: ConformanceTarget): void {
  describe('digests and content types', () => {
    let work: string;
    let store: ObjectStore;
    const { bucket, sdk, flags } = target;
    const prefix = randomPrefix('dg');
    const uri = (key: string) => `${store.scheme}://${bucket}/${key}`;

    beforeAll(async () => {
      work = await mkdtemp(path.join(tmpdir(), 'provcat-conf-dg-'));
      store = target.store({ cache: path.join(work, 'cache'), offline: false });
    });
    afterAll(async () => {
      await store.close();
      await rm(work, { recursive: true, force: true });
    });

    it.runIf(flags.versions && flags.createMode !== 'none')(
      'commit and diff agree: diff against now is empty after a commit, and shows exactly the file changed',
      async () => {
        const p = `${prefix}agree/`;
        for (const [rel, body] of [
          ['a.txt', 'alpha\n'],
          ['b.csv', 'x,y\n1,2\n'],
          ['deep/c.json', '{"c":1}\n'],
        ]) {
          await store.put(uri(`${p}${rel}`), Buffer.from(body as string));
        }
        const c1 = await store.commit(uri(p), 'one');
        const none = await store.diff(c1);
        expect([none.added, none.removed, none.changed]).toEqual([[], [], []]);
        // The commit's own check agrees: nothing to record.
        const same = await rejection(store.commit(uri(p), 'again'));
        expect(same).toBeInstanceOf(StoreError);
        expect((same as Error).message).toMatch(/no change since commit 1/);

        await store.put(uri(`${p}b.csv`), Buffer.from('x,y\n3,4\n'));
        const one = await store.diff(c1);
        expect(one.added).toEqual([]);
        expect(one.removed).toEqual([]);
        expect(one.changed.map((c) => [c.path, c.from.size, c.to.size])).toEqual([['b.csv', 8, 8]]);
        const c2 = await store.commit(uri(p), 'two');
        const after = await store.diff(c2);
        expect([after.added, after.removed, after.changed]).toEqual([[], [], []]);
        expect((await store.diff(c1, c2)).changed.map((c) => c.path)).toEqual(['b.csv']);
      },
      120_000,
    );

    it.runIf(sdk !== undefined)(
      "push skips an object another client wrote with the file's bytes, and sends one of other bytes of the same size",
      async () => {
        const p = `${prefix}foreign/`;
        const [same, local, theirs] = [randomBytes(3000), randomBytes(3000), randomBytes(3000)];
        const dir = path.join(work, 'foreign');
        await mkdir(dir, { recursive: true });
        await writeFile(path.join(dir, 'same.bin'), same);
        await writeFile(path.join(dir, 'other.bin'), local);
        const foreign = sdk as TargetSdk;
        await foreign.put(`${p}same.bin`, same);
        await foreign.put(`${p}other.bin`, theirs);

        const head = vi.spyOn(store, '_head');
        const r = await store.push(dir, uri(p));
        // The listing's digest decided: no HEAD for objects this small.
        expect(head).not.toHaveBeenCalled();
        head.mockRestore();
        expect({ uploaded: r.uploaded, skipped: r.skipped }).toEqual({ uploaded: 1, skipped: 1 });
        expect(r.actions).toEqual([{ action: 'upload', path: 'other.bin', size: 3000 }]);
        const back = await store.fetch(uri(`${p}other.bin`));
        expect((await readFile(back.path)).equals(local)).toBe(true);
        // And the push is now a no-op.
        expect((await store.push(dir, uri(p))).skipped).toBe(2);
      },
      60_000,
    );

    it.runIf(sdk?.contentType !== undefined)(
      'put, push and upload store the type of the extension (in one request and in parts); contentType overrides',
      async () => {
        const read = (sdk as TargetSdk).contentType as NonNullable<TargetSdk['contentType']>;
        const protocol = store.partProtocol(bucket);
        const partSize = Math.max(protocol?.minPartSize ?? 0, 1024 * 1024);
        // A store whose uploads above one part go in parts (when the driver has them).
        const parted = target.store({
          cache: path.join(work, 'cache'),
          offline: false,
          partSize,
          multipartThreshold: partSize,
        });
        const expected: Record<string, string> = {
          'a.csv': 'text/csv',
          'b.json': 'application/json',
          'c.bin': 'application/octet-stream',
          noext: 'application/octet-stream',
          'big.csv': 'text/csv',
        };
        const dir = path.join(work, 'types');
        await mkdir(dir, { recursive: true });
        for (const name of Object.keys(expected)) {
          const size = name === 'big.csv' ? 2 * partSize + 1 : 100;
          await writeFile(path.join(dir, name), randomBytes(size));
        }
        let created = 0;
        const own = parted.partProtocol.bind(parted);
        const counted = new WeakSet<object>(); // a driver may hand out one protocol again
        vi.spyOn(parted, 'partProtocol').mockImplementation((b) => {
          const made = own(b);
          if (made !== undefined && !counted.has(made)) {
            counted.add(made);
            const create = made.create.bind(made);
            made.create = (...args) => {
              created++;
              return create(...args);
            };
          }
          return made;
        });
        try {
          const pp = `${prefix}types-put/`;
          const pushed = `${prefix}types-push/`;
          for (const name of Object.keys(expected)) {
            await parted.put(uri(`${pp}${name}`), path.join(dir, name));
          }
          await parted.push(dir, uri(pushed));
          // The big file went in parts, once by put and once by push.
          expect(created).toBe(protocol === undefined ? 0 : 2);
          for (const name of Object.keys(expected)) {
            expect([name, await read(`${pp}${name}`)]).toEqual([name, expected[name]]);
            expect([name, await read(`${pushed}${name}`)]).toEqual([name, expected[name]]);
          }
          // --content-type overrides, for every file.
          const op = `${prefix}types-override/`;
          await parted.put(uri(`${op}put.csv`), path.join(dir, 'a.csv'), {
            contentType: 'text/x-given',
          });
          await parted.push(dir, uri(`${op}push/`), { contentType: 'text/x-given' });
          expect(await read(`${op}put.csv`)).toBe('text/x-given');
          for (const name of Object.keys(expected)) {
            expect([name, await read(`${op}push/${name}`)]).toEqual([name, 'text/x-given']);
          }
        } finally {
          await parted.close();
        }

        const make = target.stage;
        if (make === undefined) return;
        const stage = make({ prefix: randomPrefix('dg-stage').slice(0, -1), partSize });
        try {
          for (const name of ['a.csv', 'b.json', 'noext', 'big.csv']) {
            const loc = await stage.upload(path.join(dir, name));
            expect([name, loc.contentType]).toEqual([name, expected[name]]);
            expect([name, await read(stage.keyOf(loc.uri))]).toEqual([name, expected[name]]);
          }
          const given = await stage.upload(path.join(dir, 'a.csv'), {
            contentType: 'text/x-given',
          });
          expect(await read(stage.keyOf(given.uri))).toBe('text/x-given');
        } finally {
          await stage.close();
        }
      },
      180_000,
    );

    it.runIf(sdk?.contentType !== undefined && target.env !== undefined)(
      'the CLI: put and push set the type of the extension, --content-type overrides',
      async () => {
        const read = (sdk as TargetSdk).contentType as NonNullable<TargetSdk['contentType']>;
        const dir = path.join(work, 'cli-types');
        await mkdir(dir, { recursive: true });
        await writeFile(path.join(dir, 'a.csv'), 'x,y\n');
        await writeFile(path.join(dir, 'b.json'), '{}\n');
        const env = { ...process.env, ...target.env, PROVCAT_CACHE_DIR: path.join(work, 'cli') };
        const run = async (...args: string[]) => {
          const r = await runCli([...args, '--json'], { env });
          expect([r.code, r.stderr]).toEqual([0, '']);
        };
        const p = `${prefix}cli/`;
        await run('put', path.join(dir, 'a.csv'), uri(`${p}put.csv`));
        await run(
          'put',
          path.join(dir, 'a.csv'),
          uri(`${p}given`),
          '--content-type',
          'text/x-given',
        );
        await run('push', dir, uri(`${p}pushed/`));
        await run('push', dir, uri(`${p}given/`), '--content-type', 'text/x-given');
        expect(await read(`${p}put.csv`)).toBe('text/csv');
        expect(await read(`${p}given`)).toBe('text/x-given');
        expect(await read(`${p}pushed/a.csv`)).toBe('text/csv');
        expect(await read(`${p}pushed/b.json`)).toBe('application/json');
        expect(await read(`${p}given/a.csv`)).toBe('text/x-given');
        expect(await read(`${p}given/b.json`)).toBe('text/x-given');
      },
      120_000,
    );
  });
}
