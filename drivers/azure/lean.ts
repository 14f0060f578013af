/**
 * {@link LeanBlobReader}: reads without the SDK, whose pipeline (and loading it) costs more than
 * a small GET or a listing (docs/performance.md): Get Blob and List Blobs signed with the account
 * key as the SDK signs them. A request it does not answer itself — any status but 200/206/404, a
 * failure before the response head, an answer it does not read — goes to the SDK reader it was
 * given (reader.ts), so a caller sees one reader either way.
 *
 * @module
 */
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import type { Agent } from 'node:http';
import type * as D from '../../src/contract/primitives.js';
import { asAbort, NotFound } from '../../src/core/errors.js';
import { Http1Pool, isFallback } from '../../src/net/http1-download.js';
import { leanGet, leanGetResult } from '../../src/net/lean-get.js';
import { getText, textAgent } from '../../src/net/text-get.js';
import { blobInfo, encodeBlobName, md5Hex } from './blob-answer.js';
import type { BlobGetOptions, BlobPage, BlobPageOptions, BlobReader } from './reader.js';

/** The service version sent (the one @azure/storage-blob 12.32 sends). */
export const SERVICE_VERSION = '2026-04-06';

const NAMED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };
const xmlText = (raw: string) =>
  raw.replace(/&(amp|lt|gt|quot|apos|#x[0-9a-fA-F]+|#\d+);/g, (_, e: string) =>
    e[0] === '#'
      ? String.fromCodePoint(Number(e[1] === 'x' ? `0${e.slice(1)}` : e.slice(1)))
      : (NAMED[e] as string),
  );
const field = (xml: string, name: string) =>
  new RegExp(`<${name}>([^<]*)</${name}>`).exec(xml)?.[1];
const date = (text: string | undefined) => (text ? new Date(text) : undefined);

/** Parse a List Blobs answer; `undefined` when it is not one. */
export function parseBlobList(xml: string): BlobPage | undefined {
  if (!xml.includes('<EnumerationResults')) return undefined;
  const page: BlobPage = { objects: [], prefixes: [], next: undefined };
  for (const [, kind, body = ''] of xml.matchAll(/<(Blob|BlobPrefix)>([\s\S]*?)<\/\1>/g)) {
    const name = /<Name( Encoded="true")?>([^<]*)<\/Name>/.exec(body);
    if (!name) return undefined;
    const key = name[1] ? decodeURIComponent(xmlText(name[2] ?? '')) : xmlText(name[2] ?? '');
    if (kind === 'BlobPrefix') {
      page.prefixes.push(key);
      continue;
    }
    const [etag, sha256] = [field(body, 'Etag'), field(body, 'sha256')];
    const info = blobInfo(key, {
      etag: etag && xmlText(etag),
      blobMd5: field(body, 'Content-MD5'),
      contentLength: Number(field(body, 'Content-Length')),
      lastModified: date(field(body, 'Last-Modified')),
      metadata: sha256 ? { sha256 } : undefined,
    });
    if (!info || !Number.isSafeInteger(info.size)) return undefined;
    page.objects.push(info);
  }
  const next = /<NextMarker>([^<]+)<\/NextMarker>/.exec(xml)?.[1];
  page.next = next && xmlText(next);
  return page;
}

/** Signed reads of one account, the SDK reader behind them (see the module comment). */
export class LeanBlobReader implements BlobReader {
  private readonly base: URL;
  private readonly key: KeyObject;
  private readonly pool: Http1Pool;
  private readonly agent: Agent;

  constructor(
    endpoint: string,
    private readonly account: string,
    key: string,
    sockets: number,
    private readonly debug: (message: string) => void,
    private readonly sdk: BlobReader,
  ) {
    this.base = new URL(endpoint);
    this.key = createSecretKey(Buffer.from(key, 'base64')); // imported once, not per request
    this.pool = new Http1Pool({ maxIdlePerOrigin: sockets });
    this.agent = textAgent(this.base, sockets);
  }

  /** A signed GET of a container or blob with `query` (raw values): URL, target, headers. */
  private sign(container: string, key: string | undefined, query: string[][], range?: D.ByteRange) {
    const blob = key === undefined ? '' : `/${encodeBlobName(key)}`;
    const path = `${this.base.pathname.replace(/\/$/, '')}/${container}${blob}`;
    const headers: Record<string, string> = {
      'x-ms-date': new Date().toUTCString(),
      ...(range ? { 'x-ms-range': `bytes=${range.start}-${range.end - 1}` } : {}),
      'x-ms-version': SERVICE_VERSION,
    }; // in the order of their names, as the string to sign lists them
    const canonical = Object.entries(headers).map(([h, v]) => `${h}:${v}\n`);
    const sorted = [...query].sort(([a = ''], [b = '']) => (a < b ? -1 : 1));
    const resource = sorted.map(([k, v]) => `\n${k}:${v}`).join('');
    const text = `GET${'\n'.repeat(12)}${canonical.join('')}/${this.account}${path}${resource}`;
    const signature = createHmac('sha256', this.key).update(text, 'utf8').digest('base64');
    headers.authorization = `SharedKey ${this.account}:${signature}`;
    const search = query.map(([k, v = '']) => `${k}=${encodeURIComponent(v)}`).join('&');
    return { url: this.base, target: search === '' ? path : `${path}?${search}`, headers };
  }

  async page(c: string, prefix: string, o: BlobPageOptions): Promise<BlobPage> {
    return (await this.leanPage(c, prefix, o)) ?? this.sdk.page(c, prefix, o);
  }

  async get(c: string, key: string, o: BlobGetOptions): Promise<D.GetResult> {
    const got = await this.leanGet(c, key, o);
    if (got === 404) throw new NotFound(`${o.op} ${o.uri}: not found (HTTP 404)`, { uri: o.uri });
    return got ?? this.sdk.get(c, key, o);
  }

  /** One List Blobs page, or `undefined`: ask the SDK. Never throws but for an abort. */
  private async leanPage(c: string, prefix: string, o: BlobPageOptions) {
    const { delimiter, marker, limit } = o;
    const fields = {
      restype: 'container',
      comp: 'list',
      maxresults: `${limit}`,
      include: 'metadata',
    };
    const all = Object.entries({ ...fields, prefix: prefix || undefined, delimiter, marker });
    const query = all.filter(([, v]) => v !== undefined) as string[][];
    const { target, headers } = this.sign(c, undefined, query);
    try {
      const url = new URL(target, this.base);
      const { status, text } = await getText(url, { headers, agent: this.agent, signal: o.signal });
      const page = status === 200 ? parseBlobList(text) : undefined;
      if (!page) this.debug(`lean list ${c}: HTTP ${status}; asking the SDK`);
      return page;
    } catch (error) {
      if (o.signal?.aborted) throw asAbort(error, o.signal);
      this.debug(`lean list ${c}: ${String(error)}; asking the SDK`);
      return undefined;
    }
  }

  /**
   * Get Blob (a range, a version, or whole into memory up to `wholeUpTo` bytes): the result,
   * `404` for a missing blob, or `undefined`: ask the SDK. Rejects only after a response head.
   */
  private async leanGet(c: string, key: string, o: BlobGetOptions) {
    const query = o.versionId === undefined ? [] : [['versionid', o.versionId]];
    const uri = `az://${c}/${key}`;
    const request = this.sign(c, key, query, o.range);
    const wholeUpTo = o.range ? undefined : o.wholeUpTo;
    // Rejects only for an abort, or after the head (a body cut off): either stands.
    const got = await leanGet(request, { signal: o.signal, pool: this.pool, uri, wholeUpTo });
    if (isFallback(got)) {
      if (got.fallback === 'status' && got.status === 404) return 404;
      this.debug(`lean get ${uri}: ${got.fallback} (${got.detail}); asking the SDK`);
      return undefined;
    }
    const h = got.headers;
    const [etag, versionId, contentRange] = [h.etag, h['x-ms-version-id'], h['content-range']];
    const lastModified = date(h['last-modified']);
    const sha256 = h['x-ms-meta-sha256'];
    const metadata = sha256 === undefined ? undefined : { sha256 };
    const answer = { etag, versionId, contentRange, lastModified, metadata };
    const info = blobInfo(key, { ...answer, contentLength: got.contentLength });
    if (info) {
      const result = leanGetResult(info, got);
      // The blob's MD5 (Put Blob records one) states these bytes' only for the whole blob.
      if (!o.range) result.contentMd5 = md5Hex(h['content-md5']);
      return result;
    }
    if (!('body' in got)) got.discard();
    return undefined;
  }

  /** Close idle connections. */
  close(): void {
    this.sdk.close();
    this.pool.close();
    this.agent.destroy();
  }
}
