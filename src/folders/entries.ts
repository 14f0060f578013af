/**
 * The {@link Entry} of a file from what the store said of it, and of a folder: the one shape
 * every listing (src/folders/listing.ts, pinned-listing.ts) and every write returns.
 *
 * @module
 */
import { statedMd5 } from '../cache/content-digest.js';
import type { Entry } from '../contract/entry.js';
import type { ObjectInfo } from '../contract/primitives.js';
import type { Uri } from '../core/uri.js';

/** An Entry for a file from what the store said about it. */
export function fileEntry(uri: Uri, info: ObjectInfo): Entry {
  return {
    uri,
    kind: 'file',
    size: info.size,
    version: info.version,
    versionId: info.versionId,
    etag: info.etag,
    md5: statedMd5(info),
    sha256: info.sha256,
  };
}

/** A folder entry. */
export function folderEntry(uri: Uri): Entry {
  return { uri, kind: 'folder', size: null, version: null };
}
