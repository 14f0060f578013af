/**
 * GCS resumable upload sessions as the upload engine's part protocol: one session per object,
 * its bytes taken in order (`sequential`), one part one chunk `PUT` (`Content-Range: bytes
 * a-b/*`) to the session URI.
 *
 * - **Create**: the SDK's `createResumableUpload` (an authorized POST). The reference is the
 *   session URI, plus `#SIZE` when the size is known. The URI is the capability: chunks, status
 *   queries and the cancel carry no credentials, so they are plain `fetch` requests (the SDK has
 *   no call for one chunk).
 * - **Parts** other than the last are multiples of 256 KiB, as GCS requires; the last part's
 *   bytes past its last 256 KiB boundary (under 256 KiB) are held in memory and sent by
 *   `complete`, so nothing is visible before `complete`. A 308 showing fewer bytes than sent is
 *   answered with the rest when the part is in memory, else it fails the part.
 * - **List**: a status query (`bytes *\/*`) gives the committed offset; the parts it covers fully
 *   are listed (the last one too once the whole object is committed). A part the offset falls in
 *   is sent again from its start; GCS skips the bytes it already has.
 * - **Complete**: the held bytes with `bytes a-b/TOTAL`, or an empty `bytes *\/TOTAL`.
 * - **Abort**: `DELETE` on the session (499). No call lists open sessions: one left behind by a
 *   crash expires after a week.
 *
 * @module
 */
import { Readable } from 'node:stream';
import type { Storage } from '@google-cloud/storage';
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
import { isAbort, NotSupported, StoreError } from '../../src/errors.js';
import { withRetries } from '../../src/retry.js';
import { CHUNK_QUANTUM } from './config.js';
import { gcsUriText, mapGcsError, responseError } from './errors.js';
import { type ObjectResource, objectInfo } from './json-api.js';

/** The committed size a 308 reports (`Range: bytes=0-N`; none: nothing). */
function committedOf(res: Response): number {
  const m = /^bytes=0-(\d+)$/.exec(res.headers.get('range') ?? '');
  return m ? Number(m[1]) + 1 : 0;
}

/** The first `at` bytes of `source` as a stream; the rest is read too, into `tail()`. */
function splitAt(source: Readable, at: number): { head: Readable; tail: () => Buffer } {
  const rest: Buffer[] = [];
  async function* head() {
    let seen = 0;
    for await (const chunk of source as AsyncIterable<Buffer>) {
      const room = Math.max(0, at - seen);
      if (room > 0) yield chunk.subarray(0, room);
      if (chunk.length > room) rest.push(Buffer.from(chunk.subarray(room)));
      seen += chunk.length;
    }
  }
  return { head: Readable.from(head(), { objectMode: false }), tail: () => Buffer.concat(rest) };
}

/** Resumable sessions in one bucket (see the module comment). */
export class GcsResumable implements PartProtocol {
  readonly name = 'resumable session';
  readonly maxParts = 10_000;
  readonly minPartSize = CHUNK_QUANTUM;
  readonly maxPartSize = 5 * 1024 ** 3;
  readonly sequential = true;
  readonly resumable = true;
  readonly leftover = "the session's expiry (GCS drops an unfinished session after a week)";
  /** The last part's bytes held back for `complete`, by session. */
  private readonly tails = new Map<string, Buffer>();

  constructor(
    private readonly bucket: string,
    private readonly storage: () => Promise<Storage>,
    /** Throws OfflineMiss when offline, before any request. */
    private readonly guard: (op: string, key: string) => void,
  ) {}

  async create(key: string, options: UploadObjectOptions): Promise<string> {
    this.guard('create session', key);
    const file = (await this.storage()).bucket(this.bucket).file(key);
    const metadata = options.contentType === undefined ? {} : { contentType: options.contentType };
    try {
      const [uri] = await file.createResumableUpload({ metadata });
      return options.size === undefined ? uri : `${uri}#${options.size}`;
    } catch (error) {
      throw isAbort(error)
        ? error
        : mapGcsError(error, { bucket: this.bucket, key, op: 'create session' });
    }
  }

  async putPart(key: string, upload: string, part: PartUpload): Promise<string> {
    this.guard('chunk', key);
    const where = gcsUriText(this.bucket, key);
    if (part.offset % CHUNK_QUANTUM !== 0) {
      throw new NotSupported(
        `${where}: resumable sessions take parts in multiples of 256 KiB, not one at ${part.offset}`,
      );
    }
    const aligned = part.size - (part.size % CHUNK_QUANTUM);
    let body: Uint8Array | Readable = part.body;
    let tail: (() => Buffer) | undefined;
    if (aligned < part.size && body instanceof Uint8Array) {
      const bytes = body;
      tail = () => Buffer.from(bytes.subarray(aligned));
      body = bytes.subarray(0, aligned);
    } else if (aligned < part.size) {
      ({ head: body, tail } = splitAt(body as Readable, aligned));
    }
    const end = part.offset + aligned;
    for (let at = part.offset; at < end; ) {
      const res = await this.send(
        'chunk',
        key,
        upload,
        `bytes ${at}-${end - 1}/*`,
        body,
        end - at,
        part.signal,
      );
      const committed = res.status === 308 ? committedOf(res) : -1;
      if (committed > at && committed < end && part.body instanceof Uint8Array) {
        at = committed;
        body = part.body.subarray(at - part.offset, aligned);
        continue;
      }
      if (committed !== end) {
        throw new StoreError(
          `chunk of ${where}: HTTP ${res.status}, ${committed} bytes committed where ${end} were sent`,
        );
      }
      at = end;
    }
    if (aligned === 0 && body instanceof Readable) for await (const _ of body);
    if (tail !== undefined) this.tails.set(upload, tail());
    return '';
  }

  async listParts(
    key: string,
    upload: string,
    options: SignalOptions & { partSize: number },
  ): Promise<Map<number, ListedPart> | 'gone'> {
    this.guard('status query', key);
    const res = await this.send(
      'status query',
      key,
      upload,
      'bytes */*',
      undefined,
      0,
      options.signal,
    );
    if (res.status !== 308) return 'gone';
    const committed = committedOf(res);
    const { partSize } = options;
    const parts = new Map<number, ListedPart>();
    for (let n = 1; n * partSize <= committed; n++) parts.set(n, { token: '', size: partSize });
    if (committed === Number(upload.split('#')[1]) && committed % partSize !== 0) {
      parts.set(parts.size + 1, { token: '', size: committed % partSize });
    }
    return parts;
  }

  async complete(
    key: string,
    upload: string,
    _parts: readonly CompletedPart[],
    options: UploadObjectOptions & { size: number },
  ): Promise<ObjectInfo> {
    this.guard('complete', key);
    const { size } = options;
    const tail = this.tails.get(upload) ?? Buffer.alloc(0);
    const range =
      tail.length === 0 ? `bytes */${size}` : `bytes ${size - tail.length}-${size - 1}/${size}`;
    const resource = await withRetries(
      async () => {
        const res = await this.send(
          'complete',
          key,
          upload,
          range,
          tail,
          tail.length,
          options.signal,
        );
        if (res.status === 200 || res.status === 201) return (await res.json()) as ObjectResource;
        const committed =
          res.status === 308 ? `, ${committedOf(res)} of ${size} bytes committed` : '';
        throw new StoreError(
          `complete ${gcsUriText(this.bucket, key)}: HTTP ${res.status}${committed}`,
          { status: res.status },
        );
      },
      { signal: options.signal },
    );
    this.tails.delete(upload);
    const info = objectInfo(this.bucket, resource);
    if (info.size !== size)
      throw new StoreError(
        `complete ${gcsUriText(this.bucket, key)}: ${info.size} bytes, not ${size}`,
      );
    return info;
  }

  async abort(key: string, upload: string, options: SignalOptions = {}): Promise<void> {
    this.tails.delete(upload);
    this.guard('cancel', key);
    await this.send('cancel', key, upload, undefined, undefined, 0, options.signal);
  }

  // biome-ignore lint/correctness/useYield: GCS has no call that lists open sessions
  async *listUploads(_prefix: string, _options?: SignalOptions): AsyncIterable<OpenUpload> {}

  /**
   * One request to the session (`range` undefined: the cancel), its failure mapped. A 2xx or 308
   * is returned (its body read, but for `complete`); for a status query or a cancel also 404,
   * 410 (gone) and 499 (cancelled); anything else is the JSON API's error.
   */
  private async send(
    op: string,
    key: string,
    upload: string,
    range: string | undefined,
    body: Uint8Array | Readable | undefined,
    length: number,
    signal: AbortSignal | undefined,
  ): Promise<Response> {
    const headers: Record<string, string> = { 'content-length': String(length) };
    if (range !== undefined) headers['content-range'] = range;
    const context = { bucket: this.bucket, key, op };
    let res: Response;
    try {
      res = await fetch(
        upload.split('#')[0] as string,
        {
          method: range === undefined ? 'DELETE' : 'PUT',
          headers,
          body,
          redirect: 'manual',
          signal,
          duplex: 'half',
        } as RequestInit,
      );
    } catch (error) {
      throw isAbort(error) ? error : mapGcsError(error, context);
    }
    const gone = (op === 'status query' || op === 'cancel') && [404, 410, 499].includes(res.status);
    if ((res.status >= 200 && res.status < 300) || res.status === 308 || gone) {
      if (op !== 'complete') await res.arrayBuffer();
      return res;
    }
    throw mapGcsError(
      responseError(res.status, await res.text(), `${op} ${gcsUriText(this.bucket, key)}`),
      context,
    );
  }
}
