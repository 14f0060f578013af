/**
 * {@link PushIndex}: what a push learnt of a local folder's files — the digests of each file's
 * bytes in one recorded state — so that the next push of the folder reads and hashes only the
 * files that changed since, as git's index and DVC's state do.
 *
 * **An entry is trusted only when every field of the file's state matches**: size, mtime and
 * ctime (nanoseconds), inode and device ({@link FileStamp}). A write changes the ctime even when
 * its writer restores the size and the mtime; a file replaced by another (rename over it) has
 * another inode; a touched file another mtime. Anything else is read and hashed again.
 *
 * **Racily clean files are not recorded.** A file system stamps times from a clock that ticks
 * coarsely (a few milliseconds on Linux, more on some disks), so a write in the same tick as the
 * read that was hashed could leave every field as recorded. An entry is kept only when the
 * file's mtime and ctime are at least {@link RACY_WINDOW_MS} older than the moment its read
 * began; a file changed more recently is hashed again by the next push (correct, not cheap),
 * until it has been still for that long.
 *
 * **Read and written in key order, never held whole.** The file lists the entries in the UTF-8
 * order of their paths, the order a push walks the folder in (src/folders/local-tree.ts): a
 * push reads it beside its walk ({@link PushIndex.entryFor}) and writes the next one as its
 * files are done ({@link PushIndexWriter}), so a folder of a million files costs no memory per
 * file. An index in any order (format 1, which older provcat wrote in the order its files were
 * hashed; or a format 2 file found out of order) is read whole into memory once, and the next
 * one is written in order.
 *
 * **Where it lives.** One file per local folder (by the SHA-256 of its real path) in
 * `<cache root>/v1/push-index/` (the cache root is env-paths' cache directory unless
 * `PROVCAT_CACHE_DIR` or the store's `cache` says otherwise), written whole to a temp file,
 * fsynced and renamed over the old one: a reader sees the old index or the new one, never a
 * torn one. An index that cannot be read is ignored (every file is hashed again), and one with
 * a line that does not parse is trusted up to it; either is replaced by the next push.
 * Concurrent pushes of one folder each write their own, and whichever renames last stays: every
 * entry of either is true.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, realpath } from 'node:fs/promises';
import path from 'node:path';
import { debuglog } from 'node:util';
import { compareUtf8 } from '../core/keys.js';
import { AtomicLineFile, field, LineCursor, unfield } from './line-files.js';
import { type FileDigests, type FileStamp, stampTimesNs } from './local-tree.js';

const debug = debuglog('provcat:push');

/** How long a file must have been still, before its read began, for its digests to be kept. */
export const RACY_WINDOW_MS = 2000;

const RACY_WINDOW_NS = BigInt(RACY_WINDOW_MS) * 1_000_000n;

/** The first word of an index file: its format (2: in key order; 1: in any order). */
const MAGIC = 'provcat-push-index/2';
const MAGIC_ANY_ORDER = 'provcat-push-index/1';

/** One file's digests in one state, the state as the index file holds it (no bigints). */
export interface IndexEntry {
  size: number;
  state: string;
  md5?: string | undefined;
  sha256?: string | undefined;
  /** The line of a format 2 file it was read from (written again as it is when kept). */
  line?: string | undefined;
}

/** The digests `entry` holds for a file in exactly the state `stamp`, else `undefined`. */
export function digestsAt(
  entry: IndexEntry | undefined,
  stamp: FileStamp,
): FileDigests | undefined {
  if (entry === undefined || entry.size !== stamp.size || entry.state !== stamp.state) {
    return undefined;
  }
  return { md5: entry.md5, sha256: entry.sha256 };
}

/**
 * The entry to keep for a file read in the state `stamp`, the read having begun at
 * `readStartedNs` ({@link wallNs}), its digests `digests` (merged with `old`'s for the same
 * state); `undefined` (forget it) when it changed within {@link RACY_WINDOW_MS} of that.
 */
export function recordedEntry(
  old: IndexEntry | undefined,
  stamp: FileStamp,
  digests: FileDigests,
  readStartedNs: bigint,
): IndexEntry | undefined {
  const still = readStartedNs - RACY_WINDOW_NS;
  const { mtimeNs, ctimeNs } = stampTimesNs(stamp);
  if (mtimeNs > still || ctimeNs > still) return undefined;
  const same = digestsAt(old, stamp);
  return {
    size: stamp.size,
    state: stamp.state,
    md5: digests.md5 ?? same?.md5,
    sha256: digests.sha256 ?? same?.sha256,
  };
}

/** Now, in nanoseconds since the epoch (the clock file systems stamp times with). */
export function wallNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

/**
 * One index line of format 1: size, mtime, ctime, inode, device (decimal), MD5 or `-`, SHA-256
 * or `-`, then the path as a JSON string (`s`: it may hold U+2028, which JSON leaves as it is). The state is
 * kept as the text it is.
 */
const LINE =
  /^(\d{1,20})\t(\d{1,20}\t\d{1,20}\t\d{1,20}\t\d{1,20})\t([0-9a-f]{32}|-)\t([0-9a-f]{64}|-)\t(".*)$/s;

/**
 * The path and entry of one line of format 2 (the fields of format 1, the path as a field
 * (src/folders/line-files.ts `field`) rather than always JSON), or `undefined` when it is none.
 */
function parseLine(line: string): { rel: string; entry: IndexEntry } | undefined {
  // size, mtime, ctime, inode, device, MD5, SHA-256, path: the state is a slice of the line.
  const t = TABS;
  let at = -1;
  for (let i = 0; i < 7; i++) {
    at = line.indexOf('\t', at + 1);
    if (at < 0) return undefined;
    t[i] = at;
  }
  if (line.indexOf('\t', at + 1) >= 0) return undefined;
  const t0 = t[0] as number;
  const size = line.slice(0, t0);
  const md5 = line.slice((t[4] as number) + 1, t[5]);
  const sha256 = line.slice((t[5] as number) + 1, t[6]);
  if (!DIGITS.test(size) || (md5 !== '-' && md5.length !== 32)) return undefined;
  if (sha256 !== '-' && sha256.length !== 64) return undefined;
  let rel: string | undefined;
  try {
    rel = unfield(line.slice((t[6] as number) + 1));
  } catch {
    return undefined;
  }
  if (rel === undefined) return undefined;
  return {
    rel,
    entry: {
      size: Number(size),
      state: line.slice(t0 + 1, t[4]),
      md5: md5 === '-' ? undefined : md5,
      sha256: sha256 === '-' ? undefined : sha256,
      line,
    },
  };
}

/** Where the tabs of an index line are (reused: one line is parsed at a time). */
const TABS = new Int32Array(7);

const DIGITS = /^\d{1,15}$/;

/** The path and entry of one line of format 1, or `undefined` when it is none. */
function parseLineV1(line: string): { rel: string; entry: IndexEntry } | undefined {
  const m = LINE.exec(line);
  if (m === null) return undefined;
  const [, size, state, md5, sha256, json] = m as unknown as [string, ...string[]];
  let rel: unknown;
  try {
    rel = JSON.parse(json as string);
  } catch {
    return undefined;
  }
  if (typeof rel !== 'string') return undefined;
  return {
    rel,
    entry: {
      size: Number(size),
      state: state as string,
      md5: md5 === '-' ? undefined : md5,
      sha256: sha256 === '-' ? undefined : sha256,
    },
  };
}

function formatLine(rel: string, e: IndexEntry): string {
  return `${e.size}\t${e.state}\t${e.md5 ?? '-'}\t${e.sha256 ?? '-'}\t${field(rel)}`;
}

function header(dir: string, magic = MAGIC): string {
  return `${magic}\t${JSON.stringify(dir)}`;
}

/**
 * The index of one local folder as its last push left it, read in key order beside a walk of
 * the folder; see the module comment.
 */
export class PushIndex {
  private cursor: LineCursor | undefined;
  private pending: { rel: string; entry: IndexEntry } | undefined;
  private last: string | undefined;
  /** The whole index, when its file is not in key order. */
  private whole: Map<string, IndexEntry> | undefined;
  /** Whether the file on disk differs from what the entries asked for would write. */
  private stale = false;

  private constructor(
    private readonly file: string,
    private readonly dir: string,
  ) {}

  /**
   * The index of the local folder `localDir`, kept below `cacheRoot` (empty when there is none
   * yet, or when it cannot be read; see the module comment).
   */
  static async open(cacheRoot: string, localDir: string): Promise<PushIndex> {
    const { file, dir } = await locate(cacheRoot, localDir);
    const index = new PushIndex(file, dir);
    try {
      index.cursor = new LineCursor(file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
        debug('cannot read the push index %s (every file is hashed): %s', file, String(error));
      }
      return index;
    }
    const first = index.cursor.next();
    if (first === header(dir, MAGIC_ANY_ORDER)) {
      index.end(true);
      index.whole = readWhole(file, dir);
    } else if (first !== header(dir)) {
      debug('ignoring the unreadable push index %s', file);
      index.end(true);
    }
    return index;
  }

  /** Begin the next index of the local folder `localDir` below `cacheRoot`. */
  static async next(cacheRoot: string, localDir: string): Promise<PushIndexWriter> {
    const { file, dir } = await locate(cacheRoot, localDir);
    await mkdir(path.dirname(file), { recursive: true });
    const out = await AtomicLineFile.begin(file);
    out.add(header(dir));
    return new PushIndexWriter(out);
  }

  private end(stale: boolean): void {
    this.cursor?.close();
    this.cursor = undefined;
    this.pending = undefined;
    if (stale) this.stale = true;
  }

  /** The next line of the file, in key order; switches to the whole file when it is not. */
  private peek(): { rel: string; entry: IndexEntry } | undefined {
    while (this.pending === undefined && this.cursor !== undefined) {
      const line = this.cursor.next();
      if (line === undefined) {
        this.end(false);
        break;
      }
      const parsed = parseLine(line);
      if (parsed === undefined) {
        debug('the push index %s ends in a line that is none; trusted up to it', this.file);
        this.end(true);
        break;
      }
      if (this.last !== undefined && compareUtf8(this.last, parsed.rel) >= 0) {
        this.end(true);
        this.whole = readWhole(this.file, this.dir);
        break;
      }
      this.last = parsed.rel;
      this.pending = parsed;
    }
    return this.pending;
  }

  /**
   * The entry recorded for `rel`. Asked for the folder's files in key order (each once); an
   * entry passed over (of a file no longer in the folder) is dropped from the next index.
   */
  entryFor(rel: string): IndexEntry | undefined {
    if (this.whole !== undefined) {
      const e = this.whole.get(rel);
      if (e !== undefined) this.whole.delete(rel);
      return e;
    }
    for (let p = this.peek(); p !== undefined; p = this.peek()) {
      const c = compareUtf8(p.rel, rel);
      if (c > 0) return undefined;
      this.pending = undefined;
      if (c === 0) return p.entry;
      this.stale = true;
    }
    // Out of order: the whole file was read.
    return this.whole === undefined ? undefined : this.entryFor(rel);
  }

  /**
   * Stop reading: whether the next index must be written even if no entry changes (entries
   * were dropped, or the file was out of order or unreadable). A second call answers the same.
   */
  close(): boolean {
    if (this.peek() !== undefined || (this.whole?.size ?? 0) > 0) this.stale = true;
    this.end(false);
    this.whole = undefined;
    return this.stale;
  }
}

/** Where the index of `localDir` is kept, and the real path of the folder it names. */
async function locate(cacheRoot: string, localDir: string): Promise<{ file: string; dir: string }> {
  const dir = await realpath(localDir).catch(() => path.resolve(localDir));
  const name = createHash('sha256').update(dir).digest('hex').slice(0, 32);
  return { file: path.join(indexFolder(cacheRoot), `${name}.tsv`), dir };
}

/** The folder of the push indexes below `cacheRoot` (a push's temp files go there too). */
export function indexFolder(cacheRoot: string): string {
  return path.join(cacheRoot, 'v1', 'push-index');
}

/** The whole index file, for one not in key order (see the module comment). */
function readWhole(file: string, dir: string): Map<string, IndexEntry> {
  const out = new Map<string, IndexEntry>();
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return out;
  }
  const lines = text.split('\n');
  const parse =
    lines[0] === header(dir)
      ? parseLine
      : lines[0] === header(dir, MAGIC_ANY_ORDER)
        ? parseLineV1
        : undefined;
  if (parse === undefined) return out;
  for (let i = 1; i < lines.length; i++) {
    const parsed = parse(lines[i] as string);
    if (parsed === undefined) break;
    out.set(parsed.rel, parsed.entry);
  }
  return out;
}

/**
 * The next index of a folder, written in key order as a push deals with its files; put in place
 * by {@link finish} only when an entry changed (or the old file was stale).
 */
export class PushIndexWriter {
  private changed = false;

  constructor(private readonly out: AtomicLineFile) {}

  /**
   * The entry of the file `rel` (next in key order): `next` is kept (`undefined`: none);
   * `old` is what the last index held, to tell whether anything changed.
   */
  add(
    rel: string,
    old: IndexEntry | undefined,
    next: IndexEntry | undefined,
  ): Promise<void> | undefined {
    if (next !== old) this.changed = true;
    if (next === undefined) return undefined;
    return this.out.add(next.line ?? formatLine(rel, next));
  }

  /**
   * Put the new index in place, or leave the old one when no entry changed and it is not
   * `stale` (as {@link PushIndex.close} answered).
   */
  async finish(stale: boolean): Promise<void> {
    if (this.changed || stale) await this.out.commit();
    else await this.out.discard();
  }
}
