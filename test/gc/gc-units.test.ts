/**
 * The pieces of garbage collection that need no store: the canonical key form and its matching
 * rule (both matchers against the rule itself, property-tested), locations turned into entries
 * by the stage's containment check (hostile keys, every stage kind), the external sort against
 * an in-memory sort with forced spills and multi-pass merges, the CSV parser, URL-decoded keys,
 * the keep-set file refusing every alteration, and durations.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { locationsOf } from '../../src/cli/commands/gc.js';
import { locationArg } from '../../src/cli/commands/lake.js';
import { InvalidArgument, ObjectIntegrityError } from '../../src/core/errors.js';
import { CsvParser } from '../../src/lake/gc/csv.js';
import { InventoryError, KeepSetFileError } from '../../src/lake/gc/errors.js';
import { ExternalSort } from '../../src/lake/gc/external-sort.js';
import { parseDuration } from '../../src/lake/gc/index.js';
import { decodeUrlKey, readInventoryFile } from '../../src/lake/gc/inventory.js';
import { KEEP_SET_FORMAT, KeepSetWriter, readKeepSet } from '../../src/lake/gc/keep-set-file.js';
import {
  compareUtf8,
  covers,
  entryOfLocation,
  entryProblem,
  nestedStageOf,
} from '../../src/lake/gc/keys.js';
import { KeepSetIndex, SortedMatcher } from '../../src/lake/gc/matcher.js';
import { PAGE_FORMAT, type PlanPage, pageBytes, planBytes } from '../../src/lake/gc/plan-format.js';
import { type Stage, stageFromDescriptor } from '../../src/lake/index.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'gc-units-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Keys that broke keep-sets elsewhere: escapes, `+`, spaces, non-ASCII, astral characters. */
const HOSTILE = [
  'data/live%25name.bin',
  'data/live%name.bin',
  'data/live%2525name.bin',
  'data/a+b c.bin',
  'data/a b+c.bin',
  'data/ünïcødé/片.bin',
  'data/emoji-😀.bin',
  'data/\uffff-bmp-end.bin',
  'data/%2F-not-a-slash.bin',
  'data/q?x#y.bin',
];

/** Segments for property tests: the characters that matter, and some plain ones. */
const segment = fc
  .array(fc.constantFrom('a', 'b', 'z', '%', '2', '5', '+', ' ', 'é', '😀', '\uffff', '.', '-'), {
    minLength: 1,
    maxLength: 4,
  })
  .map((cs) => cs.join(''))
  .filter((s) => s !== '.' && s !== '..' && s !== '.provcat');
const key = fc.array(segment, { minLength: 1, maxLength: 4 }).map((s) => s.join('/'));
const entry = fc.oneof(
  key,
  fc.array(segment, { minLength: 1, maxLength: 3 }).map((s) => `${s.join('/')}/`),
);

describe('the matching rule and both matchers', () => {
  it('covers: a prefix covers what starts with it (itself included); a key only itself', () => {
    expect(covers('data/', 'data/x')).toBe(true);
    expect(covers('data/', 'data/')).toBe(true);
    expect(covers('data/', 'data')).toBe(false);
    expect(covers('data/', 'database/x')).toBe(false);
    expect(covers('data/x', 'data/x')).toBe(true);
    expect(covers('data/x', 'data/x/y')).toBe(false);
    expect(covers('data/live%25name.bin', 'data/live%2525name.bin')).toBe(false);
  });

  it('KeepSetIndex and SortedMatcher answer exactly as the rule, on any entries and keys', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(entry, { maxLength: 30 }),
        fc.array(fc.oneof(key, entry), { maxLength: 40 }),
        async (entries, asked) => {
          const truth = (k: string) => entries.some((e) => covers(e, k));
          const index = new KeepSetIndex(entries);
          const sortedEntries = [...new Set(entries)].sort(compareUtf8);
          const keys = [...new Set(asked)].sort(compareUtf8);
          const matcher = new SortedMatcher(
            (async function* () {
              yield* sortedEntries;
            })(),
          );
          for (const k of keys) {
            expect(index.isReferenced(k)).toBe(truth(k));
            expect(await matcher.isReferenced(k)).toBe(truth(k));
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  it('the sorted matcher refuses keys out of order and entries out of order', async () => {
    const m = new SortedMatcher(
      (async function* () {
        yield 'b';
      })(),
    );
    await m.isReferenced('b');
    await expect(m.isReferenced('a')).rejects.toThrow(RangeError);
    const bad = new SortedMatcher(
      (async function* () {
        yield 'b';
        yield 'a';
      })(),
    );
    await expect(bad.isReferenced('c')).rejects.toThrow(RangeError);
  });

  it('nested stages: a .provcat segment below the top marks its folder', () => {
    expect(nestedStageOf('acme/.provcat/refs/log/x')).toBe('acme/');
    expect(nestedStageOf('a/b/.provcat')).toBe('a/b/');
    expect(nestedStageOf('a/.provcatx/y')).toBeUndefined();
    expect(nestedStageOf('.provcat/refs/x')).toBeUndefined();
    expect(nestedStageOf('data/x.bin')).toBeUndefined();
  });

  it('entries: reserved, empty and malformed ones are refused', () => {
    expect(entryProblem('.provcat/refs/x')).toBeDefined();
    expect(entryProblem('.provcat/')).toBeDefined();
    expect(entryProblem('')).toBeDefined();
    expect(entryProblem('a//b')).toBeDefined();
    expect(entryProblem('a/../b')).toBeDefined();
    expect(entryProblem('/a')).toBeDefined();
    for (const k of HOSTILE) expect(entryProblem(k)).toBeUndefined();
  });
});

describe('locations to entries, through the stage containment check', () => {
  const stages: Array<[string, Stage]> = [
    ['local', stageFromDescriptor({ version: 1, kind: 'local', root: '/srv/la ke%25' }) as Stage],
    [
      'local with tenant',
      stageFromDescriptor({
        version: 1,
        kind: 'local',
        root: '/srv/lake',
        tenant: 'acme',
      }) as Stage,
    ],
    [
      's3',
      stageFromDescriptor({
        version: 1,
        kind: 's3',
        bucket: 'lake',
        prefix: 'managed/v1',
        region: 'us-east-1',
      }) as Stage,
    ],
    [
      's3, whole bucket',
      stageFromDescriptor({
        version: 1,
        kind: 's3',
        bucket: 'lake',
        prefix: '',
        region: 'us-east-1',
      }) as Stage,
    ],
  ];

  it.each(stages)('%s: uriOf then entryOfLocation is the identity on hostile keys', (_n, stage) => {
    for (const k of HOSTILE) {
      expect(entryOfLocation(stage, stage.uriOf(k))).toBe(k);
      expect(
        entryOfLocation(stage, {
          uri: stage.uriOf(k),
          contentType: 'x',
          sizeBytes: 1,
          sha256: 'a'.repeat(64),
        }),
      ).toBe(k);
      // A prefix: the folder's URI with its trailing slash.
      expect(entryOfLocation(stage, `${stage.uriOf(k)}/`)).toBe(`${k}/`);
    }
  });

  it.each(stages)('%s: the identity holds for any key (property)', (_n, stage) => {
    fc.assert(
      fc.property(key, (k) => {
        expect(entryOfLocation(stage, stage.uriOf(k))).toBe(k);
      }),
      { numRuns: 300 },
    );
  });

  it.each(stages)(
    '%s: outside the stage, the stage itself and reserved keys are OutsideStage',
    (_n, stage) => {
      const outside = [
        'file:///etc/passwd',
        's3://other/managed/v1/ab/cd',
        // A sibling prefix (inside the bucket, so inside a whole-bucket stage).
        ...(stage.keyPrefix === '' ? [] : ['s3://lake/managed/v10/ab/cd']),
        `${stage.uriOf('a')}/../../x`,
        stage.uriOf('.provcat/refs/log/x'),
        `${stage.uriOf('.provcat')}/`,
      ];
      for (const uri of outside) {
        let caught: unknown;
        try {
          entryOfLocation(stage, uri);
        } catch (error) {
          caught = error;
        }
        expect(caught, uri).toBeInstanceOf(ObjectIntegrityError);
        expect((caught as ObjectIntegrityError).kind).toBe('OutsideStage');
      }
    },
  );
});

describe('external sort', () => {
  it('sorts like an in-memory sort by UTF-8 bytes, with spills and multi-pass merges', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(key, fc.integer()), { maxLength: 300 }),
        fc.integer({ min: 1, max: 17 }),
        fc.integer({ min: 2, max: 4 }),
        async (records, runSize, fanIn) => {
          const sorter = new ExternalSort<[string, number]>({
            dir,
            maxRunRecords: runSize,
            fanIn,
          });
          for (const r of records) await sorter.add(r);
          const out: Array<[string, number]> = [];
          for await (const r of sorter.sorted()) out.push(r);
          const expected = [...records].sort((a, b) => compareUtf8(a[0], b[0]));
          expect(out.map((r) => r[0])).toEqual(expected.map((r) => r[0]));
          // The same records (equal keys may come in any order).
          const bag = (rs: Array<[string, number]>) => rs.map((r) => JSON.stringify(r)).sort();
          expect(bag(out)).toEqual(bag(records));
          if (records.length > runSize) expect(sorter.spilled).toBeGreaterThan(1);
        },
      ),
      { numRuns: 60 },
    );
    // No run file is left behind.
    const { readdir } = await import('node:fs/promises');
    expect((await readdir(dir)).filter((f) => f.startsWith('run-'))).toEqual([]);
  });

  it('compareUtf8 puts astral characters after U+FFFF (byte order, not UTF-16 order)', () => {
    expect(compareUtf8('a\uffff', 'a😀')).toBeLessThan(0);
    expect('a\uffff' < 'a😀').toBe(false);
  });
});

describe('CSV and URL-encoded keys', () => {
  function parse(text: string, splits: number[] = []): string[][] {
    const p = new CsvParser();
    const out: string[][] = [];
    let at = 0;
    for (const s of [...splits, text.length]) {
      out.push(...p.push(text.slice(at, s)));
      at = s;
    }
    out.push(...p.end());
    return out;
  }

  it('parses quoted fields, doubled quotes, CRLF, blank lines and a last line without newline', () => {
    const text = '"Bucket","Key","Size"\r\n"b","a,b ""c""\nd","3"\r\n\r\nb,plain,4';
    const expected = [
      ['Bucket', 'Key', 'Size'],
      ['b', 'a,b "c"\nd', '3'],
      ['b', 'plain', '4'],
    ];
    expect(parse(text)).toEqual(expected);
    // Any split of the input gives the same rows.
    for (let i = 0; i <= text.length; i++) expect(parse(text, [i])).toEqual(expected);
  });

  it('refuses malformed CSV', () => {
    expect(() => parse('a,b"c\n')).toThrow(InventoryError);
    expect(() => parse('"a"b,c\n')).toThrow(InventoryError);
    expect(() => parse('"never closed\n')).toThrow(InventoryError);
  });

  it('decodes a URL-encoded key exactly once (form encoding, as S3 Inventory writes)', () => {
    expect(decodeUrlKey('data/live%2525name.bin', 'x')).toBe('data/live%25name.bin');
    expect(decodeUrlKey('data/a%2Bb+c.bin', 'x')).toBe('data/a+b c.bin');
    expect(decodeUrlKey('data/%C3%BC.bin', 'x')).toBe('data/ü.bin');
    expect(() => decodeUrlKey('data/%zz', 'x')).toThrow(InventoryError);
    expect(() => decodeUrlKey('data/%C3', 'x')).toThrow(InventoryError);
  });
});

describe('the keep-set file', () => {
  const header = {
    format: KEEP_SET_FORMAT,
    stage: 'test',
    fingerprint: 'f'.repeat(64),
    sets: [{ set: 'a'.repeat(64), name: 'n', number: 1, head: 'b'.repeat(64), retired: false }],
  } as const;
  const entries = [...HOSTILE, 'data/prefix/'].sort(compareUtf8);

  async function written(name: string): Promise<string> {
    const file = path.join(dir, name);
    const w = await KeepSetWriter.create(file, { ...header, sets: [...header.sets] });
    for (const e of entries) await w.add(e);
    await w.finish();
    return file;
  }

  it('reads back exactly what was written, and writes it again byte for byte', async () => {
    const file = await written('keep-a.jsonl');
    const ks = await readKeepSet(file);
    expect(ks.entries).toBe(entries.length);
    const back: string[] = [];
    for await (const k of ks.keys()) back.push(k);
    expect(back).toEqual(entries);
    const again = path.join(dir, 'keep-a2.jsonl');
    const w = await KeepSetWriter.create(again, ks.header);
    for (const k of back) await w.add(k);
    await w.finish();
    expect(await readFile(again)).toEqual(await readFile(file));
  });

  it('refuses a truncated, reordered, re-encoded or altered file', async () => {
    const file = await written('keep-b.jsonl');
    const text = await readFile(file, 'utf8');
    const lines = text.split('\n');
    const variants: Record<string, string> = {
      'no trailer': `${lines.slice(0, -2).join('\n')}\n`,
      'cut mid-line': text.slice(0, text.length - 10),
      'an entry dropped': [...lines.slice(0, 2), ...lines.slice(3)].join('\n'),
      'two entries swapped': [lines[0], lines[2], lines[1], ...lines.slice(3)].join('\n'),
      're-encoded %25': text.replace('live%25name', 'live%2525name'),
      whitespace: text.replace('{"key":', '{ "key":'),
      'unknown format': text.replace(KEEP_SET_FORMAT, 'provcat.keep-set/2'),
      'a line after the trailer': `${text}{"key":"zzz"}\n`,
    };
    for (const [what, bad] of Object.entries(variants)) {
      const f = path.join(dir, `bad-${what.replace(/\W/g, '-')}.jsonl`);
      await writeFile(f, bad);
      await expect(readKeepSet(f), what).rejects.toBeInstanceOf(KeepSetFileError);
    }
  });

  it('the writer refuses entries out of order or not canonical', async () => {
    const w = await KeepSetWriter.create(path.join(dir, 'keep-c.jsonl'), { ...header, sets: [] });
    await w.add('b');
    await expect(w.add('a')).rejects.toBeInstanceOf(KeepSetFileError);
    await expect(w.add('c//d')).rejects.toBeInstanceOf(KeepSetFileError);
    await w.abort();
  });
});

describe('durations', () => {
  it('parses whole numbers with a unit', () => {
    expect(parseDuration('0s')).toBe(0);
    expect(parseDuration('36h')).toBe(36 * 3600_000);
    expect(parseDuration('7d')).toBe(7 * 86_400_000);
    expect(parseDuration('90m')).toBe(90 * 60_000);
    expect(parseDuration('500ms')).toBe(500);
    for (const bad of ['7', 'd', '1.5h', '-1s', '1w', ' 1s']) {
      expect(() => parseDuration(bad), bad).toThrow(/duration/);
    }
  });

  it('a duration longer than a cutoff can be is a usage error, not a RangeError later', () => {
    expect(parseDuration('36525d')).toBe(36525 * 86_400_000);
    for (const huge of ['9007199254740991ms', '36526d', '99999999999999h']) {
      const error = (() => {
        try {
          parseDuration(huge);
        } catch (e) {
          return e;
        }
      })();
      expect(error, huge).toBeInstanceOf(InvalidArgument);
      expect((error as Error).message).toMatch(/at most 36525d \(100 years\)/);
    }
  });
});

describe('inventory columns', () => {
  it('a JSON Lines row naming one column twice (key and Key) is refused, as a CSV header is', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'gc-inventory-'));
    const file = path.join(dir, 'twice.jsonl');
    await writeFile(
      file,
      `${JSON.stringify({ key: 'data/live.bin', Key: 'data/other.bin', size: 1, last_modified: 0 })}\n`,
    );
    const rows = async () => {
      const out: unknown[] = [];
      for await (const row of readInventoryFile(file)) out.push(row);
      return out;
    };
    await expect(rows()).rejects.toThrow(InventoryError);
    await expect(rows()).rejects.toThrow(/line 1: "key" and "Key" both name the key column/);
    const csv = path.join(dir, 'twice.csv');
    await writeFile(csv, 'key,Key,size,last_modified\ndata/a,data/b,1,\n');
    await expect(
      (async () => {
        for await (const _ of readInventoryFile(csv));
      })(),
    ).rejects.toThrow(/column Key appears twice/);
    await rm(dir, { recursive: true, force: true });
  });
});

describe('location files', () => {
  it('a UTF-8 byte-order mark before the JSON is accepted, by every reader of @file.json', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'gc-bom-'));
    const location = {
      uri: 'file:///lake/ab/ab12',
      contentType: 'application/octet-stream',
      sizeBytes: 1,
      sha256: 'a'.repeat(64),
    };
    const one = path.join(dir, 'one.json');
    await writeFile(one, `\ufeff${JSON.stringify(location)}`);
    const many = path.join(dir, 'many.json');
    await writeFile(many, `\ufeff${JSON.stringify([location, 'file:///lake/ab/'])}`);
    expect(await locationArg(`@${one}`)).toEqual(location);
    expect(await locationsOf(`@${one}`)).toEqual([location]);
    expect(await locationsOf(`@${many}`)).toEqual([location, 'file:///lake/ab/']);
    // Anything else before the JSON is still not JSON.
    await writeFile(one, `x${JSON.stringify(location)}`);
    await expect(locationsOf(`@${one}`)).rejects.toThrow(/not JSON/);
    await expect(locationArg(`@${one}`)).rejects.toThrow(/must be JSON/);
    await rm(dir, { recursive: true, force: true });
  });
});

describe('plan pages', () => {
  it('pageBytes writes exactly the canonical JSON of a page', () => {
    const object = fc.record({
      key,
      size: fc.nat(),
      version: fc.option(fc.string({ minLength: 1 }), { nil: null }),
      lastModified: fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
    });
    const upload = fc.record({
      key,
      upload: fc.string({ minLength: 1 }),
      initiated: fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
    });
    fc.assert(
      fc.property(
        fc.array(object, { maxLength: 5 }),
        fc.array(upload, { maxLength: 3 }),
        fc.option(fc.constant('c'.repeat(64)), { nil: null }),
        (objects, uploads, previous) => {
          const page: PlanPage = { format: PAGE_FORMAT, number: 3, previous, objects, uploads };
          expect(pageBytes(page).toString()).toBe(planBytes(page).toString());
        },
      ),
      { numRuns: 300 },
    );
  });
});
