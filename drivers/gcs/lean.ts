/**
 * The driver's own GETs of the JSON API, over the shared HTTP/1.1 client
 * (src/net/http1-download.ts): media always (a `createReadStream()` of SDK 7.22 whose connection
 * drops mid-body never ends nor fails), metadata and listings on the lean path.
 *
 * Why lean: a CLI command is a fresh process, and the SDK's first request costs it the SDK's
 * load; a folder fetch of small files pays its per-request cost per file (docs/performance.md).
 * The JSON API needs no signing — a custom endpoint takes no credentials, Google's a Bearer token
 * from the SDK's auth client — so a read is one GET, its body read into reused buffers or whole.
 * Only a 200/206 with a Content-Length is taken, and a 404 reported; anything else comes back as
 * the status (or `undefined`: no answer, or a whole read cut off), for the caller to retry or to
 * ask the SDK.
 *
 * @module
 */
import { isAbort } from '../../src/errors.js';
import {
  fetchWhole,
  type Http1Pool,
  type Http1Response,
  isFallback,
  openDownload,
  type WholeResponse,
} from '../../src/net/http1-download.js';

/** A JSON answer (a listing page of 1,000 resources) larger than this is the SDK's to read. */
const MAX_JSON_BYTES = 32 << 20;

/** A GET that did not give a response the driver reads: its status, or its error, and why. */
export class LeanFailure {
  constructor(
    readonly detail: string,
    readonly status?: number | undefined,
    readonly error?: unknown,
  ) {}
}

/** GETs over one pool (see the module comment). */
export class LeanReads {
  constructor(
    private readonly pool: Http1Pool,
    /** Request headers: an `Authorization` for Google's endpoint, none for a custom one. */
    private readonly auth: () => Record<string, string> | Promise<Record<string, string>>,
    private readonly debug: (message: string) => void,
  ) {}

  /** A JSON GET: the parsed body of a 200, or why not. */
  async json<T>(url: string, signal?: AbortSignal): Promise<T | LeanFailure> {
    const got = await this.send(url, { signal, wholeUpTo: MAX_JSON_BYTES }, {});
    if (got instanceof LeanFailure) return got;
    if (got === 'larger') return new LeanFailure('larger than the lean path reads');
    const whole = got as WholeResponse;
    try {
      return JSON.parse(whole.body.toString('utf8')) as T;
    } finally {
      whole.release();
    }
  }

  /**
   * A media GET (`Range: bytes=start-(end-1)` when given; the stored bytes, not transcoded): the
   * response, its body unread or, up to `wholeUpTo` bytes, read whole (`'larger'`: it is longer,
   * nothing read). A stream's failure after its head rejects its `pipeTo` (a StoreError, or an
   * AbortError).
   */
  media(
    url: string,
    options: {
      range?: { start: number; end: number } | undefined;
      wholeUpTo?: number | undefined;
      signal?: AbortSignal | undefined;
    },
  ): Promise<Http1Response | WholeResponse | 'larger' | LeanFailure> {
    const headers: Record<string, string> = { 'accept-encoding': 'gzip' };
    if (options.range) headers.range = `bytes=${options.range.start}-${options.range.end - 1}`;
    return this.send(url, options, headers);
  }

  private async send(
    url: string,
    options: { wholeUpTo?: number | undefined; signal?: AbortSignal | undefined },
    extra: Record<string, string>,
  ): Promise<Http1Response | WholeResponse | 'larger' | LeanFailure> {
    const request = { url, headers: { ...(await this.auth()), ...extra } };
    const settings = { signal: options.signal, pool: this.pool, uri: url };
    try {
      const outcome =
        options.wholeUpTo === undefined
          ? await openDownload(request, settings)
          : await fetchWhole(request, { ...settings, maxBytes: options.wholeUpTo });
      if (!isFallback(outcome)) return outcome;
      if (outcome.fallback === 'refused') return 'larger';
      this.debug(`GET ${url}: ${outcome.fallback} (${outcome.detail})`);
      const status = outcome.fallback === 'status' ? outcome.status : undefined;
      return new LeanFailure(`${outcome.fallback}: ${outcome.detail}`, status, outcome.cause);
    } catch (error) {
      // Before the head only an abort rejects; after it, a whole read that was cut off.
      if (isAbort(error)) throw error;
      this.debug(`GET ${url}: ${String(error)}`);
      return new LeanFailure(String(error), undefined, error);
    }
  }
}
