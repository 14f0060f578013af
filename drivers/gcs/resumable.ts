/**
 * GCS resumable upload sessions as the upload engine's part protocol (docs/drivers/gcs.md,
 * "Uploads"): a session per object, its bytes in order (`sequential`), a part one chunk `PUT`
 * to the session URI — a capability, so chunks, status queries and the cancel are plain `fetch`
 * requests without credentials. Parts but the last are multiples of 256 KiB; the last part's
 * bytes past its last boundary are held for `complete`, so nothing is visible before it. A part
 * sent again first asks what the session kept (`bytes *\/*`), and a resume lists the parts the
 * committed offset covers: no byte is sent twice. No call lists open sessions (they expire).
 *
 * @module
 */
import { Readable } from 'node:stream';
import type { Storage } from '@google-cloud/storage';
import type * as D from '../../src/contract/primitives.js';
import { raceAbort } from '../../src/core/concurrency.js';
import { DEFAULT_CONTENT_TYPE } from '../../src/core/content-type.js';
import { isAbort, NotSupported, StoreError } from '../../src/core/errors.js';
import { withRetries } from '../../src/core/retry.js';
import { CHUNK_QUANTUM } from './config.js';
import { gcsUriText, mapGcsError, statusError } from './errors.js';
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

/** One request to a session: a chunk, a status query (no body), or the cancel (no `range`). */
type SessionRequest = {
  range?: string;
  body?: Uint8Array | Readable;
  length?: number;
  signal?: AbortSignal;
};

/** Resumable sessions in one bucket (see the module comment). */
export class GcsResumable implements D.PartProtocol {
  readonly name = 'resumable session';
  readonly maxParts = 10_000;
  readonly minPartSize = CHUNK_QUANTUM;
  readonly maxPartSize = 5 * 1024 ** 3;
  readonly sequential = true;
  readonly resumable = true;
  readonly leftover = 'GCS drops the unfinished session, a week after it was started';
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

  async create(key: string, options: D.UploadObjectOptions): Promise<string> {
    this.guard('create session', key);
    const file = (await this.storage()).bucket(this.bucket).file(key);
    // Always a type: without one the SDK may guess from the name by a table of its own.
    const metadata = { contentType: options.contentType ?? DEFAULT_CONTENT_TYPE };
    try {
      // The SDK takes no signal here: the call is raced with it, so that a create that stalls
      // (a request that never ends) is abandoned when the engine's bound aborts it.
      const created = file.createResumableUpload({ metadata });
      const [uri] = options.signal ? await raceAbort(created, options.signal) : await created;
      return options.size === undefined ? uri : `${uri}#${options.size}`;
    } catch (error) {
      const context = { bucket: this.bucket, key, op: 'create session' };
      throw isAbort(error) ? error : mapGcsError(error, context);
    }
  }

  /**
   * Send one part (see the module comment). A part in memory is sent as a fresh stream of its
   * bytes (the engine's watchdog counts what it reads) and sent again here after a retryable
   * failure; a file part's stream is read once, and the engine sends it again.
   */
  async putPart(key: string, upload: string, part: D.PartUpload): Promise<string> {
    this.guard('chunk', key);
    if (!(part.body instanceof Uint8Array)) return this.sendPart(key, upload, part);
    return withRetries(() => this.sendPart(key, upload, part), { signal: part.signal });
  }

  private async sendPart(key: string, upload: string, part: D.PartUpload): Promise<string> {
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
        const init = { range, body, length: end - at, signal: part.signal };
        const res = await this.send('chunk', key, upload, init);
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
    options: D.SignalOptions & { partSize: number },
  ): Promise<Map<number, D.ListedPart> | 'gone'> {
    this.guard('status query', key);
    const committed = await this.status(key, upload, options.signal);
    if (committed === undefined) return 'gone';
    const { partSize } = options;
    const parts = new Map<number, D.ListedPart>();
    for (let n = 1; n * partSize <= committed; n++) parts.set(n, { token: '', size: partSize });
    if (committed === Number(upload.split('#')[1]) && committed % partSize !== 0) {
      parts.set(parts.size + 1, { token: '', size: committed % partSize });
    }
    return parts;
  }

  async complete(
    key: string,
    upload: string,
    _parts: readonly D.CompletedPart[],
    options: D.UploadObjectOptions & { size: number },
  ): Promise<D.ObjectInfo> {
    this.guard('complete', key);
    const { size, signal } = options;
    const where = `complete ${gcsUriText(this.bucket, key)}`;
    const tail = this.tails.get(upload) ?? Buffer.alloc(0);
    const from = size - tail.length;
    const range = tail.length === 0 ? `bytes */${size}` : `bytes ${from}-${size - 1}/${size}`;
    const text = await withRetries(
      async () => {
        const init = { range, body: tail, length: tail.length, signal };
        const res = await this.send('complete', key, upload, init);
        if (res.status === 200 || res.status === 201) return res.text;
        const committed = res.status === 308 ? `, ${res.committed} of ${size} bytes committed` : '';
        throw new StoreError(`${where}: HTTP ${res.status}${committed}`, { status: res.status });
      },
      { signal },
    );
    this.forget(upload);
    const info = objectInfo(this.bucket, JSON.parse(text) as ObjectResource);
    if (info.size !== size) throw new StoreError(`${where}: ${info.size} bytes, not ${size}`);
    return info;
  }

  async abort(key: string, upload: string, options: D.SignalOptions = {}): Promise<void> {
    this.forget(upload);
    this.guard('cancel', key);
    await this.send('cancel', key, upload, { signal: options.signal });
  }

  /** Nothing: GCS has no call that lists open sessions (they expire after a week). */
  async *listUploads(_prefix: string, _options?: D.SignalOptions): AsyncIterable<D.OpenUpload> {}

  private forget(upload: string): void {
    for (const map of [this.tails, this.committed, this.tried]) map.delete(upload);
  }

  /** The session's committed size (kept for the next part), or `undefined` when it is gone. */
  private async status(key: string, upload: string, signal?: AbortSignal) {
    const res = await this.send('status query', key, upload, { range: 'bytes */*', signal });
    if (res.status !== 308) return undefined;
    this.committed.set(upload, res.committed);
    return res.committed;
  }

  /**
   * One request to the session (no `range`: the cancel), its answer read: a 2xx or 308, or for a
   * status query or cancel a 404, 410 (gone) or 499 (cancelled); else the JSON API's error.
   */
  private async send(op: string, key: string, upload: string, init: SessionRequest) {
    const { range, body, length = 0, signal } = init;
    const headers: Record<string, string> = { 'content-length': String(length) };
    if (range !== undefined) headers['content-range'] = range;
    const method = range === undefined ? 'DELETE' : 'PUT';
    const request = { method, headers, body, signal, redirect: 'manual', duplex: 'half' };
    const context = { bucket: this.bucket, key, op };
    let res: Response;
    let text: string;
    try {
      res = await fetch(upload.split('#')[0] as string, request as RequestInit);
      text = await res.text();
    } catch (error) {
      throw isAbort(error) ? error : mapGcsError(error, context);
    }
    const { status } = res;
    const m = /^bytes=0-(\d+)$/.exec(res.headers.get('range') ?? '');
    const gone = (op === 'status query' || op === 'cancel') && [404, 410, 499].includes(status);
    if ((status >= 200 && status < 300) || status === 308 || gone)
      return { status, committed: m ? Number(m[1]) + 1 : 0, text };
    throw statusError(status, context, text);
  }
}
