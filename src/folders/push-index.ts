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
 * **Where it lives.** One file per local folder (by the SHA-256 of its real path) in
 * `<cache root>/v1/push-index/` (the cache root is env-paths' cache directory unless
 * `PROVCAT_CACHE_DIR` or the store's `cache` says otherwise), written whole to a temp file,
 * fsynced and renamed over the old one: a reader sees the old index or the new one, never a
 * torn one. An index that cannot be read or parsed is ignored (every file is hashed again) and
 * replaced by the next save; concurrent pushes of one folder each save their own, and whichever
 * renames last stays: every entry of either is true.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { debuglog } from 'node:util';
import { writeFileAtomic } from '../core/fs-atomic.js';
import { type FileDigests, type FileStamp, stampTimesNs } from './local-tree.js';

const debug = debuglog('provcat:push');

/** How long a file must have been still, before its read began, for its digests to be kept. */
export const RACY_WINDOW_MS = 2000;

const RACY_WINDOW_NS = BigInt(RACY_WINDOW_MS) * 1_000_000n;

/** The first word of an index file: its format. */
const MAGIC = 'provcat-push-index/1';

/** One file's digests in one state: flat, the state as the index file holds it (no bigints). */
interface Entry {
  size: number;
  state: string;
  md5?: string | undefined;
  sha256?: string | undefined;
}

function sameState(e: Entry, stamp: FileStamp): boolean {
  return e.size === stamp.size && e.state === stamp.state;
}

/** Now, in nanoseconds since the epoch (the clock file systems stamp times with). */
export function wallNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

/** The digests of a local folder's files in recorded states; see the module comment. */
export class PushIndex {
  private readonly entries: Map<string, Entry>;
  private dirty = false;

  private constructor(
    private readonly file: string | undefined,
    private readonly dir: string,
    entries: Map<string, Entry>,
  ) {
    this.entries = entries;
  }

  /** An index that remembers nothing and saves nothing. */
  static none(): PushIndex {
    return new PushIndex(undefined, '', new Map());
  }

  /**
   * The index of the local folder `localDir`, kept below `cacheRoot` (empty when there is none
   * yet, or when it cannot be read; see the module comment).
   */
  static async open(cacheRoot: string, localDir: string): Promise<PushIndex> {
    const dir = await realpath(localDir).catch(() => path.resolve(localDir));
    const name = createHash('sha256').update(dir).digest('hex').slice(0, 32);
    const file = path.join(cacheRoot, 'v1', 'push-index', `${name}.tsv`);
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
        debug('cannot read the push index %s (every file is hashed): %s', file, String(error));
      }
      return new PushIndex(file, dir, new Map());
    }
    const entries = parse(text, dir);
    if (entries === undefined) debug('ignoring the unreadable push index %s', file);
    return new PushIndex(file, dir, entries ?? new Map());
  }

  /** The digests recorded for `rel` in exactly the state `stamp`, else `undefined`. */
  lookup(rel: string, stamp: FileStamp): FileDigests | undefined {
    const e = this.entries.get(rel);
    if (e === undefined || !sameState(e, stamp)) return undefined;
    return { md5: e.md5, sha256: e.sha256 };
  }

  /**
   * Record the digests of `rel` read in the state `stamp`, the read having begun at
   * `readStartedNs` ({@link wallNs}); a file changed within {@link RACY_WINDOW_MS} of that is
   * forgotten instead (see the module comment).
   */
  record(rel: string, stamp: FileStamp, digests: FileDigests, readStartedNs: bigint): void {
    const old = this.entries.get(rel);
    this.dirty = true;
    const still = readStartedNs - RACY_WINDOW_NS;
    const { mtimeNs, ctimeNs } = stampTimesNs(stamp);
    if (mtimeNs > still || ctimeNs > still) {
      this.entries.delete(rel);
      return;
    }
    const same = old !== undefined && sameState(old, stamp);
    this.entries.set(rel, {
      size: stamp.size,
      state: stamp.state,
      md5: digests.md5 ?? (same ? old.md5 : undefined),
      sha256: digests.sha256 ?? (same ? old.sha256 : undefined),
    });
  }

  /**
   * Write the index of the files in `keep` (the folder's files now; others are dropped),
   * atomically. Does nothing when nothing changed.
   */
  async save(keep: ReadonlySet<string>): Promise<void> {
    if (this.file === undefined) return;
    for (const rel of this.entries.keys()) {
      if (!keep.has(rel)) {
        this.entries.delete(rel);
        this.dirty = true;
      }
    }
    if (!this.dirty) return;
    const lines = [`${MAGIC}\t${JSON.stringify(this.dir)}`];
    for (const [rel, { size, state, md5, sha256 }] of this.entries) {
      lines.push(`${size}\t${state}\t${md5 ?? '-'}\t${sha256 ?? '-'}\t${JSON.stringify(rel)}`);
    }
    await writeFileAtomic(this.file, `${lines.join('\n')}\n`);
    this.dirty = false;
  }
}

/**
 * One index line: size, mtime, ctime, inode, device (decimal), MD5 or `-`, SHA-256 or `-`, then
 * the path as a JSON string (`s`: it may hold U+2028, which JSON leaves as it is). The state is
 * kept as the text it is.
 */
const LINE =
  /^(\d{1,20})\t(\d{1,20}\t\d{1,20}\t\d{1,20}\t\d{1,20})\t([0-9a-f]{32}|-)\t([0-9a-f]{64}|-)\t(".*)$/s;

/** The entries of an index file, or `undefined` when it is not one (of the folder `dir`). */
function parse(text: string, dir: string): Map<string, Entry> | undefined {
  const lines = text.split('\n');
  if (lines.pop() !== '' || lines[0] !== `${MAGIC}\t${JSON.stringify(dir)}`) return undefined;
  const out = new Map<string, Entry>();
  for (let i = 1; i < lines.length; i++) {
    const m = LINE.exec(lines[i] as string);
    if (m === null) return undefined;
    const [, size, state, md5, sha256, json] = m as unknown as [string, ...string[]];
    let rel: unknown;
    try {
      rel = JSON.parse(json as string);
    } catch {
      return undefined; // not an index line: the whole file is ignored (module comment)
    }
    if (typeof rel !== 'string') return undefined;
    out.set(rel, {
      size: Number(size),
      state: state as string,
      md5: md5 === '-' ? undefined : md5,
      sha256: sha256 === '-' ? undefined : sha256,
    });
  }
  return out;
}
