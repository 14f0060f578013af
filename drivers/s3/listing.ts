/**
 * The S3 driver's two paged listings over its reader (reader.ts): ListObjectsV2 pages as the
 * primitives' {@link ListPage}s ({@link objectPages}) and ListObjectVersions pages as
 * {@link VersionRecord}s in the store's exact order ({@link versionRecords}). Both follow the
 * store's continuation markers and decode the URL-encoded keys (keys.ts).
 *
 * @module
 */
import type {
  HistoryOptions,
  ListPage,
  PagesOptions,
  VersionRecord,
} from '../../src/contract/primitives.js';
import { NotFound, StoreError } from '../../src/core/errors.js';
import { compareUtf8 } from '../../src/core/keys.js';
import { missingBucket } from '../../src/driver-kit/bucket-state.js';
import { pageSize } from '../../src/driver-kit/paging.js';
import { type S3ErrorContext, s3UriText } from './errors.js';
import { listedKeyDecoder } from './keys.js';
import { objectInfo, quotedEtag } from './object-info.js';
import type { ListedPage, S3Reader } from './reader.js';

/** The store's offline guard, called before each page's request. */
type Guard = (context: S3ErrorContext) => void;

/**
 * ListObjectsV2 pages of `prefix` (`limit` is MaxKeys, at most 1,000); empty pages are skipped.
 * A missing bucket is `NotFound` (the listing's own `NoSuchBucket`).
 */
export async function* objectPages(
  reader: S3Reader,
  guard: Guard,
  bucket: string,
  prefix: string,
  options: PagesOptions,
): AsyncIterable<ListPage> {
  const limit = pageSize(options.limit, 1000);
  const { delimiter, signal } = options;
  let token: string | undefined;
  for (;;) {
    const context = { bucket, key: prefix, op: 'list' };
    let listed: ListedPage;
    try {
      guard(context);
      listed = await reader.listPage(context, { prefix, delimiter, maxKeys: limit, token, signal });
    } catch (error) {
      if (error instanceof NotFound) throw missingBucket(s3UriText(bucket), error);
      throw error;
    }
    const decode = listedKeyDecoder(listed.encodingType, context);
    const page: ListPage = {
      prefixes: listed.prefixes.map(decode),
      objects: listed.objects.map((o) =>
        objectInfo(decode(o.key), { ETag: o.etag, LastModified: o.lastModified }, o.size),
      ),
    };
    if (page.prefixes.length > 0 || page.objects.length > 0) yield page;
    if (!listed.isTruncated) return;
    token = listed.nextToken;
    if (!token) {
      throw new StoreError(`list ${s3UriText(bucket, prefix)}: truncated page without a token`);
    }
  }
}

/**
 * ListObjectVersions of `prefix`, paging with KeyMarker/VersionIdMarker: versions and delete
 * markers (`size: null`) in the store's exact order (key order, newest first within a key).
 * `startAfter` is the first page's KeyMarker alone (the store starts there), and entries not
 * after it are dropped.
 */
export async function* versionRecords(
  reader: S3Reader,
  guard: Guard,
  bucket: string,
  prefix: string,
  options: HistoryOptions,
): AsyncIterable<VersionRecord> {
  const after = options.startAfter;
  let keyMarker: string | undefined = after;
  let versionIdMarker: string | undefined;
  for (;;) {
    const context = { bucket, key: prefix, op: 'history' };
    guard(context);
    const page = await reader.versionPage(context, {
      prefix,
      keyMarker,
      versionIdMarker,
      signal: options.signal,
    });
    const decode = listedKeyDecoder(page.encodingType, context);
    for (const e of page.entries) {
      const key = decode(e.key);
      // Ceph's radosgw also lists the versions of the KeyMarker itself when no VersionIdMarker
      // comes with it; AWS starts after it. Dropped here, so `startAfter` means after on both.
      if (after !== undefined && compareUtf8(key, after) <= 0) continue;
      yield {
        key,
        versionId: e.versionId,
        size: e.kind === 'version' ? (e.size ?? 0) : null,
        current: e.isLatest,
        etag: e.kind === 'version' && e.etag ? quotedEtag(e.etag) : undefined,
        lastModified: e.lastModified,
      };
    }
    if (!page.isTruncated) return;
    keyMarker = page.nextKeyMarker === undefined ? undefined : decode(page.nextKeyMarker);
    versionIdMarker = page.nextVersionIdMarker;
    if (!keyMarker) {
      throw new StoreError(`history ${s3UriText(bucket, prefix)}: truncated page without a marker`);
    }
  }
}
