/**
 * Listings of the local store (`_pages`, `_history`): a depth-first walk of folder directories
 * in UTF-8 byte order of the keys, answered from each folder's listing index where it can be
 * trusted, else from the object directories themselves (`./layout.ts` says when).
 *
 * @module
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type {
  ListPage,
  PagesOptions,
  SignalOptions,
  VersionRecord,
} from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { errorCode, fsError, type Trace } from './fs-errors.js';
import { listStart, readNameFile, requireBucket } from './key-paths.js';
import { etagOf, NAME_FILE, parseFolderEntry, refOf, timeOf, type VersionFile } from './layout.js';
import { byVersionId, infoOf, newestOf, versionNames, versionsIn } from './versions.js';

/** Keys whose version directories a listing reads at once. */
const LIST_BATCH = 64;
/** Default (and largest useful) page size of `_pages`, as on S3. */
const DEFAULT_PAGE = 1000;

/** One object or folder in a folder directory, decoded. */
interface Child {
  kind: 'object' | 'folder';
  segment: string;
  path: string;
  /** The sort key: the segment, plus `/` for a folder (compared in UTF-8 byte order). */
  sort: string;
  /** An object's versions from the folder's index, oldest first; unset when not trusted. */
  versions?: VersionFile[] | undefined;
}

/** What the walk of a listing yields: an object, or (one level) a folder. */
interface WalkItem {
  kind: 'object' | 'folder';
  /** The object's key, or the folder's prefix (ending in `/`). */
  key: string;
  path: string;
  /** An object's versions, oldest first, once known (see {@link resolve}). */
  versions?: VersionFile[] | undefined;
  /** For a folder, once known: whether some key below it has a current object. */
  current?: boolean | undefined;
}

/**
 * `_pages` of the store at `root`: the current objects (and, with delimiter `/`, the folders
 * holding one) under `prefix`, in UTF-8 byte order, `options.limit` entries a page.
 */
export async function* listPages(
  root: string,
  bucket: string,
  prefix: string,
  options: PagesOptions,
  trace: Trace,
): AsyncGenerator<ListPage> {
  const { delimiter, signal } = options;
  const limit = options.limit ?? DEFAULT_PAGE;
  if (!Number.isInteger(limit) || limit < 1) {
    throw new RangeError(`a page limit is a positive integer, not ${limit}`);
  }
  if (delimiter !== undefined && delimiter !== '/') {
    throw new StoreError(`the local store lists with delimiter '/' or none, not '${delimiter}'`);
  }
  const start = listStart(root, bucket, prefix);
  if (start === undefined) return await requireBucket(root, bucket);
  const walk = walkKeys(start.dir, start.keyPrefix, start.partial, delimiter === undefined, trace);
  let page: ListPage = { prefixes: [], objects: [] };
  let count = 0;
  let listed = false;
  for await (const run of walk) {
    await resolve(run, signal, trace);
    for (const item of run) {
      if (item.kind === 'folder') {
        if (item.current !== true) continue;
        page.prefixes.push(item.key);
      } else {
        const v = item.versions?.at(-1);
        if (v === undefined || v.size === null) continue;
        page.objects.push(infoOf(item.key, v));
      }
      listed = true;
      if (++count === limit) {
        yield page;
        page = { prefixes: [], objects: [] };
        count = 0;
      }
    }
  }
  if (count > 0) yield page;
  else if (!listed) await requireBucket(root, bucket);
}

/** `_history` of the store at `root`: every version under `prefix`, by key, newest first. */
export async function* listHistory(
  root: string,
  bucket: string,
  prefix: string,
  options: SignalOptions,
  trace: Trace,
): AsyncGenerator<VersionRecord> {
  const start = listStart(root, bucket, prefix);
  if (start === undefined) return;
  for await (const run of walkKeys(start.dir, start.keyPrefix, start.partial, true, trace)) {
    await resolve(run, options.signal, trace);
    for (const { key, versions = [] } of run) {
      for (let i = versions.length - 1; i >= 0; i--) {
        const v = versions[i] as VersionFile;
        yield {
          key,
          versionId: v.versionId,
          size: v.size,
          current: i === versions.length - 1,
          etag: etagOf(v),
          lastModified: timeOf(v),
        };
      }
    }
  }
}

/**
 * The objects and folders of a folder directory, in listing (byte) order, each object with its
 * versions from the folder's index when the index can be trusted for it (see `./layout.ts`).
 */
async function scan(dir: string, trace: Trace): Promise<Child[]> {
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return [];
    throw fsError(error, `cannot list ${dir}`);
  }
  const entries: { tag: 'o' | 'd'; ref: string; segment: string | undefined; name: string }[] = [];
  const index = new Map<string, VersionFile[]>();
  const pending = new Set<string>();
  for (const name of names) {
    const entry = parseFolderEntry(name);
    if (entry === undefined) {
      if (name !== NAME_FILE) trace(`ignoring ${path.join(dir, name)}: not a store entry`);
    } else if (entry.tag === 'v') {
      const list = index.get(entry.ref);
      if (list === undefined) index.set(entry.ref, [entry.version]);
      else list.push(entry.version);
    } else if (entry.tag === 'p') pending.add(entry.ref);
    else entries.push({ tag: entry.tag, ref: entry.ref, segment: entry.segment, name });
  }
  const out: Child[] = [];
  for (const { tag, ref, segment: direct, name } of entries) {
    const child = `${dir}${path.sep}${name}`;
    let segment = direct;
    if (segment === undefined) {
      segment = await readNameFile(child);
      if (segment === undefined || refOf(segment).ref !== ref) {
        trace(`ignoring ${child}: its ${NAME_FILE} is missing or does not match`);
        continue;
      }
    }
    const kind = tag === 'o' ? 'object' : 'folder';
    const sort = kind === 'folder' ? `${segment}/` : segment;
    const indexed = kind === 'object' && !pending.has(ref) ? index.get(ref) : undefined;
    const versions = indexed?.sort(byVersionId);
    out.push({ kind, segment, path: child, sort, versions });
  }
  return out.sort((a, b) => compareUtf8(a.sort, b.sort));
}

/**
 * Objects (and, unless `recursive`, folders) under `dir` whose segment starts with `partial`,
 * in UTF-8 byte order of their keys, in runs (a folder's children between two subfolders).
 * Depth-first with sorted siblings gives global byte order: every key below folder `x/` shares
 * the prefix `x/`, and no sibling's key sorts between them.
 */
async function* walkKeys(
  dir: string,
  keyPrefix: string,
  partial: string,
  recursive: boolean,
  trace: Trace,
  scanned?: Promise<Child[]>,
): AsyncGenerator<WalkItem[]> {
  let run: WalkItem[] = [];
  const children = await (scanned ?? scan(dir, trace));
  // The next subfolder is scanned while this one is walked: its `readdir` under way while the
  // caller works (a listing of many folders otherwise waits for one `readdir` per folder).
  const folders = recursive
    ? children.filter((c) => c.kind === 'folder' && c.segment.startsWith(partial))
    : [];
  let next = 0;
  let ahead: Promise<Child[]> | undefined;
  for (const child of children) {
    if (!child.segment.startsWith(partial)) continue;
    const key = keyPrefix + child.segment;
    if (child.kind === 'object') {
      run.push({ kind: 'object', key, path: child.path, versions: child.versions });
    } else if (!recursive) run.push({ kind: 'folder', key: `${key}/`, path: child.path });
    else {
      if (run.length > 0) yield run;
      run = [];
      const mine = ahead ?? scan(child.path, trace);
      const following = folders[++next];
      ahead = following === undefined ? undefined : scan(following.path, trace);
      // Awaited when its turn comes; a walk that ends first leaves its failure unhandled no more.
      ahead?.catch(() => undefined);
      yield* walkKeys(child.path, `${key}/`, '', true, trace, mine);
    }
  }
  if (run.length > 0) yield run;
}

/**
 * Fill in what the folder index did not answer: the versions of objects it cannot vouch for
 * (read from their own directories) and whether folders hold anything current.
 * {@link LIST_BATCH} at a time.
 */
async function resolve(
  run: WalkItem[],
  signal: AbortSignal | undefined,
  trace: Trace,
): Promise<void> {
  const todo = run.filter((item) => item.kind === 'folder' || item.versions === undefined);
  for (let at = 0; at < todo.length; at += LIST_BATCH) {
    signal?.throwIfAborted();
    await Promise.all(
      todo.slice(at, at + LIST_BATCH).map(async (item) => {
        if (item.kind === 'object') item.versions = await versionsIn(item.path, item.key);
        else item.current = await hasCurrent(item.path, trace);
      }),
    );
  }
  signal?.throwIfAborted();
}

/** True when some key below the folder directory `dir` has a current (undeleted) object. */
async function hasCurrent(dir: string, trace: Trace): Promise<boolean> {
  const children = await scan(dir, trace);
  for (const child of children) {
    if (child.kind !== 'object') continue;
    const v = await newestOfChild(child);
    if (v !== undefined && v.size !== null) return true;
  }
  for (const child of children) {
    if (child.kind === 'folder' && (await hasCurrent(child.path, trace))) return true;
  }
  return false;
}

/** The newest version of a scanned object: from the index, or its own directory. */
async function newestOfChild(child: Child): Promise<VersionFile | undefined> {
  if (child.versions !== undefined) return child.versions.at(-1);
  return newestOf(await versionNames(child.path, child.path));
}
