/**
 * What the server accepts, per route: every query parameter, the `x-goog-*` headers and the
 * request-body fields that change what GCS does. Anything GCS documents that the server does
 * not implement is refused with 400 (reason `notImplemented`) instead of being silently
 * ignored, so a client that relies on it — a `matchGlob` listing, a `softDeleted` read, a
 * bucket lifecycle rule, a customer-supplied encryption key, a `kmsKeyName` — finds out here,
 * not on GCS. A query parameter the server does not know at all is refused too (400
 * `invalidParameter`): stricter than GCS, which documents none of that, but it catches a
 * misspelt precondition that would otherwise turn a conditional write into a plain one.
 *
 * Body fields are different: GCS ignores fields it does not know, and SDK 7.22 relies on it
 * (`file.copy` sends its options, `token` included, as the rewrite body). So only fields GCS
 * documents and the server does not implement are refused; unknown ones and read-only ones
 * (`kind`, `size`, `generation` ...) are ignored, as on GCS.
 *
 * Every route also takes the standard parameters the clients send: `alt` (`json`, and `media`
 * where a download is served), `prettyPrint` (formatting only) and `userProject` (billing only:
 * the server bills nobody). A known-but-unimplemented parameter with an empty value
 * (`predefinedAcl=`, which Go clients send for "unset") counts as absent.
 *
 * The lists are docs/testing-servers.md's table ("What the server accepts").
 *
 * @module
 */
import { invalid } from './api-error.js';

/** The routes the server implements, by the JSON API method they serve. */
export type RouteName =
  | 'buckets.list'
  | 'buckets.insert'
  | 'buckets.get'
  | 'buckets.patch'
  | 'buckets.delete'
  | 'objects.list'
  | 'objects.get'
  | 'objects.patch'
  | 'objects.delete'
  | 'objects.compose'
  | 'objects.rewrite'
  | 'objects.copy'
  | 'objects.insert'
  | 'uploads.session';

const OBJECT_PRECONDITIONS = [
  'ifGenerationMatch',
  'ifGenerationNotMatch',
  'ifMetagenerationMatch',
  'ifMetagenerationNotMatch',
];
const SOURCE_PRECONDITIONS = OBJECT_PRECONDITIONS.map((p) => `ifSource${p.slice(2)}`);
const BUCKET_PRECONDITIONS = ['ifMetagenerationMatch', 'ifMetagenerationNotMatch'];

/** The query parameters each route implements (besides the standard ones). */
const ACCEPTED: Record<RouteName, readonly string[]> = {
  'buckets.list': ['project'],
  'buckets.insert': ['project'],
  'buckets.get': BUCKET_PRECONDITIONS,
  'buckets.patch': BUCKET_PRECONDITIONS,
  'buckets.delete': BUCKET_PRECONDITIONS,
  'objects.list': [
    'prefix',
    'delimiter',
    'versions',
    'maxResults',
    'pageToken',
    'startOffset',
    'endOffset',
    'includeTrailingDelimiter',
  ],
  'objects.get': ['generation', ...OBJECT_PRECONDITIONS],
  'objects.patch': ['generation', ...OBJECT_PRECONDITIONS],
  'objects.delete': ['generation', ...OBJECT_PRECONDITIONS],
  'objects.compose': ['ifGenerationMatch', 'ifMetagenerationMatch'],
  'objects.rewrite': [
    'sourceGeneration',
    'rewriteToken',
    'maxBytesRewrittenPerCall',
    ...OBJECT_PRECONDITIONS,
    ...SOURCE_PRECONDITIONS,
  ],
  'objects.copy': ['sourceGeneration', ...OBJECT_PRECONDITIONS, ...SOURCE_PRECONDITIONS],
  'objects.insert': ['uploadType', 'name', ...OBJECT_PRECONDITIONS],
  // The session URI the server hands out carries these three; clients send it back as is.
  'uploads.session': ['upload_id', 'uploadType', 'name'],
};

/** Why ACLs are refused: every bucket here reports uniform bucket-level access. */
const UBLA =
  'ACLs; buckets here have uniform bucket-level access, on which GCS refuses ACLs too (rclone: set bucket_policy_only)';

/** Parameters GCS documents that the server does not implement, and what they would do. */
const UNIMPLEMENTED_PARAMS: Record<string, string> = {
  matchGlob: 'glob filters on listings',
  softDeleted: 'soft-deleted objects',
  includeFoldersAsPrefixes: 'managed folders',
  includeFolders: 'managed folders',
  restoreToken: 'soft-delete restores',
  projection: 'ACL projections (every resource is answered as projection=noAcl)',
  fields: 'partial responses',
  kmsKeyName: 'customer-managed encryption keys',
  destinationKmsKeyName: 'customer-managed encryption keys',
  predefinedAcl: UBLA,
  destinationPredefinedAcl: UBLA,
  predefinedDefaultObjectAcl: UBLA,
  contentEncoding: 'the contentEncoding query parameter (set it in the metadata instead)',
  overrideUnlockedRetention: 'object retention',
  enableObjectRetention: 'object retention',
  dropContextGroups: 'object contexts',
  deleteSourceObjects: 'deleting the sources of a compose',
  quotaUser: 'quotas',
  userIp: 'quotas',
  callback: 'JSONP',
};

/** Standard parameters every JSON route takes. */
const STANDARD = new Set(['alt', 'prettyPrint', 'userProject']);

/** Request headers with a meaning the server does not implement (CSEK and friends). */
const UNIMPLEMENTED_HEADERS: readonly [RegExp, string][] = [
  [/^x-goog-encryption-/, 'customer-supplied encryption keys (CSEK)'],
  [/^x-goog-copy-source-encryption-/, 'customer-supplied encryption keys (CSEK)'],
  [/^x-goog-encryption-kms-key-name$/, 'customer-managed encryption keys'],
];

/** The `x-goog-*` / `x-upload-*` headers the server reads or may ignore without harm. */
const ACCEPTED_HEADERS = new Set([
  'x-goog-api-client', // the client library's version, informational
  'x-goog-user-project', // billing only
  'x-goog-hash', // checked on uploads
  'x-goog-gcs-idempotency-token', // a retry identifier; every request here is idempotent as is
  'x-upload-content-type', // resumable session start
  'x-upload-content-length', // resumable session start
]);

/**
 * Refuses (400) a query parameter or header the route does not implement. `alt` must be
 * `json`, or `media` where `media` is true.
 */
export function checkRequest(
  route: RouteName,
  query: URLSearchParams,
  headers: Readonly<Record<string, string | string[] | undefined>>,
  media = false,
): void {
  const accepted = ACCEPTED[route];
  for (const name of new Set(query.keys())) {
    if (accepted.includes(name)) continue;
    if (STANDARD.has(name)) {
      const value = query.get(name) ?? '';
      if (name === 'alt' && value !== 'json' && !(media && value === 'media')) {
        throw invalid(`alt=${value} is not served on ${route}.`, 'invalidParameter');
      }
      continue;
    }
    const what = UNIMPLEMENTED_PARAMS[name];
    if (what !== undefined) {
      const values = query.getAll(name);
      if (values.every((v) => v === '')) continue; // "unset", as Go clients send it
      if (name === 'projection' && values.every((v) => v === 'noAcl')) continue; // what is served
      throw notImplementedHere(`The query parameter ${name} (${what}) is not implemented`, route);
    }
    throw invalid(
      `Unknown query parameter ${name} on ${route}: the GCS test server refuses parameters it does not implement (docs/testing-servers.md).`,
      'invalidParameter',
    );
  }
  checkHeaders(route, headers);
}

/** Refuses (400) the `x-goog-*` / `x-upload-*` headers the server does not implement. */
export function checkHeaders(
  route: string,
  headers: Readonly<Record<string, string | string[] | undefined>>,
): void {
  for (const name of Object.keys(headers)) {
    const lower = name.toLowerCase();
    if (!lower.startsWith('x-goog-') && !lower.startsWith('x-upload-')) continue;
    if (ACCEPTED_HEADERS.has(lower)) continue;
    const known = UNIMPLEMENTED_HEADERS.find(([pattern]) => pattern.test(lower));
    const what = known === undefined ? 'unknown to the server' : known[1];
    throw notImplementedHere(`The header ${name} (${what}) is not implemented`, route);
  }
}

/** Object resource fields GCS documents as writable that the server does not implement. */
const UNIMPLEMENTED_OBJECT_FIELDS: Record<string, string> = {
  acl: UBLA,
  customTime: 'custom times',
  eventBasedHold: 'object holds',
  temporaryHold: 'object holds',
  retention: 'object retention',
  kmsKeyName: 'customer-managed encryption keys',
  customerEncryption: 'customer-supplied encryption keys',
  contexts: 'object contexts',
};

/** Bucket resource fields GCS documents as writable; the server implements `versioning` only. */
const UNIMPLEMENTED_BUCKET_FIELDS: Record<string, string> = {
  acl: 'ACLs',
  defaultObjectAcl: 'ACLs',
  lifecycle: 'lifecycle rules',
  retentionPolicy: 'retention policies',
  softDeletePolicy: 'soft delete',
  objectRetention: 'object retention',
  labels: 'labels',
  cors: 'CORS',
  website: 'website configuration',
  logging: 'usage logs',
  encryption: 'default encryption keys',
  defaultEventBasedHold: 'object holds',
  billing: 'requester pays',
  autoclass: 'Autoclass',
  rpo: 'turbo replication',
  customPlacementConfig: 'dual-region placement',
  hierarchicalNamespace: 'hierarchical namespaces',
  iamConfiguration: 'IAM configuration',
  ipFilter: 'IP filtering',
  owner: 'ownership',
};

/**
 * Refuses (400) the fields of an object resource in a request body that GCS would act on and
 * the server would not. `storageClass` is accepted only as `STANDARD`, the one class kept.
 */
export function checkObjectFields(resource: Record<string, unknown>, where: string): void {
  for (const [field, value] of Object.entries(resource)) {
    if (value === undefined || value === null) continue;
    const what = UNIMPLEMENTED_OBJECT_FIELDS[field];
    if (what !== undefined) {
      throw notImplementedHere(`The object field ${field} (${what}) is not implemented`, where);
    }
    if (field === 'storageClass' && value !== 'STANDARD') {
      throw notImplementedHere('Storage classes other than STANDARD are not implemented', where);
    }
  }
}

/**
 * Refuses (400) the fields of a bucket resource that the server would not act on. `location`
 * and `storageClass` are accepted only as the values the server reports (`US`, `STANDARD`).
 */
export function checkBucketFields(resource: Record<string, unknown>, where: string): void {
  for (const [field, value] of Object.entries(resource)) {
    if (value === undefined) continue;
    const what = UNIMPLEMENTED_BUCKET_FIELDS[field];
    if (what !== undefined) {
      throw notImplementedHere(`The bucket field ${field} (${what}) is not implemented`, where);
    }
    if (field === 'location' && String(value).toUpperCase() !== 'US') {
      throw notImplementedHere('Bucket locations other than US are not implemented', where);
    }
    if (field === 'storageClass' && String(value).toUpperCase() !== 'STANDARD') {
      throw notImplementedHere('Storage classes other than STANDARD are not implemented', where);
    }
  }
}

function notImplementedHere(what: string, where: string) {
  return invalid(
    `${what} by the GCS test server (${where}); it refuses what it would otherwise ignore.`,
    'notImplemented',
  );
}
