/**
 * A snapshot crossed by another client's write, on a store whose history listing is built as
 * GCS's is: src/driver-kit/version-history.ts over the generations listed page by page (oldest
 * first within a key), each page from the state at that moment, resumed after the last (key,
 * generation) listed. An overwrite of a key that lands between the page that listed its old
 * generation and the next page makes that listing show the key twice, both versions current
 * (what the project's GCS test server shows when a write lands between two pages of a
 * `versions=true` listing).
 *
 * Such a listing is no snapshot: src/commits/snapshot.ts takes it as "the listings differ" and
 * lists again, in the first listing of a pair (which used to be `StoreError: … listed two
 * current versions` at once) and in the second, streamed into the page tree (which used to be
 * the page tree's `InvalidArgument: … does not follow …`, a usage error). A folder whose every
 * listing is like that is refused after the bounded attempts, with StoreError. The in-memory
 * snapshot (`snapshotFolder`, the streaming one's fallback) already listed again here, since a
 * raced listing never equals the next one; it is checked on the same store all the same.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { commitFolder } from '../../src/commits/commit.js';
import { loadCommit } from '../../src/commits/read.js';
import { SNAPSHOT_ATTEMPTS, snapshotFolder } from '../../src/commits/snapshot.js';
import type { Capabilities, HistoryOptions, VersionRecord } from '../../src/contract/primitives.js';
import { InvalidArgument, StoreError } from '../../src/core/errors.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { historyOf, type ListedVersion } from '../../src/driver-kit/version-history.js';
import { rejection } from '../../src/testing/rejection.js';
import { text } from '../../src/testing/versions.js';
import { MemoryBackend, MemoryStore } from '../support/memory-store.js';

const work = mkdtempSync(path.join(tmpdir(), 'provcat-snapshot-race-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let caches = 0;
const cacheDir = () => path.join(work, `cache-${++caches}`);
const B = 'bkt';
const FOLDER = 'f/';
const OTHER = 'written by another client\n';

/**
 * The memory store with a GCS-shaped history (see the module comment): generations two a page.
 * Listing number `n` of {@link FOLDER} (1, 2, …) is crossed, when `raced(n)`, by an overwrite of
 * `f/b` right after the page that listed its current generation.
 */
class Generations extends MemoryStore {
  /** As GCS: no listing after a key, so every listing is the one sequential listing. */
  override readonly capabilities: Capabilities = { versions: true, ranges: true };
  /** Listings of the folder so far. */
  listings = 0;

  constructor(
    backend: MemoryBackend,
    private readonly raced: (listing: number) => boolean,
  ) {
    super({ backend, cache: cacheDir() });
  }

  override async *_history(
    bucket: string,
    prefix: string,
    options?: HistoryOptions,
  ): AsyncIterable<VersionRecord> {
    const raced = prefix === FOLDER && this.raced(++this.listings);
    const age = new WeakMap<ListedVersion, number>();
    const newerFirst = (x: ListedVersion, y: ListedVersion) =>
      (age.get(y) as number) - (age.get(x) as number);
    yield* historyOf(this.generations(bucket, prefix, raced, age, options?.signal), newerFirst);
  }

  private async *generations(
    bucket: string,
    prefix: string,
    raced: boolean,
    age: WeakMap<ListedVersion, number>,
    signal: AbortSignal | undefined,
  ): AsyncIterable<ListedVersion> {
    let after: { key: string; index: number } | undefined;
    let race = raced;
    let overwrite = false;
    for (;;) {
      // Another client overwrites f/b while this listing is between two pages.
      if (overwrite) await this._put(bucket, 'f/b', Buffer.from(OTHER));
      await new Promise(setImmediate);
      signal?.throwIfAborted();
      const listed: ListedVersion[] = [];
      const keys = [...this.backend.bucket(bucket).keys]
        .filter(([key]) => key.startsWith(prefix))
        .sort(([x], [y]) => compareUtf8(x, y));
      for (const [key, versions] of keys) {
        versions.forEach((v, index) => {
          if (v.data === null) return;
          const seen =
            after &&
            (compareUtf8(key, after.key) < 0 || (key === after.key && index <= after.index));
          if (seen) return;
          const record: ListedVersion = {
            key,
            versionId: v.versionId,
            size: v.data.length,
            current: index === versions.length - 1,
            etag: v.etag,
            lastModified: v.lastModified,
          };
          age.set(record, index);
          listed.push(record);
        });
      }
      // Two a page; a raced listing's page ends at f/b's current generation (a server may always
      // give fewer than asked), and the overwrite lands before the next page.
      let end = Math.min(2, listed.length);
      const b = listed.findIndex((r) => r.key === 'f/b' && r.current);
      overwrite = race && b >= 0 && b < end && b + 1 < listed.length;
      if (overwrite) {
        end = b + 1;
        race = false;
      }
      const items = listed.slice(0, end);
      yield* items;
      if (end === listed.length) return;
      const last = items[end - 1] as ListedVersion;
      after = { key: last.key, index: age.get(last) as number };
    }
  }
}

/** A store racing the listings `raced` says, over a folder of five files `f/a` … `f/e`. */
async function racing(raced: (listing: number) => boolean) {
  const backend = new MemoryBackend();
  const plain = new MemoryStore({ backend, cache: cacheDir() });
  for (const name of ['a', 'b', 'c', 'd', 'e']) {
    await plain._put(B, `${FOLDER}${name}`, Buffer.from(`${name}\n`));
  }
  return { plain, store: new Generations(backend, raced) };
}

/** The current version of every file under the folder, as the backend holds it now. */
function finalVersions(plain: MemoryStore): Array<{ key: string; versionId: string }> {
  return [...plain.backend.bucket(B).keys]
    .filter(([key]) => key.startsWith(FOLDER))
    .sort(([x], [y]) => compareUtf8(x, y))
    .map(([key, versions]) => ({ key, versionId: versions.at(-1)?.versionId as string }));
}

/** The log entries written under `.provcat/log/` (a commit that got through writes one). */
const logEntries = (plain: MemoryStore) =>
  [...plain.backend.bucket(B).keys.keys()].filter((k) => k.startsWith('.provcat/log/'));

describe('a commit whose folder is written between two pages of its listing', () => {
  it('the control: a raced listing shows f/b twice, both current', async () => {
    const { store } = await racing(() => true);
    const seen: VersionRecord[] = [];
    for await (const r of store._history(B, FOLDER)) seen.push(r);
    expect(seen.filter((r) => r.key === 'f/b' && r.current)).toHaveLength(2);
  });

  it.each([
    ['the first listing of the first pair', 1],
    ['the second listing of the first pair', 2],
  ])('inconsistent in %s: listed again, and commits the final versions', async (_, n) => {
    const { plain, store } = await racing((listing) => listing === n);
    const uri = await commitFolder(store, `mem://${B}/${FOLDER}`, 'raced');
    expect(store.listings).toBeGreaterThan(2);
    const commit = await loadCommit(plain, B, uri.at?.id as string);
    expect(commit.files.map(({ key, versionId }) => ({ key, versionId }))).toEqual(
      finalVersions(plain),
    );
    const b = commit.files.find((f) => f.key === 'f/b');
    expect(await text((await plain._getVersion(B, 'f/b', b?.versionId as string)).body)).toBe(
      OTHER,
    );
  });

  it.each([
    ['every listing', () => true],
    ['the second listing of every pair', (listing: number) => listing % 2 === 0],
  ])(
    'inconsistent in %s: StoreError naming the folder after the bounded attempts',
    async (_, raced) => {
      const { plain, store } = await racing(raced);
      const error = await rejection(commitFolder(store, `mem://${B}/${FOLDER}`, 'raced'));
      expect(error).toBeInstanceOf(StoreError);
      expect(error).not.toBeInstanceOf(InvalidArgument);
      const message = (error as Error).message;
      expect(message).toMatch(/^mem:\/\/bkt\/f\/ kept changing/);
      expect(message).toContain(`${SNAPSHOT_ATTEMPTS} pairs of listings differed`);
      expect(message).toContain('(the last: memory listed two current versions of f/b)');
      expect(store.listings).toBeGreaterThanOrEqual(SNAPSHOT_ATTEMPTS);
      expect(store.listings).toBeLessThanOrEqual(2 * SNAPSHOT_ATTEMPTS);
      expect(logEntries(plain)).toEqual([]);
    },
  );
});

describe('the in-memory snapshot (snapshotFolder) on the same store', () => {
  it('inconsistent in the first listing: listed again, the final versions', async () => {
    const { plain, store } = await racing((listing) => listing === 1);
    const files = await snapshotFolder(store, B, FOLDER);
    expect(files.map(({ key, versionId }) => ({ key, versionId }))).toEqual(finalVersions(plain));
  });

  it('inconsistent in every listing: StoreError after the attempts asked for', async () => {
    const { store } = await racing(() => true);
    const error = await rejection(snapshotFolder(store, B, FOLDER, { attempts: 3 }));
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toMatch(/mem:\/\/bkt\/f\/ kept changing: 3 pairs/);
    expect(store.listings).toBe(2 * 3);
  });
});
