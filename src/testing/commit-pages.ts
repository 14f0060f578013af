/**
 * The commit pages part of the conformance suite (`provcat.commit/2`, docs/commit-format.md), on
 * every driver that keeps versions: a commit of several pages, a child that writes only the
 * pages that changed, diff by page across commits, a tampered page (`ObjectIntegrityError`,
 * nothing served) and a missing one (fail closed), format 1 and format 2 commits of one folder
 * side by side, concurrent committers numbered without gaps, and pins read offline.
 *
 * The folders are small: file names are chosen so that the content-defined boundaries
 * (page-format.ts) fall inside them, which gives trees of several pages with a few files.
 *
 * @module
 */
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { commitFolder } from '../commits/commit.js';
import {
  COMMIT_FORMAT,
  type CommitBody,
  type CommitFile,
  commitBytes,
  commitKey,
  compareUtf8,
  logKey,
  sha256Hex,
} from '../commits/format.js';
import { logFolder } from '../commits/log.js';
import { keyLevel, pageKey } from '../commits/pages/page-format.js';
import { openCommit } from '../commits/read.js';
import { ObjectIntegrityError, StoreError } from '../core/errors.js';
import type { Uri } from '../core/uri.js';
import { createOnce } from '../logs/small-objects.js';
import type { ObjectStore } from '../store/object-store.js';
import { forbidPrimitives, readTree } from './fetch.js';
import { rejection } from './rejection.js';
import { type ConformanceTarget, randomPrefix } from './target.js';
import { tempCache } from './temp-cache.js';
import { text } from './versions.js';

/**
 * File names under `prefix` such that `boundaries` of them end a leaf page (a key of level ≥ 1),
 * each followed by `filler` names that do not: a folder of `boundaries + 1` leaves or more.
 */
export function pagedNames(prefix: string, boundaries: number, filler = 2): string[] {
  const out: string[] = [];
  let recent: string[] = [];
  let found = 0;
  for (let n = 0; found < boundaries || recent.length < filler; n++) {
    const name = `f${String(n).padStart(6, '0')}`;
    if (keyLevel(prefix + name) < 1) {
      recent = [...recent, name].slice(-filler);
    } else if (found < boundaries) {
      out.push(...recent, name);
      recent = [];
      found++;
    }
  }
  out.push(...recent);
  return out.sort(compareUtf8);
}

/** The pages a commit's tree names. */
async function pagesOf(store: ObjectStore, bucket: string, c: Uri): Promise<Set<string>> {
  return (await openCommit(store, bucket, c.at?.id as string)).pageHashes();
}

/** The commit pages part of the conformance suite (see the module comment). */
export function commitPagesSuite(target: ConformanceTarget): void {
  const atomicish = target.flags.createMode !== 'none';
  describe.runIf(target.flags.versions && atomicish)('commit pages (provcat.commit/2)', () => {
    const bucket = target.bucket;
    const fresh = (offline = false) => target.store({ cache: tempCache(), offline });
    let store: ObjectStore;
    beforeAll(() => {
      store = fresh();
    });
    const url = (key: string) => `${store.scheme}://${bucket}/${key}`;
    const write = (key: string, body: string) => store._put(bucket, key, Buffer.from(body));
    const fill = async (p: string, names: string[], body = 'x') => {
      for (const name of names) await write(p + name, body);
    };

    it('a child shares every unchanged page; diff, tamper, a missing page, offline pins', {
      timeout: 60_000,
    }, async () => {
      const p = randomPrefix();
      const names = pagedNames(p, 3);
      await fill(p, names);
      const c1 = await commitFolder(store, url(p), 'one');
      const t1 = await openCommit(fresh(), bucket, c1.at?.id as string);
      expect(t1.head).toMatchObject({ format: 'provcat.commit/2', count: names.length });
      expect(t1.head.tree?.height).toBeGreaterThanOrEqual(1);
      const p1 = await pagesOf(store, bucket, c1);
      expect(p1.size).toBeGreaterThanOrEqual(5);

      const changed = names[names.length - 1] as string;
      await write(p + changed, 'changed');
      const creates = vi.spyOn(store, '_create');
      const puts = vi.spyOn(store, '_put');
      let c2: Uri;
      let writes: string[];
      try {
        c2 = await commitFolder(store, url(p), 'two');
      } finally {
        writes = [...creates.mock.calls, ...puts.mock.calls]
          .map((call) => call[1])
          .filter((key) => key.startsWith('.provcat/pages/'));
        creates.mockRestore();
        puts.mockRestore();
      }
      const p2 = await pagesOf(store, bucket, c2);
      const added = [...p2].filter((h) => !p1.has(h));
      expect(added.length).toBeGreaterThanOrEqual(1);
      expect(added.length).toBeLessThanOrEqual((t1.head.tree?.height ?? 0) + 1);
      // Exactly the new pages were written: nothing the parent already had.
      expect(writes.sort()).toEqual(added.map(pageKey).sort());

      const d = await fresh().diff(c1, c2);
      expect(d.changed.map((f) => f.path)).toEqual([changed]);
      expect(d.added.length + d.removed.length).toBe(0);

      // Offline, once read: stat, list, fetch and diff of both commits, no store call.
      const cache = tempCache();
      const online = target.store({ cache });
      await online.fetch(c1);
      await online.fetch(c2);
      const offline = target.store({ cache, offline: true });
      const spies = forbidPrimitives(offline);
      expect((await offline.stat(c2.join(changed))).size).toBe(7);
      expect((await offline.list(c1)).length).toBe(names.length);
      expect((await offline.diff(c1, c2)).changed.length).toBe(1);
      const tree = await readTree((await offline.fetch(c2)).path);
      expect(tree[changed]).toBe('changed');
      for (const spy of spies) expect(spy).not.toHaveBeenCalled();

      // A tampered leaf: ObjectIntegrityError, nothing served, to a reader without the cache.
      const leaf = [...p2].find((h) => !p1.has(h) && h !== t1.head.tree?.root) ?? added[0];
      const original = await text((await store._get(bucket, pageKey(leaf as string))).body);
      await write(pageKey(leaf as string), original.replace('"format":', '"format": '));
      const tampered = await rejection(fresh().fetch(c2));
      expect(tampered).toBeInstanceOf(ObjectIntegrityError);
      expect((tampered as ObjectIntegrityError).kind).toBe('DigestMismatch');
      await write(pageKey(leaf as string), original);
      expect((await fresh().stat(c2.join(changed))).size).toBe(7);

      // A missing page: fail closed, never an empty answer.
      await store._delete(bucket, pageKey(leaf as string));
      const missing = await rejection(fresh().walk(c2));
      expect(missing).toBeInstanceOf(StoreError);
      expect((missing as Error).message).toMatch(/is missing/);
    });

    it('format 1 and format 2 commits of one folder: log, diff and branch across them', {
      timeout: 60_000,
    }, async () => {
      const p = randomPrefix();
      await write(`${p}a.txt`, 'a1');
      await write(`${p}sub/b.txt`, 'b1');
      // A format 1 commit as an older provcat wrote it.
      const files: CommitFile[] = [];
      for await (const r of store._history(bucket, p)) {
        if (!r.current || r.size === null) continue;
        const f: CommitFile = { key: r.key, versionId: r.versionId, size: r.size };
        if (r.etag !== undefined) f.etag = r.etag;
        files.push(f);
      }
      const body: CommitBody = {
        format: COMMIT_FORMAT,
        folder: p,
        parent: null,
        number: 1,
        message: 'format 1',
        metadata: {},
        time: new Date().toISOString(),
        files: files.sort((x, y) => compareUtf8(x.key, y.key)),
      };
      const bytes = commitBytes(body);
      const v1 = sha256Hex(bytes);
      await store._put(bucket, commitKey(v1), bytes);
      const mode = await store._createMode(bucket);
      expect(await createOnce(store, bucket, logKey(p, 1), Buffer.from(v1), mode)).toBe(true);

      await write(`${p}a.txt`, 'a2');
      const c2 = await commitFolder(store, url(p), 'format 2');
      const reader = fresh();
      const log = await logFolder(reader, url(p));
      expect(log.map((e) => [e.number, e.files])).toEqual([
        [2, 2],
        [1, 2],
      ]);
      expect(log[0]?.parent).toBe(v1);
      const d = await reader.diff(`${url(p)}?at=commit:${v1}`, c2);
      expect(d.changed.map((f) => f.path)).toEqual(['a.txt']);
      const branch = randomPrefix('b1').slice(0, -1);
      await reader.branch(url(`${branch}/`), v1);
      expect(await text((await store._get(bucket, `${branch}/a.txt`)).body)).toBe('a1');
    });

    it('concurrent committers of a paged folder are numbered without gaps', {
      timeout: 60_000,
    }, async () => {
      const p = randomPrefix();
      await fill(p, pagedNames(p, 2));
      const made = await Promise.all(
        Array.from({ length: 4 }, (_, i) =>
          commitFolder(fresh(), url(p), `c${i}`, { allowEmpty: true }),
        ),
      );
      const log = await logFolder(fresh(), url(p));
      expect(log.map((e) => e.number)).toEqual([4, 3, 2, 1]);
      expect(new Set(log.map((e) => e.id))).toEqual(new Set(made.map((u) => u.at?.id)));
      for (let i = 0; i + 1 < log.length; i++) expect(log[i]?.parent).toBe(log[i + 1]?.id);
    });
  });
}
