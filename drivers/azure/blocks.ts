/**
 * Azure's part protocol, staged blocks, for the one upload engine (src/upload/engine.ts): Put
 * Block per part, Put Block List to commit, Get Block List to resume.
 *
 * - An upload is a random token made locally (Azure has no "create upload" call); block IDs are
 *   Base64 of `<token>-<part number, 5 digits>`: all of one length, as Azure requires, and
 *   telling this upload's blocks from any other's.
 * - Nothing is visible before Put Block List. Uncommitted blocks cannot be deleted one by one;
 *   `abort` discards them by committing an empty list where no blob exists, then deletes that
 *   empty blob. A crash leaves them to Azure, which drops them after 7 days.
 * - `listParts` is Get Block List (all): committed blocks mean the upload was completed (its
 *   response lost) — `'gone'`, and the stage verifies the object; a blob without any block is
 *   `'gone'` too (never started, or expired).
 * - A part in memory is sent from a fresh stream per attempt (the SDK retries it); a file part's
 *   stream is sent once, a retry by the SDK fails, and the engine sends the part again.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { BlockBlobClient } from '@azure/storage-blob';
import type {
  CompletedPart,
  ListedPart,
  ObjectInfo,
  OpenUpload,
  PartProtocol,
  PartUpload,
  SignalOptions,
  UploadObjectOptions,
} from '../../src/driver.js';
import { isAbort, NotFound, StoreError } from '../../src/errors.js';
import { type AzureErrorContext, azUriText, mapAzureError, statusOf } from './errors.js';

const MiB = 1024 * 1024;

/** What the protocol needs of the store: a blob's client, the container's listing of uncommitted blobs. */
export interface BlockTarget {
  blob(key: string, op: string): Promise<BlockBlobClient>;
  uncommitted(
    prefix: string,
    signal?: AbortSignal,
  ): AsyncIterable<{ key: string; lastModified?: Date | undefined }>;
}

/** The block ID of part `n` of `upload`. */
export function blockId(upload: string, n: number): string {
  return Buffer.from(`${upload}-${String(n).padStart(5, '0')}`).toString('base64');
}

/** Staged blocks of one container, as a {@link PartProtocol}. */
export class AzureBlocks implements PartProtocol {
  readonly name = 'block list';
  readonly maxParts = 50_000;
  readonly minPartSize = 1;
  readonly maxPartSize = 4000 * MiB;
  readonly resumable = true;
  readonly leftover = 'nothing: Azure discards uncommitted blocks after 7 days';

  constructor(
    private readonly target: BlockTarget,
    readonly container: string,
  ) {}

  private async send<T>(
    op: string,
    key: string,
    fn: (b: BlockBlobClient) => Promise<T>,
  ): Promise<T> {
    const blob = await this.target.blob(key, op);
    try {
      return await fn(blob);
    } catch (error) {
      if (isAbort(error)) throw error;
      throw mapAzureError(error, {
        container: this.container,
        key,
        op,
      } satisfies AzureErrorContext);
    }
  }

  /** The SHA-256 each upload of this process records at `complete` (a put's). */
  private readonly sha256 = new Map<string, string>();

  async create(key: string, options: UploadObjectOptions): Promise<string> {
    await this.target.blob(key, 'create upload'); // the offline guard; no request
    const upload = randomBytes(12).toString('hex');
    if (options.sha256) this.sha256.set(upload, options.sha256);
    return upload;
  }

  async putPart(key: string, upload: string, part: PartUpload): Promise<string> {
    const id = blockId(upload, part.number);
    const { body, restream } = part;
    let sent = false;
    // A throw from the body factory fails that attempt (a stream piped into the request would
    // have no error handler); the engine then sends the part again from a fresh stream.
    const factory =
      body instanceof Readable
        ? () => {
            if (sent) throw new StoreError(`block ${part.number} cannot be resent from its stream`);
            sent = true;
            return body;
          }
        : (restream ?? Buffer.from(body.buffer, body.byteOffset, body.byteLength));
    await this.send('PutBlock', key, (b) =>
      b.stageBlock(id, factory, part.size, { abortSignal: part.signal }),
    );
    return id;
  }

  async listParts(
    key: string,
    upload: string,
    options: SignalOptions & { partSize: number },
  ): Promise<Map<number, ListedPart> | 'gone'> {
    let list: Awaited<ReturnType<BlockBlobClient['getBlockList']>>;
    try {
      list = await this.send('GetBlockList', key, (b) =>
        b.getBlockList('all', { abortSignal: options.signal }),
      );
    } catch (error) {
      if (error instanceof NotFound) return 'gone';
      throw error;
    }
    if ((list.committedBlocks ?? []).length > 0) return 'gone';
    const parts = new Map<number, ListedPart>();
    for (const block of list.uncommittedBlocks ?? []) {
      const m = /^([0-9a-f]{24})-(\d{5})$/.exec(
        Buffer.from(block.name, 'base64').toString('latin1'),
      );
      if (m?.[1] === upload) parts.set(Number(m[2]), { token: block.name, size: block.size });
    }
    return parts.size === 0 ? 'gone' : parts;
  }

  async complete(
    key: string,
    upload: string,
    parts: readonly CompletedPart[],
    options: UploadObjectOptions & { size: number },
  ): Promise<ObjectInfo> {
    const sha256 = this.sha256.get(upload);
    const r = await this.send('PutBlockList', key, (b) =>
      b.commitBlockList(
        parts.map((p) => p.token),
        {
          blobHTTPHeaders: { blobContentType: options.contentType },
          metadata: sha256 ? { sha256 } : undefined,
          abortSignal: options.signal,
        },
      ),
    );
    this.sha256.delete(upload);
    if (!r.etag)
      throw new StoreError(`PutBlockList ${azUriText(this.container, key)} returned no ETag`);
    return { key, size: options.size, version: r.etag, etag: r.etag, versionId: r.versionId };
  }

  /**
   * Azure cannot delete uncommitted blocks, but committing an empty block list discards them:
   * Put Block List of nothing with `If-None-Match: *` (so a blob already there, a completed
   * upload, is never touched), then the empty blob (and its version) is deleted at once. A block
   * whose cancelled request the service applies only after this lands as a new open upload, as
   * a part can on S3: {@link listUploads} shows it, and aborting again removes it.
   */
  async abort(key: string, upload: string, options: SignalOptions = {}): Promise<void> {
    this.sha256.delete(upload);
    const abortSignal = options.signal;
    await this.send('abort upload', key, async (b) => {
      let r: Awaited<ReturnType<BlockBlobClient['commitBlockList']>>;
      try {
        r = await b.commitBlockList([], { conditions: { ifNoneMatch: '*' }, abortSignal });
      } catch (error) {
        if (statusOf(error) === 409 || statusOf(error) === 412) return; // a blob is there
        throw error;
      }
      await b.delete({ conditions: { ifMatch: r.etag }, abortSignal });
      if (r.versionId) await b.withVersion(r.versionId).delete({ abortSignal });
    });
  }

  /**
   * Blobs under `prefix` that hold uncommitted blocks only (List Blobs with
   * `include=uncommittedblobs`). The upload token is not in that listing; `''` stands for it, and
   * {@link abort} needs none (it discards every uncommitted block of the blob).
   */
  async *listUploads(prefix: string, options: SignalOptions = {}): AsyncIterable<OpenUpload> {
    for await (const b of this.target.uncommitted(prefix, options.signal)) {
      yield { key: b.key, upload: '', initiated: b.lastModified };
    }
  }
}
