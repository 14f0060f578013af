/**
 * Multipart uploads and multipart copies.
 *
 * Upload: the source is read in order, part after part, into pooled buffers (parts.ts); up to
 * `partsInFlight` UploadPart requests run at once, so memory stays at most
 * `partSize * partsInFlight` whatever the object size. Parts are completed in part-number order,
 * whatever order their responses arrive in. Progress is the number of bytes in parts the store
 * has acknowledged.
 *
 * Failure and cancellation: on the first failure (a part refused, the source failing, the
 * caller's AbortSignal) no new part starts, the parts in flight are cancelled, and once they have
 * settled the upload is aborted (AbortMultipartUpload, bounded to 30 s), so no incomplete upload
 * is left behind to be billed. Only a crash of the process itself can leave one; buckets should
 * have an `AbortIncompleteMultipartUpload` lifecycle rule for that (docs/drivers/s3.md).
 *
 * Copy: objects above the copy threshold (5 GiB, S3's CopyObject limit) are copied with
 * UploadPartCopy byte ranges, each conditional on the source's ETag so a source replaced
 * mid-copy fails the copy instead of mixing two objects.
 *
 * @module
 */
import type { CompletedPart, S3Client } from '@aws-sdk/client-s3';
import { isAbort, StoreError } from '../../src/errors.js';
import { MAX_PARTS, partSizeFor } from './config.js';
import { mapS3Error, statusOf } from './errors.js';
import { copySource } from './keys.js';
import type { PartBufferPool, PartReader } from './parts.js';
import type { S3Sdk } from './sdk.js';

/** What a multipart operation needs: the client, the SDK module, where, and a debug log. */
export interface MultipartTarget {
  client: S3Client;
  sdk: S3Sdk;
  bucket: string;
  key: string;
  debug(message: string): void;
}

/** What a completed multipart upload or copy reports. */
export interface MultipartResult {
  /** The object's ETag; Ceph sends none on completion, then it comes from a HEAD. */
  etag: string;
  versionId: string | undefined;
  size: number;
}

/** How long aborting an upload may take before giving up (it is cleanup, not the caller's work). */
const ABORT_TIMEOUT_MS = 30_000;

/** Options of {@link uploadMultipart}. */
export interface UploadMultipartOptions {
  pool: PartBufferPool;
  partSize: number;
  contentType?: string | undefined;
  /** The size the caller declared: the source must be exactly this long. */
  expectedSize?: number | undefined;
  /** The first part, already read (by the caller deciding between a single put and multipart). */
  first?: { buffer: Buffer; data: Uint8Array } | undefined;
  signal?: AbortSignal | undefined;
  onProgress?: ((bytes: number) => void) | undefined;
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/**
 * Upload `reader`'s bytes as one object with a multipart upload. Aborts the upload on any
 * failure; see the module comment. Errors are raw (SDK errors, SourceError, StoreError) for the
 * caller to map; an abort surfaces as the signal's abort error.
 */
export async function uploadMultipart(
  target: MultipartTarget,
  reader: PartReader,
  options: UploadMultipartOptions,
): Promise<MultipartResult> {
  const { client, sdk, bucket, key } = target;
  const { pool, partSize } = options;
  const inner = new AbortController();
  const onAbort = () => inner.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  // The first failure; set from part callbacks, so read it through `failed()` (TypeScript would
  // otherwise narrow a local it cannot see assigned).
  let failure: { error: unknown } | undefined;
  const failed = () => failure;
  const fail = (error: unknown) => {
    failure ??= { error };
    inner.abort(error);
  };
  const inflight = new Set<Promise<void>>();
  const parts: CompletedPart[] = [];
  let uploadId: string | undefined;
  let total = 0;
  let acknowledged = 0;
  let first = options.first;
  try {
    options.signal?.throwIfAborted();
    const created = await client.send(
      new sdk.CreateMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        ContentType: options.contentType,
      }),
      { abortSignal: inner.signal },
    );
    uploadId = created.UploadId;
    if (!uploadId) throw new StoreError('CreateMultipartUpload returned no UploadId');
    target.debug(`multipart ${bucket}/${key}: upload ${uploadId}, parts of ${partSize} bytes`);
    for (let partNumber = 1; ; partNumber++) {
      const early = failed();
      if (early) throw early.error;
      let buffer: Buffer;
      let data: Uint8Array;
      if (first) {
        ({ buffer, data } = first);
        first = undefined;
      } else {
        buffer = await pool.acquire(inner.signal);
        try {
          data = await abortable(reader.read(buffer), inner.signal);
        } catch (error) {
          // The read may still be writing into the buffer: never hand it out again.
          pool.discard();
          throw error;
        }
      }
      if (data.length === 0) {
        pool.release(buffer);
        break;
      }
      if (partNumber > MAX_PARTS) {
        pool.release(buffer);
        throw new StoreError(
          `the source is larger than ${MAX_PARTS} parts of ${partSize} bytes (give its size to raise the part size)`,
        );
      }
      total += data.length;
      if (options.expectedSize !== undefined && total > options.expectedSize) {
        pool.release(buffer);
        throw new StoreError(
          `the source is longer than its declared size of ${options.expectedSize} bytes`,
        );
      }
      const number = partNumber;
      const body = data;
      const part: Promise<void> = client
        .send(
          new sdk.UploadPartCommand({
            Bucket: bucket,
            Key: key,
            UploadId: uploadId,
            PartNumber: number,
            Body: body,
            ContentLength: body.length,
          }),
          { abortSignal: inner.signal },
        )
        .then((response) => {
          if (!response.ETag) throw new StoreError(`UploadPart ${number} returned no ETag`);
          parts[number - 1] = { PartNumber: number, ETag: response.ETag };
          acknowledged += body.length;
          options.onProgress?.(acknowledged);
        })
        .catch(fail)
        .finally(() => {
          pool.release(buffer);
          inflight.delete(part);
        });
      inflight.add(part);
      if (data.length < partSize) break;
    }
    await Promise.all(inflight);
    const late = failed();
    if (late) throw late.error;
    if (options.expectedSize !== undefined && total !== options.expectedSize) {
      throw new StoreError(
        `the source ended after ${total} of its declared ${options.expectedSize} bytes`,
      );
    }
    const completed = await client.send(
      new sdk.CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        UploadId: uploadId,
        MultipartUpload: { Parts: parts },
      }),
      { abortSignal: inner.signal },
    );
    const etag = await completedEtag(target, completed.ETag, completed.VersionId, inner.signal);
    target.debug(`multipart ${bucket}/${key}: completed ${parts.length} parts, ${total} bytes`);
    return { etag, versionId: completed.VersionId, size: total };
  } catch (error) {
    fail(error);
    if (first) pool.release(first.buffer);
    await Promise.allSettled(inflight);
    const original = failed()?.error ?? error;
    if (uploadId !== undefined) await abortUpload(target, uploadId, original);
    throw original;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * The ETag of a completed multipart object: the completion's, or, when the store sent an empty
 * one (Ceph 16), a HEAD's of the version just written.
 */
async function completedEtag(
  target: MultipartTarget,
  etag: string | undefined,
  versionId: string | undefined,
  signal: AbortSignal,
): Promise<string> {
  if (etag && etag !== '""') return etag;
  const head = await target.client.send(
    new target.sdk.HeadObjectCommand({
      Bucket: target.bucket,
      Key: target.key,
      VersionId: versionId,
    }),
    { abortSignal: signal },
  );
  if (!head.ETag) throw new StoreError('the completed object has no ETag');
  return head.ETag;
}

/**
 * Abort a multipart upload after `cause` failed it. If the abort itself fails, the original
 * error is still what the caller sees (an abort stays an abort), but a non-abort error is
 * replaced by a StoreError that says an incomplete upload remains, with both errors as cause.
 */
async function abortUpload(
  target: MultipartTarget,
  uploadId: string,
  cause: unknown,
): Promise<void> {
  try {
    await target.client.send(
      new target.sdk.AbortMultipartUploadCommand({
        Bucket: target.bucket,
        Key: target.key,
        UploadId: uploadId,
      }),
      { abortSignal: AbortSignal.timeout(ABORT_TIMEOUT_MS) },
    );
    target.debug(`multipart ${target.bucket}/${target.key}: aborted upload ${uploadId}`);
  } catch (abortError) {
    if (statusOf(abortError) === 404) return; // already gone: nothing is left behind
    target.debug(
      `multipart ${target.bucket}/${target.key}: aborting upload ${uploadId} failed: ${String(abortError)}`,
    );
    if (isAbort(cause)) return;
    const mapped = mapS3Error(cause, { bucket: target.bucket, key: target.key, op: 'put' });
    throw new StoreError(
      `${mapped.message}; aborting multipart upload ${uploadId} failed too, so it remains until an AbortIncompleteMultipartUpload lifecycle rule removes it`,
      {
        uri: mapped.uri,
        cause: new AggregateError([cause, abortError], 'upload failed, then its abort failed'),
        status: statusOf(cause),
      },
    );
  }
}

/** What a multipart copy copies from. */
export interface CopySourceInfo {
  versionId: string | undefined;
  size: number;
  etag: string;
  contentType?: string | undefined;
  contentEncoding?: string | undefined;
  contentDisposition?: string | undefined;
  cacheControl?: string | undefined;
  metadata?: Record<string, string> | undefined;
}

/**
 * Copy `sourceKey` (one version of it, or the current object) to `target.key` in the same bucket
 * with UploadPartCopy, `partsInFlight` ranges at once. Aborts the upload on failure.
 */
export async function copyMultipart(
  target: MultipartTarget,
  sourceKey: string,
  source: CopySourceInfo,
  options: { partSize: number; partsInFlight: number; signal?: AbortSignal | undefined },
): Promise<MultipartResult> {
  const { client, sdk, bucket, key } = target;
  const partSize = partSizeFor(options.partSize, source.size);
  const count = Math.max(1, Math.ceil(source.size / partSize));
  const inner = new AbortController();
  const onAbort = () => inner.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  let uploadId: string | undefined;
  try {
    options.signal?.throwIfAborted();
    const created = await client.send(
      new sdk.CreateMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        ContentType: source.contentType,
        ContentEncoding: source.contentEncoding,
        ContentDisposition: source.contentDisposition,
        CacheControl: source.cacheControl,
        Metadata: source.metadata,
      }),
      { abortSignal: inner.signal },
    );
    uploadId = created.UploadId;
    if (!uploadId) throw new StoreError('CreateMultipartUpload returned no UploadId');
    const id = uploadId;
    const parts: CompletedPart[] = [];
    let next = 0;
    let failure: { error: unknown } | undefined;
    const failed = () => failure;
    const worker = async () => {
      for (;;) {
        if (failure) return;
        const index = next++;
        if (index >= count) return;
        const start = index * partSize;
        const end = Math.min(source.size, start + partSize) - 1;
        try {
          const response = await client.send(
            new sdk.UploadPartCopyCommand({
              Bucket: bucket,
              Key: key,
              UploadId: id,
              PartNumber: index + 1,
              CopySource: copySource(bucket, sourceKey, source.versionId),
              CopySourceRange: `bytes=${start}-${end}`,
              CopySourceIfMatch: source.etag,
            }),
            { abortSignal: inner.signal },
          );
          const etag = response.CopyPartResult?.ETag;
          if (!etag) throw new StoreError(`UploadPartCopy ${index + 1} returned no ETag`);
          parts[index] = { PartNumber: index + 1, ETag: etag };
        } catch (error) {
          failure ??= { error };
          inner.abort(error);
          return;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(options.partsInFlight, count) }, worker));
    const failedCopy = failed();
    if (failedCopy) throw failedCopy.error;
    const completed = await client.send(
      new sdk.CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        UploadId: id,
        MultipartUpload: { Parts: parts },
      }),
      { abortSignal: inner.signal },
    );
    const etag = await completedEtag(target, completed.ETag, completed.VersionId, inner.signal);
    target.debug(`copy ${bucket}/${sourceKey} -> ${key}: ${count} parts of ${partSize} bytes`);
    return { etag, versionId: completed.VersionId, size: source.size };
  } catch (error) {
    inner.abort(error);
    if (uploadId !== undefined) await abortUpload(target, uploadId, error);
    throw error;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
  }
}
