/**
 * {@link BlobReader}: how the Azure driver reads (Get Blob, List Blobs pages). The store picks one
 * reader at construction, never per request: the SDK reader here, or the lean reader (lean.ts),
 * which signs the same requests with the account key without the SDK's pipeline and hands any
 * request it does not answer to the SDK reader. Every other call goes through the SDK
 * (azure-store.ts, blocks.ts).
 *
 * @module
 */
import type { Readable } from 'node:stream';
import type { BlobItem, BlobServiceClient, BlockBlobClient } from '@azure/storage-blob';
import type * as D from '../../src/contract/primitives.js';
import { exactDownload } from '../../src/driver-kit/sized-body.js';
import { infoOf as info, md5Hex } from './blob-answer.js';
import type { AzureErrorContext } from './errors.js';

/** One List Blobs page, with the marker of the next (`undefined`: the last). */
export type BlobPage = D.ListPage & { next: string | undefined };

/** Options of one List Blobs page. */
export type BlobPageOptions = D.PagesOptions & { marker?: string | undefined; limit: number };

/** One Get Blob: of version `versionId` when given; `op` and `uri` name it in errors. */
export type BlobGetOptions = D.GetOptions & {
  versionId?: string | undefined;
  op: string;
  uri: string;
};

/**
 * The driver's reads. Failures are mapped with the driver's one error mapping (errors.ts; a
 * missing blob is `NotFound`); an abort passes as it is. The offline guard and the checks of a
 * version's answer are the store's, around the reader.
 */
export interface BlobReader {
  /** One List Blobs page, flat or by `delimiter`, with metadata. */
  page(container: string, prefix: string, o: BlobPageOptions): Promise<BlobPage>;
  /** Get Blob (a range is one request): a body of exactly its Content-Length. */
  get(container: string, key: string, o: BlobGetOptions): Promise<D.GetResult>;
  /** Release sockets the reader holds. */
  close(): void;
}

/** The SDK calls a reader makes, through the store's one error mapping. */
export interface SdkCalls {
  call<T>(ctx: AzureErrorContext, fn: (s: BlobServiceClient) => Promise<T>): Promise<T>;
  onBlob<T>(
    c: string,
    key: string,
    op: string,
    fn: (b: BlockBlobClient) => Promise<T>,
    versionId?: string,
  ): Promise<T>;
}

/** The reads as `@azure/storage-blob` calls. */
export class SdkBlobReader implements BlobReader {
  constructor(private readonly sdk: SdkCalls) {}

  page(c: string, prefix: string, o: BlobPageOptions): Promise<BlobPage> {
    return this.sdk.call({ container: c, key: prefix, op: 'list' }, async (s) => {
      const container = s.getContainerClient(c);
      const opts = { prefix: prefix || undefined, includeMetadata: true, abortSignal: o.signal };
      const pages = o.delimiter
        ? container.listBlobsByHierarchy(o.delimiter, opts)
        : container.listBlobsFlat(opts);
      const page = { continuationToken: o.marker, maxPageSize: o.limit };
      const r = (await pages.byPage(page).next()).value;
      const segment = r.segment as { blobItems: BlobItem[]; blobPrefixes?: { name: string }[] };
      const objects = segment.blobItems.map((b) =>
        info(b.name, { ...b.properties, metadata: b.metadata, blobMd5: b.properties.contentMD5 }),
      );
      const prefixes = (segment.blobPrefixes ?? []).map((x) => x.name);
      return { prefixes, objects, next: (r.continuationToken as string) || undefined };
    });
  }

  get(c: string, key: string, o: BlobGetOptions): Promise<D.GetResult> {
    const { range, signal, versionId, op, uri } = o;
    return this.sdk.onBlob(
      c,
      key,
      op,
      async (blob) => {
        const count = range && range.end - range.start;
        const from = versionId ? blob.withVersion(versionId) : blob;
        const r = await from.download(range?.start ?? 0, count, { abortSignal: signal });
        const length = r.contentLength as number;
        // Checked against its length: the SDK reports a dropped connection as an abort.
        const body = exactDownload(r.readableStreamBody as Readable, length, signal, { op, uri });
        // The blob's MD5 (Put Blob records one) states these bytes only for the whole blob.
        const contentMd5 = range ? undefined : md5Hex(r.contentMD5);
        return {
          body,
          info: info(key, r),
          contentLength: length,
          contentRange: r.contentRange,
          contentMd5,
        };
      },
      versionId,
    );
  }

  close(): void {}
}
