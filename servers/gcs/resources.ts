/**
 * The JSON resources the server answers (cloud.google.com/storage/docs/json_api/v1/objects,
 * json_api/v1/buckets), and the response headers of a media download.
 *
 * Field types follow the API, not JavaScript: `generation`, `metageneration` and `size` are
 * strings (int64 / uint64), times are RFC 3339 with milliseconds, `md5Hash` and `crc32c` are
 * base64. The `etag` is opaque, changing with the generation and the metageneration, as GCS's.
 *
 * A composite (made by compose, or a rewrite of one) is answered as GCS answers one
 * (cloud.google.com/storage/docs/composite-objects): `crc32c` and `componentCount`, no
 * `md5Hash`; on downloads `x-goog-hash` carries only `crc32c`, `x-goog-component-count` the
 * count, and the XML API's ETag is not the MD5 hex but an opaque value (here `"-` + the JSON
 * etag + `"`) that changes with the object.
 *
 * @module
 */
import type { Bucket, ObjectVersion } from './store.js';

function rfc3339(ms: number): string {
  return new Date(ms).toISOString();
}

function etag(parts: readonly (string | number)[]): string {
  return Buffer.from(parts.join('/')).toString('base64');
}

/** The `storage#object` resource of one generation. `base` is the server's URL. */
export function objectResource(version: ObjectVersion, base: string): Record<string, unknown> {
  const encoded = encodeURIComponent(version.name);
  const resource: Record<string, unknown> = {
    kind: 'storage#object',
    id: `${version.bucket}/${version.name}/${version.generation}`,
    selfLink: `${base}/storage/v1/b/${version.bucket}/o/${encoded}`,
    mediaLink: `${base}/download/storage/v1/b/${version.bucket}/o/${encoded}?generation=${version.generation}&alt=media`,
    name: version.name,
    bucket: version.bucket,
    generation: version.generation,
    metageneration: String(version.metageneration),
    contentType: version.contentType,
    storageClass: 'STANDARD',
    size: String(version.content.size),
    crc32c: version.content.crc32c,
    etag: etag([version.generation, version.metageneration]),
    timeCreated: rfc3339(version.timeCreated),
    updated: rfc3339(version.updated),
    timeStorageClassUpdated: rfc3339(version.timeCreated),
    timeFinalized: rfc3339(version.timeCreated),
  };
  if (version.content.md5 !== undefined) resource.md5Hash = version.content.md5;
  if (version.timeDeleted !== undefined) resource.timeDeleted = rfc3339(version.timeDeleted);
  if (version.contentEncoding !== undefined) resource.contentEncoding = version.contentEncoding;
  if (version.contentDisposition !== undefined) {
    resource.contentDisposition = version.contentDisposition;
  }
  if (version.contentLanguage !== undefined) resource.contentLanguage = version.contentLanguage;
  if (version.cacheControl !== undefined) resource.cacheControl = version.cacheControl;
  if (version.metadata !== undefined) resource.metadata = { ...version.metadata };
  if (version.componentCount > 0) resource.componentCount = version.componentCount;
  return resource;
}

/** The `storage#bucket` resource. */
export function bucketResource(bucket: Bucket, base: string): Record<string, unknown> {
  return {
    kind: 'storage#bucket',
    id: bucket.name,
    selfLink: `${base}/storage/v1/b/${bucket.name}`,
    projectNumber: '0',
    name: bucket.name,
    timeCreated: rfc3339(bucket.timeCreated),
    updated: rfc3339(bucket.updated),
    metageneration: String(bucket.metageneration),
    location: bucket.location,
    locationType: 'multi-region',
    storageClass: bucket.storageClass,
    etag: etag(['bucket', bucket.name, bucket.metageneration]),
    versioning: { enabled: bucket.versioning },
    iamConfiguration: {
      uniformBucketLevelAccess: { enabled: true },
      publicAccessPrevention: 'enforced',
    },
  };
}

/**
 * Response headers of a media download (JSON `alt=media` and XML GET alike): the generation,
 * metageneration and hashes of the whole object (`x-goog-hash` describes the stored object, not
 * the range served), `x-goog-stored-content-length`, and `x-goog-stored-content-encoding`
 * (the SDK validates a download only when it says `identity`).
 */
export function mediaHeaders(version: ObjectVersion, xml: boolean): Record<string, string> {
  const opaque = etag([version.generation, version.metageneration]);
  const md5Hex = version.content.md5Hex();
  const { md5, crc32c } = version.content;
  const headers: Record<string, string> = {
    'content-type': version.contentType,
    'accept-ranges': 'bytes',
    'last-modified': new Date(version.updated).toUTCString(),
    etag: xml ? (md5Hex === undefined ? `"-${opaque}"` : `"${md5Hex}"`) : opaque,
    'x-goog-generation': version.generation,
    'x-goog-metageneration': String(version.metageneration),
    'x-goog-hash': md5 === undefined ? `crc32c=${crc32c}` : `crc32c=${crc32c},md5=${md5}`,
    'x-goog-stored-content-length': String(version.content.size),
    'x-goog-stored-content-encoding': version.contentEncoding ?? 'identity',
    'x-goog-storage-class': 'STANDARD',
    'cache-control': version.cacheControl ?? 'no-cache, no-store, max-age=0, must-revalidate',
  };
  if (version.componentCount > 0) {
    headers['x-goog-component-count'] = String(version.componentCount);
  }
  if (version.contentDisposition !== undefined) {
    headers['content-disposition'] = version.contentDisposition;
  }
  if (version.contentLanguage !== undefined) headers['content-language'] = version.contentLanguage;
  if (version.contentEncoding !== undefined) headers['content-encoding'] = version.contentEncoding;
  if (xml && version.metadata !== undefined) {
    for (const [key, value] of Object.entries(version.metadata)) {
      headers[`x-goog-meta-${key.toLowerCase()}`] = value;
    }
  }
  return headers;
}
