/**
 * {@link SdkReader}: the driver's reads through `@aws-sdk/client-s3` (its retries, redirects,
 * checksums and error shapes), and {@link sdkRunner}, the one way any S3 call reaches the SDK:
 * the client, the lazily loaded SDK module, and the driver's one error mapping.
 *
 * @module
 */
import { addAbortSignal, Readable } from 'node:stream';
import type { S3Client } from '@aws-sdk/client-s3';
import type { GetOptions, GetResult, ObjectInfo } from '../../src/contract/primitives.js';
import { isAbort, StoreError } from '../../src/core/errors.js';
import { mapS3Error, type S3ErrorContext, s3UriText } from './errors.js';
import { recordVersionOrder, sdkVersionPage } from './history.js';
import type { LeanVersionPage } from './list-xml.js';
import { etagNotMd5, objectInfo, totalFromContentRange } from './object-info.js';
import type {
  ListedPage,
  ListPageOptions,
  ObjectAt,
  S3Reader,
  VersionPageOptions,
} from './reader.js';
import { loadS3Sdk, type S3Sdk } from './sdk.js';

/** Run `fn` on the client and the SDK; its errors mapped (errors.ts), an abort left as it is. */
export type SdkRun = <T>(
  context: S3ErrorContext,
  fn: (client: S3Client, sdk: S3Sdk) => Promise<T>,
) => Promise<T>;

/** An {@link SdkRun} on the client `client()` gives (built on first use by the store). */
export function sdkRunner(client: () => Promise<S3Client>): SdkRun {
  return async (context, fn) => {
    const [c, sdk] = await Promise.all([client(), loadS3Sdk()]);
    try {
      return await fn(c, sdk);
    } catch (error) {
      if (isAbort(error)) throw error;
      throw mapS3Error(error, context);
    }
  };
}

/** The reads as SDK commands (see the module comment). */
export class SdkReader implements S3Reader {
  readonly lean = false;

  constructor(private readonly run: SdkRun) {}

  /** HeadObject. */
  head(at: ObjectAt, signal: AbortSignal | undefined): Promise<ObjectInfo> {
    return this.run(at, async (client, sdk) => {
      const r = await client.send(
        new sdk.HeadObjectCommand({ Bucket: at.bucket, Key: at.key, VersionId: at.versionId }),
        { abortSignal: signal },
      );
      return objectInfo(at.key, r);
    });
  }

  /**
   * GetObject, streamed. With a range, `Range: bytes=start-(end-1)`; `info.size` is the whole
   * object's size (from Content-Range when there is one).
   */
  get(at: ObjectAt, options: GetOptions): Promise<GetResult> {
    const { bucket, key, versionId, op } = at;
    const range = options.range;
    return this.run(at, async (client, sdk) => {
      const r = await client.send(
        new sdk.GetObjectCommand({
          Bucket: bucket,
          Key: key,
          VersionId: versionId,
          Range: range ? `bytes=${range.start}-${range.end - 1}` : undefined,
        }),
        { abortSignal: options.signal },
      );
      const body = r.Body;
      if (!(body instanceof Readable)) {
        throw new StoreError(`${op} ${s3UriText(bucket, key)}: the SDK returned no Node stream`);
      }
      if (options.signal) addAbortSignal(options.signal, body);
      if (r.ContentLength === undefined) {
        body.destroy();
        throw new StoreError(`${op} ${s3UriText(bucket, key)}: no Content-Length`);
      }
      const size = totalFromContentRange(r.ContentRange) ?? r.ContentLength;
      return {
        body,
        info: objectInfo(key, r, size),
        contentLength: r.ContentLength,
        contentRange: r.ContentRange,
        etagNotMd5: etagNotMd5(r.ServerSideEncryption, r.SSECustomerAlgorithm),
      };
    });
  }

  /** ListObjectsV2 (`encoding-type=url`), in the readers' one page shape. */
  listPage(at: S3ErrorContext, options: ListPageOptions): Promise<ListedPage> {
    return this.run(at, async (client, sdk) => {
      const r = await client.send(
        new sdk.ListObjectsV2Command({
          Bucket: at.bucket,
          Prefix: options.prefix === '' ? undefined : options.prefix,
          Delimiter: options.delimiter,
          MaxKeys: options.maxKeys,
          ContinuationToken: options.token,
          EncodingType: 'url',
        }),
        { abortSignal: options.signal },
      );
      return {
        encodingType: r.EncodingType,
        prefixes: (r.CommonPrefixes ?? []).flatMap((p) =>
          p.Prefix === undefined ? [] : [p.Prefix],
        ),
        objects: (r.Contents ?? []).map((o) => ({
          key: o.Key ?? '',
          size: o.Size,
          etag: o.ETag,
          lastModified: o.LastModified,
        })),
        isTruncated: r.IsTruncated === true,
        nextToken: r.NextContinuationToken,
      };
    });
  }

  /** ListObjectVersions (`encoding-type=url`), entries in the store's order (history.ts). */
  versionPage(at: S3ErrorContext, options: VersionPageOptions): Promise<LeanVersionPage> {
    return this.run(at, async (client, sdk) => {
      const command = new sdk.ListObjectVersionsCommand({
        Bucket: at.bucket,
        Prefix: options.prefix === '' ? undefined : options.prefix,
        KeyMarker: options.keyMarker,
        VersionIdMarker: options.versionIdMarker,
        MaxKeys: options.maxKeys,
        EncodingType: 'url',
      });
      const recorder = recordVersionOrder(command);
      return sdkVersionPage(await client.send(command, { abortSignal: options.signal }), recorder);
    });
  }

  /** Nothing to learn from the client. */
  watch(): void {}

  /** Nothing held: the client is the store's. */
  async close(): Promise<void> {}
}
