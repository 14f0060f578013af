/**
 * The upload endpoint, `/upload/storage/v1/b/B/o`
 * (cloud.google.com/storage/docs/uploading-objects, json_api/v1/objects/insert):
 *
 * - `uploadType=media&name=N`: the body is the object; its Content-Type is the object's.
 * - `uploadType=multipart&name=N`: multipart/related, JSON metadata then data (multipart.ts).
 *   What `file.save(data, {resumable: false})` sends.
 * - `uploadType=resumable`: opens a session (resumable.ts); requests carrying `upload_id` go to
 *   that session (`PUT`/`POST` chunks and status queries, `DELETE` cancels).
 *
 * Single-request uploads check `X-Goog-Hash` and any `crc32c` / `md5Hash` in the metadata
 * against the bytes (400 on a mismatch, nothing written), then write with the query's
 * preconditions, atomically.
 *
 * @module
 */
import { invalid } from './api-error.js';
import { Content } from './content.js';
import { header, jsonBody, type RequestContext, writableMetadata } from './json-api.js';
import { multipartBoundary, parseMultipart } from './multipart.js';
import { json, type Reply } from './reply.js';
import { objectResource } from './resources.js';
import type { UploadSessions } from './resumable.js';
import { parsePreconditions, type WritableMetadata } from './store.js';

function nameOf(ctx: RequestContext, metadata: Record<string, unknown>): string {
  const fromQuery = ctx.query.get('name');
  const fromBody = typeof metadata.name === 'string' ? metadata.name : undefined;
  if (fromQuery !== null && fromBody !== undefined && fromQuery !== fromBody) {
    throw invalid(`Value '${fromBody}' in content does not agree with value '${fromQuery}'.`);
  }
  const name = fromQuery ?? fromBody;
  if (name === undefined || name === '') throw invalid('Required parameter: name', 'required');
  return name;
}

function declaredHashes(ctx: RequestContext, metadata: Record<string, unknown>) {
  const hashes: { crc32c?: string; md5?: string } = {};
  if (typeof metadata.crc32c === 'string') hashes.crc32c = metadata.crc32c;
  if (typeof metadata.md5Hash === 'string') hashes.md5 = metadata.md5Hash;
  for (const part of (header(ctx, 'x-goog-hash') ?? '').split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const key = part.slice(0, eq).trim().toLowerCase();
    if (key === 'crc32c') hashes.crc32c = part.slice(eq + 1).trim();
    if (key === 'md5') hashes.md5 = part.slice(eq + 1).trim();
  }
  return hashes;
}

function checkHashes(content: Content, hashes: { crc32c?: string; md5?: string }): void {
  if (hashes.crc32c !== undefined && hashes.crc32c !== content.crc32c) {
    throw invalid(
      `Provided CRC32C "${hashes.crc32c}" doesn't match calculated CRC32C "${content.crc32c}".`,
    );
  }
  if (hashes.md5 !== undefined && hashes.md5 !== content.md5) {
    throw invalid(
      `Provided MD5 hash "${hashes.md5}" doesn't match calculated MD5 hash "${content.md5}".`,
    );
  }
}

function write(
  ctx: RequestContext,
  bucket: string,
  name: string,
  data: Buffer,
  meta: WritableMetadata,
  hashes: { crc32c?: string; md5?: string },
): Reply {
  ctx.store.bucket(bucket);
  const content = Content.of(data);
  checkHashes(content, hashes);
  const version = ctx.store.insert(bucket, name, content, meta, parsePreconditions(ctx.query));
  return json(200, objectResource(version, ctx.base));
}

/** `POST /upload/storage/v1/b/B/o?uploadType=...` without `upload_id`. */
export function startUpload(ctx: RequestContext, bucket: string, sessions: UploadSessions): Reply {
  const uploadType = ctx.query.get('uploadType');
  switch (uploadType) {
    case 'media': {
      const name = nameOf(ctx, {});
      const meta: WritableMetadata = {};
      const type = header(ctx, 'content-type');
      if (type !== undefined) meta.contentType = type;
      return write(ctx, bucket, name, ctx.body, meta, declaredHashes(ctx, {}));
    }
    case 'multipart': {
      const parts = parseMultipart(ctx.body, multipartBoundary(header(ctx, 'content-type')));
      const name = nameOf(ctx, parts.metadata);
      const meta = writableMetadata(parts.metadata);
      if (meta.contentType === undefined && parts.dataContentType !== undefined) {
        meta.contentType = parts.dataContentType;
      }
      return write(ctx, bucket, name, parts.data, meta, declaredHashes(ctx, parts.metadata));
    }
    case 'resumable': {
      const metadata = jsonBody(ctx);
      const name = nameOf(ctx, metadata);
      const meta = writableMetadata(metadata);
      const type = header(ctx, 'x-upload-content-type');
      if (meta.contentType === undefined && type !== undefined) meta.contentType = type;
      const lengthHeader = header(ctx, 'x-upload-content-length');
      let declaredSize: number | undefined;
      if (lengthHeader !== undefined) {
        if (!/^\d+$/.test(lengthHeader)) throw invalid('Invalid X-Upload-Content-Length.');
        declaredSize = Number(lengthHeader);
      }
      const hashes: { crc32c?: string; md5?: string } = {};
      if (typeof metadata.crc32c === 'string') hashes.crc32c = metadata.crc32c;
      if (typeof metadata.md5Hash === 'string') hashes.md5 = metadata.md5Hash;
      return sessions.open(
        ctx.base,
        bucket,
        name,
        meta,
        parsePreconditions(ctx.query),
        declaredSize,
        hashes,
      );
    }
    case null:
      throw invalid('Required parameter: uploadType', 'required');
    default:
      throw invalid(`Invalid value for uploadType: ${uploadType}`);
  }
}
