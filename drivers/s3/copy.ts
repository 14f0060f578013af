/**
 * Server-side copies ({@link copyObject}): CopyObject, or, above CopyObject's 5 GiB limit,
 * UploadPartCopy byte ranges on the S3 part protocol (multipart.ts, {@link copyMultipart}).
 * Loaded by the first copy.
 *
 * @module
 */
import type { S3Client, CompletedPart as S3CompletedPart } from '@aws-sdk/client-s3';
import type { ObjectInfo } from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';
import { ABORT_TIMEOUT_MS, abortUpload, linkedController } from '../../src/upload/requests.js';
import { partSizeFor } from '../../src/upload/settings.js';
import { s3UriText, statusOf } from './errors.js';
import { copySource } from './keys.js';
import type { S3Multipart } from './multipart.js';
import { objectInfo, quotedEtag } from './object-info.js';
import type { S3Sdk } from './sdk.js';

/** One copy: of `key` (at `versionId`, or the current object) to `toKey` in the same bucket. */
export interface CopyRequest {
  bucket: string;
  key: string;
  versionId: string | undefined;
  toKey: string;
  signal?: AbortSignal | undefined;
}

/** What {@link copyObject} needs of the store. */
export interface CopySettings {
  /** Copies above this many bytes use UploadPartCopy. */
  copyThreshold: number;
  partSize: number;
  partsInFlight: number;
  /** The S3 part protocol of the bucket (the store's `partProtocol`). */
  multipart(bucket: string): S3Multipart;
  /** Whether the bucket's versioning is enabled. */
  versioned(bucket: string): Promise<boolean>;
}

/**
 * Copy with `client`: a HEAD of the source first gives its size; then CopyObject, or
 * UploadPartCopy parts above `copyThreshold`. The copy is conditional on the source's ETag, so
 * a source replaced in between fails the copy (StoreError, status 412) rather than copying
 * something else.
 */
export async function copyObject(
  client: S3Client,
  sdk: S3Sdk,
  request: CopyRequest,
  settings: CopySettings,
): Promise<ObjectInfo> {
  const { bucket, key, versionId, toKey, signal } = request;
  const head = await client.send(
    new sdk.HeadObjectCommand({ Bucket: bucket, Key: key, VersionId: versionId }),
    { abortSignal: signal },
  );
  const source = objectInfo(key, head);
  try {
    if (source.size > settings.copyThreshold) {
      return await copyMultipart(
        settings.multipart(bucket),
        key,
        toKey,
        {
          versionId,
          size: source.size,
          etag: source.version,
          contentType: head.ContentType,
          contentEncoding: head.ContentEncoding,
          contentDisposition: head.ContentDisposition,
          cacheControl: head.CacheControl,
          metadata: head.Metadata,
        },
        { partSize: settings.partSize, partsInFlight: settings.partsInFlight, signal },
      );
    }
    const r = await client.send(
      new sdk.CopyObjectCommand({
        Bucket: bucket,
        Key: toKey,
        CopySource: copySource(bucket, key, versionId),
        CopySourceIfMatch: source.version,
      }),
      { abortSignal: signal },
    );
    const copied = objectInfo(
      toKey,
      {
        ETag: r.CopyObjectResult?.ETag,
        VersionId: r.VersionId,
        LastModified: r.CopyObjectResult?.LastModified,
      },
      source.size,
    );
    if (copied.versionId === undefined && (await settings.versioned(bucket))) {
      // Ceph 16 sends no x-amz-version-id for a copy: the new version is what a HEAD sees,
      // if it has the copy's ETag (a write in between leaves the ID unknown, not wrong).
      const after = await client.send(new sdk.HeadObjectCommand({ Bucket: bucket, Key: toKey }), {
        abortSignal: signal,
      });
      if (after.ETag && quotedEtag(after.ETag) === copied.etag) copied.versionId = after.VersionId;
    }
    return copied;
  } catch (error) {
    if (statusOf(error) !== 412) throw error;
    throw new StoreError(`copy ${s3UriText(bucket, key)}: the source changed during the copy`, {
      uri: s3UriText(bucket, key),
      cause: error,
      status: 412,
    });
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
 * Copy `sourceKey` (one version of it, or the current object) to `toKey` in the same bucket with
 * UploadPartCopy, `partsInFlight` ranges at once, each conditional on the source's ETag (a source
 * replaced mid-copy fails the copy instead of mixing two objects). Aborts the upload on failure.
 */
export async function copyMultipart(
  multipart: S3Multipart,
  sourceKey: string,
  toKey: string,
  source: CopySourceInfo,
  options: { partSize: number; partsInFlight: number; signal?: AbortSignal | undefined },
): Promise<ObjectInfo> {
  const { bucket } = multipart;
  const target = multipart.target(toKey);
  const partSize = partSizeFor(options.partSize, source.size, multipart);
  const count = Math.max(1, Math.ceil(source.size / partSize));
  const inner = linkedController(options.signal);
  let upload: string | undefined;
  try {
    options.signal?.throwIfAborted();
    // Created with the source's headers, bounded and not cancelled by the caller (engine.ts).
    const created = await multipart.send('CreateMultipartUpload', toKey, (client, sdk) =>
      client.send(
        new sdk.CreateMultipartUploadCommand({
          Bucket: bucket,
          Key: toKey,
          ContentType: source.contentType,
          ContentEncoding: source.contentEncoding,
          ContentDisposition: source.contentDisposition,
          CacheControl: source.cacheControl,
          Metadata: source.metadata,
        }),
        { abortSignal: AbortSignal.timeout(ABORT_TIMEOUT_MS) },
      ),
    );
    if (!created.UploadId) throw new StoreError('CreateMultipartUpload returned no UploadId');
    upload = created.UploadId;
    const id = upload;
    const parts: S3CompletedPart[] = [];
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
          const response = await multipart.send('UploadPartCopy', toKey, (client, sdk) =>
            client.send(
              new sdk.UploadPartCopyCommand({
                Bucket: bucket,
                Key: toKey,
                UploadId: id,
                PartNumber: index + 1,
                CopySource: copySource(bucket, sourceKey, source.versionId),
                CopySourceRange: `bytes=${start}-${end}`,
                CopySourceIfMatch: source.etag,
              }),
              { abortSignal: inner.signal },
            ),
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
    const info = await multipart.complete(
      toKey,
      id,
      parts.map((p) => ({
        number: p.PartNumber as number,
        token: p.ETag as string,
        size: 0,
      })),
      { size: source.size, signal: inner.signal },
    );
    target.debug(`copy ${bucket}/${sourceKey} -> ${toKey}: ${count} parts of ${partSize} bytes`);
    return info;
  } catch (error) {
    inner.abort(error);
    throw upload === undefined ? error : await abortUpload(target, upload, error);
  } finally {
    inner.dispose();
  }
}
