/**
 * Azure's part protocol (docs/drivers/azure.md): Put Block per part, Put Block List to commit,
 * Get Block List to resume. An upload is a random token made locally; block IDs are Base64 of
 * `<token>-<part number, 5 digits>` (one length, as Azure requires).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { BlobServiceClient, BlockBlobClient } from '@azure/storage-blob';
import type * as D from '../../src/contract/primitives.js';
import { NotFound, StoreError } from '../../src/core/errors.js';
import { infoOf } from './blob-answer.js';
import type { AzureErrorContext } from './errors.js';

/**
 * What the block protocol takes of the Azure store (azure-store.ts): its guarded call on one
 * blob, its mapped listing and `_head`. An interface, so this file does not import the store.
 */
export interface BlockHost {
  onBlob<T>(c: string, key: string, op: string, fn: (b: BlockBlobClient) => Promise<T>): Promise<T>;
  listing<T>(
    ctx: AzureErrorContext,
    items: (s: BlobServiceClient) => AsyncIterable<T>,
  ): AsyncIterable<T>;
  _head(bucket: string, key: string, options?: D.SignalOptions): Promise<D.ObjectInfo>;
}

/** The reference of an open upload as listed (no token is listed; abort discards every block). */
export const ALL_BLOCKS = 'uncommitted-blocks';

/** The block ID of part `n` of `upload`. */
export function blockId(upload: string, n: number): string {
  return Buffer.from(`${upload}-${String(n).padStart(5, '0')}`).toString('base64');
}

/** Staged blocks of one container, as a {@link D.PartProtocol}. */
export class AzureBlocks implements D.PartProtocol {
  readonly name = 'block list';
  readonly maxParts = 50_000;
  readonly minPartSize = 1;
  readonly maxPartSize = 4000 * 1024 * 1024;
  readonly resumable = true;
  readonly digestAtComplete = true;
  readonly leftover =
    'Azure discards its uncommitted blocks, a week after the last block was staged';

  constructor(
    readonly container: string,
    private readonly store: BlockHost,
  ) {}

  private onBlob<T>(key: string, op: string, fn: (blob: BlockBlobClient) => Promise<T>) {
    return this.store.onBlob(this.container, key, op, fn);
  }

  /** A new upload token (no request; the offline guard applies). */
  async create(key: string): Promise<string> {
    await this.onBlob(key, 'create upload', async () => {});
    return randomBytes(12).toString('hex');
  }

  /**
   * Put Block. The SDK retries a block itself (after a reset, a timeout, a 5xx) and asks its body
   * factory for the body of each attempt: the part's `restream` (a fresh stream of the bytes, or
   * of the file range read again; the upload engine gives one with every part). A stream
   * without one can be sent only once: a retry of the SDK's then fails with a StoreError.
   */
  async putPart(key: string, upload: string, part: D.PartUpload): Promise<string> {
    const id = blockId(upload, part.number);
    const { body, restream } = part;
    let sent = false;
    const once = () => {
      if (sent) throw new StoreError(`block ${part.number} cannot be resent from its stream`);
      sent = true;
      return body as Readable;
    };
    const bytes =
      restream ??
      (body instanceof Readable
        ? once
        : Buffer.from(body.buffer, body.byteOffset, body.byteLength));
    await this.onBlob(key, 'PutBlock', (b) =>
      b.stageBlock(id, bytes, part.size, { abortSignal: part.signal }),
    );
    return id;
  }

  /** Get Block List: this upload's uncommitted blocks by part number, or `'gone'`. */
  async listParts(key: string, upload: string, o: D.SignalOptions & { partSize: number }) {
    const list = await this.onBlob(key, 'GetBlockList', (b) =>
      b.getBlockList('all', { abortSignal: o.signal }),
    ).catch((error: unknown) => {
      if (error instanceof NotFound) return undefined;
      throw error;
    });
    if (!list || (list.committedBlocks ?? []).length > 0) return 'gone';
    const parts = new Map<number, D.ListedPart>();
    for (const { name, size } of list.uncommittedBlocks ?? []) {
      const m = /^([0-9a-f]{24})-(\d{5})$/.exec(Buffer.from(name, 'base64').toString('latin1'));
      if (m?.[1] === upload) parts.set(Number(m[2]), { token: name, size });
    }
    return parts.size === 0 ? 'gone' : parts;
  }

  /** Put Block List of `parts`, with the content type and the SHA-256 as metadata. */
  async complete(
    key: string,
    _upload: string,
    parts: readonly D.CompletedPart[],
    o: D.UploadObjectOptions & { size: number },
  ): Promise<D.ObjectInfo> {
    const blobHTTPHeaders = { blobContentType: o.contentType };
    const options = { blobHTTPHeaders, metadata: o.sha256 ? { sha256: o.sha256 } : undefined };
    const tokens = parts.map((p) => p.token);
    const r = await this.onBlob(key, 'PutBlockList', (b) =>
      b.commitBlockList(tokens, { ...options, abortSignal: o.signal }),
    );
    return infoOf(key, { ...r, contentLength: o.size });
  }

  /**
   * Azure cannot delete uncommitted blocks, but committing an empty block list discards them:
   * Put Block List of nothing with `If-None-Match: *` (so a blob already there, a completed
   * upload, is never touched), then the empty blob (and its version) is deleted at once. A block
   * whose cancelled request the service applies only after this lands as a new open upload, as a
   * part can on S3: {@link listUploads} shows it, and aborting again removes it.
   */
  async abort(key: string, _upload: string, o: D.SignalOptions = {}): Promise<void> {
    const abortSignal = o.signal;
    await this.onBlob(key, 'abort upload', async (b) => {
      const r = await b
        .commitBlockList([], { conditions: { ifNoneMatch: '*' }, abortSignal })
        .catch((error: unknown) => {
          const status = (error as { statusCode?: number }).statusCode;
          if (status === 409 || status === 412) return undefined; // a blob is there
          throw error;
        });
      if (!r) return;
      await b.delete({ conditions: { ifMatch: r.etag }, abortSignal });
      if (r.versionId) await b.withVersion(r.versionId).delete({ abortSignal });
    });
  }

  /**
   * Blobs under `prefix` holding uncommitted blocks only (List Blobs `include=uncommittedblobs`:
   * size 0, and no blob for HEAD), each as upload {@link ALL_BLOCKS}.
   */
  async *listUploads(prefix: string, o: D.SignalOptions = {}): AsyncIterable<D.OpenUpload> {
    const { container: c, store } = this;
    const options = { prefix, includeUncommitedBlobs: true, abortSignal: o.signal };
    const ctx = { container: c, key: prefix, op: 'listUploads' };
    const blobs = store.listing(ctx, (s) => s.getContainerClient(c).listBlobsFlat(options));
    for await (const b of blobs) {
      if (b.properties.contentLength !== 0) continue;
      const head = await store._head(c, b.name, o).catch((e: unknown) => e);
      const initiated = b.properties.lastModified;
      if (head instanceof NotFound) yield { key: b.name, upload: ALL_BLOCKS, initiated };
      else if (head instanceof Error) throw head;
    }
  }
}
