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
 *   answered with the rest when the part is in memory, else it fails the part; a part sent
 *   again (a retry) first asks the session what it kept, so no byte is sent twice.
 * - **List**: a status query (`bytes *\/*`) gives the committed offset; the parts it covers fully
 *   are listed (the last one too once the whole object is committed). A part the offset falls in
 *   is read again from its start (its SHA-256 rebuilt) but sent from the offset.
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

/** Bytes `[from, to)` of `source` as a stream; the rest past `to` is read too, into `tail()`. */
function slice(source: Readable, from: number, to: number): { body: Readable; tail: () => Buffer } {
  const rest: Buffer[] = [];
  async function* body() {
    let seen = 0;
    for await (const chunk of source as AsyncIterable<Buffer>) {
      const a = Math.min(chunk.length, Math.max(0, from - seen));
      const b = Math.min(chunk.length, Math.max(0, to - seen));
      if (b > a) yield chunk.subarray(a, b);
      if (chunk.length > b) rest.push(Buffer.from(chunk.subarray(b)));
      seen += chunk.length;
    }
  }
  return { body: Readable.from(body(), { objectMode: false }), tail: () => Buffer.concat(rest) };
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
  /** The committed offset a status query found, by session (a resume skips those bytes). */
  private readonly committed = new Map<string, number>();
  /** The offset of the last part sent, by session (one sent again is a retry). */
  private readonly tried = new Map<string, number>();

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

  /**
   * Send one part (see the module comment). A part in memory is sent as a fresh stream of its
   * bytes (the engine's watchdog counts what it reads) and sent again here after a retryable
   * failure; a file part's stream is read once, and the engine sends it again.
   */
  async putPart(key: string, upload: string, part: PartUpload): Promise<string> {
    this.guard('chunk', key);
    if (!(part.body instanceof Uint8Array)) return this.sendPart(key, upload, part);
    return withRetries(() => this.sendPart(key, upload, part), { signal: part.signal });
  }

  private async sendPart(key: string, upload: string, part: PartUpload): Promise<string> {
    const where = gcsUriText(this.bucket, key);
    if (part.offset % CHUNK_QUANTUM !== 0) {
      throw new NotSupported(`${where}: resumable sessions take parts in multiples of 256 KiB`);
    }
    // A part sent before is a retry: ask what the session kept. After a retry or a resume, the
    // bytes the session has are read but not sent again.
    if ((this.tried.get(upload) ?? -1) >= part.offset) await this.status(key, upload, part.signal);
    this.tried.set(upload, part.offset);
    const aligned = part.size - (part.size % CHUNK_QUANTUM);
    const end = part.offset + aligned;
    const memory = part.body instanceof Uint8Array ? part.body : undefined;
    for (;;) {
      const at = Math.min(end, Math.max(part.offset, this.committed.get(upload) ?? 0));
      const source = memory
        ? (part.restream?.() ?? Readable.from([memory], { objectMode: false }))
        : (part.body as Readable);
      const { body, tail } = slice(source, at - part.offset, aligned);
      let committed = end;
      if (at < end) {
        const range = `bytes ${at}-${end - 1}/*`;
        const res = await this.send('chunk', key, upload, {
          range,
          body,
          length: end - at,
          signal: part.signal,
        });
        committed = res.status === 308 ? res.committed : -1;
      } else {
        for await (const _ of body);
      }
      if (committed === end) {
        if (aligned < part.size) this.tails.set(upload, tail());
        return '';
      }
      if (!(memory && committed > at && committed < end)) {
        throw new StoreError(
          `chunk of ${where}: ${committed} bytes committed where ${end} were sent`,
        );
      }
      this.committed.set(upload, committed);
    }
  }

  async listParts(
    key: string,
    upload: string,
    options: SignalOptions & { partSize: number },
  ): Promise<Map<number, ListedPart> | 'gone'> {
    this.guard('status query', key);
    const committed = await this.status(key, upload, options.signal);
    if (committed === undefined) return 'gone';
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
    const where = `complete ${gcsUriText(this.bucket, key)}`;
    const tail = this.tails.get(upload) ?? Buffer.alloc(0);
    const from = size - tail.length;
    const range = tail.length === 0 ? `bytes */${size}` : `bytes ${from}-${size - 1}/${size}`;
    const text = await withRetries(
      async () => {
        const init = { range, body: tail, length: tail.length, signal: options.signal };
        const res = await this.send('complete', key, upload, init);
        if (res.status === 200 || res.status === 201) return res.text;
        const committed = res.status === 308 ? `, ${res.committed} of ${size} bytes committed` : '';
        throw new StoreError(`${where}: HTTP ${res.status}${committed}`, { status: res.status });
      },
      { signal: options.signal },
    );
    for (const map of [this.tails, this.committed, this.tried]) map.delete(upload);
    const info = objectInfo(this.bucket, JSON.parse(text) as ObjectResource);
    if (info.size !== size) throw new StoreError(`${where}: ${info.size} bytes, not ${size}`);
    return info;
  }

  async abort(key: string, upload: string, options: SignalOptions = {}): Promise<void> {
    for (const map of [this.tails, this.committed, this.tried]) map.delete(upload);
    this.guard('cancel', key);
    await this.send('cancel', key, upload, { signal: options.signal });
  }

  /** The session's committed size (kept for the next part), or `undefined` when it is gone. */
  private async status(
    key: string,
    upload: string,
    signal?: AbortSignal,
  ): Promise<number | undefined> {
    const res = await this.send('status query', key, upload, { range: 'bytes */*', signal });
    if (res.status !== 308) return undefined;
    this.committed.set(upload, res.committed);
    return res.committed;
  }

  /** Nothing: GCS has no call that lists open sessions (they expire after a week). */
  async *listUploads(_prefix: string, _options?: SignalOptions): AsyncIterable<OpenUpload> {}

  /**
   * One request to the session (no `range`: the cancel) and its answer read, failures mapped: a
   * 2xx or 308 is returned with the committed size and the body; for a status query or a cancel
   * also 404, 410 (gone) and 499 (cancelled); anything else is the JSON API's error.
   */
  private async send(
    op: string,
    key: string,
    upload: string,
    init: { range?: string; body?: Uint8Array | Readable; length?: number; signal?: AbortSignal },
  ): Promise<{ status: number; committed: number; text: string }> {
    const headers: Record<string, string> = { 'content-length': String(init.length ?? 0) };
    if (init.range !== undefined) headers['content-range'] = init.range;
    const context = { bucket: this.bucket, key, op };
    const method = init.range === undefined ? 'DELETE' : 'PUT';
    const request = { method, headers, body: init.body, redirect: 'manual', signal: init.signal };
    let status: number;
    let text: string;
    let committed: number;
    try {
      const res = await fetch(
        upload.split('#')[0] as string,
        { ...request, duplex: 'half' } as RequestInit,
      );
      ({ status } = res);
      const m = /^bytes=0-(\d+)$/.exec(res.headers.get('range') ?? '');
      committed = m ? Number(m[1]) + 1 : 0;
      text = await res.text();
    } catch (error) {
      throw isAbort(error) ? error : mapGcsError(error, context);
    }
    const gone = (op === 'status query' || op === 'cancel') && [404, 410, 499].includes(status);
    if ((status >= 200 && status < 300) || status === 308 || gone)
      return { status, committed, text };
    throw mapGcsError(
      responseError(status, text, `${op} ${gcsUriText(this.bucket, key)}`),
      context,
    );
  }
}
