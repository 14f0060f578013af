/**
 * The shared numbered, create-only log (src/logs/create-only-log.ts) and the canonical-JSON
 * parse-and-check (src/logs/canonical-json.ts), on both of their users: the commit log (through
 * src/logs/small-objects.ts on an object store's primitives) and the reference-set log (through
 * src/lake/gc/refs-log.ts on a stage backend). The stores are in-memory fakes that keep every
 * version and, in `oldest-version-wins`, ignore the create condition — the case that decides.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { logKey, logPrefix, parseCommit } from '../../src/commits/format.js';
import type {
  GetResult,
  ObjectInfo,
  PutSource,
  VersionRecord,
} from '../../src/contract/primitives.js';
import { sha256Hex } from '../../src/core/digest.js';
import { Exists, isAbort, NotFound, NotSupported, StoreError } from '../../src/core/errors.js';
import { backoffMs, sleep } from '../../src/core/retry.js';
import type { StageBackend } from '../../src/lake/backend.js';
import { GcPlanError, ReferenceSetError } from '../../src/lake/gc/errors.js';
import { readManifest } from '../../src/lake/gc/plan-format.js';
import { entryKey, parseDelta, parseEntryKey, setHash } from '../../src/lake/gc/refs-format.js';
import { createEntry, readSet } from '../../src/lake/gc/refs-log.js';
import { canonicalJson, parseCanonical } from '../../src/logs/canonical-json.js';
import {
  createOnlyIfAbsent,
  entryId,
  firstMissing,
  follows,
  LOG_BASE,
  logName,
  newestListed,
  numberOfLogKey,
  oldestVersions,
} from '../../src/logs/create-only-log.js';
import { createOnce, readOldest, readWhole } from '../../src/logs/small-objects.js';
import type { ObjectStore } from '../../src/store/object-store.js';

/** Every version of every key, oldest first; `atomic` honours create-only-if-absent. */
class Versions {
  readonly keys = new Map<string, { versionId: string; bytes: Buffer }[]>();
  writes = 0;
  #next = 1;
  constructor(readonly honoursCreate: boolean) {}

  write(key: string, bytes: Uint8Array, create: boolean): ObjectInfo {
    const versions = this.keys.get(key) ?? [];
    if (create && this.honoursCreate && versions.length > 0) throw new Exists(`${key} exists`);
    const versionId = `v${this.#next++}`;
    versions.push({ versionId, bytes: Buffer.from(bytes) });
    this.keys.set(key, versions);
    this.writes++;
    return { key, size: bytes.byteLength, version: versionId, versionId };
  }

  async *history(prefix: string): AsyncGenerator<VersionRecord> {
    for (const key of [...this.keys.keys()].filter((k) => k.startsWith(prefix)).sort()) {
      const versions = this.keys.get(key) ?? [];
      for (let i = versions.length - 1; i >= 0; i--) {
        const v = versions[i] as { versionId: string; bytes: Buffer };
        yield {
          key,
          versionId: v.versionId,
          size: v.bytes.length,
          current: i === versions.length - 1,
        };
      }
    }
  }

  read(key: string, versionId?: string): GetResult {
    const versions = this.keys.get(key) ?? [];
    const v =
      versionId === undefined ? versions.at(-1) : versions.find((x) => x.versionId === versionId);
    if (!v) throw new NotFound(`${key} is not there`);
    const info = { key, size: v.bytes.length, version: v.versionId, versionId: v.versionId };
    return { body: Readable.from([v.bytes]), info, contentLength: v.bytes.length };
  }
}

/** The primitives the commit log uses, over {@link Versions}. */
function fakeStore(versions: Versions): ObjectStore {
  const store = {
    scheme: 'mem',
    driver: 'mem',
    _create: async (_b: string, key: string, body: Uint8Array) => versions.write(key, body, true),
    _put: async (_b: string, key: string, body: PutSource) =>
      versions.write(key, body as Uint8Array, false),
    _history: (_b: string, prefix: string) => versions.history(prefix),
    _get: async (_b: string, key: string) => versions.read(key),
    _getVersion: async (_b: string, key: string, versionId: string) =>
      versions.read(key, versionId),
  };
  return store as unknown as ObjectStore;
}

/** The stage backend the reference-set log uses, over {@link Versions}. */
function fakeBackend(versions: Versions): StageBackend {
  const backend: Partial<StageBackend> = {
    create: async (key, bytes) => versions.write(key, bytes, true),
    put: async (key, bytes) => versions.write(key, bytes, false),
    get: async (key) => versions.read(key),
    async getOldest(key) {
      const [oldest] = await oldestVersions(versions.history(key), key);
      if (!oldest) throw new NotFound(`${key} has no version`);
      return versions.read(key, oldest.versionId);
    },
    async *list(prefix) {
      for (const key of [...versions.keys.keys()].filter((k) => k.startsWith(prefix)).sort()) {
        yield versions.read(key).info;
      }
    },
  };
  return backend as StageBackend;
}

const idA = 'a'.repeat(64);
const idB = 'b'.repeat(64);

describe('the numbered log: keys, listing order, gaps', () => {
  it('names entry N 10^15 - N in 16 digits, so an ascending listing is newest first', () => {
    expect(logName(1)).toBe('0999999999999999');
    expect(logName(LOG_BASE - 1)).toBe('0000000000000001');
    const names = [1, 2, 10, 11].map(logName).sort();
    expect(names.map((n) => numberOfLogKey('', n))).toEqual([11, 10, 2, 1]);
    expect(() => logName(0)).toThrow(RangeError);
    expect(() => logName(LOG_BASE)).toThrow(RangeError);
    expect(() => logName(1.5)).toThrow(RangeError);
  });

  it('reads back only keys of its own log', () => {
    const prefix = 'p/';
    expect(numberOfLogKey(prefix, `p/${logName(7)}`)).toBe(7);
    expect(numberOfLogKey(prefix, `q/${logName(7)}`)).toBeUndefined();
    expect(numberOfLogKey(prefix, 'p/123')).toBeUndefined();
    expect(numberOfLogKey(prefix, `p/${logName(7)}x`)).toBeUndefined();
    expect(numberOfLogKey(prefix, 'p/1000000000000000')).toBeUndefined(); // N = 0
  });

  it('is the layout of both the commit log and the reference-set log', () => {
    expect(logKey('data/', 3)).toBe(`${logPrefix('data/')}${logName(3)}`);
    expect(numberOfLogKey(logPrefix('data/'), logKey('data/', 3))).toBe(3);
    const hash = setHash('nightly');
    expect(entryKey(hash, 3).endsWith(`/${logName(3)}`)).toBe(true);
    expect(parseEntryKey(entryKey(hash, 3))).toEqual({ hash, number: 3 });
  });

  it('finds the first missing entry number, and which entry follows which', () => {
    expect(firstMissing([])).toBeUndefined();
    expect(firstMissing([1, 2, 3])).toBeUndefined();
    expect(firstMissing([2, 3])).toBe(1);
    expect(firstMissing([1, 2, 4])).toBe(3);
    expect(follows(1, undefined)).toBe(true);
    expect(follows(2, undefined)).toBe(false);
    expect(follows(5, 4)).toBe(true);
    expect(follows(5, 3)).toBe(false);
  });

  it('takes the newest entry as the first entry key listed, reading no further', async () => {
    let pulled = 0;
    async function* listing() {
      for (const key of ['p/other', `p/${logName(9)}`, `p/${logName(8)}`]) {
        pulled++;
        yield { key };
      }
    }
    expect(await newestListed(listing(), (k) => numberOfLogKey('p/', k))).toEqual({
      key: `p/${logName(9)}`,
      number: 9,
    });
    expect(pulled).toBe(2);
    expect(await newestListed(listing(), () => undefined)).toBeUndefined();
  });

  it('holds exactly one 64-hex ID per entry', () => {
    expect(entryId(Buffer.from(idA))).toBe(idA);
    expect(entryId(Buffer.from(`${idA}\n`))).toBeUndefined();
    expect(entryId(Buffer.from(idA.toUpperCase()))).toBeUndefined();
  });
});

describe('oldest version wins', () => {
  it('takes the oldest version that is not a delete marker, per key', async () => {
    async function* history(): AsyncGenerator<VersionRecord> {
      yield { key: 'a', versionId: '3', size: null, current: true };
      yield { key: 'a', versionId: '2', size: 1, current: false };
      yield { key: 'a', versionId: '1', size: 1, current: false };
      yield { key: 'b', versionId: '5', size: 1, current: true };
      yield { key: 'c', versionId: '6', size: null, current: true };
    }
    expect((await oldestVersions(history())).map((r) => [r.key, r.versionId])).toEqual([
      ['a', '1'],
      ['b', '5'],
    ]);
    expect((await oldestVersions(history(), 'b')).map((r) => r.versionId)).toEqual(['5']);
  });

  it('commit log: the first writer wins, the second learns it lost, readers see the first', async () => {
    const versions = new Versions(false);
    const store = fakeStore(versions);
    const key = logKey('data/', 1);
    expect(await createOnce(store, 'b', key, Buffer.from(idA), 'oldest-version-wins')).toBe(true);
    expect(await createOnce(store, 'b', key, Buffer.from(idB), 'oldest-version-wins')).toBe(false);
    expect(versions.read(key).body.read().toString()).toBe(idB); // the loser is the current one
    const read = await readOldest(store, 'b', key, { limit: 1024 });
    expect(read?.toString()).toBe(idA);
  });

  it('reference-set log: a loser with other bytes loses, one with the same bytes counts', async () => {
    const backend = fakeBackend(new Versions(false));
    const key = entryKey(setHash('s'), 1);
    const create = (id: string) =>
      createEntry(backend, 'oldest-version-wins', key, Buffer.from(id), `mem://${key}`);
    expect(await create(idA)).toBe(true);
    expect(await create(idB)).toBe(false);
    expect(await create(idA)).toBe(true);
  });
});

describe('create only if absent', () => {
  it('atomic: the store condition decides, on both logs', async () => {
    const versions = new Versions(true);
    const store = fakeStore(versions);
    expect(await createOnce(store, 'b', 'k', Buffer.from(idA), 'atomic')).toBe(true);
    expect(await createOnce(store, 'b', 'k', Buffer.from(idA), 'atomic')).toBe(false);
    const backend = fakeBackend(versions);
    expect(await createEntry(backend, 'atomic', 'r', Buffer.from(idA), 'mem://r')).toBe(true);
    expect(await createEntry(backend, 'atomic', 'r', Buffer.from(idA), 'mem://r')).toBe(false);
    expect(versions.writes).toBe(2);
  });

  it('none: each log refuses with its own error before writing anything', async () => {
    const versions = new Versions(false);
    await expect(
      createOnce(fakeStore(versions), 'b', 'k', Buffer.from(idA), 'none'),
    ).rejects.toThrow(NotSupported);
    const refused = createEntry(fakeBackend(versions), 'none', 'r', Buffer.from(idA), 'mem://r');
    await expect(refused).rejects.toThrow(StoreError);
    await expect(refused).rejects.toThrow(/mem:\/\/r refused/);
    expect(versions.writes).toBe(0);
  });

  it('passes a failure of the write through', async () => {
    const boom = new StoreError('boom', { status: 500 });
    const target = {
      create: async () => Promise.reject(boom),
      put: async () => Promise.reject(boom),
      oldestWins: async () => true,
      refuse: () => new StoreError('refused'),
    };
    await expect(createOnlyIfAbsent(target, 'atomic', 'k', Buffer.from('x'))).rejects.toBe(boom);
    await expect(
      createOnlyIfAbsent(target, 'oldest-version-wins', 'k', Buffer.from('x')),
    ).rejects.toBe(boom);
  });
});

describe('gapless and bounded reads', () => {
  it('reference-set log: a gap is refused before anything is read', async () => {
    const backend = fakeBackend(new Versions(true));
    const stage = {
      keyPrefix: '',
      identity: 'mem',
      backend: async () => backend,
      uriOf: (k: string) => `mem://${k}`,
    };
    const hash = setHash('s');
    const read = async () => {
      for await (const _ of readSet(stage, { hash, numbers: [1, 3] })) break;
    };
    await expect(read()).rejects.toMatchObject({ name: 'ReferenceSetError', kind: 'Gap' });
    await expect(read()).rejects.toThrow(/has no entry 2/);
  });

  it('reads a small body whole, each log with its own error above the limit', async () => {
    const versions = new Versions(true);
    versions.write('k', Buffer.alloc(10), true);
    expect((await readWhole(versions.read('k'), 10, 'k')).length).toBe(10);
    await expect(readWhole(versions.read('k'), 9, 'k')).rejects.toThrow(StoreError);
    const tooLarge = readWhole(
      versions.read('k'),
      9,
      'k',
      (m) => new ReferenceSetError('TooLarge', m),
    );
    await expect(tooLarge).rejects.toThrow(ReferenceSetError);
    // A body longer than its declared size is cut at the limit.
    const lying: GetResult = {
      body: Readable.from([Buffer.alloc(8), Buffer.alloc(8)]),
      info: { key: 'k', size: 8, version: 'v' },
      contentLength: 8,
    };
    await expect(readWhole(lying, 10, 'k')).rejects.toThrow(/sent more than the 10 bytes/);
  });
});

describe('canonical JSON, one parse-and-check for commits, plans and deltas', () => {
  const problems: string[] = [];
  const reader = {
    fail: (problem: string, why: string) => {
      problems.push(problem);
      return new Error(why);
    },
  };
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('writes members sorted, no whitespace, safe integers only', () => {
    expect(canonicalJson({ b: [1, 'x', null, true], a: { d: undefined, c: false } })).toBe(
      '{"a":{"c":false},"b":[1,"x",null,true]}',
    );
    expect(() => canonicalJson(1.5)).toThrow(TypeError);
    expect(() => canonicalJson({ a: 2n })).toThrow(TypeError);
  });

  it('names each problem in order, and validates before the canonical form', () => {
    problems.length = 0;
    const check = (text: string | Uint8Array, validate?: (r: Record<string, unknown>) => void) =>
      parseCanonical(typeof text === 'string' ? Buffer.from(text) : text, { ...reader, validate });
    expect(check('{"a":1}')).toEqual({ a: 1 });
    expect(() => check(Buffer.from([0xff]))).toThrow('not UTF-8 JSON');
    expect(() => check('[1]')).toThrow('not a JSON object');
    expect(() => check('{"a":1.5}')).toThrow('holds a value canonical JSON cannot');
    expect(() => check('{"b":1,"a":1}')).toThrow('not in canonical form');
    expect(() =>
      check('{ "a": 1 }', () => {
        throw new Error('field');
      }),
    ).toThrow('field');
    expect(problems).toEqual(['not-json', 'not-object', 'not-representable', 'not-canonical']);
  });

  it('commits, deltas and plans each refuse bytes that are not canonical', async () => {
    const commit = Buffer.from(
      '{"files":[],"folder":"","format":"provcat.commit/1","message":"m","metadata":{},"number":1,"parent":null, "time":"2024-01-01T00:00:00.000Z"}',
    );
    expect(() => parseCommit(commit, sha256Hex(commit), 'b')).toThrow(/not in canonical form/);
    const delta = Buffer.from(
      '{"add":[],"format":"provcat.refs/1","name":"s","number":1,"parent":null,"retired":false, "time":"2024-01-01T00:00:00.000Z"}',
    );
    expect(() => parseDelta(delta, sha256Hex(delta))).toThrow(
      expect.objectContaining({ kind: 'NonCanonical' }),
    );
    const dir = mkdtempSync(path.join(tmpdir(), 'provcat-plan-'));
    dirs.push(dir);
    writeFileSync(path.join(dir, 'manifest.json'), '{ "format": "provcat.gc-plan/1" }');
    await expect(readManifest(dir)).rejects.toThrow(GcPlanError);
    await expect(readManifest(dir)).rejects.toThrow(/not in canonical form/);
  });
});

describe('one sleep and backoff', () => {
  it('scales the full-jitter backoff for a loop that is not a request retry', () => {
    const scale = { baseMs: 10, capMs: 1000 };
    expect(backoffMs(3, () => 0.5, scale)).toBe(40);
    expect(backoffMs(30, () => 1, scale)).toBe(1000);
    expect(backoffMs(2, () => 0, scale)).toBe(0);
  });

  it('sleeps, and rejects with an AbortError when the signal aborts', async () => {
    const started = Date.now();
    await sleep(20);
    expect(Date.now() - started).toBeGreaterThanOrEqual(15);
    const controller = new AbortController();
    const waiting = sleep(60_000, controller.signal);
    controller.abort();
    await expect(waiting).rejects.toSatisfy(isAbort);
    await expect(sleep(1, controller.signal)).rejects.toSatisfy(isAbort);
  });
});
