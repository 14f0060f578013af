/**
 * {@link LeanReader}: the driver's reads on the lean path (lean-path.ts), chosen once by the
 * store when it builds its own client. Each read is sent lean and its answer read into the
 * same {@link ObjectInfo} and {@link GetResult} the SDK reader gives; whenever the lean path
 * says "ask the SDK" (no route yet, a failure before the body, an answer it does not read) the
 * request goes to the SDK reader instead. An error the lean path raises itself (a 404, a whole
 * read that failed after its head) is mapped as the SDK's would be; an abort passes as it is.
 *
 * @module
 */
import type { Agent as HttpAgent, IncomingMessage } from 'node:http';
import type { Agent as HttpsAgent } from 'node:https';
import path from 'node:path';
import type { S3Client } from '@aws-sdk/client-s3';
import type {
  GetOptions,
  GetResult,
  ObjectInfo,
  PutOptions,
} from '../../src/contract/primitives.js';
import { sha256Hex } from '../../src/core/digest.js';
import { isAbort } from '../../src/core/errors.js';
import { Http1Pool, type Http1Response, type WholeResponse } from '../../src/net/http1-download.js';
import { leanGetResult } from '../../src/net/lean-get.js';
import type { S3Config } from './config.js';
import { mapS3Error, type S3ErrorContext } from './errors.js';
import { LeanPath } from './lean-path.js';
import { sdkSignerFactory } from './lean-signer.js';
import type { LeanVersionPage } from './list-xml.js';
import { putMetadata } from './metadata.js';
import { etagNotMd5, objectInfo, totalFromContentRange } from './object-info.js';
import type {
  ListedPage,
  ListPageOptions,
  ObjectAt,
  S3Reader,
  VersionPageOptions,
} from './reader.js';
import { pathStyleRoute, type Route } from './route.js';
import { endpointInputs, RouteStore } from './route-store.js';

/** What a {@link LeanReader} is built from. */
export interface LeanReaderOptions {
  config: S3Config;
  /** The keep-alive agents the store's requests share (lean and SDK). */
  agents: { http: HttpAgent; https: HttpsAgent };
  /** The cache root: learned routes are kept below it (route-store.ts). */
  cacheRoot: string;
  /** An idle socket (no byte either way) for this long is a dead transfer. */
  socketTimeoutMs: number;
  /** Milliseconds to add to the local clock: the skew the SDK client measured, once there is one. */
  clockOffset(): number;
  /** The reader a request goes to when the lean path does not answer it. */
  fallback: S3Reader;
  debug(message: string): void;
}

/** The reads on the lean path, falling back to the SDK reader (see the module comment). */
export class LeanReader implements S3Reader {
  readonly lean = true;
  private readonly path: LeanPath;
  private readonly fallback: S3Reader;
  /** Idle keep-alive connections of lean GETs (closed by {@link close}). */
  private readonly downloads: Http1Pool;
  /** The lean path's learned routes kept in the cache, when routes are not fixed (route-store.ts). */
  private readonly routeStore: RouteStore | undefined;
  private readonly fixedRoutes = new Map<string, Route | undefined>();

  constructor(options: LeanReaderOptions) {
    const { config: c, agents } = options;
    const endpoint = c.endpoint;
    const fixed = endpoint !== undefined && c.forcePathStyle;
    this.fallback = options.fallback;
    this.downloads = new Http1Pool({ maxIdlePerOrigin: agents.http.maxSockets });
    this.routeStore = fixed
      ? undefined
      : new RouteStore({
          dir: path.join(options.cacheRoot, 'v1', 's3-routes'),
          inputs: () => endpointInputs(c),
          debug: options.debug,
        });
    this.path = new LeanPath({
      agents,
      downloads: this.downloads,
      socketTimeoutMs: options.socketTimeoutMs,
      stored: this.routeStore,
      fixedRoute: fixed
        ? (bucket) => {
            // Made once per bucket: a URL parse per request is measurable on small GETs.
            let route = this.fixedRoutes.get(bucket);
            if (route === undefined && !this.fixedRoutes.has(bucket)) {
              route = pathStyleRoute(endpoint, c.region, bucket);
              this.fixedRoutes.set(bucket, route);
            }
            return route;
          }
        : undefined,
      signer: sdkSignerFactory(c),
      clockOffset: options.clockOffset,
      debug: options.debug,
    });
  }

  /**
   * PutObject of a body in memory sent lean (lean-path.ts `put`): its {@link ObjectInfo}, or
   * `undefined` when the SDK should send it (the caller then does). Never throws but a
   * malformed answer (no ETag).
   */
  async put(at: ObjectAt, body: Uint8Array, options: PutOptions): Promise<ObjectInfo | undefined> {
    const headers: Record<string, string> = {};
    if (options.contentType !== undefined) headers['content-type'] = options.contentType;
    const meta = putMetadata(options.sha256);
    if (meta?.sha256 !== undefined) headers['x-amz-meta-sha256'] = meta.sha256;
    const answer = await this.path.put(at.bucket, at.key, body, {
      sha256: options.sha256 ?? sha256Hex(body),
      headers,
      signal: options.signal,
    });
    if (answer === undefined) return undefined;
    options.onProgress?.(body.length);
    const version = answer['x-amz-version-id'];
    return objectInfo(
      at.key,
      { ETag: answer.etag, VersionId: typeof version === 'string' ? version : undefined },
      body.length,
    );
  }

  /** HeadObject sent lean; the SDK reader's when the lean path does not answer. */
  async head(at: ObjectAt, signal: AbortSignal | undefined): Promise<ObjectInfo> {
    let info: ObjectInfo | undefined;
    try {
      const { bucket, key, versionId } = at;
      info = leanHeadInfo(key, await this.path.head(bucket, key, { versionId, signal }));
    } catch (error) {
      throw mapped(error, at);
    }
    return info ?? this.fallback.head(at, signal);
  }

  /** GetObject sent lean (small objects read whole); the SDK reader's when not answered. */
  async get(at: ObjectAt, options: GetOptions): Promise<GetResult> {
    let result: GetResult | undefined;
    try {
      result = await this.leanGet(at, options);
    } catch (error) {
      throw mapped(error, at);
    }
    return result ?? this.fallback.get(at, options);
  }

  private async leanGet(at: ObjectAt, options: GetOptions): Promise<GetResult | undefined> {
    const { bucket, key, versionId } = at;
    const range = options.range;
    const upTo = options.wholeUpTo;
    if (upTo !== undefined && range === undefined) {
      const whole = await this.path.getWhole(bucket, key, {
        versionId,
        signal: options.signal,
        maxBytes: upTo,
      });
      if (whole === undefined) return undefined;
      if (whole !== 'larger') return leanResult(key, whole);
    }
    // The transfer has the signal: an abort rejects `pipeTo` and errors `body`.
    const res = await this.path.get(bucket, key, { versionId, range, signal: options.signal });
    return res && leanResult(key, res);
  }

  /** One ListObjectsV2 page sent lean; the SDK reader's when not answered. */
  async listPage(at: S3ErrorContext, options: ListPageOptions): Promise<ListedPage> {
    let page: ListedPage | undefined;
    try {
      page = await this.path.listPage(at.bucket, options);
    } catch (error) {
      throw mapped(error, at);
    }
    return page ?? this.fallback.listPage(at, options);
  }

  /** One ListObjectVersions page sent lean; the SDK reader's when not answered. */
  async versionPage(at: S3ErrorContext, options: VersionPageOptions): Promise<LeanVersionPage> {
    let page: LeanVersionPage | undefined;
    try {
      page = await this.path.listVersionsPage(at.bucket, options);
    } catch (error) {
      throw mapped(error, at);
    }
    return page ?? this.fallback.versionPage(at, options);
  }

  /** Learn routes from the SDK client's own endpoint resolution (lean-path.ts). */
  watch(client: S3Client): void {
    this.path.watch(client);
  }

  /** Write the learned routes to the cache and close the idle connections of lean GETs. */
  async close(): Promise<void> {
    await this.routeStore?.flush();
    this.downloads.close();
  }
}

/**
 * An error of the lean path mapped as the SDK's would be: it throws only for a status it
 * answers itself (a HEAD's or GET's 404), and for a whole read that failed after its head (a
 * network error, or an abort, which passes as it is).
 */
function mapped(error: unknown, at: S3ErrorContext): unknown {
  return isAbort(error) ? error : mapS3Error(error, at);
}

/** {@link etagNotMd5} of a lean response's headers (names lowercased). */
function leanEtagNotMd5(h: Readonly<Record<string, string>>): boolean | undefined {
  return etagNotMd5(
    h['x-amz-server-side-encryption'],
    h['x-amz-server-side-encryption-customer-algorithm'],
  );
}

/**
 * A GetResult from a lean GET's response (streamed or read whole; src/net/lean-get.ts), or
 * `undefined` (the response discarded) when it lacks an ETag, so the SDK reader decides.
 */
function leanResult(key: string, res: Http1Response | WholeResponse): GetResult | undefined {
  const info = leanGetInfo(key, res);
  if (info === undefined) {
    if (!('body' in res)) res.discard();
    return undefined;
  }
  const result = leanGetResult(info, res);
  result.etagNotMd5 = leanEtagNotMd5(res.headers);
  return result;
}

/** The ObjectInfo of a lean GET's response head (the fields the SDK reads); `undefined` without an ETag. */
function leanGetInfo(
  key: string,
  res: Pick<Http1Response, 'headers' | 'contentLength'>,
): ObjectInfo | undefined {
  const h = res.headers;
  const etag = h.etag;
  if (etag === undefined) return undefined;
  const versionId = h['x-amz-version-id'];
  const modified = h['last-modified'];
  const sha256 = h['x-amz-meta-sha256'];
  return objectInfo(
    key,
    {
      ContentLength: res.contentLength,
      ETag: etag,
      VersionId: typeof versionId === 'string' ? versionId : undefined,
      LastModified: modified === undefined ? undefined : httpDate(modified),
      Metadata: typeof sha256 === 'string' ? { sha256 } : undefined,
    },
    totalFromContentRange(h['content-range']) ?? res.contentLength,
  );
}

/**
 * The ObjectInfo of a lean HEAD's response headers (the fields the SDK's HeadObject reads), or
 * `undefined` when there were none or they lack a size or an ETag, so the SDK reader decides.
 */
function leanHeadInfo(
  key: string,
  h: IncomingMessage['headers'] | undefined,
): ObjectInfo | undefined {
  if (h === undefined) return undefined;
  const length = Number(h['content-length']);
  if (h['content-length'] === undefined || !Number.isSafeInteger(length) || !h.etag)
    return undefined;
  const versionId = h['x-amz-version-id'];
  const modified = h['last-modified'];
  const sha256 = h['x-amz-meta-sha256'];
  return objectInfo(key, {
    ContentLength: length,
    ETag: h.etag,
    VersionId: typeof versionId === 'string' ? versionId : undefined,
    LastModified: modified === undefined ? undefined : httpDate(modified),
    Metadata: typeof sha256 === 'string' ? { sha256 } : undefined,
  });
}

/** HTTP's preferred date format (RFC 9110 §5.6.7), as S3 sends Last-Modified. */
const IMF_FIXDATE =
  /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d\d) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) (\d\d):(\d\d):(\d\d) GMT$/;
const MONTHS = 'JanFebMarAprMayJunJulAugSepOctNovDec';

/**
 * The Date of an HTTP date header. An IMF-fixdate (what S3 sends) is read by {@link IMF_FIXDATE}
 * and `Date.UTC`; anything else by `new Date`, whose general parser cost a few microseconds per
 * GET here.
 */
export function httpDate(text: string): Date {
  const m = IMF_FIXDATE.exec(text);
  if (m === null) return new Date(text);
  const [, day, month, year, hours, minutes, seconds] = m as unknown as string[];
  return new Date(
    Date.UTC(
      Number(year),
      MONTHS.indexOf(month as string) / 3,
      Number(day),
      Number(hours),
      Number(minutes),
      Number(seconds),
    ),
  );
}
