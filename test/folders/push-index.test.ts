/**
 * The push index (src/folders/push-index.ts): a second push of an unchanged folder reads and
 * hashes no file, and a file whose state differs in any recorded field (size, mtime, ctime,
 * inode, device) is read and hashed again — so a changed file is never skipped, even with its
 * size and mtime restored.
 */
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { makeStamp, type StampFields, stampTimesNs } from '../../src/folders/local-tree.js';
import {
  digestsAt,
  type IndexEntry,
  PushIndex,
  RACY_WINDOW_MS,
  recordedEntry,
  wallNs,
} from '../../src/folders/push-index.js';
import { writeTree } from '../support/folder-flows.js';

function tmp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-${label}-`));
}

/** A fixed mtime (whole seconds, so it is restored exactly), long before the racy window. */
const OLD = 1_700_000_000;

const TREE = { 'a.txt': 'alpha', 'b/c.txt': 'charlie', 'b/d.bin': 'delta-bytes', 'e.txt': 'echo' };

/** A store over fresh directories, a folder with {@link TREE} at {@link OLD}, and its URI. */
async function setup(label: string, wait = true) {
  const store = new LocalStore({ root: tmp(`${label}-root`), cache: tmp(`${label}-cache`) });
  const dir = tmp(label);
  writeTree(dir, TREE);
  for (const rel of Object.keys(TREE)) utimesSync(path.join(dir, rel), OLD, OLD);
  // ctime cannot be set back: let it leave the racy window, as a folder of older files has.
  if (wait) await sleep(RACY_WINDOW_MS + 100);
  return { store, dir, uri: `local://idx/${label}/` };
}

describe('the push index', () => {
  it('a second push of an unchanged folder reads and hashes no file', async () => {
    const { store, dir, uri } = await setup('unchanged');
    // A dry run changes nothing, the index included.
    expect(await store.push(dir, uri, { dryRun: true })).toMatchObject({ uploaded: 4, hashed: 4 });
    expect(existsSync(path.join(store.cache.root, 'v1', 'push-index'))).toBe(false);
    const first = await store.push(dir, uri);
    expect(first).toMatchObject({ uploaded: 4, skipped: 0, hashed: 4 });
    const second = await store.push(dir, uri);
    expect(second).toMatchObject({ uploaded: 0, skipped: 4, hashed: 0 });
    // The index lives in the cache directory, one file per local folder.
    const files = readdirSync(path.join(store.cache.root, 'v1', 'push-index'));
    expect(files.filter((f) => !f.startsWith('.tmp-'))).toHaveLength(1);
    await store.close();
  });

  it('a file rewritten with its size and mtime restored is hashed again and sent', async () => {
    const { store, dir, uri } = await setup('restored');
    await store.push(dir, uri);
    const file = path.join(dir, 'b/c.txt');
    const before = statSync(file, { bigint: true });
    await writeFile(file, 'CHARLIE'); // same size, other bytes, same inode
    utimesSync(file, OLD, OLD);
    const after = statSync(file, { bigint: true });
    expect([after.size, after.mtimeNs, after.ino]).toEqual([
      before.size,
      before.mtimeNs,
      before.ino,
    ]);
    const second = await store.push(dir, uri);
    expect(second).toMatchObject({ uploaded: 1, skipped: 3, hashed: 1 });
    expect(second.actions).toEqual([{ action: 'upload', path: 'b/c.txt', size: 7 }]);
    const fetched = await store.fetch(`${uri}b/c.txt`);
    expect(await readFile(fetched.path, 'utf8')).toBe('CHARLIE');
    await store.close();
  });

  it('a touched file is hashed again and, its bytes unchanged, not sent', async () => {
    const { store, dir, uri } = await setup('touched');
    await store.push(dir, uri);
    utimesSync(path.join(dir, 'a.txt'), OLD + 5, OLD + 5);
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 4, hashed: 1 });
    await store.close();
  });

  it('a file replaced by another inode with the same size and mtime is sent', async () => {
    const { store, dir, uri } = await setup('replaced');
    await store.push(dir, uri);
    const file = path.join(dir, 'e.txt');
    const other = path.join(dir, 'e.new');
    writeFileSync(other, 'ECHO');
    utimesSync(other, OLD, OLD);
    renameSync(other, file);
    const second = await store.push(dir, uri);
    expect(second).toMatchObject({ uploaded: 1, skipped: 3, hashed: 1 });
    expect((await readFile((await store.fetch(`${uri}e.txt`)).path, 'utf8')).toString()).toBe(
      'ECHO',
    );
    await store.close();
  });

  it('files changed within the racy window of their hashing are not trusted', async () => {
    // Just written: a change in the same clock tick as the hash could keep every field.
    const { store, dir, uri } = await setup('racy', false);
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 4, hashed: 4 });
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 4, hashed: 4 });
    await store.close();
  });

  it('an unreadable index is ignored and rewritten: every file is hashed again', async () => {
    const { store, dir, uri } = await setup('corrupt');
    await store.push(dir, uri);
    const indexDir = path.join(store.cache.root, 'v1', 'push-index');
    const [name] = readdirSync(indexDir);
    await writeFile(path.join(indexDir, name as string), 'not an index\n');
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 4, hashed: 4 });
    expect(await store.push(dir, uri)).toMatchObject({ uploaded: 0, skipped: 4, hashed: 0 });
    await store.close();
  });

  it('an entry is trusted only when every field of the stamp matches', async () => {
    const fields: StampFields = {
      size: 1,
      mtimeNs: 1_000_000_000n,
      ctimeNs: 1_000_000_002n,
      ino: 7n,
      dev: 9n,
    };
    const stamp = makeStamp(fields);
    expect(stampTimesNs(stamp)).toEqual({ mtimeNs: 1_000_000_000n, ctimeNs: 1_000_000_002n });
    const digests = { md5: 'a'.repeat(32), sha256: 'b'.repeat(64) };
    const entry = recordedEntry(undefined, stamp, digests, wallNs());
    expect(digestsAt(entry, stamp)).toEqual(digests);
    for (const change of [
      { size: 2 },
      { mtimeNs: 1_000_000_001n },
      { ctimeNs: 1_000_000_001n },
      { ino: 8n },
      { dev: 10n },
      // Fields that trade digits must not meet in one string.
      { mtimeNs: 10_000_000_000n, ctimeNs: 100_000_002n },
    ]) {
      expect(digestsAt(entry, makeStamp({ ...fields, ...change }))).toBeUndefined();
    }
    // A digest learnt later for the same state joins the one learnt before.
    const md5Only = recordedEntry(undefined, stamp, { md5: digests.md5 }, wallNs());
    expect(
      digestsAt(recordedEntry(md5Only, stamp, { sha256: digests.sha256 }, wallNs()), stamp),
    ).toEqual(digests);
    // Recorded inside the racy window: not kept.
    const now = wallNs();
    expect(
      recordedEntry(entry, makeStamp({ ...fields, mtimeNs: now, ctimeNs: now }), digests, now),
    ).toBeUndefined();
  });

  /** Write an index of `entries` (in that order) for `dir`, and read it back in key order. */
  async function roundTrip(cache: string, dir: string, rels: string[], entry: IndexEntry) {
    const out = await PushIndex.next(cache, dir);
    for (const rel of rels) out.add(rel, undefined, entry);
    await out.finish(false);
    return PushIndex.open(cache, dir);
  }

  it('is written and read in key order, names of any kind included', async () => {
    const cache = tmp('unit-cache');
    const dir = tmp('unit');
    const entry = oldEntry('c');
    // Names JSON writes with tabs, newlines or U+2028 in them read back too.
    const rels = ['a', 'line\nbreak', 'sep\u2028arator', 'tab\there', 'z/\u{1f600}'];
    const index = await roundTrip(cache, dir, rels, entry);
    // Asked in key order, some skipped: each asked one is found; the skipped ones are dropped.
    expect(index.entryFor('a')).toMatchObject(entry);
    expect(index.entryFor('b')).toBeUndefined();
    expect(index.entryFor('sep\u2028arator')).toMatchObject(entry);
    expect(index.entryFor('z/\u{1f600}')).toMatchObject(entry);
    expect(index.close()).toBe(true); // two entries passed over: the next index differs
    const again = await PushIndex.open(cache, dir);
    for (const rel of rels) expect(again.entryFor(rel)).toMatchObject(entry);
    expect(again.close()).toBe(false);
    // Nothing changed: the next index leaves the file as it is (no rewrite).
    const file = indexFile(cache);
    const before = statSync(file).mtimeMs;
    const same = await PushIndex.next(cache, dir);
    for (const rel of rels) same.add(rel, entry, entry);
    await same.finish(false);
    expect(statSync(file).mtimeMs).toBe(before);
    expect(readdirSync(path.dirname(file))).toHaveLength(1); // no temp left
  });

  it('an index out of key order (an older provcat wrote it) is read whole, then rewritten', async () => {
    const cache = tmp('unit-cache');
    const dir = tmp('unit');
    const entry = oldEntry('d');
    // Format 1, as older provcat wrote it: in the order the files were hashed.
    const file0 = await roundTrip(cache, dir, ['m', 'b', 'x', 'a'], entry);
    expect(file0.close()).toBe(true);
    const written = indexFile(cache);
    const text = await readFile(written, 'utf8');
    // Format 1 holds each path as JSON.
    const v1 = text
      .replace('provcat-push-index/2', 'provcat-push-index/1')
      .replace(/\t([a-z])\n/g, '\t"$1"\n');
    await writeFile(written, v1);
    const index = await PushIndex.open(cache, dir);
    for (const rel of ['a', 'b', 'm', 'x']) expect(index.entryFor(rel)).toMatchObject(entry);
    expect(index.close()).toBe(true);
    // Format 2 found out of order: read whole from there on; what it misses is hashed again.
    await writeFile(written, text);
    const found = await PushIndex.open(cache, dir);
    expect(found.entryFor('m')).toMatchObject(entry);
    expect(found.entryFor('x')).toMatchObject(entry);
    expect(found.close()).toBe(true);
    // A line that does not parse: the entries before it are trusted, the rest are not.
    const file = indexFile(cache);
    const lines = (await readFile(file, 'utf8')).split('\n');
    lines.splice(2, 1, 'garbage');
    await writeFile(file, lines.join('\n'));
    const torn = await PushIndex.open(cache, dir);
    expect(torn.entryFor('m')).toMatchObject(entry);
    expect(torn.entryFor('x')).toBeUndefined();
    expect(torn.close()).toBe(true);
  });
});

/** The one push index below the cache root `cache`. */
function indexFile(cache: string): string {
  const dir = path.join(cache, 'v1', 'push-index');
  return path.join(dir, readdirSync(dir)[0] as string);
}

/** An entry of a file state long before the racy window, with an MD5 of `digit`s. */
function oldEntry(digit: string): IndexEntry {
  const entry = recordedEntry(
    undefined,
    makeStamp(OLD_FIELDS),
    { md5: digit.repeat(32) },
    wallNs(),
  );
  if (entry === undefined) throw new Error('an old state is kept');
  return entry;
}

const OLD_FIELDS: StampFields = {
  size: 3,
  mtimeNs: BigInt(OLD) * 1_000_000_000n,
  ctimeNs: BigInt(OLD) * 1_000_000_000n,
  ino: 11n,
  dev: 12n,
};
