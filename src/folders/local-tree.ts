/**
 * The local side of a push: the files of a local folder, and reads of them that are a snapshot.
 *
 * **What a local folder holds.** Regular files at any depth, named by their path relative to the
 * folder with `/` between segments. A symbolic link to a regular file is followed (the object
 * gets the target's bytes, under the link's name): a HuggingFace snapshot folder, made of links
 * into a blob store, pushes as the files it shows. A link to a folder is refused, since following
 * it can loop or push one tree twice, and so is a dangling link or anything else that is not a
 * regular file (FIFO, socket, device): a push never guesses what such a name should become.
 * Empty folders are not objects and are left out. Names are read as bytes: a name that is not
 * UTF-8 cannot become a key, so it is refused rather than sent under a replacement character.
 *
 * **Reads are snapshots.** A file is read between two `stat` calls that must agree (size, mtime,
 * ctime, inode, device, in nanoseconds and as exact integers); a file that changed while it was read is read again, and after
 * {@link STABLE_ATTEMPTS} tries is {@link SourceChanged}. So the bytes sent or hashed are one
 * state of the file, never a mix of two.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import {
  type BigIntStats,
  closeSync,
  createReadStream,
  type Dirent,
  fstatSync,
  lstatSync,
  openSync,
  readSync,
  statSync,
} from 'node:fs';
import { type FileHandle, open, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { SourceChanged, SourceError, UriError } from '../core/errors.js';
import { compareUtf8 } from '../core/keys.js';

/** Reads of a file that kept changing before it is {@link SourceChanged}. */
export const STABLE_ATTEMPTS = 3;

/**
 * What identifies one state of a local file: equal stamps mean an unchanged file. The times are
 * nanoseconds and the inode and device exact (`stat` with `bigint`); any write changes the ctime,
 * even one whose writer restores the mtime after it.
 *
 * Kept as the size and one string of the other four fields (a push holds a stamp per file, some
 * twice: one string instead of an object of four bigints is about 150 bytes a file less, and the
 * push index reads it from its file as it is). Make one with {@link makeStamp}; read its times
 * with {@link stampTimesNs}.
 */
export interface FileStamp {
  size: number;
  /** mtime and ctime in nanoseconds, inode and device: decimal integers, tab-separated. */
  state: string;
}

/** The fields of a {@link FileStamp}, as `stat` with `bigint` reports them. */
export interface StampFields {
  size: number;
  mtimeNs: bigint;
  ctimeNs: bigint;
  ino: bigint;
  dev: bigint;
}

/** The stamp of a file state given field by field. */
export function makeStamp(f: StampFields): FileStamp {
  return { size: f.size, state: `${f.mtimeNs}\t${f.ctimeNs}\t${f.ino}\t${f.dev}` };
}

/** The mtime and ctime (nanoseconds) of a stamp. */
export function stampTimesNs(stamp: FileStamp): { mtimeNs: bigint; ctimeNs: bigint } {
  const [mtime, ctime] = stamp.state.split('\t', 2);
  return { mtimeNs: BigInt(mtime as string), ctimeNs: BigInt(ctime as string) };
}

/** One file of a local folder. */
export interface LocalFile {
  /** The path relative to the folder, `/`-separated (the key below the store folder). */
  rel: string;
  /** The local path (a link's own path when the file is a followed link). */
  path: string;
  /** The file's state when the folder was read (of the link's target for a link). */
  stamp: FileStamp;
}

/**
 * A {@link LocalFile} as {@link walkLocalTree} hands it on: the path is joined when asked from its
 * folder's path (one string a folder) and its name, rather than held as a string a file.
 */
class TreeFile implements LocalFile {
  constructor(
    readonly rel: string,
    private readonly dir: string,
    private readonly name: string,
    readonly stamp: FileStamp,
  ) {}

  get path(): string {
    return path.join(this.dir, this.name);
  }
}

function stampOf(st: BigIntStats): FileStamp {
  return makeStamp({
    size: Number(st.size),
    mtimeNs: st.mtimeNs,
    ctimeNs: st.ctimeNs,
    ino: st.ino,
    dev: st.dev,
  });
}

/** True when two stamps describe the same state of a file. */
export function sameStamp(a: FileStamp, b: FileStamp): boolean {
  return a.size === b.size && a.state === b.state;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function decodeName(name: Buffer, dir: string): string {
  try {
    return utf8.decode(name);
  } catch (cause) {
    throw new UriError(
      `${path.join(dir, name.toString('latin1'))}: the name is not UTF-8, so no key or URI can name it`,
      { cause },
    );
  }
}

function sourceError(file: string, cause: unknown): SourceError {
  return new SourceError(`cannot read ${file}: ${(cause as Error).message}`, { cause });
}

/** One folder of a walk: its entries in key order, and the next one to visit. */
interface WalkFrame {
  dir: string;
  rel: string;
  entries: { name: string; key: string; entry: Dirent<Buffer> }[];
  next: number;
}

/**
 * Hand `visit` every file of the local folder `root` (see the module comment), in the order of
 * the UTF-8 bytes of `rel` (the order object stores list keys in), one at a time. `SourceError`
 * when `root` is not a readable folder, for a link to a folder, a dangling link or a special
 * file, and `UriError` for a name that is not UTF-8, as they are met (a `visit` that throws ends
 * the walk with its error). Reads only metadata: one `readdir` per folder, one `lstat` per file
 * (synchronous, a few milliseconds per thousand files between turns of the event loop). Memory holds the entries of the folders open on the way down, not the tree:
 * each folder's entries are sorted by name, a folder's name followed by `/` (so `a-b` and
 * `a.txt` come before the files of `a/`, and `a0` after them), which makes the depth-first order
 * the key order, with no sort of the whole tree. A callback rather than an async generator, so a
 * consumer that only collects pays no promise per file.
 */
export async function walkLocalTree(
  root: string,
  visit: (file: LocalFile) => void | Promise<void>,
): Promise<void> {
  let top: BigIntStats;
  try {
    top = await stat(root, { bigint: true });
  } catch (cause) {
    throw sourceError(root, cause);
  }
  if (!top.isDirectory()) throw new SourceError(`cannot push ${root}: not a folder`);
  const frames: WalkFrame[] = [await readFrame(root, '')];
  let sinceYield = 0;
  while (frames.length > 0) {
    const frame = frames[frames.length - 1] as WalkFrame;
    const item = frame.entries[frame.next++];
    if (item === undefined) {
      frames.pop();
      continue;
    }
    const { name, entry } = item;
    const file = path.join(frame.dir, name);
    const rel = frame.rel === '' ? name : `${frame.rel}/${name}`;
    if (entry.isDirectory()) {
      frames.push(await readFrame(file, rel));
      continue;
    }
    // Awaited only when it returns a promise: a tick a file is what the callback avoids.
    const visited = visit(new TreeFile(rel, frame.dir, name, stampOf(statEntry(entry, file))));
    if (visited !== undefined) await visited;
    // Synchronous stats cost a sixth of the CPU of promised ones; the loop yields often.
    if (++sinceYield >= YIELD_EVERY) {
      sinceYield = 0;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
}

/** The entries of one folder of a walk, in key order (see {@link walkLocalTree}). */
async function readFrame(dir: string, rel: string): Promise<WalkFrame> {
  let listed: Dirent<Buffer>[];
  try {
    listed = await readdir(dir, { withFileTypes: true, encoding: 'buffer' });
  } catch (cause) {
    throw sourceError(dir, cause);
  }
  const entries = listed.map((entry) => {
    const name = decodeName(entry.name, dir);
    return { name, key: entry.isDirectory() ? `${name}/` : name, entry };
  });
  entries.sort((a, b) => compareUtf8(a.key, b.key));
  return { dir, rel, entries, next: 0 };
}

/** Files stat()ed between two turns of the event loop by {@link walkLocalTree}. */
const YIELD_EVERY = 256;

/**
 * The state of a file entry (of its target for a link), synchronously; `SourceError` for a
 * link to nothing or to a folder and for anything that is not a regular file.
 */
function statEntry(entry: Dirent<Buffer>, file: string): BigIntStats {
  if (entry.isFile()) {
    try {
      return lstatSync(file, { bigint: true });
    } catch (cause) {
      throw sourceError(file, cause);
    }
  }
  if (entry.isSymbolicLink()) {
    let target: BigIntStats;
    try {
      target = statSync(file, { bigint: true });
    } catch (cause) {
      throw new SourceError(`cannot push ${file}: a link to nothing`, { cause });
    }
    if (target.isFile()) return target;
    if (target.isDirectory()) {
      throw new SourceError(
        `cannot push ${file}: a link to a folder (push follows links to files only; copy or link the files instead)`,
      );
    }
  }
  throw new SourceError(`cannot push ${file}: not a regular file`);
}

/** The state of a file now (following a link). SourceError when it cannot be read. */
export async function stampNow(file: string): Promise<FileStamp> {
  try {
    return stampOf(await stat(file, { bigint: true }));
  } catch (cause) {
    throw sourceError(file, cause);
  }
}

/** Whether a read between stamps `before` and `after` holds; `SourceChanged` after the last attempt. */
function settled(file: string, before: FileStamp, after: FileStamp, attempt: number): boolean {
  if (sameStamp(before, after)) return true;
  if (attempt >= STABLE_ATTEMPTS) {
    throw new SourceChanged(`${file} kept changing while it was read (${attempt} reads)`);
  }
  return false;
}

/**
 * Run `read` between two stamps of `file` that must agree, and return its result with that
 * stamp; a file that changed meanwhile is read again, then {@link SourceChanged}.
 */
export async function stableRead<T>(
  file: string,
  read: () => Promise<T>,
): Promise<{ value: T; stamp: FileStamp }> {
  for (let attempt = 1; ; attempt++) {
    const before = await stampNow(file);
    let value: T;
    try {
      value = await read();
    } catch (cause) {
      if (cause instanceof SourceError) throw cause;
      throw sourceError(file, cause);
    }
    const after = await stampNow(file);
    if (settled(file, before, after, attempt)) return { value, stamp: after };
  }
}

/**
 * The whole file, read as one snapshot: opened once, its state taken from the open file before
 * and after the read (`fstat`), which must agree, else read again, then {@link SourceChanged}
 * (as {@link stableRead}, with five system calls instead of seven: no path lookup but the open).
 * The bytes are one state of the file that was at `file` when it was opened.
 */
export async function readWhole(file: string): Promise<{ value: Buffer; stamp: FileStamp }> {
  for (let attempt = 1; ; attempt++) {
    let handle: FileHandle;
    try {
      handle = await open(file, 'r');
    } catch (cause) {
      throw sourceError(file, cause);
    }
    let before: FileStamp;
    let after: FileStamp;
    let value: Buffer;
    try {
      before = stampOf(await handle.stat({ bigint: true }));
      value = Buffer.allocUnsafe(before.size);
      let got = 0;
      while (got < value.length) {
        const { bytesRead } = await handle.read(value, got, value.length - got, got);
        if (bytesRead === 0) break; // shorter now: the second stamp tells
        got += bytesRead;
      }
      after = stampOf(await handle.stat({ bigint: true }));
    } catch (cause) {
      throw sourceError(file, cause);
    } finally {
      await handle.close();
    }
    if (settled(file, before, after, attempt)) return { value, stamp: after };
  }
}

/**
 * {@link readWhole} in synchronous calls, for a small file (a push reads files up to
 * {@link SYNC_READ_MAX} this way): the five calls cost about a fifth of the CPU of promised
 * ones, and a read of a small file blocks the event loop for microseconds. Same guarantee.
 */
export function readWholeSync(file: string): { value: Buffer; stamp: FileStamp } {
  for (let attempt = 1; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(file, 'r');
    } catch (cause) {
      throw sourceError(file, cause);
    }
    let before: FileStamp;
    let after: FileStamp;
    let value: Buffer;
    try {
      before = stampOf(fstatSync(fd, { bigint: true }));
      value = Buffer.allocUnsafe(before.size);
      let got = 0;
      while (got < value.length) {
        const n = readSync(fd, value, got, value.length - got, got);
        if (n === 0) break; // shorter now: the second stamp tells
        got += n;
      }
      after = stampOf(fstatSync(fd, { bigint: true }));
    } catch (cause) {
      throw sourceError(file, cause);
    } finally {
      closeSync(fd);
    }
    if (settled(file, before, after, attempt)) return { value, stamp: after };
  }
}

/** The largest file a push reads with {@link readWholeSync} (256 KiB). */
export const SYNC_READ_MAX = 256 * 1024;

/** Digests of a file's bytes, in hex. */
export interface FileDigests {
  md5?: string | undefined;
  sha256?: string | undefined;
}

/** The MD5 and/or SHA-256 of bytes in memory. */
export function digestsOf(bytes: Uint8Array, want: { md5: boolean; sha256: boolean }): FileDigests {
  return {
    md5: want.md5 ? createHash('md5').update(bytes).digest('hex') : undefined,
    sha256: want.sha256 ? createHash('sha256').update(bytes).digest('hex') : undefined,
  };
}

/** The MD5 and/or SHA-256 of a file, in one streamed pass (no whole-file buffer). */
export async function digestFile(
  file: string,
  want: { md5: boolean; sha256: boolean },
  signal?: AbortSignal,
): Promise<FileDigests> {
  const md5 = want.md5 ? createHash('md5') : undefined;
  const sha = want.sha256 ? createHash('sha256') : undefined;
  for await (const chunk of createReadStream(file, { highWaterMark: 1024 * 1024, signal })) {
    md5?.update(chunk as Buffer);
    sha?.update(chunk as Buffer);
  }
  return { md5: md5?.digest('hex'), sha256: sha?.digest('hex') };
}
