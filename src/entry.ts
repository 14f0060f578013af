/**
 * {@link Entry}: one file or folder as provcat reports it.
 *
 * @module
 */
import type { Uri } from './uri.js';

/** One file or folder. */
export interface Entry {
  /** Where it is (with `?at=` when it was read at a version or a commit). */
  uri: Uri;
  kind: 'file' | 'folder';
  /** Size in bytes; `null` for a folder. */
  size: number | null;
  /** What changes when the bytes change (see ObjectInfo.version); `null` for a folder. */
  version: string | null;
  /** The store's version ID of a file, when known. */
  versionId?: string | undefined;
  /** The ETag of a file, when known. */
  etag?: string | undefined;
}

/** The JSON shape of an entry, as the CLI prints it: `{"uri","kind","size","version"}`. */
export interface EntryJson {
  uri: string;
  kind: 'file' | 'folder';
  size: number | null;
  version: string | null;
}

/** The stable JSON form of an entry. */
export function entryToJson(entry: Entry): EntryJson {
  return { uri: entry.uri.toString(), kind: entry.kind, size: entry.size, version: entry.version };
}
