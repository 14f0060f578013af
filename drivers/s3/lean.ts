/**
 * The lean path: GetObject and ListObjectsV2 sent without the SDK's command stack, on the SDK's
 * own pieces.
 *
 * Why: a folder fetch is one GetObject per file, and for small objects the SDK's per-command
 * machinery (middleware stack resolved per command, endpoint ruleset parameters, schema-driven
 * serde, retry bookkeeping) costs about 2–3 ms of CPU per request — more than the request itself
 * on a LAN (measured in docs/performance.md: a 1,000-file fetch spent ~3 s of CPU in the SDK).
 * Signing the same request with the same signer and sending it with `node:http` costs ~0.3 ms.
 * A listing page of 1,000 keys costs the SDK ~35 ms of CPU (its generic XML parser, then its
 * schema-driven deserializer); {@link parseListPage} reads the one shape S3 sends in ~5 ms.
 *
 * What stays the SDK's, so there is still one source of truth:
 * - the endpoint: taken from the SDK's own resolution (its endpoint ruleset) of an earlier
 *   request of the same kind to the same bucket (GetObject or HeadObject for objects,
 *   ListObjectsV2 for listings), recorded by a middleware on the store's client; until the SDK
 *   has sent one, requests of that kind to that bucket go through the SDK;
 * - signing and credentials: the client's own signer (`config.signer`), hence its credential
 *   provider, with the client's clock-skew offset;
 * - failures: a lean request that fails before its body starts (any status but 200/206, a network
 *   error, missing credentials, an abort) is handed to the SDK, whose retries, abort handling
 *   and the driver's one error mapping then decide. A failure after a GET's body started
 *   surfaces on the body stream, as with the SDK. A listing page that fails at any point, or
 *   does not parse, is asked again through the SDK (a page is idempotent).
 *
 * It is used only for a client the store built itself (an injected client may carry middleware
 * that must see every request), for endpoints whose auth scheme is plain SigV4 (not SigV4a, not
 * S3 Express sessions), and when response checksum validation is `WHEN_REQUIRED`, where the SDK
 * does not validate a GET's body either.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { type Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { type Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { S3Client } from '@aws-sdk/client-s3';
import type { ByteRange } from '../../src/driver.js';
import { encodeKeyPath } from './keys.js';

/** The SHA-256 of an empty body: GET requests carry it as `x-amz-content-sha256`. */
const EMPTY_SHA256 = createHash('sha256').update('').digest('hex');

/**
 * The commands whose resolved endpoint a lean request reuses, by kind: object requests (a
 * single-file fetch learns the route from its HEAD) and listings.
 */
const ROUTE_KIND: Record<string, 'object' | 'bucket'> = {
  GetObjectCommand: 'object',
  HeadObjectCommand: 'object',
  ListObjectsV2Command: 'bucket',
};

/** Where the SDK sends a bucket's GetObject, and how it signs it. */
interface Route {
  url: URL;
  signingRegion: string;
  signingName: string;
}

/** The parts of the SDK's resolved endpoint (`context.endpointV2`) the lean path reads. */
interface ResolvedEndpoint {
  url?: URL | undefined;
  properties?: { authSchemes?: unknown } | undefined;
}

/** The request shape the SDK's signer takes (a smithy HttpRequest's fields). */
interface SignableRequest {
  method: string;
  protocol: string;
  hostname: string;
  port?: number | undefined;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string>;
}

interface Signer {
  sign(
    request: SignableRequest,
    options: { signingDate: Date; signingRegion: string; signingService: string },
  ): Promise<{ headers: Record<string, string> }>;
}

/** What a lean GET needs from the store. */
export interface LeanGetOptions {
  versionId?: string | undefined;
  range?: ByteRange | undefined;
  signal?: AbortSignal | undefined;
}

/** One page of a ListObjectsV2 listing, as {@link parseListPage} reads it. */
export interface LeanListPage {
  encodingType: string | undefined;
  prefixes: string[];
  objects: { key: string; size: number; etag: string; lastModified: Date | undefined }[];
  isTruncated: boolean;
  nextToken: string | undefined;
}

/** Options of one lean listing page. */
export interface LeanListOptions {
  prefix: string;
  delimiter?: string | undefined;
  maxKeys: number;
  token?: string | undefined;
  signal?: AbortSignal | undefined;
}

/** Sends requests lean once the SDK has shown the way to a bucket. See the module comment. */
export class LeanPath {
  private readonly routes = new Map<string, Route | null>();
  private readonly signers = new Map<string, Promise<Signer>>();

  constructor(
    private readonly client: S3Client,
    private readonly agents: { http: HttpAgent; https: HttpsAgent },
    private readonly socketTimeoutMs: number,
    private readonly debug: (message: string) => void,
  ) {
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const bucket = (args.input as { Bucket?: unknown }).Bucket;
        const kind = ROUTE_KIND[context.commandName ?? ''];
        if (kind && typeof bucket === 'string') {
          this.learn(kind, bucket, (context as { endpointV2?: ResolvedEndpoint }).endpointV2);
        }
        return next(args);
      },
      { step: 'build', name: 'provcatLeanRoute', override: true },
    );
  }

  /** Record the SDK's endpoint for a kind of request to a bucket (once); `null` if unusable. */
  private learn(kind: string, bucket: string, endpoint: ResolvedEndpoint | undefined): void {
    const id = `${kind}:${bucket}`;
    if (this.routes.has(id)) return;
    const scheme = (
      endpoint?.properties?.authSchemes as Record<string, unknown>[] | undefined
    )?.[0];
    const url = endpoint?.url;
    const ok =
      url !== undefined &&
      (url.protocol === 'http:' || url.protocol === 'https:') &&
      url.search === '' &&
      scheme?.name === 'sigv4' &&
      typeof scheme.signingRegion === 'string' &&
      typeof scheme.signingName === 'string';
    if (!ok) {
      this.routes.set(id, null);
      this.debug(`lean path: ${kind} requests to ${bucket} stay on the SDK (endpoint or auth)`);
      return;
    }
    this.routes.set(id, {
      url,
      signingRegion: scheme.signingRegion as string,
      signingName: scheme.signingName as string,
    });
    this.debug(`lean path: ${kind} requests to ${bucket} via ${url.origin}${url.pathname}`);
  }

  private signer(route: Route): Promise<Signer> {
    const id = `${route.signingName}/${route.signingRegion}`;
    let signer = this.signers.get(id);
    if (!signer) {
      const config = this.client.config as unknown as {
        signer: (scheme: Record<string, unknown>) => Promise<Signer>;
      };
      signer = config.signer({
        name: 'sigv4',
        signingName: route.signingName,
        signingRegion: route.signingRegion,
        properties: {},
      });
      this.signers.set(id, signer);
      signer.catch(() => this.signers.delete(id));
    }
    return signer;
  }

  /**
   * GetObject sent lean: the response (status 200 or 206, body unread), or `undefined` when the
   * SDK should send the request instead (no route yet, a failure before the body, an abort).
   * Never throws.
   */
  async get(
    bucket: string,
    key: string,
    options: LeanGetOptions,
  ): Promise<IncomingMessage | undefined> {
    const route = this.routes.get(`object:${bucket}`);
    if (!route) return undefined;
    const headers: Record<string, string> = {};
    if (options.range) headers.range = `bytes=${options.range.start}-${options.range.end - 1}`;
    const query: Record<string, string> =
      options.versionId === undefined ? {} : { versionId: options.versionId };
    const res = await this.send(route, encodeKeyPath(key), query, headers, options.signal);
    if (res === undefined || res.statusCode === 200 || res.statusCode === 206) return res;
    res.resume();
    this.debug(`lean get ${bucket}/${key}: HTTP ${res.statusCode}; asking the SDK`);
    return undefined;
  }

  /**
   * One ListObjectsV2 page (`encoding-type=url`) sent lean and parsed, or `undefined` when the
   * SDK should ask for it instead (no route yet, any failure, a body that does not parse).
   * Never throws.
   */
  async listPage(bucket: string, options: LeanListOptions): Promise<LeanListPage | undefined> {
    const route = this.routes.get(`bucket:${bucket}`);
    if (!route) return undefined;
    const query: Record<string, string> = {
      'list-type': '2',
      'encoding-type': 'url',
      'max-keys': String(options.maxKeys),
    };
    if (options.prefix !== '') query.prefix = options.prefix;
    if (options.delimiter !== undefined) query.delimiter = options.delimiter;
    if (options.token !== undefined) query['continuation-token'] = options.token;
    const res = await this.send(route, '', query, {}, options.signal);
    if (res === undefined) return undefined;
    try {
      const chunks: Buffer[] = [];
      for await (const chunk of res as AsyncIterable<Buffer>) chunks.push(chunk);
      if (res.statusCode !== 200) {
        this.debug(`lean list ${bucket}: HTTP ${res.statusCode}; asking the SDK`);
        return undefined;
      }
      const page = parseListPage(Buffer.concat(chunks).toString('utf8'));
      if (!page) this.debug(`lean list ${bucket}: an answer it does not read; asking the SDK`);
      return page;
    } catch (error) {
      if (!options.signal?.aborted) {
        this.debug(`lean list ${bucket}: ${String(error)}; asking the SDK`);
      }
      return undefined;
    }
  }

  /**
   * Sign and send one GET of `route` + `subpath` (already encoded); the response at its head, or
   * `undefined` after a failure (logged) or an abort. Never throws.
   */
  private async send(
    route: Route,
    subpath: string,
    query: Record<string, string>,
    extraHeaders: Record<string, string>,
    signal: AbortSignal | undefined,
  ): Promise<IncomingMessage | undefined> {
    try {
      const base = route.url.pathname.endsWith('/') ? route.url.pathname : `${route.url.pathname}/`;
      const path = `${base}${subpath}`;
      const headers: Record<string, string> = {
        ...extraHeaders,
        host: route.url.host,
        'x-amz-content-sha256': EMPTY_SHA256,
      };
      const offset = (this.client.config as { systemClockOffset?: number }).systemClockOffset ?? 0;
      const signed = await (await this.signer(route)).sign(
        {
          method: 'GET',
          protocol: route.url.protocol,
          hostname: route.url.hostname,
          port: route.url.port === '' ? undefined : Number(route.url.port),
          path,
          query,
          headers,
        },
        {
          signingDate: new Date(Date.now() + offset),
          signingRegion: route.signingRegion,
          signingService: route.signingName,
        },
      );
      const search = Object.entries(query)
        .map(([k, v]) => `${encodeQueryValue(k)}=${encodeQueryValue(v)}`)
        .join('&');
      return await request(route.url, search === '' ? path : `${path}?${search}`, signed.headers, {
        agent: route.url.protocol === 'https:' ? this.agents.https : this.agents.http,
        timeoutMs: this.socketTimeoutMs,
        signal,
      });
    } catch (error) {
      // An abort goes to the SDK path too, which raises it the way every S3 call does.
      if (!signal?.aborted) this.debug(`lean path ${route.url.origin}: ${String(error)}`);
      return undefined;
    }
  }
}

/** A query value encoded as SigV4's canonical query encodes it. */
function encodeQueryValue(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/** One GET with node:http(s); resolves at the response head. */
function request(
  url: URL,
  path: string,
  headers: Record<string, string>,
  options: { agent: HttpAgent | HttpsAgent; timeoutMs: number; signal: AbortSignal | undefined },
): Promise<IncomingMessage> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(
      {
        protocol: url.protocol,
        hostname: url.hostname,
        port: url.port === '' ? undefined : url.port,
        method: 'GET',
        path,
        headers,
        agent: options.agent,
        signal: options.signal,
      },
      resolve,
    );
    // An idle socket (no byte either way) for this long is a dead transfer, as for the SDK.
    req.setTimeout(options.timeoutMs, () => {
      req.destroy(new Error(`no byte for ${options.timeoutMs} ms`));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The text of an XML element's content: the five predefined entities and character references. */
function unescapeXml(text: string): string {
  if (!text.includes('&')) return text;
  return text.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos);/g, (_, ref: string) => {
    if (ref[0] === '#') {
      return String.fromCodePoint(
        ref[1] === 'x' ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10),
      );
    }
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[ref] as string;
  });
}

/** The content of the first `<tag>...</tag>` in `xml[from, to)`, or `undefined`. */
function element(xml: string, tag: string, from: number, to: number): string | undefined {
  const open = xml.indexOf(`<${tag}>`, from);
  if (open < 0 || open >= to) return undefined;
  const start = open + tag.length + 2;
  const end = xml.indexOf(`</${tag}>`, start);
  if (end < 0 || end > to) return undefined;
  return unescapeXml(xml.slice(start, end));
}

/** Every `<tag>...</tag>` block in `xml`, as [start, end) of its content. */
function blocks(xml: string, tag: string): [number, number][] {
  const out: [number, number][] = [];
  for (let at = xml.indexOf(`<${tag}>`); at >= 0; at = xml.indexOf(`<${tag}>`, at)) {
    const start = at + tag.length + 2;
    const end = xml.indexOf(`</${tag}>`, start);
    if (end < 0) throw new Error(`unterminated <${tag}>`);
    out.push([start, end]);
    at = end;
  }
  return out;
}

/**
 * Read a ListObjectsV2 answer (`ListBucketResult`): its prefixes, objects (key, size, ETag,
 * last-modified), truncation and continuation token, keys left URL-encoded as sent. Returns
 * `undefined` for anything else — another root element, a CDATA section or comment, an object
 * without a key, size or ETag — so the SDK reads it instead. S3 and S3-compatible stores send
 * this one flat shape; the checks keep a surprise from being misread.
 */
export function parseListPage(xml: string): LeanListPage | undefined {
  const root = xml.indexOf('<ListBucketResult');
  if (root < 0 || xml.includes('<![CDATA[') || xml.includes('<!--')) return undefined;
  const objects: LeanListPage['objects'] = [];
  for (const [start, end] of blocks(xml, 'Contents')) {
    const key = element(xml, 'Key', start, end);
    const size = element(xml, 'Size', start, end);
    const etag = element(xml, 'ETag', start, end);
    const modified = element(xml, 'LastModified', start, end);
    if (key === undefined || size === undefined || etag === undefined || !/^\d+$/.test(size)) {
      return undefined;
    }
    objects.push({
      key,
      size: Number(size),
      etag,
      lastModified: modified === undefined ? undefined : new Date(modified),
    });
  }
  const prefixes: string[] = [];
  for (const [start, end] of blocks(xml, 'CommonPrefixes')) {
    const prefix = element(xml, 'Prefix', start, end);
    if (prefix === undefined) return undefined;
    prefixes.push(prefix);
  }
  // The top-level fields, looked up with the blocks cut out (a key cannot hide a tag).
  const outside = xml.replace(/<(Contents|CommonPrefixes)>[\s\S]*?<\/\1>/g, '');
  const truncated = element(outside, 'IsTruncated', 0, outside.length);
  if (truncated !== 'true' && truncated !== 'false') return undefined;
  return {
    encodingType: element(outside, 'EncodingType', 0, outside.length),
    prefixes,
    objects,
    isTruncated: truncated === 'true',
    nextToken: element(outside, 'NextContinuationToken', 0, outside.length),
  };
}
