/**
 * JSON API handlers for buckets and objects (cloud.google.com/storage/docs/json_api/v1):
 * buckets insert/get/list/patch/update/delete; objects get (metadata and `alt=media`), list,
 * patch/update, delete, compose. Uploads are in uploads.ts, rewrite in rewrite.ts.
 *
 * Each handler takes the request context, works on the store synchronously and returns a
 * {@link Reply}, or throws an {@link ApiError}.
 *
 * @module
 */
import { ApiError, conditionNotMet, invalid } from './api-error.js';
import { Content } from './content.js';
import { listObjects, parseListQuery } from './listing.js';
import { mediaReply } from './media.js';
import { empty, json, type Reply } from './reply.js';
import { bucketResource, objectResource } from './resources.js';
import {
  type ObjectVersion,
  parsePreconditions,
  requirePreconditions,
  requireReadPreconditions,
  type Store,
  type WritableMetadata,
} from './store.js';
import { checkBucketFields, checkObjectFields } from './strict.js';

/** What a handler needs from the request. */
export interface RequestContext {
  readonly store: Store;
  /** The server's URL as the client reached it (for links and session URIs). */
  readonly base: string;
  readonly method: string;
  readonly query: URLSearchParams;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** The request body, read in full. */
  readonly body: Buffer;
}

/** A request header as one string. */
export function header(ctx: RequestContext, name: string): string | undefined {
  const value = ctx.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

/** The body as a JSON object ({} when empty); 400 `parseError` otherwise. */
export function jsonBody(ctx: RequestContext): Record<string, unknown> {
  if (ctx.body.length === 0) return {};
  let value: unknown;
  try {
    value = JSON.parse(ctx.body.toString('utf8'));
  } catch (error) {
    throw invalid(`Parse Error: ${(error as Error).message}`, 'parseError');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalid('The request body must be a JSON object.', 'parseError');
  }
  return value as Record<string, unknown>;
}

/**
 * The writable object fields of a JSON resource (insert, rewrite and compose destinations);
 * 400 for a field GCS would act on and the server would not (strict.ts).
 */
export function writableMetadata(
  resource: Record<string, unknown>,
  where = 'object metadata',
): WritableMetadata {
  checkObjectFields(resource, where);
  const meta: WritableMetadata = {};
  const strings = [
    'contentType',
    'contentEncoding',
    'contentDisposition',
    'contentLanguage',
    'cacheControl',
  ] as const;
  for (const field of strings) {
    const value = resource[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'string') throw invalid(`Invalid value for ${field}.`);
    meta[field] = value;
  }
  const custom = resource.metadata;
  if (custom !== undefined && custom !== null) {
    if (typeof custom !== 'object' || Array.isArray(custom)) throw invalid('Invalid metadata.');
    const entries = Object.entries(custom as Record<string, unknown>).filter(([, v]) => v !== null);
    meta.metadata = Object.fromEntries(entries.map(([k, v]) => [k, String(v)]));
  }
  return meta;
}

// --- buckets ---------------------------------------------------------------------------

/** `POST /b?project=P`: buckets.insert, honouring `versioning.enabled` (nothing else). */
export function insertBucket(ctx: RequestContext): Reply {
  const project = ctx.query.get('project');
  if (project === null || project === '') throw invalid('Required parameter: project', 'required');
  const body = jsonBody(ctx);
  checkBucketFields(body, 'buckets.insert');
  const name = body.name;
  if (typeof name !== 'string') throw invalid('Required field: name', 'required');
  const versioning = (body.versioning as { enabled?: unknown } | undefined)?.enabled === true;
  const bucket = ctx.store.createBucket(name, project, versioning);
  return json(200, bucketResource(bucket, ctx.base));
}

/** `GET /b?project=P`: every bucket of the server (the project is not a namespace here). */
export function listBuckets(ctx: RequestContext): Reply {
  const items = ctx.store.listBuckets().map((b) => bucketResource(b, ctx.base));
  return json(200, { kind: 'storage#buckets', items });
}

/** 412 unless the bucket's metageneration preconditions hold (304 for a read's NotMatch). */
function requireBucketPreconditions(ctx: RequestContext, metageneration: number, read: boolean) {
  const match = ctx.query.get('ifMetagenerationMatch');
  const notMatch = ctx.query.get('ifMetagenerationNotMatch');
  for (const value of [match, notMatch]) {
    if (value !== null && !/^-?\d+$/.test(value)) throw invalid(`Invalid metageneration: ${value}`);
  }
  if (match !== null && BigInt(match) !== BigInt(metageneration)) throw conditionNotMet();
  if (notMatch !== null && BigInt(notMatch) === BigInt(metageneration)) {
    if (read) throw new ApiError(304, 'notModified', 'Not Modified');
    throw conditionNotMet();
  }
}

/** `GET /b/B`, with metageneration preconditions. */
export function getBucket(ctx: RequestContext, bucket: string): Reply {
  const b = ctx.store.bucket(bucket);
  requireBucketPreconditions(ctx, b.metageneration, true);
  return json(200, bucketResource(b, ctx.base));
}

/**
 * `PATCH /b/B` and `PUT /b/B`: only `versioning` is writable here; every other field GCS
 * would act on (lifecycle, retentionPolicy, labels ...) is refused with 400 (strict.ts).
 */
export function patchBucket(ctx: RequestContext, bucket: string): Reply {
  const body = jsonBody(ctx);
  checkBucketFields(body, ctx.method === 'PUT' ? 'buckets.update' : 'buckets.patch');
  const b = ctx.store.bucket(bucket);
  requireBucketPreconditions(ctx, b.metageneration, false);
  const versioning = body.versioning as { enabled?: unknown } | null | undefined;
  if (versioning !== undefined) {
    return json(
      200,
      bucketResource(ctx.store.setVersioning(bucket, versioning?.enabled === true), ctx.base),
    );
  }
  return json(200, bucketResource(b, ctx.base));
}

/** `DELETE /b/B`: only an empty bucket (no generation of anything left). */
export function deleteBucket(ctx: RequestContext, bucket: string): Reply {
  requireBucketPreconditions(ctx, ctx.store.bucket(bucket).metageneration, false);
  ctx.store.deleteBucket(bucket);
  return empty(204);
}

// --- objects ---------------------------------------------------------------------------

/** `GET /b/B/o/N[?generation=G][&alt=media]`: metadata, or the bytes (honouring `Range`). */
export function getObject(ctx: RequestContext, bucket: string, name: string): Reply {
  const version = ctx.store.select(bucket, name, ctx.query.get('generation'));
  requireReadPreconditions(version, parsePreconditions(ctx.query));
  if (ctx.query.get('alt') === 'media') return mediaReply(version, header(ctx, 'range'), false);
  return json(200, objectResource(version, ctx.base));
}

/** `GET /b/B/o`: objects.list. */
export function listObjectsRoute(ctx: RequestContext, bucket: string): Reply {
  const page = listObjects(ctx.store.bucket(bucket), parseListQuery(ctx.query));
  const body: Record<string, unknown> = { kind: 'storage#objects' };
  if (page.items.length > 0) body.items = page.items.map((v) => objectResource(v, ctx.base));
  if (page.prefixes.length > 0) body.prefixes = page.prefixes;
  if (page.nextPageToken !== undefined) body.nextPageToken = page.nextPageToken;
  return json(200, body);
}

/** `PATCH /b/B/o/N` (merge) and `PUT /b/B/o/N` (replace): metadata only; bumps metageneration. */
export function patchObject(ctx: RequestContext, bucket: string, name: string): Reply {
  const changes = jsonBody(ctx);
  checkObjectFields(changes, ctx.method === 'PUT' ? 'objects.update' : 'objects.patch');
  const version = ctx.store.patch(
    bucket,
    name,
    ctx.query.get('generation'),
    changes,
    parsePreconditions(ctx.query),
    ctx.method === 'PUT',
  );
  return json(200, objectResource(version, ctx.base));
}

/** `DELETE /b/B/o/N[?generation=G]`: 204. */
export function deleteObject(ctx: RequestContext, bucket: string, name: string): Reply {
  ctx.store.delete(bucket, name, ctx.query.get('generation'), parsePreconditions(ctx.query));
  return empty(204);
}

/** GCS's limit on the components of one composite object (the sources' counts added up). */
export const MAX_COMPONENTS = 1024;

/**
 * `POST /b/B/o/D/compose`: objects.compose, 1 to 32 sources of the same bucket, each
 * optionally of one generation and with `objectPreconditions.ifGenerationMatch`. The result is
 * a composite: a CRC32C, no MD5 (an `md5Hash` given for it is ignored, as GCS documents), and
 * `componentCount` — a source that is itself composite counts with its components, at most
 * {@link MAX_COMPONENTS} in all. A `crc32c` given for the destination is refused (400): the
 * server does not check one.
 */
export function composeObject(ctx: RequestContext, bucket: string, name: string): Reply {
  const body = jsonBody(ctx);
  const sources = body.sourceObjects;
  if (!Array.isArray(sources) || sources.length === 0 || sources.length > 32) {
    throw invalid('sourceObjects must list 1 to 32 objects.');
  }
  const parts: ObjectVersion[] = sources.map((raw: unknown) => {
    const source = raw as {
      name?: unknown;
      generation?: unknown;
      objectPreconditions?: { ifGenerationMatch?: unknown };
    };
    if (typeof source?.name !== 'string') throw invalid('Every source object needs a name.');
    const generation = source.generation === undefined ? null : String(source.generation);
    const version = ctx.store.select(bucket, source.name, generation);
    const match = source.objectPreconditions?.ifGenerationMatch;
    if (match !== undefined) requirePreconditions(version, { ifGenerationMatch: String(match) });
    return version;
  });
  const destination = (body.destination ?? {}) as Record<string, unknown>;
  if (destination.crc32c !== undefined && destination.crc32c !== null) {
    throw invalid(
      'A crc32c for a compose destination is not implemented by the GCS test server.',
      'notImplemented',
    );
  }
  const meta = writableMetadata(destination, 'objects.compose destination');
  const count = parts.reduce((n, v) => n + Math.max(1, v.componentCount), 0);
  if (count > MAX_COMPONENTS) {
    throw invalid(
      `The composite would have ${count} components; at most ${MAX_COMPONENTS} are allowed.`,
    );
  }
  const version = ctx.store.insert(
    bucket,
    name,
    Content.concat(parts.map((v) => v.content)),
    meta,
    parsePreconditions(ctx.query),
    count,
  );
  return json(200, objectResource(version, ctx.base));
}
