/**
 * The keep-set file (`provcat.keep-set/1`): what `gc keep-set --out FILE` exports for an external
 * engine, and what plan and apply build for themselves. JSON Lines, UTF-8:
 *
 * ```
 * {"fingerprint":"…","format":"provcat.keep-set/1","sets":[…],"stage":"…"}   header
 * {"key":"ab/ab12…"}                                                          one per entry,
 * {"key":"datasets/robots/"}                                                  sorted, no repeats
 * {"end":true,"entries":2,"sha256":"…"}                                       trailer
 * ```
 *
 * Every line is canonical JSON (so a line has one spelling), entries are canonical
 * stage-relative keys or prefixes (keys.ts) in strictly ascending UTF-8 byte order, and the
 * trailer carries the count and the SHA-256 of every byte before it. A reader
 * ({@link readKeepSet}) checks all of it and refuses the file otherwise: a truncated file has no
 * trailer, a dropped or altered line changes the digest, a re-encoded key (`%25` → `%2525`) is
 * out of order or changes the digest. Keys are JSON strings and nothing else: no percent-encoding
 * or decoding happens on the way out or in, so an import answers exactly as the export did.
 *
 * @module
 */
import { createHash, type Hash } from 'node:crypto';
import { write } from 'node:fs';
import path from 'node:path';
import { type OutputFile, openOutputFile } from '../../core/output-file.js';
import { canonicalJson } from '../../logs/canonical-json.js';
import { KeepSetFileError } from './errors.js';
import { compareUtf8, entryProblem } from './keys.js';
import { LineReader } from './line-reader.js';
import { KeepSetIndex, SortedMatcher } from './matcher.js';

/** The `format` of keep-set files. */
export const KEEP_SET_FORMAT = 'provcat.keep-set/1';

/** One reference set as the header lists it. */
export interface KeepSetSource {
  /** The set's log hash (SHA-256 hex of its name). */
  set: string;
  name: string;
  /** Its newest entry number. */
  number: number;
  /** The ID of its newest delta. */
  head: string;
  /** Retired sets are listed (they are part of the fingerprint) but contribute no entry. */
  retired: boolean;
}

/** The header line. */
export interface KeepSetHeader {
  format: typeof KEEP_SET_FORMAT;
  /** The stage's identity (`Stage.identity`). */
  stage: string;
  /** The fingerprint of the reference sets the entries were read from. */
  fingerprint: string;
  /** Every set, by log hash. */
  sets: KeepSetSource[];
}

/** What a finished or verified file holds. */
export interface KeepSetSummary {
  header: KeepSetHeader;
  /** How many entries. */
  entries: number;
  /** SHA-256 hex of every byte before the trailer. */
  sha256: string;
}

const BATCH = 1024 * 1024;

/** Write all of `text` to descriptor `fd`. */
async function writeText(fd: number, text: string): Promise<void> {
  const bytes = Buffer.from(text, 'utf8');
  let done = 0;
  while (done < bytes.length) {
    done += await new Promise<number>((resolve, reject) =>
      write(fd, bytes, done, bytes.length - done, null, (error, n) =>
        error ? reject(error) : resolve(n),
      ),
    );
  }
}

/**
 * Writes a keep-set file complete-or-absent through the one safe-output routine
 * (src/core/output-file.ts): the target must be a new or regular file (a device, FIFO, symlink or
 * directory is refused before anything is created — a usage error); the bytes go to a temp
 * beside it, fsync, rename, directory fsync.
 */
export class KeepSetWriter {
  private readonly hash: Hash = createHash('sha256');
  private batch = '';
  private count = 0;
  private last: string | undefined;

  private constructor(
    private readonly out: OutputFile,
    private readonly header: KeepSetHeader,
  ) {}

  /** Start writing `file` with `header`; `option` names it in a refusal (default `--out`). */
  static async create(
    file: string,
    header: KeepSetHeader,
    option = '--out',
  ): Promise<KeepSetWriter> {
    const writer = new KeepSetWriter(openOutputFile(file, option), header);
    writer.line(canonicalJson(header));
    return writer;
  }

  private line(text: string): void {
    const line = `${text}\n`;
    this.hash.update(line, 'utf8');
    this.batch += line;
  }

  /** Add one entry; entries must come in strictly ascending order and be canonical. */
  async add(entry: string): Promise<void> {
    const problem = entryProblem(entry);
    if (problem)
      throw new KeepSetFileError(`not a canonical entry ${JSON.stringify(entry)}: ${problem}`);
    if (this.last !== undefined && compareUtf8(this.last, entry) >= 0) {
      throw new KeepSetFileError(
        `entries out of order: ${JSON.stringify(entry)} after ${JSON.stringify(this.last)}`,
      );
    }
    this.last = entry;
    this.count += 1;
    this.line(canonicalJson({ key: entry }));
    if (this.batch.length >= BATCH) {
      await writeText(this.out.fd, this.batch);
      this.batch = '';
    }
  }

  /** Write the trailer and publish the file. */
  async finish(): Promise<KeepSetSummary> {
    const sha256 = this.hash.digest('hex');
    this.batch += `${canonicalJson({ end: true, entries: this.count, sha256 })}\n`;
    try {
      await writeText(this.out.fd, this.batch);
      this.batch = '';
    } catch (error) {
      this.out.abort();
      throw error;
    }
    await this.out.commit();
    return { header: this.header, entries: this.count, sha256 };
  }

  /** Give up: remove the temp file. */
  async abort(): Promise<void> {
    this.out.abort();
  }
}

function bad(file: string, why: string, cause?: unknown): KeepSetFileError {
  return new KeepSetFileError(`keep-set file ${file}: ${why}`, { cause });
}

function parseLine(file: string, line: string, n: number): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (cause) {
    throw bad(file, `line ${n} is not JSON`, cause);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(file, `line ${n} is not a JSON object`);
  }
  let canonical: string;
  try {
    canonical = canonicalJson(value);
  } catch (cause) {
    throw bad(file, `line ${n} holds a value canonical JSON cannot`, cause);
  }
  if (canonical !== line) throw bad(file, `line ${n} is not in canonical form`);
  return value as Record<string, unknown>;
}

const HEX64 = /^[0-9a-f]{64}$/;

function checkHeader(file: string, value: Record<string, unknown>): KeepSetHeader {
  if (value.format !== KEEP_SET_FORMAT) {
    throw bad(
      file,
      `format ${JSON.stringify(value.format)} (this reader knows ${KEEP_SET_FORMAT})`,
    );
  }
  const keys = Object.keys(value).sort().join(',');
  if (keys !== 'fingerprint,format,sets,stage') throw bad(file, `header fields ${keys}`);
  if (typeof value.stage !== 'string') throw bad(file, 'header stage is not a string');
  if (typeof value.fingerprint !== 'string' || !HEX64.test(value.fingerprint)) {
    throw bad(file, 'header fingerprint is not a SHA-256');
  }
  if (!Array.isArray(value.sets)) throw bad(file, 'header sets is not an array');
  for (const s of value.sets as unknown[]) {
    const set = s as Record<string, unknown>;
    if (
      typeof set !== 'object' ||
      set === null ||
      typeof set.set !== 'string' ||
      typeof set.name !== 'string' ||
      typeof set.head !== 'string' ||
      typeof set.number !== 'number' ||
      typeof set.retired !== 'boolean' ||
      Object.keys(set).length !== 5
    ) {
      throw bad(file, 'a header set is not {set, name, number, head, retired}');
    }
  }
  return value as unknown as KeepSetHeader;
}

/**
 * Read a keep-set file line by line, verifying everything (see the module comment); yields the
 * header first (as `{header}`), then each entry, and checks the trailer at the end. Any
 * problem is a {@link KeepSetFileError} — raised at the end for a digest or count that differs,
 * so a consumer acts on entries only once the whole file was read.
 */
async function* readLines(
  file: string,
): AsyncGenerator<{ header: KeepSetHeader } | { entry: string } | { end: KeepSetSummary }> {
  const reader = await LineReader.open(file);
  const hash = createHash('sha256');
  try {
    const first = await reader.next();
    if (first === undefined) throw bad(file, 'empty');
    const header = checkHeader(file, parseLine(file, first, 1));
    hash.update(`${first}\n`, 'utf8');
    yield { header };
    let n = 1;
    let count = 0;
    let last: string | undefined;
    for (;;) {
      const line = reader.nextBuffered() ?? (await reader.next());
      n += 1;
      if (line === undefined) throw bad(file, 'ends without its trailer (truncated?)');
      const value = parseLine(file, line, n);
      if ('end' in value) {
        if (reader.unterminated) throw bad(file, 'the trailer is not followed by a newline');
        if (value.end !== true || Object.keys(value).length !== 3) {
          throw bad(file, `line ${n} is not a trailer {end, entries, sha256}`);
        }
        const sha256 = hash.digest('hex');
        if (value.entries !== count) {
          throw bad(
            file,
            `the trailer counts ${String(value.entries)} entries, the file has ${count}`,
          );
        }
        if (value.sha256 !== sha256) {
          throw bad(
            file,
            `the trailer's SHA-256 ${String(value.sha256)} is not the file's ${sha256}`,
          );
        }
        if ((await reader.next()) !== undefined) throw bad(file, 'lines after the trailer');
        yield { end: { header, entries: count, sha256 } };
        return;
      }
      const keys = Object.keys(value);
      if (keys.length !== 1 || keys[0] !== 'key' || typeof value.key !== 'string') {
        throw bad(file, `line ${n} is not an entry {key}`);
      }
      const entry = value.key;
      const problem = entryProblem(entry);
      if (problem)
        throw bad(file, `line ${n}: ${JSON.stringify(entry)} is not canonical: ${problem}`);
      if (last !== undefined && compareUtf8(last, entry) >= 0) {
        throw bad(file, `line ${n}: ${JSON.stringify(entry)} is not after ${JSON.stringify(last)}`);
      }
      last = entry;
      count += 1;
      hash.update(`${line}\n`, 'utf8');
      yield { entry };
    }
  } finally {
    await reader.close();
  }
}

/** A keep-set file that was read whole and verified once ({@link readKeepSet}). */
export class KeepSetFile implements KeepSetSummary {
  constructor(
    /** The file. */
    readonly path: string,
    readonly header: KeepSetHeader,
    readonly entries: number,
    readonly sha256: string,
  ) {}

  /** The fingerprint of the reference sets it was read from. */
  get fingerprint(): string {
    return this.header.fingerprint;
  }

  /**
   * Its entries in ascending order, read again from the file and verified again as they come;
   * the file must still be the one verified (same digest), else {@link KeepSetFileError} at
   * the end.
   */
  async *keys(): AsyncGenerator<string> {
    for await (const item of readLines(this.path)) {
      if ('entry' in item) yield item.entry;
      else if ('end' in item && item.end.sha256 !== this.sha256) {
        throw bad(this.path, 'changed since it was verified');
      }
    }
  }

  /** A streaming matcher over the entries, for keys asked in ascending order. */
  matcher(): SortedMatcher {
    return new SortedMatcher(this.keys());
  }

  /** Every entry in memory, for questions in any order. */
  async index(): Promise<KeepSetIndex> {
    const all: string[] = [];
    for await (const key of this.keys()) all.push(key);
    return new KeepSetIndex(all);
  }
}

/**
 * Read and verify a keep-set file (header, every line canonical and in order, trailer count and
 * digest). Throws {@link KeepSetFileError}; returns the file's summary, from which its entries
 * can be streamed or indexed.
 */
export async function readKeepSet(file: string): Promise<KeepSetFile> {
  const resolved = path.resolve(file);
  let header: KeepSetHeader | undefined;
  try {
    for await (const item of readLines(resolved)) {
      if ('header' in item) header = item.header;
      if ('end' in item) {
        return new KeepSetFile(
          resolved,
          header as KeepSetHeader,
          item.end.entries,
          item.end.sha256,
        );
      }
    }
  } catch (error) {
    if (error instanceof KeepSetFileError) throw error;
    throw bad(resolved, 'cannot be read', error);
  }
  throw bad(resolved, 'ends without its trailer');
}
