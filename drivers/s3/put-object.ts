/**
 * One PutObject of a source of exactly `size` bytes (a buffer, a file path or a stream): the
 * `put` below `multipartThreshold` (the bigger ones go in parts, multipart.ts). A source that is
 * not exactly `size` bytes, or fails, ends the request and raises {@link SourceError} (an abort
 * stays an abort); a source stream is destroyed on failure.
 *
 * @module
 */
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import type { S3Client } from '@aws-sdk/client-s3';
import type { ObjectInfo, PutOptions, PutSource } from '../../src/contract/primitives.js';
import { SourceError } from '../../src/core/errors.js';
import { exactBytes } from '../../src/driver-kit/exact-bytes.js';
import { putMetadata } from './metadata.js';
import { objectInfo } from './object-info.js';
import type { S3Sdk } from './sdk.js';

/** PutObject of `source` to `bucket`/`key` (see the module comment). */
export async function putObject(
  client: S3Client,
  sdk: S3Sdk,
  bucket: string,
  key: string,
  source: PutSource,
  size: number,
  options: PutOptions,
): Promise<ObjectInfo> {
  let body: Uint8Array | Readable;
  let input: Readable | undefined;
  let sourceError: unknown;
  // A failing source must also end the request: the server would wait for the missing bytes.
  const request = new AbortController();
  const onAbort = () => request.abort(options.signal?.reason);
  if (options.signal?.aborted) onAbort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  if (source instanceof Uint8Array) {
    body = source;
  } else {
    input = typeof source === 'string' ? createReadStream(source) : source;
    const check = Readable.from(exactBytes(input, size, options.onProgress), {
      objectMode: false,
    });
    check.on('error', (error) => {
      sourceError ??= error;
      request.abort(error);
    });
    body = check;
  }
  try {
    const r = await client.send(
      new sdk.PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: body,
        ContentLength: size,
        ContentType: options.contentType,
        Metadata: putMetadata(options.sha256),
      }),
      { abortSignal: request.signal },
    );
    if (source instanceof Uint8Array) options.onProgress?.(size);
    return objectInfo(key, { ETag: r.ETag, VersionId: r.VersionId }, size);
  } catch (error) {
    if (body instanceof Readable) body.destroy();
    input?.destroy();
    if (sourceError !== undefined && !options.signal?.aborted) {
      throw sourceError instanceof SourceError
        ? sourceError
        : new SourceError(`the source failed: ${(sourceError as Error).message}`, {
            cause: sourceError,
          });
    }
    throw error;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
  }
}
