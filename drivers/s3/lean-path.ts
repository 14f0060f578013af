/**
 * The lean path: GetObject, HeadObject and ListObjectsV2 sent without the SDK's command stack,
 * and without loading the SDK client at all, on the SDK's own signer and credential chain.
 *
 * Why: a folder fetch is one GetObject per file, and for small objects the SDK's per-command
 * machinery (middleware stack resolved per command, endpoint ruleset parameters, schema-driven
 * serde, retry bookkeeping) costs about 2–3 ms of CPU per request — more than the request itself
 * on a LAN (measured in docs/performance.md: a 1,000-file fetch spent ~3 s of CPU in the SDK).
 * Signing the same request with the same signer and sending it with `node:http` costs ~0.3 ms.
 * A listing page of 1,000 keys costs the SDK ~35 ms of CPU (its generic XML parser, then its
 * schema-driven deserializer); `parseListPage` (list-xml.ts) reads the one shape S3 sends in ~5 ms.
 * And loading `@aws-sdk/client-s3` costs ~0.25 s of CPU per process, more than a whole unchanged
 * refetch of 1,000 files otherwise: commands that only read (stat, ls, fetch, refetch) never
 * load it while every answer is the plain one.
 *
 * What stays the SDK's, so there is still one source of truth:
 * - signing: `SignatureV4` of `@smithy/signature-v4`, the signer the S3 client itself wraps, with
 *   S3's settings (no double escaping of the path), called member by member
 *   (`signFromPieces`, lean-signer.ts); the clock-skew offset the client measured, once a client exists;
 * - credentials: the SDK's default chain (`@aws-sdk/credential-provider-node`), the same chain
 *   the client uses by default;
 * - the endpoint: for an explicit endpoint with path-style addressing the route is
 *   `endpoint/bucket/` signed for the configured region — exactly what the SDK's endpoint ruleset
 *   resolves there (test/drivers/s3-lean.test.ts compares the two). Anywhere else (AWS's virtual hosts,
 *   FIPS, dual-stack, access points) the route is taken from the SDK's own resolution of an
 *   earlier request of the same kind to the same bucket (GetObject or HeadObject for objects,
 *   ListObjectsV2 for listings), recorded by a middleware on the store's client; until the SDK
 *   has sent one, requests of that kind to that bucket go through the SDK. Learned routes are
 *   kept in the cache between processes (route-store.ts), so a later process starts lean. A
 *   stored route is only a hint until a request on it succeeds in this process: any failure
 *   on it before the body (a 404 included: a wrong route may answer 404 for a key that exists)
 *   hands the request to the SDK and drops the route, here and on disk, so the SDK's fresh
 *   resolution is learned and stored instead; the request is not retried lean;
 * - failures: a lean request that fails before its body starts (any status but 200/206, a network
 *   error, missing credentials, an abort) is handed to the SDK, whose retries, abort handling
 *   and the driver's one error mapping then decide. One exception: a HEAD or GET answered 404
 *   throws a {@link LeanHttpError} shaped like the SDK's own error for it (`NotFound`, status
 *   404), which the driver maps with the same one mapping. Asking "is it there?" of a missing
 *   key is common (`stat` or `fetch` of a folder named without its `/`, `exists`) and must not
 *   load the SDK client (~0.25 s) to hear "no" again. The price: a GET's 404 is not told apart
 *   by its error code (`NoSuchKey`, `NoSuchBucket`, `NoSuchVersion`), which a HEAD cannot tell
 *   either; all are `NotFound`. A failure after a GET's body started
 *   surfaces on the body stream, as with the SDK. A listing page that fails at any point, or
 *   does not parse, is asked again through the SDK (a page is idempotent).
 *
 * It is used only when the store builds its client itself (an injected client may carry
 * middleware that must see every request), for endpoints whose auth scheme is plain SigV4 (not
 * SigV4a, not S3 Express sessions), and when response checksum validation is `WHEN_REQUIRED`,
 * where the SDK does not validate a GET's body either.
 *
 * The pieces: this file sends the requests ({@link LeanPath}); lean-signer.ts signs them,
 * route-book.ts picks each one's route (route.ts, route-store.ts), list-xml.ts reads listing
 * pages, and lean-reader.ts turns the answers into the primitives' results, handing a request
 * to the SDK reader (sdk-reader.ts) whenever the lean path says "ask the SDK".
 *
 * @module
 */
import { type Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import type { Agent as HttpsAgent } from 'node:https';
import type { S3Client } from '@aws-sdk/client-s3';
import type { ByteRange } from '../../src/contract/primitives.js';
import { EMPTY_SHA256 } from '../../src/core/digest.js';
import { isAbort, StoreError } from '../../src/core/errors.js';
import { nodeHttps } from '../../src/net/builtins.js';
import {
  type DownloadFallback,
  fetchWhole,
  type Http1Pool,
  type Http1Response,
  isFallback,
  openDownload,
  type WholeResponse,
} from '../../src/net/http1-download.js';
import { encodeKeyPath } from './keys.js';
import type { Signer } from './lean-signer.js';
import {
  type LeanListPage,
  type LeanVersionPage,
  parseListPage,
  parseVersionPage,
} from './list-xml.js';
import type { ListPageOptions, VersionPageOptions } from './reader.js';
import { type Route, routeParts } from './route.js';
import { RouteBook, type RouteBookOptions } from './route-book.js';

/**
 * A status the lean path answers itself, shaped like the SDK's service error for it (`name`,
 * `$metadata.httpStatusCode`), so the driver's one error mapping (errors.ts) treats both alike.
 */
export class LeanHttpError extends Error {
  /** The SDK's error metadata: the HTTP status. */
  readonly $metadata: { httpStatusCode: number };
  constructor(status: number, name: string, message: string) {
    super(message);
    this.name = name;
    this.$metadata = { httpStatusCode: status };
  }
}

/** What a lean GET needs from the store. */
export interface LeanGetOptions {
  versionId?: string | undefined;
  range?: ByteRange | undefined;
  signal?: AbortSignal | undefined;
}

/** A whole read's failure after the response head: the transfer's own error, or an abort. */
function isAfterHead(error: unknown): boolean {
  return error instanceof StoreError || isAbort(error);
}

/** What a {@link LeanPath} is built from (the store's configuration and HTTP agents). */
export interface LeanPathOptions extends RouteBookOptions {
  /** The keep-alive agents the store's requests share. */
  agents: { http: HttpAgent; https: HttpsAgent };
  /** An idle socket (no byte either way) for this long is a dead transfer. */
  socketTimeoutMs: number;
  /**
   * Keep-alive connections of lean GETs, whose bodies are read into reused buffers
   * (src/net/http1-download.ts: no allocation per socket read, hence no garbage-driven full GCs
   * on big objects). HEAD and listing pages go through `agents`.
   */
  downloads: Http1Pool;
  /** The signer for a route's signing name and region ({@link sdkSignerFactory}). */
  signer(route: Route): Promise<Signer>;
  /** Milliseconds to add to the local clock: the skew the SDK client measured, once there is one. */
  clockOffset(): number;
}

/** Sends requests lean on a known route. See the module comment. */
export class LeanPath {
  /** Which route each request takes (fixed, learned, or a stored hint). */
  private readonly book: RouteBook;

  constructor(private readonly options: LeanPathOptions) {
    this.book = new RouteBook(options);
  }

  private debug(message: string): void {
    this.options.debug(message);
  }

  /**
   * Learn routes from `client`'s own endpoint resolution: a middleware records, per bucket, the
   * endpoint and auth scheme of its first GetObject/HeadObject and ListObjectsV2.
   */
  watch(client: S3Client): void {
    this.book.watch(client);
  }

  /**
   * GetObject sent lean: the response (status 200 or 206, body unread), or `undefined` when the
   * SDK should send the request instead (no route yet, a failure before the body, an abort,
   * any other status but 404). A 404 throws a {@link LeanHttpError} `NotFound`, as a HEAD's
   * does (a single-file fetch GETs first, and a folder named without its `/` answers 404: that
   * must not load the SDK), except on a stored route not yet confirmed, where the SDK is asked;
   * nothing else throws.
   */
  async get(
    bucket: string,
    key: string,
    options: LeanGetOptions,
  ): Promise<Http1Response | undefined> {
    const got = await this.sendGet<Http1Response>(bucket, key, options, undefined);
    return got === 'larger' ? undefined : got;
  }

  /**
   * GetObject of a whole object expected to be small, read into memory ({@link fetchWhole}):
   * the response with its body, `'larger'` when the object is longer than `maxBytes` (nothing
   * read; stream it with {@link get}), or `undefined` and throws as {@link get}. Failures after
   * the head reject (a {@link StoreError}, or an AbortError).
   */
  async getWhole(
    bucket: string,
    key: string,
    options: LeanGetOptions & { maxBytes: number },
  ): Promise<WholeResponse | 'larger' | undefined> {
    return this.sendGet<WholeResponse>(bucket, key, options, options.maxBytes);
  }

  private async sendGet<R extends Http1Response | WholeResponse>(
    bucket: string,
    key: string,
    options: LeanGetOptions,
    wholeUpTo: number | undefined,
  ): Promise<R | 'larger' | undefined> {
    const picked = await this.book.pick('object', bucket);
    if (!picked) return undefined;
    const route = picked.route;
    const headers: Record<string, string> = {};
    if (options.range) headers.range = `bytes=${options.range.start}-${options.range.end - 1}`;
    const query: Record<string, string> =
      options.versionId === undefined ? {} : { versionId: options.versionId };
    let outcome: Http1Response | WholeResponse | DownloadFallback;
    try {
      const signed = await this.sign('GET', route, encodeKeyPath(key), query, headers);
      const request = { url: route.url, target: signed.target, headers: signed.headers };
      const downloadOptions = {
        signal: options.signal,
        idleTimeoutMs: this.options.socketTimeoutMs,
        pool: this.options.downloads,
        uri: `s3://${bucket}/${key}`,
      };
      outcome =
        wholeUpTo === undefined
          ? await openDownload(request, downloadOptions)
          : await fetchWhole(request, { ...downloadOptions, maxBytes: wholeUpTo });
    } catch (error) {
      // An abort before the head goes to the SDK path, which raises it the way every S3 call
      // does. A whole read rejects after its head too: that error (or abort) stands.
      if (wholeUpTo !== undefined && isAfterHead(error)) {
        this.book.settle(picked, true, options.signal);
        throw error;
      }
      if (!options.signal?.aborted) this.debug(`lean get ${bucket}/${key}: ${String(error)}`);
      this.book.settle(picked, false, options.signal);
      return undefined;
    }
    if (!isFallback(outcome)) {
      this.book.settle(picked, true, options.signal);
      return outcome as R;
    }
    if (outcome.fallback === 'refused') {
      this.book.settle(picked, true, options.signal);
      return 'larger';
    }
    if (outcome.fallback === 'status' && outcome.status === 404 && !this.book.unconfirmed(picked)) {
      throw new LeanHttpError(404, 'NotFound', `GET ${route.url.origin}: HTTP 404`);
    }
    this.debug(
      `lean get ${bucket}/${key}: ${outcome.fallback} (${outcome.detail}); asking the SDK`,
    );
    this.book.settle(picked, false, options.signal);
    return undefined;
  }

  /**
   * HeadObject sent lean: the response headers of a 200, or `undefined` when the SDK should send
   * the request instead (no route, any other status but 404, a failure, an abort). A 404 throws
   * a {@link LeanHttpError} `NotFound` (what the SDK raises for it), except on a stored route
   * not yet confirmed, where the SDK is asked; nothing else throws.
   */
  async head(
    bucket: string,
    key: string,
    options: { versionId?: string | undefined; signal?: AbortSignal | undefined },
  ): Promise<IncomingMessage['headers'] | undefined> {
    const picked = await this.book.pick('object', bucket);
    if (!picked) return undefined;
    const route = picked.route;
    const query: Record<string, string> =
      options.versionId === undefined ? {} : { versionId: options.versionId };
    const res = await this.send('HEAD', route, encodeKeyPath(key), query, {}, options.signal);
    if (res !== undefined) {
      res.resume();
      if (res.statusCode === 200) {
        this.book.settle(picked, true, options.signal);
        return res.headers;
      }
      if (res.statusCode === 404 && !this.book.unconfirmed(picked)) {
        throw new LeanHttpError(404, 'NotFound', `HEAD ${route.url.origin}: HTTP 404`);
      }
      this.debug(`lean head ${bucket}/${key}: HTTP ${res.statusCode}; asking the SDK`);
    }
    this.book.settle(picked, false, options.signal);
    return undefined;
  }

  /**
   * One PutObject of a body in memory sent lean (its SHA-256 signed as the payload hash, so the
   * server refuses any other bytes): the response headers on HTTP 200, or `undefined` when the
   * SDK should send it instead (no route yet, any other status, a failure, an abort). Never
   * throws. A PUT that failed after its bytes left may have been stored; the SDK's send then
   * stores the same bytes again, as its own retry would.
   */
  async put(
    bucket: string,
    key: string,
    body: Uint8Array,
    options: {
      sha256: string;
      headers: Record<string, string>;
      signal?: AbortSignal | undefined;
    },
  ): Promise<IncomingMessage['headers'] | undefined> {
    const picked = await this.book.pick('object', bucket);
    if (!picked) return undefined;
    const headers = { ...options.headers, 'content-length': String(body.length) };
    const res = await this.send(
      'PUT',
      picked.route,
      encodeKeyPath(key),
      {},
      headers,
      options.signal,
      {
        bytes: body,
        sha256: options.sha256,
      },
    );
    if (res !== undefined) {
      try {
        await bodyText(res);
      } catch (error) {
        if (!options.signal?.aborted) this.debug(`lean put ${bucket}/${key}: ${String(error)}`);
      }
      if (res.statusCode === 200 && res.complete) {
        this.book.settle(picked, true, options.signal);
        return res.headers;
      }
      this.debug(`lean put ${bucket}/${key}: HTTP ${res.statusCode}; asking the SDK`);
    }
    this.book.settle(picked, false, options.signal);
    return undefined;
  }

  /**
   * One ListObjectsV2 page (`encoding-type=url`) sent lean and parsed, or `undefined` when the
   * SDK should ask for it instead (no route yet, any failure, a body that does not parse).
   * Never throws.
   */
  async listPage(bucket: string, options: ListPageOptions): Promise<LeanListPage | undefined> {
    const query: Record<string, string> = {
      'list-type': '2',
      'encoding-type': 'url',
      'max-keys': String(options.maxKeys),
    };
    if (options.prefix !== '') query.prefix = options.prefix;
    if (options.delimiter !== undefined) query.delimiter = options.delimiter;
    if (options.token !== undefined) query['continuation-token'] = options.token;
    return this.xmlPage(bucket, 'list', query, parseListPage, options.signal);
  }

  /**
   * One ListObjectVersions page (`encoding-type=url`) sent lean and parsed, or `undefined` when
   * the SDK should ask for it instead (no route yet, any failure, a body that does not parse).
   * Never throws. The SDK's parser is most of a commit's CPU (two listings of every version);
   * this one reads the entries in document order, so no order has to be recovered (history.ts).
   */
  async listVersionsPage(
    bucket: string,
    options: VersionPageOptions,
  ): Promise<LeanVersionPage | undefined> {
    const query: Record<string, string> = { versions: '', 'encoding-type': 'url' };
    if (options.prefix !== '') query.prefix = options.prefix;
    if (options.keyMarker !== undefined) query['key-marker'] = options.keyMarker;
    if (options.versionIdMarker !== undefined) {
      query['version-id-marker'] = options.versionIdMarker;
    }
    if (options.maxKeys !== undefined) query['max-keys'] = String(options.maxKeys);
    return this.xmlPage(bucket, 'list versions', query, parseVersionPage, options.signal);
  }

  /** GET a bucket-level XML answer and parse it; `undefined` (logged) for anything unexpected. */
  private async xmlPage<T>(
    bucket: string,
    what: string,
    query: Record<string, string>,
    parse: (xml: string) => T | undefined,
    signal: AbortSignal | undefined,
  ): Promise<T | undefined> {
    const picked = await this.book.pick('bucket', bucket);
    if (!picked) return undefined;
    const read = async (): Promise<T | undefined> => {
      const res = await this.send('GET', picked.route, '', query, {}, signal);
      if (res === undefined) return undefined;
      try {
        const text = await bodyText(res);
        if (res.statusCode !== 200) {
          this.debug(`lean ${what} ${bucket}: HTTP ${res.statusCode}; asking the SDK`);
          return undefined;
        }
        const page = parse(text);
        if (!page) this.debug(`lean ${what} ${bucket}: an answer it does not read; asking the SDK`);
        return page;
      } catch (error) {
        if (!signal?.aborted)
          this.debug(`lean ${what} ${bucket}: ${String(error)}; asking the SDK`);
        return undefined;
      }
    };
    const page = await read();
    this.book.settle(picked, page !== undefined, signal);
    return page;
  }

  /** Sign one request of `route` + `subpath` (already encoded): its request-target and headers. */
  private async sign(
    method: LeanMethod,
    route: Route,
    subpath: string,
    query: Record<string, string>,
    extraHeaders: Record<string, string>,
    payloadSha256: string = EMPTY_SHA256,
  ): Promise<{ target: string; headers: Record<string, string> }> {
    const parts = routeParts(route);
    const path = `${parts.base}${subpath}`;
    const headers: Record<string, string> = {
      ...extraHeaders,
      host: parts.host,
      'x-amz-content-sha256': payloadSha256,
    };
    const signed = await (await this.options.signer(route)).sign(
      {
        method,
        protocol: parts.protocol,
        hostname: parts.hostname,
        port: parts.port,
        path,
        query,
        headers,
      },
      {
        signingDate: new Date(Date.now() + this.options.clockOffset()),
        signingRegion: route.signingRegion,
        signingService: route.signingName,
      },
    );
    const search = Object.entries(query)
      .map(([k, v]) => `${encodeQueryValue(k)}=${encodeQueryValue(v)}`)
      .join('&');
    return { target: search === '' ? path : `${path}?${search}`, headers: signed.headers };
  }

  /**
   * Sign and send one GET, HEAD or PUT (with `body`, whose SHA-256 is `payloadSha256`) of
   * `route` + `subpath` (already encoded) with node:http(s); the response at its head, or
   * `undefined` after a failure (logged) or an abort. Never throws.
   */
  private async send(
    method: LeanMethod,
    route: Route,
    subpath: string,
    query: Record<string, string>,
    extraHeaders: Record<string, string>,
    signal: AbortSignal | undefined,
    body?: { bytes: Uint8Array; sha256: string },
  ): Promise<IncomingMessage | undefined> {
    try {
      const signed = await this.sign(method, route, subpath, query, extraHeaders, body?.sha256);
      const agents = this.options.agents;
      return await request(method, route.url, signed.target, {
        headers: signed.headers,
        agent: route.url.protocol === 'https:' ? agents.https : agents.http,
        timeoutMs: this.options.socketTimeoutMs,
        signal,
        body: body?.bytes,
      });
    } catch (error) {
      // An abort goes to the SDK path too, which raises it the way every S3 call does.
      if (!signal?.aborted) this.debug(`lean path ${route.url.origin}: ${String(error)}`);
      return undefined;
    }
  }
}

/** The methods the lean path sends. */
type LeanMethod = 'GET' | 'HEAD' | 'PUT';

/** A query value encoded as SigV4's canonical query encodes it. */
function encodeQueryValue(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/** One GET, HEAD or PUT (of `body`) with node:http(s); resolves at the response head. */
function request(
  method: LeanMethod,
  url: URL,
  path: string,
  options: {
    headers: Record<string, string>;
    agent: HttpAgent | HttpsAgent;
    timeoutMs: number;
    signal: AbortSignal | undefined;
    body?: Uint8Array | undefined;
  },
): Promise<IncomingMessage> {
  const send = url.protocol === 'https:' ? nodeHttps().request : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(
      {
        protocol: url.protocol,
        hostname: url.hostname,
        port: url.port === '' ? undefined : url.port,
        method,
        path,
        headers: options.headers,
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
    if (options.body === undefined) req.end();
    else req.end(options.body);
  });
}

/**
 * A response's whole body as UTF-8 text, read with events (an async iterator costs a promise
 * per chunk and a stream-end watcher). Rejects when the response ends before its last byte.
 */
function bodyText(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.once('error', reject);
    res.once('close', () => {
      if (!res.complete) reject(new Error('the response ended before its last byte'));
    });
  });
}
