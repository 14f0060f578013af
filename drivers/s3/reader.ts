/**
 * {@link S3Reader}: how the S3 driver reads (HeadObject, GetObject, ListObjectsV2 and
 * ListObjectVersions pages). The store picks one reader at construction, never per request:
 * the SDK reader (sdk-reader.ts), or the lean reader (lean-reader.ts), which sends the same
 * requests without the SDK's command stack and hands any request it does not answer to the SDK
 * reader. Writes, copies and bucket calls always go through the SDK (s3-store.ts).
 *
 * @module
 */
import type { S3Client } from '@aws-sdk/client-s3';
import type { GetOptions, GetResult, ObjectInfo } from '../../src/contract/primitives.js';
import type { S3ErrorContext } from './errors.js';
import type { LeanVersionPage } from './list-xml.js';

/** One object a read is about (`versionId`: that version), and the operation, for errors. */
export interface ObjectAt extends S3ErrorContext {
  key: string;
}

/** Options of one ListObjectsV2 page. */
export interface ListPageOptions {
  prefix: string;
  delimiter?: string | undefined;
  maxKeys: number;
  token?: string | undefined;
  signal?: AbortSignal | undefined;
}

/** Options of one ListObjectVersions page. */
export interface VersionPageOptions {
  prefix: string;
  keyMarker?: string | undefined;
  versionIdMarker?: string | undefined;
  /** At most this many entries (the store's default, 1,000, when absent). */
  maxKeys?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** One listed object, as the store sent it (the key URL-encoded under `encoding-type=url`). */
export interface ListedObject {
  key: string;
  size: number | undefined;
  etag: string | undefined;
  lastModified: Date | undefined;
}

/** One ListObjectsV2 page in the one shape both readers give (keys as sent). */
export interface ListedPage {
  encodingType: string | undefined;
  prefixes: string[];
  objects: ListedObject[];
  isTruncated: boolean;
  nextToken: string | undefined;
}

/**
 * The driver's reads. Every method maps failures with the driver's one error mapping
 * (errors.ts; 404 is NotFound) and lets an abort through as it is. The offline guard is the
 * store's, before it calls a reader.
 */
export interface S3Reader {
  /** True for the lean reader (the store's `leanReads`). */
  readonly lean: boolean;
  /** HeadObject of `at` (of one version with `at.versionId`). */
  head(at: ObjectAt, signal: AbortSignal | undefined): Promise<ObjectInfo>;
  /** GetObject of `at`, streamed (or read whole up to `options.wholeUpTo`). */
  get(at: ObjectAt, options: GetOptions): Promise<GetResult>;
  /** One ListObjectsV2 page (`encoding-type=url`); `at` names the listing for errors. */
  listPage(at: S3ErrorContext, options: ListPageOptions): Promise<ListedPage>;
  /** One ListObjectVersions page (`encoding-type=url`), entries in the store's order. */
  versionPage(at: S3ErrorContext, options: VersionPageOptions): Promise<LeanVersionPage>;
  /** Called with the SDK client the store built, once built (the lean reader learns routes). */
  watch(client: S3Client): void;
  /** Release what the reader holds (routes written to the cache, idle sockets). */
  close(): Promise<void>;
}
