/**
 * objects.list (cloud.google.com/storage/docs/json_api/v1/objects/list): prefix, delimiter,
 * versions, startOffset/endOffset, includeTrailingDelimiter, maxResults and opaque page tokens.
 *
 * Order: names in UTF-8 byte order (what GCS documents as "lexicographical order"; JavaScript's
 * `<` on strings is UTF-16 order, which differs for characters beyond U+FFFF, so names are
 * compared as bytes). With `versions=true`, the generations of one name follow each other,
 * oldest first, as `gcloud storage ls --all-versions` shows them.
 *
 * Paging: `maxResults` bounds items and prefixes together ("the combined number of entries in
 * items[] and prefixes[]"). A page is cut after that many entries; the token records where in
 * the order the page stopped — after an item (name and generation) or after a whole prefix
 * (everything under it) — so the next page starts right after it even if objects were added
 * or removed in between. The token is base64url of a small versioned JSON record: opaque to
 * clients (never the raw last name) and stateless for the server.
 *
 * @module
 */
import { invalid } from './api-error.js';
import type { Bucket, ObjectVersion } from './store.js';

/** The list parameters, as the query gives them. */
export interface ListQuery {
  prefix: string;
  delimiter: string;
  versions: boolean;
  maxResults: number;
  pageToken: string | undefined;
  startOffset: string | undefined;
  endOffset: string | undefined;
  includeTrailingDelimiter: boolean;
}

/** One page: items (generations) and prefixes, and the token of the next page when cut. */
export interface ListPage {
  items: ObjectVersion[];
  prefixes: string[];
  nextPageToken: string | undefined;
}

/** GCS's default and largest page size. */
const MAX_RESULTS = 1000;

/** Parses the list query parameters; 400 on a bad maxResults. */
export function parseListQuery(query: URLSearchParams): ListQuery {
  const raw = query.get('maxResults');
  let maxResults = MAX_RESULTS;
  if (raw !== null && raw !== '') {
    if (!/^\d+$/.test(raw)) throw invalid(`Invalid value for maxResults: ${raw}`);
    maxResults = Math.min(MAX_RESULTS, Math.max(1, Number(raw)));
  }
  return {
    prefix: query.get('prefix') ?? '',
    delimiter: query.get('delimiter') ?? '',
    versions: query.get('versions') === 'true',
    maxResults,
    pageToken: query.get('pageToken') || undefined,
    startOffset: query.get('startOffset') || undefined,
    endOffset: query.get('endOffset') || undefined,
    includeTrailingDelimiter: query.get('includeTrailingDelimiter') === 'true',
  };
}

/** Where the previous page stopped: after an item, or after everything under a prefix. */
type Cursor = { kind: 'item'; name: Buffer; generation: bigint } | { kind: 'prefix'; name: Buffer };

function encodeToken(cursor: Cursor): string {
  const record =
    cursor.kind === 'item'
      ? { v: 1, k: 'i', n: cursor.name.toString('base64'), g: String(cursor.generation) }
      : { v: 1, k: 'p', n: cursor.name.toString('base64') };
  return Buffer.from(JSON.stringify(record)).toString('base64url');
}

function decodeToken(token: string): Cursor {
  try {
    const record = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as {
      v?: unknown;
      k?: unknown;
      n?: unknown;
      g?: unknown;
    };
    if (record.v === 1 && typeof record.n === 'string') {
      const name = Buffer.from(record.n, 'base64');
      if (record.k === 'i' && typeof record.g === 'string') {
        return { kind: 'item', name, generation: BigInt(record.g) };
      }
      if (record.k === 'p') return { kind: 'prefix', name };
    }
  } catch (error) {
    throw invalid(`Invalid pageToken (${(error as Error).message})`);
  }
  throw invalid('Invalid pageToken');
}

/** True when (name, generation) comes at or before the cursor in list order. */
function covered(cursor: Cursor | undefined, name: Buffer, generation: bigint): boolean {
  if (cursor === undefined) return false;
  if (cursor.kind === 'prefix') {
    return Buffer.compare(name, cursor.name) < 0 || startsWith(name, cursor.name);
  }
  const byName = Buffer.compare(name, cursor.name);
  return byName < 0 || (byName === 0 && generation <= cursor.generation);
}

function startsWith(value: Buffer, prefix: Buffer): boolean {
  return value.length >= prefix.length && value.subarray(0, prefix.length).equals(prefix);
}

/** One page of a bucket's listing, computed from the bucket's state now. */
export function listObjects(bucket: Bucket, q: ListQuery): ListPage {
  const cursor = q.pageToken === undefined ? undefined : decodeToken(q.pageToken);
  const prefix = Buffer.from(q.prefix, 'utf8');
  const start = q.startOffset === undefined ? undefined : Buffer.from(q.startOffset, 'utf8');
  const end = q.endOffset === undefined ? undefined : Buffer.from(q.endOffset, 'utf8');

  const names: { name: string; bytes: Buffer }[] = [];
  for (const name of bucket.objects.keys()) {
    const bytes = Buffer.from(name, 'utf8');
    if (!startsWith(bytes, prefix)) continue;
    if (start !== undefined && Buffer.compare(bytes, start) < 0) continue;
    if (end !== undefined && Buffer.compare(bytes, end) >= 0) continue;
    names.push({ name, bytes });
  }
  names.sort((a, b) => Buffer.compare(a.bytes, b.bytes));

  const items: ObjectVersion[] = [];
  const prefixes: string[] = [];
  let last: Cursor | undefined;
  let full = false;
  const delimiter = q.delimiter;
  for (const { name, bytes } of names) {
    const all = bucket.objects.get(name) ?? [];
    const versions = q.versions ? all : all.filter((v) => v.timeDeleted === undefined);
    if (versions.length === 0) continue;
    let group: string | undefined;
    if (delimiter !== '') {
      const at = name.indexOf(delimiter, q.prefix.length);
      if (at >= 0) group = name.slice(0, at + delimiter.length);
    }
    // An object named exactly like its group ("a/" under delimiter "/") is also an item when
    // includeTrailingDelimiter is set; it sorts before everything else under the group.
    const asItems = group === undefined || (q.includeTrailingDelimiter && group === name);
    if (asItems) {
      for (const version of versions) {
        const generation = BigInt(version.generation);
        if (covered(cursor, bytes, generation)) continue;
        if (items.length + prefixes.length >= q.maxResults) {
          full = true;
          break;
        }
        items.push(version);
        last = { kind: 'item', name: bytes, generation };
      }
    }
    if (full) break;
    if (group !== undefined && prefixes[prefixes.length - 1] !== group) {
      const groupBytes = Buffer.from(group, 'utf8');
      const done = cursor?.kind === 'prefix' && cursor.name.equals(groupBytes);
      if (!done && !(cursor !== undefined && Buffer.compare(groupBytes, cursor.name) < 0)) {
        if (items.length + prefixes.length >= q.maxResults) {
          full = true;
          break;
        }
        prefixes.push(group);
        last = { kind: 'prefix', name: groupBytes };
      }
    }
  }
  return {
    items,
    prefixes,
    nextPageToken: full && last !== undefined ? encodeToken(last) : undefined,
  };
}
