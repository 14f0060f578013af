/**
 * A GCS put of one request (`uploadType=multipart`: the object's JSON metadata, then its bytes,
 * as `multipart/related`), sent by the driver itself rather than by `@google-cloud/storage`.
 * The SDK's one-request upload (7.22, `file.save(…, { resumable: false })`) never settles when
 * the connection is reset after the server answered: no error, no finish, whatever its retry and
 * timeout options (found by the fault suite, docs/reliability.md). Here a reset is an error the
 * retry policy reads like any other.
 *
 * The answer's `md5Hash` must be the MD5 of the bytes sent (the SDK checked its CRC32C): an
 * object stored with other bytes is deleted (that generation only) and the put fails. Bytes in
 * memory also state their MD5 in the metadata, which GCS checks before it writes anything, and
 * are sent again after a retryable failure; a stream or a file is sent once.
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import type * as D from '../../src/contract/primitives.js';
import { DEFAULT_CONTENT_TYPE } from '../../src/core/content-type.js';
import { isAbort, StoreError } from '../../src/core/errors.js';
import { withRetries } from '../../src/core/retry.js';
import { exactBytes } from '../../src/driver-kit/exact-bytes.js';
import { type GcsErrorContext, gcsUriText, mapGcsError, statusError } from './errors.js';
import { type ObjectResource, objectInfo } from './json-api.js';

/** Where the request goes: the endpoint (no trailing `/`) and the headers that authorize it. */
export interface SimpleUploadTarget {
  endpoint: string;
  headers(): Promise<Record<string, string>>;
}

/**
 * Write `source` (exactly `o.size` bytes) as `key` in `bucket` in one request; with
 * `ifGenerationMatch` only if the generation matches (0: no live object). See the module comment.
 */
export async function simpleUpload(
  target: SimpleUploadTarget,
  bucket: string,
  key: string,
  source: D.PutSource,
  o: D.PutOptions,
  ifGenerationMatch?: number,
): Promise<D.ObjectInfo> {
  const context: GcsErrorContext = {
    bucket,
    key,
    op: ifGenerationMatch === undefined ? 'put' : 'create',
  };
  const query = new URLSearchParams({ uploadType: 'multipart', name: key });
  if (ifGenerationMatch !== undefined) query.set('ifGenerationMatch', String(ifGenerationMatch));
  const url = `${target.endpoint}/upload/storage/v1/b/${encodeURIComponent(bucket)}/o?${query}`;
  if (source instanceof Uint8Array) {
    const md5 = createHash('md5').update(source).digest('base64');
    const info = await withRetries(
      () => send(target, url, context, o, [source], source.byteLength, md5),
      { signal: o.signal },
    );
    o.onProgress?.(source.byteLength);
    return info;
  }
  const input = typeof source === 'string' ? createReadStream(source) : source;
  const size = o.size as number;
  return send(target, url, context, o, exactBytes(input, size, o.onProgress), size, undefined);
}

/** One attempt: the request, its answer read and checked (see the module comment). */
async function send(
  target: SimpleUploadTarget,
  url: string,
  context: GcsErrorContext,
  o: D.PutOptions,
  data: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
  size: number,
  md5: string | undefined,
): Promise<D.ObjectInfo> {
  const boundary = `provcat-${randomBytes(12).toString('hex')}`;
  // Always a type (the core decides it, src/core/content-type.ts): never one GCS infers.
  const contentType = o.contentType ?? DEFAULT_CONTENT_TYPE;
  const metadata: Record<string, string> = { name: context.key as string, contentType };
  if (md5 !== undefined) metadata.md5Hash = md5;
  const head = Buffer.from(
    `--${boundary}\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n${JSON.stringify(metadata)}\r\n` +
      `--${boundary}\r\ncontent-type: ${contentType}\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const hash = createHash('md5');
  // A failure of the source (a SourceError: too short, too long, unreadable) is the put's error,
  // not the request's that it ended.
  let sourceFailure: { error: unknown } | undefined;
  async function* body() {
    yield head;
    try {
      for await (const chunk of data) {
        hash.update(chunk);
        yield chunk;
      }
    } catch (error) {
      sourceFailure = { error };
      throw error;
    }
    yield tail;
  }
  const headers: Record<string, string> = {
    ...(await target.headers()),
    'content-type': `multipart/related; boundary=${boundary}`,
    'content-length': String(head.length + size + tail.length),
  };
  const request = {
    method: 'POST',
    headers,
    body: Readable.from(body(), { objectMode: false }),
    signal: o.signal,
    duplex: 'half',
  };
  let status: number;
  let text: string;
  try {
    const res = await fetch(url, request as RequestInit);
    status = res.status;
    text = await res.text();
  } catch (error) {
    if (sourceFailure) throw sourceFailure.error;
    throw isAbort(error) ? error : mapGcsError(error, context);
  }
  if (status < 200 || status >= 300) throw statusError(status, context, text);
  const resource = JSON.parse(text) as ObjectResource;
  const info = objectInfo(context.bucket, resource);
  const sent = hash.digest('base64');
  if (resource.md5Hash !== sent) {
    const where = gcsUriText(context.bucket, context.key);
    const removed = await removeGeneration(target, context, resource.generation);
    throw new StoreError(
      `${context.op} ${where}: the store holds other bytes than were sent (MD5 ${resource.md5Hash}, sent ${sent}); ${removed}`,
      { uri: where },
    );
  }
  return info;
}

/**
 * Delete one generation (a stored object whose bytes are not the ones sent); says what became of
 * it, for the put's error.
 */
async function removeGeneration(
  target: SimpleUploadTarget,
  context: GcsErrorContext,
  generation: string | undefined,
): Promise<string> {
  if (generation === undefined) return 'the answer names no generation to delete';
  const name = encodeURIComponent(context.key as string);
  const url = `${target.endpoint}/storage/v1/b/${encodeURIComponent(context.bucket)}/o/${name}?generation=${generation}`;
  try {
    const res = await fetch(url, { method: 'DELETE', headers: await target.headers() });
    await res.body?.cancel();
    return res.ok
      ? `generation ${generation} was deleted`
      : `deleting generation ${generation} failed too (HTTP ${res.status})`;
  } catch (error) {
    return `deleting generation ${generation} failed too (${(error as Error).message})`;
  }
}
