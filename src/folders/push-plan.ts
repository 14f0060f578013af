/**
 * The first pass of a push (src/folders/push.ts): what the local folder holds and what the store
 * folder holds, merged into one plan file in key order — with every refusal checked on the way,
 * before the push writes anything.
 *
 * **Memory does not grow with the folder.** A push of a million files used to hold the local
 * tree, the listing and the push index in memory at once (about 2.4 KiB of RSS a file). Here
 * each comes in key order and leaves as a line of a file: the walk in key order
 * (`walkLocalTree`, src/folders/local-tree.ts) and the flat listing in key order (every driver's
 * `_pages`); the second pass reads the push index in the same order (src/folders/push-index.ts).
 * Both files sit beside the push index in the cache (`.tmp-` names: a killed push's are swept
 * by the next one); the plan is about 150 bytes a file (146 MB at a million files), the file
 * list half that.
 *
 * **In two steps, so no store call comes before the local refusals.** Step one walks the folder
 * and writes its files (a folder that is or holds provcat's cache or the embedded store's root is
 * refused first; names no URI can name, links to folders, special files and `.provcat/` at a
 * bucket root as they pass). Step two lists the store folder once, merges the
 * listing with the files and the index, and checks the names of the folder as it will be (the
 * checks of a fetch) as they pass: `FolderKeyStream` (src/core/keys.ts, 8 bytes a name), with
 * the whole list read back from the plan only when two names may fold to one.
 *
 * **A listing out of key order is not trusted to merge**: a driver whose service sorts otherwise
 * (UTF-16 rather than UTF-8 order where surrogates meet U+E000–U+FFFF) makes step two start over
 * with the whole listing in memory, sorted — correct, with the old cost.
 *
 * @module
 */
import { rm, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { debuglog } from 'node:util';
import { type CachedStoreContext, ownFolders } from '../cache/context.js';
import type { ObjectInfo } from '../contract/primitives.js';
import { abortError, SourceError, StoreError, UriError } from '../core/errors.js';
import { tempPathFor } from '../core/fs-atomic.js';
import {
  checkDiskNames,
  checkFolderKeys,
  compareUtf8,
  FolderKeyStream,
  isMetaKey,
} from '../core/keys.js';
import { overlapping } from '../core/own-folders.js';
import type { Uri } from '../core/uri.js';
import { field, LineCursor, LineWriter, lineBatches, optField, unfield } from './line-files.js';
import { type FileStamp, walkLocalTree } from './local-tree.js';
import { listRemote, remotePages } from './remote-listing.js';

const debug = debuglog('provcat:push');

/** One name of the plan: the local file's state and the object (either, or both). */
export interface PlanRecord {
  rel: string;
  local: FileStamp | undefined;
  remote: ObjectInfo | undefined;
}

/** What the first pass found. */
export interface Plan {
  /** The plan file: a {@link PlanRecord} a line, in key order. */
  file: string;
  /** Local files, and their bytes. */
  files: number;
  bytes: number;
}

/** What {@link makePlan} works on. */
export interface PlanInput {
  store: Pick<CachedStoreContext, '_pages' | 'capabilities' | 'cache' | 'localRoot'>;
  localDir: string;
  folder: Uri;
  bucket: string;
  prefix: string;
  /** `delete`: the objects the local folder lacks go, and do not count in the folder as it will be. */
  deleting: boolean;
  /** A path of the folder the temp files go in (they get `.tmp-` names beside it). */
  beside: string;
  signal?: AbortSignal | undefined;
}

function refusal(localDir: string, folder: Uri): string {
  return `push of ${localDir} to ${folder} refused`;
}

/**
 * Refuse a name no URI can name or the store cannot hold exactly (src/core/keys.ts
 * `checkFolderKeys`), and `.provcat/` at a bucket root: no store call needed.
 */
function checkLocalName(rel: string, shown: string, input: PlanInput): void {
  const { folder, localDir } = input;
  if (folder.isBucket && isMetaKey(rel)) {
    throw new UriError(
      `${refusal(localDir, folder)}: ${shown}: keys under .provcat/ belong to provcat`,
      { uri: folder.toString() },
    );
  }
  try {
    checkFolderKeys(folder, [rel], {
      keyProblem: input.store.capabilities.keyProblem,
      disk: false,
    });
  } catch (cause) {
    const why = (cause as Error).message.slice(`${folder}: `.length);
    throw new UriError(`${refusal(localDir, folder)}: ${shown}: ${why}`, {
      uri: folder.toString(),
      cause,
    });
  }
}

/** The refusal of a folder that would not fetch back, from the checks' `StoreError`. */
function fetchBackError(cause: unknown, input: PlanInput): unknown {
  if (!(cause instanceof StoreError)) return cause;
  const text = cause.message.replace(/; refusing to fetch$/, '');
  return new StoreError(
    `${refusal(input.localDir, input.folder)}: the folder would not fetch back (${text})`,
    { uri: input.folder.toString(), cause },
  );
}

/** The listing was not in key order: step two starts over with it sorted. */
class Unordered extends Error {}

/**
 * Pass one of a push (see the module comment): the plan file, or the push's refusal (then no
 * file is left). The caller removes `plan.file` when done.
 */
export async function makePlan(input: PlanInput): Promise<Plan> {
  const clash = overlapping(input.localDir, ownFolders(input.store), ['is', 'holds']);
  if (clash !== undefined) {
    throw new SourceError(
      `cannot push ${input.localDir}: it ${clash.how} ${clash.folder.what} (${clash.folder.path}), whose files are provcat's; push a folder apart from it`,
    );
  }
  const localFile = tempPathFor(input.beside);
  const files = await LineWriter.create(localFile);
  let count = 0;
  let bytes = 0;
  try {
    try {
      await walkLocalTree(input.localDir, (f) => {
        if (input.signal?.aborted === true) throw abortError(input.signal);
        checkLocalName(f.rel, f.path, input);
        count++;
        bytes += f.stamp.size;
        return files.add(`${field(f.rel)}\t${f.stamp.size}\t${f.stamp.state}`);
      });
    } finally {
      await files.close();
    }
    const planFile = tempPathFor(input.beside);
    try {
      try {
        await merge(
          input,
          localFile,
          planFile,
          remotePages(input.store, input.bucket, input.prefix, input.signal),
        );
      } catch (error) {
        if (!(error instanceof Unordered)) throw error;
        debug('%s lists out of key order: planned again from the whole listing', input.folder);
        await rm(planFile, { force: true });
        const all = await listRemote(input.store, input.bucket, input.prefix, input.signal);
        const sorted = [...all].sort(([a], [b]) => compareUtf8(a, b));
        await merge(
          input,
          localFile,
          planFile,
          (async function* () {
            yield sorted;
          })(),
        );
      }
      return { file: planFile, files: count, bytes };
    } catch (error) {
      await rm(planFile, { force: true });
      throw error;
    }
  } finally {
    await rm(localFile, { force: true });
  }
}

/** Step two (see the module comment): the local files and the listing into the plan. */
async function merge(
  input: PlanInput,
  localFile: string,
  planFile: string,
  listing: AsyncIterable<[string, ObjectInfo][]>,
): Promise<void> {
  const local = new LineCursor(localFile);
  const plan = await LineWriter.create(planFile);
  const names = new FolderKeyStream(input.folder, { names: false });
  // The local line is the plan line's start: a local file's fields are written once.
  let line = local.next();
  let rel = line === undefined ? undefined : unfield(line.slice(0, line.indexOf('\t')));
  const advance = () => {
    line = local.next();
    rel = line === undefined ? undefined : unfield(line.slice(0, line.indexOf('\t')));
  };
  const emit = (name: string, localLine: string | undefined, remote: ObjectInfo | undefined) => {
    if (localLine !== undefined || !input.deleting) names.add(name);
    const head = localLine ?? `${field(name)}${NO_LOCAL}`;
    return plan.add(`${head}\t${remoteFields(remote)}`);
  };
  try {
    let last: string | undefined;
    for await (const page of listing) {
      for (const [name, info] of page) {
        if (last !== undefined && compareUtf8(last, name) >= 0) throw new Unordered();
        last = name;
        while (rel !== undefined && compareUtf8(rel, name) < 0) {
          const flushed = emit(rel, line, undefined);
          if (flushed !== undefined) await flushed;
          advance();
        }
        const both = rel === name;
        const flushed = emit(name, both ? line : undefined, info);
        if (flushed !== undefined) await flushed;
        if (both) advance();
      }
    }
    for (; rel !== undefined; advance()) {
      const flushed = emit(rel, line, undefined);
      if (flushed !== undefined) await flushed;
    }
  } finally {
    local.close();
    await plan.close();
  }
  try {
    if (names.finish() === 'recheck')
      checkDiskNames(await resultNames(planFile, input), input.folder);
  } catch (cause) {
    throw fetchBackError(cause, input);
  }
}

/** The local fields of a name the local folder lacks: no size, no state. */
const NO_LOCAL = '\t\t\t\t\t';

/** An object's fields: size, version (`=`: its version ID), version ID, ETag, SHA-256, MD5. */
function remoteFields(o: ObjectInfo | undefined): string {
  if (o === undefined) return '\t\t\t\t\t';
  const version = o.version === o.versionId ? '=' : field(o.version);
  return `${o.size}\t${version}\t${optField(o.versionId)}\t${optField(o.etag)}\t${optField(o.sha256)}\t${optField(o.md5)}`;
}

/** The names of the folder as it will be, read back from the plan (the rare recheck). */
async function resultNames(planFile: string, input: PlanInput): Promise<string[]> {
  const out: string[] = [];
  for await (const batch of planBatches(planFile, input.prefix)) {
    for (const r of batch) if (r.local !== undefined || !input.deleting) out.push(r.rel);
  }
  return out;
}

/**
 * The records of a plan file, in key order, a batch at a time; `prefix` is the store folder's
 * (an object's key is it and the name).
 */
export async function* planBatches(planFile: string, prefix: string): AsyncGenerator<PlanRecord[]> {
  for await (const lines of lineBatches(planFile)) yield lines.map((l) => parsePlanLine(l, prefix));
}

/** Where the tabs of a line are (reused: one line is read at a time). */
const TABS = new Int32Array(12);

/** The positions of the first `n` tabs of `line` in {@link TABS}; false when it has another number. */
function findTabs(line: string, n: number): boolean {
  let at = -1;
  for (let i = 0; i < n; i++) {
    at = line.indexOf('\t', at + 1);
    if (at < 0) return false;
    TABS[i] = at;
  }
  return line.indexOf('\t', at + 1) < 0;
}

/**
 * One plan line (see {@link merge}): 12 fields, the local file's 6 and the object's 6. The
 * state is a slice of the line, not a join of its four fields: the push compares it with the
 * index's as it is.
 */
function parsePlanLine(line: string, prefix: string): PlanRecord {
  if (!findTabs(line, 11)) throw new Error('push plan: a line of another number of fields');
  const t = TABS;
  const part = (i: number) => line.slice((t[i - 1] as number) + 1, t[i]);
  const rel = unfield(line.slice(0, t[0])) as string;
  const size = part(1);
  const local =
    size === '' ? undefined : { size: Number(size), state: line.slice((t[1] as number) + 1, t[5]) };
  let remote: ObjectInfo | undefined;
  const remoteSize = part(6);
  if (remoteSize !== '') {
    const versionId = unfield(part(8));
    const version = part(7);
    remote = {
      key: prefix + rel,
      size: Number(remoteSize),
      version: version === '=' ? (versionId as string) : (unfield(version) as string),
      versionId,
      etag: unfield(part(9)),
      sha256: unfield(part(10)),
      md5: unfield(line.slice((t[10] as number) + 1)),
    };
  }
  return { rel, local, remote };
}

/** Remove the empty folders from `dir` up to `top` (never one that holds anything). */
export async function removeEmpty(dir: string, top: string): Promise<void> {
  for (let d = dir; d.length >= top.length; d = path.dirname(d)) {
    try {
      await rmdir(d);
    } catch {
      return; // not empty (another push's), or gone
    }
  }
}
