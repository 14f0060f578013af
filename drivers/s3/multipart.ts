/**
 * S3's part protocol (multipart uploads) for the one upload engine (src/upload/engine.ts).
 *
 * Each method is one SDK call (a listing: one per page), its errors mapped by the driver's one
 * mapping. Two S3 particulars:
 *
 * - A part in memory is given to the SDK as bytes, so the SDK signs its SHA-256 and retries it
 *   itself; a middleware at the SDK's innermost step swaps in a fresh stream of the bytes
 *   (`restream`) for each request it writes, so that the engine's stall watchdog sees the bytes
 *   the socket takes. A file part is a stream, which the SDK cannot retry: the engine does.
 * - Ceph 16 answers CompleteMultipartUpload with an empty ETag; the object's ETag then comes
 *   from one HEAD of the version just written.
 *
 * @module
 */
import type { Readable } from 'node:stream';
import type { S3Client, UploadPartCommand } from '@aws-sdk/client-s3';
import type {
  CompletedPart,
  ListedPart,
  ObjectInfo,
  OpenUpload,
  PartProtocol,
  PartUpload,
  SignalOptions,
  UploadObjectOptions,
} from '../../src/contract/primitives.js';
import { isAbort, NotFound, StoreError } from '../../src/core/errors.js';
import type { UploadTarget } from '../../src/upload/requests.js';
import { MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE } from './config.js';
import { mapS3Error, s3UriText } from './errors.js';
import { putMetadata } from './metadata.js';
import type { S3Sdk } from './sdk.js';

/** The client and SDK module a multipart call needs, made on first use. */
export type S3Connection = () => Promise<{ client: S3Client; sdk: S3Sdk }>;

/** S3 multipart uploads in one bucket, as a {@link PartProtocol}. */
export class S3Multipart implements PartProtocol {
  readonly name = 'multipart upload';
  readonly maxParts = MAX_PARTS;
  readonly minPartSize = MIN_PART_SIZE;
  readonly maxPartSize = MAX_PART_SIZE;
  readonly resumable = true;
  readonly leftover = 'an AbortIncompleteMultipartUpload lifecycle rule removes it';

  constructor(
    private readonly connect: S3Connection,
    readonly bucket: string,
    private readonly debug: (message: string) => void = () => {},
  ) {}

  /**
   * One SDK call with the driver's error mapping (aborts pass through as they are).
   * @internal
   */
  async send<T>(
    op: string,
    key: string,
    fn: (client: S3Client, sdk: S3Sdk) => Promise<T>,
  ): Promise<T> {
    const { client, sdk } = await this.connect();
    try {
      return await fn(client, sdk);
    } catch (error) {
      if (isAbort(error)) throw error;
      throw mapS3Error(error, { bucket: this.bucket, key, op });
    }
  }

  async create(key: string, options: UploadObjectOptions): Promise<string> {
    const created = await this.send('CreateMultipartUpload', key, (client, sdk) =>
      client.send(
        new sdk.CreateMultipartUploadCommand({
          Bucket: this.bucket,
          Key: key,
          ContentType: options.contentType,
          Metadata: putMetadata(options.sha256),
        }),
        { abortSignal: options.signal },
      ),
    );
    if (!created.UploadId) {
      throw new StoreError('CreateMultipartUpload returned no UploadId', {
        uri: s3UriText(this.bucket, key),
      });
    }
    return created.UploadId;
  }

  async putPart(key: string, upload: string, part: PartUpload): Promise<string> {
    const out = await this.send('UploadPart', key, (client, sdk) => {
      const command = new sdk.UploadPartCommand({
        Bucket: this.bucket,
        Key: key,
        UploadId: upload,
        PartNumber: part.number,
        Body: part.body,
        ContentLength: part.size,
      });
      // Bytes only: the SDK does not retry a stream body (a file range), which the engine sends
      // again itself.
      if (part.restream !== undefined && part.body instanceof Uint8Array) {
        streamEachRequest(command, part.restream);
      }
      return client.send(command, { abortSignal: part.signal });
    });
    if (!out.ETag) {
      throw new StoreError(
        `UploadPart ${part.number} of ${s3UriText(this.bucket, key)} returned no ETag`,
      );
    }
    return out.ETag;
  }

  async listParts(
    key: string,
    upload: string,
    options: SignalOptions & { partSize: number },
  ): Promise<Map<number, ListedPart> | 'gone'> {
    const listed = new Map<number, ListedPart>();
    let marker: string | undefined;
    for (;;) {
      let out: import('@aws-sdk/client-s3').ListPartsCommandOutput;
      try {
        out = await this.send('ListParts', key, (client, sdk) =>
          client.send(
            new sdk.ListPartsCommand({
              Bucket: this.bucket,
              Key: key,
              UploadId: upload,
              PartNumberMarker: marker,
            }),
            { abortSignal: options.signal },
          ),
        );
      } catch (error) {
        // S3 says NoSuchUpload; Ceph says NoSuchKey for an upload that was completed. Either
        // way (any 404) the upload no longer exists.
        if (error instanceof NotFound) return 'gone';
        throw error;
      }
      for (const part of out.Parts ?? []) {
        if (part.PartNumber !== undefined && part.ETag !== undefined && part.Size !== undefined) {
          listed.set(part.PartNumber, { token: part.ETag, size: part.Size });
        }
      }
      if (!out.IsTruncated) return listed;
      const next = out.NextPartNumberMarker;
      if (next === undefined || next === marker) {
        throw new StoreError('ListParts is truncated but gives no next marker', {
          uri: s3UriText(this.bucket, key),
        });
      }
      marker = next;
    }
  }

  async complete(
    key: string,
    upload: string,
    parts: readonly CompletedPart[],
    options: UploadObjectOptions & { size: number },
  ): Promise<ObjectInfo> {
    const completed = await this.send('CompleteMultipartUpload', key, (client, sdk) =>
      client.send(
        new sdk.CompleteMultipartUploadCommand({
          Bucket: this.bucket,
          Key: key,
          UploadId: upload,
          MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.number, ETag: p.token })) },
        }),
        { abortSignal: options.signal },
      ),
    );
    const etag = await this.completedEtag(key, completed.ETag, completed.VersionId, options.signal);
    return {
      key,
      size: options.size,
      version: etag,
      versionId: completed.VersionId,
      etag,
    };
  }

  async abort(key: string, upload: string, options: SignalOptions = {}): Promise<void> {
    try {
      await this.send('AbortMultipartUpload', key, (client, sdk) =>
        client.send(
          new sdk.AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: upload }),
          { abortSignal: options.signal },
        ),
      );
    } catch (error) {
      if (error instanceof NotFound) return; // already gone
      throw error;
    }
  }

  async *listUploads(prefix: string, options: SignalOptions = {}): AsyncIterable<OpenUpload> {
    let keyMarker: string | undefined;
    let idMarker: string | undefined;
    for (;;) {
      const out = await this.send('ListMultipartUploads', prefix, (client, sdk) =>
        client.send(
          new sdk.ListMultipartUploadsCommand({
            Bucket: this.bucket,
            Prefix: prefix,
            KeyMarker: keyMarker,
            UploadIdMarker: idMarker,
          }),
          { abortSignal: options.signal },
        ),
      );
      for (const u of out.Uploads ?? []) {
        if (u.Key !== undefined && u.UploadId !== undefined) {
          yield { key: u.Key, upload: u.UploadId, initiated: u.Initiated };
        }
      }
      if (!out.IsTruncated) return;
      if (out.NextKeyMarker === keyMarker && out.NextUploadIdMarker === idMarker) {
        throw new StoreError('ListMultipartUploads is truncated but gives no next marker', {
          uri: s3UriText(this.bucket, prefix),
        });
      }
      keyMarker = out.NextKeyMarker;
      idMarker = out.NextUploadIdMarker;
    }
  }

  /**
   * The ETag of a completed multipart object: the completion's, or, when the store sent an empty
   * one (Ceph 16), a HEAD's of the version just written.
   */
  async completedEtag(
    key: string,
    etag: string | undefined,
    versionId: string | undefined,
    signal?: AbortSignal,
  ): Promise<string> {
    if (etag && etag !== '""') return etag;
    const head = await this.send('head', key, (client, sdk) =>
      client.send(
        new sdk.HeadObjectCommand({ Bucket: this.bucket, Key: key, VersionId: versionId }),
        { abortSignal: signal },
      ),
    );
    if (!head.ETag) throw new StoreError('the completed object has no ETag');
    return head.ETag;
  }

  /** The engine's target for `key` in this bucket. */
  target(key: string): UploadTarget {
    return { protocol: this, key, uri: s3UriText(this.bucket, key), debug: this.debug };
  }
}

/**
 * Have each request of `command` (each attempt the SDK makes) write a fresh stream from `open`
 * instead of the bytes in its body. The middleware sits at the innermost step, after the retry
 * logic and the signer, which see (and sign) the bytes. It puts the bytes back once the request
 * settled: the retry logic must find bytes there, as it does not retry a streamed body.
 */
function streamEachRequest(command: UploadPartCommand, open: () => Readable): void {
  command.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { body?: unknown } | undefined;
      if (!request) return next(args);
      const bytes = request.body;
      const stream = open();
      request.body = stream;
      try {
        return await next(args);
      } finally {
        request.body = bytes;
        if (!stream.destroyed) stream.destroy();
      }
    },
    { step: 'deserialize', name: 'provcatStreamBody' },
  );
}
