/**
 * Reads without the SDK: Get Blob and List Blobs signed with the account key (Shared Key) and
 * sent on the project's HTTP/1.1 path (src/net/http1-download.ts) and `node:http`.
 *
 * Why: a folder fetch of many small blobs is mostly per-request client work, and the SDK's
 * pipeline (policies, header serializers, a stream wrapper per download) costs several times
 * what the request itself does; an unchanged refetch is one listing, and loading the SDK costs
 * more CPU than it. docs/performance.md has the numbers. Writes, versions, HEAD and anything
 * unusual stay on the SDK: a lean call answers `undefined` ("ask the SDK") for any status but
 * 200/206/404, any network failure before a response head, and any body it does not read; its
 * own errors are only a 404 (NotFound, so a miss does not load the SDK) and failures after the
 * head (typed by the HTTP path). `leanReads: false` or `PROVCAT_AZURE_LEAN=0` turns it off; the
 * conformance suite runs both ways.
 *
 * The string to sign is the Blob service's ("Authorize with Shared Key"), built as the SDK
 * builds it, for exactly the path and query sent. Blob names are encoded as the SDK encodes
 * them, except that a name with a `.` or `..` segment has its `/` encoded too (see
 * {@link encodeBlobName}).
 *
 * @module
 */
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import http, { type IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { ByteRange, GetResult, ObjectInfo } from '../../src/driver.js';
import { nodeHttps } from '../../src/net/builtins.js';
import {
  fetchWhole,
  Http1Pool,
  type Http1Response,
  isFallback,
  openDownload,
  responseReadable,
  type WholeResponse,
} from '../../src/net/http1-download.js';

/** The service version sent (the one @azure/storage-blob 12.32 sends). */
export const SERVICE_VERSION = '2026-04-06';

/**
 * A blob name as a URL path: each segment percent-encoded (as the SDK does, `'` included). A
 * name with a `.` or `..` segment is encoded whole, `/` as `%2F`, which the service decodes back:
 * URL parsing would otherwise resolve the dot segments and name another blob.
 */
export function encodeBlobName(name: string): string {
  const segments = name.split('/');
  const enc = (s: string) => encodeURIComponent(s).replace(/'/g, '%27');
  return segments.some((s) => s === '.' || s === '..') ? enc(name) : segments.map(enc).join('/');
}

/** One List Blobs page, read without the SDK. */
export interface LeanListPage {
  blobs: ObjectInfo[];
  prefixes: string[];
  next: string | undefined;
}

const ENTITY = /&(amp|lt|gt|quot|apos|#x[0-9a-fA-F]+|#\d+);/g;
const NAMED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };
function xmlText(raw: string, encoded: boolean): string {
  const text = raw.replace(ENTITY, (_, e: string) =>
    e[0] === '#'
      ? String.fromCodePoint(Number(e[1] === 'x' ? `0${e.slice(1)}` : e.slice(1)))
      : (NAMED[e] as string),
  );
  return encoded ? decodeURIComponent(text) : text;
}

/** The quoted form of an ETag (headers quote it, listings do not). */
export function quoted(etag: string): string {
  return etag.startsWith('"') ? etag : `"${etag}"`;
}

const ENTRY = /<(Blob|BlobPrefix)>([\s\S]*?)<\/\1>/g;
const field = (xml: string, name: string) =>
  new RegExp(`<${name}>([^<]*)</${name}>`).exec(xml)?.[1];

/** Parse a List Blobs answer; `undefined` when it is not one. */
export function parseBlobList(xml: string): LeanListPage | undefined {
  if (!xml.includes('<EnumerationResults')) return undefined;
  const page: LeanListPage = { blobs: [], prefixes: [], next: undefined };
  for (const [, kind, body] of xml.matchAll(ENTRY)) {
    const name = /<Name( Encoded="true")?>([^<]*)<\/Name>/.exec(body as string);
    if (!name) return undefined;
    const key = xmlText(name[2] as string, name[1] !== undefined);
    if (kind === 'BlobPrefix') {
      page.prefixes.push(key);
      continue;
    }
    const size = Number(field(body as string, 'Content-Length'));
    const etag = field(body as string, 'Etag');
    if (!Number.isSafeInteger(size) || !etag) return undefined;
    const modified = field(body as string, 'Last-Modified');
    const version = quoted(xmlText(etag, false));
    const sha256 = field(body as string, 'sha256');
    page.blobs.push({
      ...(sha256 === undefined ? {} : { sha256 }),
      key,
      size,
      version,
      etag: version,
      lastModified: modified ? new Date(modified) : undefined,
    });
  }
  const next = /<NextMarker>([^<]+)<\/NextMarker>/.exec(xml)?.[1];
  page.next = next === undefined ? undefined : xmlText(next, false);
  return page;
}

/**
 * The object an answer describes, from its headers (lower-case names): the ETag quoted, the whole
 * blob's size from Content-Range when ranged, else `size`. `undefined` without an ETag or a size.
 */
export function answerInfo(
  key: string,
  headers: Readonly<Record<string, unknown>>,
  size: number | undefined,
): ObjectInfo | undefined {
  const { etag, 'content-range': range, 'x-ms-version-id': versionId } = headers;
  const total = typeof range === 'string' ? /\/(\d+)$/.exec(range)?.[1] : undefined;
  const bytes = total === undefined ? size : Number(total);
  if (typeof etag !== 'string' || etag === '' || bytes === undefined) return undefined;
  const modified = headers['last-modified'];
  return {
    key,
    size: bytes,
    version: quoted(etag),
    etag: quoted(etag),
    versionId: typeof versionId === 'string' ? versionId : undefined,
    lastModified: typeof modified === 'string' ? new Date(modified) : undefined,
  };
}

/** Signed reads of one account (see the module comment). */
export class LeanReads {
  private readonly base: URL;
  private readonly key: KeyObject;
  private readonly pool: Http1Pool;
  private readonly agent: http.Agent;

  constructor(
    endpoint: string,
    private readonly account: string,
    key: string,
    sockets: number,
    private readonly debug: (message: string) => void,
  ) {
    this.base = new URL(endpoint);
    this.key = createSecretKey(Buffer.from(key, 'base64')); // imported once, not per request
    this.pool = new Http1Pool({ maxIdlePerOrigin: sockets });
    const Agent = this.base.protocol === 'https:' ? nodeHttps().Agent : http.Agent;
    this.agent = new Agent({ keepAlive: true, maxSockets: sockets });
  }

  /** Headers of a signed request to `path` (encoded) with `query` (name → raw value). */
  private sign(method: string, path: string, query: [string, string][], range?: ByteRange) {
    const headers: Record<string, string> = {
      'x-ms-date': new Date().toUTCString(),
      'x-ms-version': SERVICE_VERSION,
    };
    if (range) headers['x-ms-range'] = `bytes=${range.start}-${range.end - 1}`;
    const canonical = Object.keys(headers)
      .sort()
      .map((h) => `${h}:${headers[h]}\n`)
      .join('');
    const resource = [...query]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([k, v]) => `\n${k}:${v}`)
      .join('');
    const text = `${method}\n\n\n\n\n\n\n\n\n\n\n\n${canonical}/${this.account}${path}${resource}`;
    headers.authorization = `SharedKey ${this.account}:${createHmac('sha256', this.key).update(text, 'utf8').digest('base64')}`;
    const search = query.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&');
    return { target: search === '' ? path : `${path}?${search}`, headers };
  }

  private path(container: string, key?: string): string {
    const base = this.base.pathname.replace(/\/$/, '');
    return `${base}/${container}${key === undefined ? '' : `/${encodeBlobName(key)}`}`;
  }

  /** One List Blobs page, or `undefined`: ask the SDK. Never throws but for an abort. */
  async list(
    container: string,
    o: {
      prefix: string;
      delimiter?: string | undefined;
      marker?: string | undefined;
      limit: number;
      signal?: AbortSignal | undefined;
    },
  ): Promise<LeanListPage | undefined> {
    const query: [string, string][] = [
      ['restype', 'container'],
      ['comp', 'list'],
      ['maxresults', String(o.limit)],
      ['include', 'metadata'],
    ];
    if (o.prefix !== '') query.push(['prefix', o.prefix]);
    if (o.delimiter !== undefined) query.push(['delimiter', o.delimiter]);
    if (o.marker !== undefined) query.push(['marker', o.marker]);
    const { target, headers } = this.sign('GET', this.path(container), query);
    try {
      const res = await new Promise<IncomingMessage>((resolve, reject) => {
        const url = new URL(target, this.base);
        const req = (this.base.protocol === 'https:' ? nodeHttps() : http).request(
          url,
          { agent: this.agent, headers, signal: o.signal },
          resolve,
        );
        req.on('error', reject).end();
      });
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      const page =
        res.statusCode === 200 ? parseBlobList(Buffer.concat(chunks).toString('utf8')) : undefined;
      if (!page) this.debug(`lean list ${container}: HTTP ${res.statusCode}; asking the SDK`);
      return page;
    } catch (error) {
      if (o.signal?.aborted) throw error;
      this.debug(`lean list ${container}: ${String(error)}; asking the SDK`);
      return undefined;
    }
  }

  /**
   * Get Blob (a range, a version, or whole into memory up to `wholeUpTo` bytes): the result,
   * `404` for a missing blob, or `undefined`: ask the SDK. Rejects only after a response head.
   */
  async get(
    container: string,
    key: string,
    o: {
      versionId?: string | undefined;
      range?: ByteRange | undefined;
      wholeUpTo?: number | undefined;
      signal?: AbortSignal | undefined;
    },
  ): Promise<GetResult | 404 | undefined> {
    const query: [string, string][] = o.versionId === undefined ? [] : [['versionid', o.versionId]];
    const uri = `az://${container}/${key}`;
    for (let whole = o.wholeUpTo !== undefined && o.range === undefined; ; whole = false) {
      const { target, headers } = this.sign('GET', this.path(container, key), query, o.range);
      const request = { url: this.base, target, headers };
      const options = { signal: o.signal, pool: this.pool, uri };
      let got: Http1Response | WholeResponse | Awaited<ReturnType<typeof openDownload>>;
      try {
        got = whole
          ? await fetchWhole(request, { ...options, maxBytes: o.wholeUpTo as number })
          : await openDownload(request, options);
      } catch (error) {
        if (whole || o.signal?.aborted) throw error; // after the head, or an abort: it stands
        return undefined;
      }
      if (isFallback(got)) {
        if (got.fallback === 'refused') continue; // larger than wholeUpTo: stream it
        if (got.fallback === 'status' && got.status === 404) return 404;
        this.debug(`lean get ${uri}: ${got.fallback} (${got.detail}); asking the SDK`);
        return undefined;
      }
      return leanResult(key, got);
    }
  }

  /** Close idle connections. */
  close(): void {
    this.pool.close();
    this.agent.destroy();
  }
}

/** A GetResult of a lean answer (`undefined` without an ETag: the SDK then decides). */
function leanResult(key: string, res: Http1Response | WholeResponse): GetResult | undefined {
  const info = answerInfo(key, res.headers, res.contentLength);
  if (!info) {
    if (!('body' in res)) res.discard();
    return undefined;
  }
  const base = {
    info,
    contentLength: res.contentLength,
    contentRange: res.headers['content-range'],
  };
  // The Readable is made only when asked for: the cache reads `bytes` or through `pipeTo`.
  let body: Readable | undefined;
  if ('body' in res) {
    const bytes = res.body;
    return {
      ...base,
      bytes,
      release: res.release,
      get body() {
        body ??= Readable.from([bytes], { objectMode: false });
        return body;
      },
    };
  }
  return {
    ...base,
    pipeTo: (sink) => res.pipeTo(sink).finally(() => body?.destroy()),
    get body() {
      body ??= responseReadable(res);
      return body;
    },
  };
}
