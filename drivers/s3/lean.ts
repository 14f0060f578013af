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
 * schema-driven deserializer); {@link parseListPage} reads the one shape S3 sends in ~5 ms.
 * And loading `@aws-sdk/client-s3` costs ~0.25 s of CPU per process, more than a whole unchanged
 * refetch of 1,000 files otherwise: commands that only read (stat, ls, fetch, refetch) never
 * load it while every answer is the plain one.
 *
 * What stays the SDK's, so there is still one source of truth:
 * - signing: `SignatureV4` of `@smithy/signature-v4`, the signer the S3 client itself wraps, with
 *   S3's settings (no double escaping of the path), called member by member
 *   ({@link signFromPieces}); the clock-skew offset the client measured, once a client exists;
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
 * @module
 */
import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import { type Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import type { Agent as HttpsAgent } from 'node:https';
import type { S3Client } from '@aws-sdk/client-s3';
import type { ByteRange } from '../../src/contract/primitives.js';
import { EMPTY_SHA256, hmacSha256Hex, sha256Hex } from '../../src/core/digest.js';
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
import type { RouteHints } from './route-store.js';

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

/**
 * The commands whose resolved endpoint a lean request reuses, by kind: object requests (a
 * single-file fetch learns the route from its HEAD) and listings.
 */
const ROUTE_KIND: Record<string, 'object' | 'bucket'> = {
  GetObjectCommand: 'object',
  HeadObjectCommand: 'object',
  ListObjectsV2Command: 'bucket',
  ListObjectVersionsCommand: 'bucket',
};

/** Where the SDK sends a bucket's requests of one kind, and how it signs them. */
export interface Route {
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

/** What the lean path needs of a signer: the SDK's `SignatureV4.sign`. */
export interface Signer {
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

/** A whole read's failure after the response head: the transfer's own error, or an abort. */
function isAfterHead(error: unknown): boolean {
  return error instanceof StoreError || isAbort(error);
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

/**
 * One entry of a ListObjectVersions page, in the page's own order (key order, newest first
 * within a key, versions and delete markers interleaved as the store sent them). The key is as
 * sent (URL-encoded with `encoding-type=url`).
 */
export interface LeanVersionEntry {
  kind: 'version' | 'marker';
  key: string;
  versionId: string;
  isLatest: boolean;
  lastModified: Date | undefined;
  /** Bytes of a version; `undefined` for a delete marker. */
  size: number | undefined;
  /** The ETag of a version as sent (quoted); `undefined` for a delete marker. */
  etag: string | undefined;
}

/** One page of a ListObjectVersions listing, as {@link parseVersionPage} reads it. */
export interface LeanVersionPage {
  encodingType: string | undefined;
  entries: LeanVersionEntry[];
  isTruncated: boolean;
  nextKeyMarker: string | undefined;
  nextVersionIdMarker: string | undefined;
}

/** Options of one lean version listing page. */
export interface LeanVersionOptions {
  prefix: string;
  keyMarker?: string | undefined;
  versionIdMarker?: string | undefined;
  /** At most this many entries (the store's default, 1,000, when absent). */
  maxKeys?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** What a {@link LeanPath} is built from (the store's configuration and HTTP agents). */
export interface LeanPathOptions {
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
  /** The route of a bucket known without asking the SDK ({@link pathStyleRoute}), if any. */
  fixedRoute?: ((bucket: string) => Route | undefined) | undefined;
  /**
   * Routes learned by earlier processes (route-store.ts), read on the first request that has
   * no route; learned routes are saved to it. Only for routes that are not fixed.
   */
  stored?: RouteHints | undefined;
  /** The signer for a route's signing name and region ({@link sdkSignerFactory}). */
  signer(route: Route): Promise<Signer>;
  /** Milliseconds to add to the local clock: the skew the SDK client measured, once there is one. */
  clockOffset(): number;
  debug(message: string): void;
}

/**
 * The route the SDK's endpoint ruleset resolves for a bucket at an explicit endpoint with
 * path-style addressing: `endpoint` + `/bucket/`, signed with SigV4 as `s3` in `region`.
 * `undefined` for a bucket name the ruleset treats specially (anything but a plain DNS-style
 * name: ARNs, access points) and for an endpoint with a query or credentials in it.
 */
export function pathStyleRoute(
  endpoint: string,
  region: string,
  bucket: string,
): Route | undefined {
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) return undefined;
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return undefined;
  }
  if (
    (url.protocol !== 'http:' && url.protocol !== 'https:') ||
    url.search !== '' ||
    url.hash !== '' ||
    url.username !== '' ||
    url.password !== ''
  ) {
    return undefined;
  }
  const base = url.pathname.endsWith('/') ? url.pathname.slice(0, -1) : url.pathname;
  url.pathname = `${base}/${bucket}`;
  return { url, signingRegion: region, signingName: 's3' };
}

/** The bytes of a buffer or view, as a Uint8Array over the same memory. */
function bytesOf(data: ArrayBuffer | ArrayBufferView): Uint8Array {
  return data instanceof ArrayBuffer
    ? new Uint8Array(data)
    : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The SHA-256 (and HMAC-SHA-256) constructor the signer takes, on node:crypto. */
export class Sha256 {
  private hash: Hash | Hmac;
  constructor(private readonly secret?: string | ArrayBuffer | ArrayBufferView) {
    this.hash = this.fresh();
  }
  private fresh(): Hash | Hmac {
    const s = this.secret;
    if (s === undefined) return createHash('sha256');
    return createHmac('sha256', typeof s === 'string' ? s : bytesOf(s));
  }
  update(data: string | ArrayBuffer | ArrayBufferView): void {
    // Strings go in as they are (UTF-8), bytes as a view: no copy per update.
    this.hash.update(typeof data === 'string' ? data : bytesOf(data));
  }
  async digest(): Promise<Uint8Array> {
    return this.hash.digest();
  }
  reset(): void {
    this.hash = this.fresh();
  }
}

/**
 * Signers built from the SDK's pieces, without the S3 client: `SignatureV4` (with S3's
 * `uriEscapePath: false`) over the SDK's default credential chain, resolved once and shared by
 * every route. Both modules are imported on first use (~0.1 s of CPU together, against ~0.25 s
 * for the client).
 */
export function sdkSignerFactory(): (route: Route) => Promise<Signer> {
  let modules:
    | Promise<[typeof import('@smithy/signature-v4'), Awaited<ReturnType<typeof credentialChain>>]>
    | undefined;
  const signers = new Map<string, Promise<Signer>>();
  return (route) => {
    const id = `${route.signingName}/${route.signingRegion}`;
    let signer = signers.get(id);
    if (!signer) {
      modules ??= Promise.all([import('@smithy/signature-v4'), credentialChain()]);
      const loading = modules;
      signer = loading.then(([sdk, credentials]) =>
        signFromPieces(
          sdk,
          cacheSigningKeys(
            new sdk.SignatureV4({
              credentials,
              region: route.signingRegion,
              service: route.signingName,
              sha256: Sha256,
              uriEscapePath: false,
              applyChecksum: false,
            }),
          ),
        ),
      );
      signers.set(id, signer);
      signer.catch(() => {
        signers.delete(id);
        modules = undefined;
      });
    }
    return signer;
  };
}

/** Resolved credentials, as the SDK's credential provider gives them. */
interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string | undefined;
}

/** The members of the SDK's `SignatureV4` that {@link signFromPieces} calls (protected in its types). */
interface SignerPieces {
  credentialProvider: () => Promise<Credentials>;
  validateResolvedCredentials(credentials: unknown): void;
  formatDate(date: Date): { longDate: string; shortDate: string };
  createCanonicalRequest(
    request: SignableRequest,
    canonicalHeaders: Record<string, string>,
    payloadHash: string,
  ): string;
  getCanonicalHeaderList(canonicalHeaders: Record<string, string>): string;
  getSigningKey(
    credentials: Credentials,
    region: string,
    shortDate: string,
    service: string,
  ): Promise<Uint8Array>;
}

/**
 * Sign the lean path's requests (GET and HEAD, no body, the payload hash in their
 * `x-amz-content-sha256` header) from the SDK signer's own pieces, without the async steps and
 * copies of its `sign` (they were 12 of a cold 1,000-file fetch's 56 MB of allocations, and
 * ~0.05 s of its CPU; docs/performance.md). Everything that decides what is signed stays the
 * SDK's: its credential provider, date format, scope, canonical headers (which headers are
 * signable, how values are trimmed), canonical request (path, query encoding, header order) and
 * signing-key derivation.
 * What is written here is SigV4's fixed frame around them: the string to sign (algorithm, date,
 * scope, the canonical request's SHA-256) and the Authorization header, exactly as the SDK's
 * `signRequest` builds them; test/drivers/s3-lean.test.ts checks the headers equal the SDK's `sign` for
 * every shape the lean path sends. A request this does not cover (no payload hash header, or a
 * header the SDK would drop and regenerate) and an SDK release without these members go to the
 * SDK's `sign` itself.
 */
export function signFromPieces(sdk: typeof import('@smithy/signature-v4'), signer: Signer): Signer {
  const p = signer as unknown as Partial<SignerPieces>;
  if (
    typeof p.credentialProvider !== 'function' ||
    typeof p.validateResolvedCredentials !== 'function' ||
    typeof p.formatDate !== 'function' ||
    typeof p.createCanonicalRequest !== 'function' ||
    typeof p.getCanonicalHeaderList !== 'function' ||
    typeof p.getSigningKey !== 'function'
  ) {
    return signer;
  }
  const pieces = p as SignerPieces;
  const algorithm = sdk.ALGORITHM_IDENTIFIER;
  const generated = new Set(sdk.GENERATED_HEADERS);
  // The SDK's `prepareRequest` would drop a generated header, and the payload hash is read here
  // by its lower-case name only.
  const covered = (headers: Record<string, string>): boolean => {
    for (const name in headers) {
      const lower = name.toLowerCase();
      if (generated.has(lower) || (lower === sdk.SHA256_HEADER && name !== lower)) return false;
    }
    return true;
  };
  // The SDK formats the signing date for every request (an ISO string, two regex replacements):
  // it depends only on the second, so requests signed within one second share it.
  let datedSecond = Number.NaN;
  let dated = { longDate: '', shortDate: '' };
  return {
    async sign(request, options) {
      const payloadHash = request.headers[sdk.SHA256_HEADER];
      if (payloadHash === undefined || !covered(request.headers)) {
        return signer.sign(request, options);
      }
      const { signingDate, signingRegion, signingService } = options;
      const credentials = await pieces.credentialProvider();
      pieces.validateResolvedCredentials(credentials);
      const second = Math.floor(signingDate.getTime() / 1000);
      if (second !== datedSecond) {
        dated = pieces.formatDate(signingDate);
        datedSecond = second;
      }
      const { longDate, shortDate } = dated;
      const scope = sdk.createScope(shortDate, signingRegion, signingService);
      const headers: Record<string, string> = { ...request.headers };
      headers[sdk.AMZ_DATE_HEADER] = longDate;
      if (credentials.sessionToken) headers[sdk.TOKEN_HEADER] = credentials.sessionToken;
      const signed = { ...request, headers };
      const canonicalHeaders = sdk.getCanonicalHeaders(signed);
      const canonical = pieces.createCanonicalRequest(signed, canonicalHeaders, payloadHash);
      const key = await pieces.getSigningKey(credentials, signingRegion, shortDate, signingService);
      const signature = hmacSha256Hex(
        key,
        `${algorithm}\n${longDate}\n${scope}\n${sha256Hex(canonical)}`,
      );
      headers[sdk.AUTH_HEADER] =
        `${algorithm} Credential=${credentials.accessKeyId}/${scope}, ` +
        `SignedHeaders=${pieces.getCanonicalHeaderList(canonicalHeaders)}, Signature=${signature}`;
      return { headers };
    },
  };
}

/** What {@link cacheSigningKeys} wraps: the SDK signer's derivation of a signing key. */
type DeriveKey = (
  credentials: Credentials,
  ...scope: (string | undefined)[]
) => Promise<Uint8Array>;

/**
 * Give the SDK's signer a cache of derived signing keys looked up by the values they are
 * derived from. The SDK's own cache is keyed by an HMAC of the credentials, which it computes
 * again for every request just to look the key up (an HMAC, a hex encoding and a string per
 * request, about a tenth of signing a GET here). A miss still derives through the SDK, so the
 * signature is the SDK's. The method is private in the SDK's types: if a release renames it,
 * this wraps nothing and the SDK signs exactly as before.
 */
export function cacheSigningKeys(signer: object): Signer {
  const s = signer as { getSigningKey?: DeriveKey };
  const derive = s.getSigningKey;
  if (typeof derive === 'function') {
    const keys = new Map<string, Promise<Uint8Array>>();
    s.getSigningKey = (credentials, ...scope) => {
      const { accessKeyId, secretAccessKey, sessionToken } = credentials;
      const id = [accessKeyId, secretAccessKey, sessionToken, ...scope].join('\n');
      let key = keys.get(id);
      if (key === undefined) {
        // Keys are per day and per credentials: a few at most, unless credentials rotate.
        if (keys.size >= 16) keys.clear();
        key = derive.call(signer, credentials, ...scope);
        keys.set(id, key);
        key.catch(() => keys.delete(id));
      }
      return key;
    };
  }
  return signer as Signer;
}

/** The SDK's default credential chain (memoized by the SDK: resolved once, refreshed on expiry). */
async function credentialChain() {
  const { defaultProvider } = await import('@aws-sdk/credential-provider-node');
  return defaultProvider({});
}

/** A route to send one request on; `hint` when it is a stored route not yet confirmed. */
interface Picked {
  id: string;
  route: Route;
  hint: boolean;
}

/** Sends requests lean on a known route. See the module comment. */
export class LeanPath {
  /** Fixed or learned in this process (or confirmed stored ones); `null`: the SDK's only. */
  private readonly routes = new Map<string, Route | null>();
  /** Stored routes not yet confirmed or refuted in this process. */
  private readonly hints = new Map<string, Route>();
  private hintsLoaded: Promise<void> | undefined;

  constructor(private readonly options: LeanPathOptions) {}

  private debug(message: string): void {
    this.options.debug(message);
  }

  /**
   * Learn routes from `client`'s own endpoint resolution: a middleware records, per bucket, the
   * endpoint and auth scheme of its first GetObject/HeadObject and ListObjectsV2.
   */
  watch(client: S3Client): void {
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

  /**
   * The route of a kind of request to a bucket: the fixed one, else a learned (or confirmed)
   * one, else a stored hint (the stored routes are read on the first such request).
   */
  private async pick(kind: 'object' | 'bucket', bucket: string): Promise<Picked | undefined> {
    const id = `${kind}:${bucket}`;
    const fixed = this.options.fixedRoute?.(bucket);
    if (fixed) return { id, route: fixed, hint: false };
    const known = this.routes.get(id);
    if (known !== undefined || this.routes.has(id)) {
      return known ? { id, route: known, hint: false } : undefined;
    }
    const stored = this.options.stored;
    if (!stored) return undefined;
    this.hintsLoaded ??= stored.load().then(
      (routes) => {
        for (const [k, route] of routes) if (!this.routes.has(k)) this.hints.set(k, route);
      },
      (error: unknown) => this.debug(`lean path: stored routes not read: ${String(error)}`),
    );
    await this.hintsLoaded;
    // The SDK may have learned the route meanwhile: that wins.
    const learned = this.routes.get(id);
    if (learned !== undefined || this.routes.has(id)) {
      return learned ? { id, route: learned, hint: false } : undefined;
    }
    const hint = this.hints.get(id);
    return hint && { id, route: hint, hint: true };
  }

  /** True while `picked` is a stored route that no request has confirmed in this process. */
  private unconfirmed(picked: Picked): boolean {
    return picked.hint && this.routes.get(picked.id) !== picked.route;
  }

  /**
   * Settle a stored route by the outcome of a request on it: a good answer confirms it (it is
   * used as a learned route from now on); a failure drops it here and on disk, so the SDK
   * answers (and its resolution is learned and stored). An abort says nothing about the route.
   */
  private settle(picked: Picked, ok: boolean, signal: AbortSignal | undefined): void {
    if (!picked.hint || signal?.aborted) return;
    const { id, route } = picked;
    if (this.hints.get(id) !== route) return; // settled by another request already
    this.hints.delete(id);
    if (this.routes.has(id)) return; // the SDK learned it meanwhile
    if (ok) {
      this.routes.set(id, route);
      this.debug(`lean path: stored route of ${id} confirmed (${route.url.href})`);
    } else {
      this.debug(`lean path: stored route of ${id} failed (${route.url.href}); dropped`);
      this.options.stored?.drop(id);
    }
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
    // What the SDK resolves replaces a stored hint, confirmed or not.
    this.hints.delete(id);
    if (!ok) {
      this.routes.set(id, null);
      this.debug(`lean path: ${kind} requests to ${bucket} stay on the SDK (endpoint or auth)`);
      this.options.stored?.drop(id);
      return;
    }
    const route: Route = {
      url,
      signingRegion: scheme.signingRegion as string,
      signingName: scheme.signingName as string,
    };
    this.routes.set(id, route);
    this.debug(`lean path: ${kind} requests to ${bucket} via ${url.origin}${url.pathname}`);
    this.options.stored?.save(id, route);
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
    const picked = await this.pick('object', bucket);
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
        this.settle(picked, true, options.signal);
        throw error;
      }
      if (!options.signal?.aborted) this.debug(`lean get ${bucket}/${key}: ${String(error)}`);
      this.settle(picked, false, options.signal);
      return undefined;
    }
    if (!isFallback(outcome)) {
      this.settle(picked, true, options.signal);
      return outcome as R;
    }
    if (outcome.fallback === 'refused') {
      this.settle(picked, true, options.signal);
      return 'larger';
    }
    if (outcome.fallback === 'status' && outcome.status === 404 && !this.unconfirmed(picked)) {
      throw new LeanHttpError(404, 'NotFound', `GET ${route.url.origin}: HTTP 404`);
    }
    this.debug(
      `lean get ${bucket}/${key}: ${outcome.fallback} (${outcome.detail}); asking the SDK`,
    );
    this.settle(picked, false, options.signal);
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
    const picked = await this.pick('object', bucket);
    if (!picked) return undefined;
    const route = picked.route;
    const query: Record<string, string> =
      options.versionId === undefined ? {} : { versionId: options.versionId };
    const res = await this.send('HEAD', route, encodeKeyPath(key), query, {}, options.signal);
    if (res !== undefined) {
      res.resume();
      if (res.statusCode === 200) {
        this.settle(picked, true, options.signal);
        return res.headers;
      }
      if (res.statusCode === 404 && !this.unconfirmed(picked)) {
        throw new LeanHttpError(404, 'NotFound', `HEAD ${route.url.origin}: HTTP 404`);
      }
      this.debug(`lean head ${bucket}/${key}: HTTP ${res.statusCode}; asking the SDK`);
    }
    this.settle(picked, false, options.signal);
    return undefined;
  }

  /**
   * One ListObjectsV2 page (`encoding-type=url`) sent lean and parsed, or `undefined` when the
   * SDK should ask for it instead (no route yet, any failure, a body that does not parse).
   * Never throws.
   */
  async listPage(bucket: string, options: LeanListOptions): Promise<LeanListPage | undefined> {
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
    options: LeanVersionOptions,
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
    const picked = await this.pick('bucket', bucket);
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
    this.settle(picked, page !== undefined, signal);
    return page;
  }

  /** Sign one request of `route` + `subpath` (already encoded): its request-target and headers. */
  private async sign(
    method: 'GET' | 'HEAD',
    route: Route,
    subpath: string,
    query: Record<string, string>,
    extraHeaders: Record<string, string>,
  ): Promise<{ target: string; headers: Record<string, string> }> {
    const parts = routeParts(route);
    const path = `${parts.base}${subpath}`;
    const headers: Record<string, string> = {
      ...extraHeaders,
      host: parts.host,
      'x-amz-content-sha256': EMPTY_SHA256,
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
   * Sign and send one GET or HEAD of `route` + `subpath` (already encoded) with node:http(s);
   * the response at its head, or `undefined` after a failure (logged) or an abort. Never throws.
   */
  private async send(
    method: 'GET' | 'HEAD',
    route: Route,
    subpath: string,
    query: Record<string, string>,
    extraHeaders: Record<string, string>,
    signal: AbortSignal | undefined,
  ): Promise<IncomingMessage | undefined> {
    try {
      const signed = await this.sign(method, route, subpath, query, extraHeaders);
      const agents = this.options.agents;
      return await request(method, route.url, signed.target, {
        headers: signed.headers,
        agent: route.url.protocol === 'https:' ? agents.https : agents.http,
        timeoutMs: this.options.socketTimeoutMs,
        signal,
      });
    } catch (error) {
      // An abort goes to the SDK path too, which raises it the way every S3 call does.
      if (!signal?.aborted) this.debug(`lean path ${route.url.origin}: ${String(error)}`);
      return undefined;
    }
  }
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

/** What signing a request on a route reads of its URL. */
interface RouteParts {
  /** The path every request of the route starts with, ending in `/`. */
  base: string;
  host: string;
  protocol: string;
  hostname: string;
  port: number | undefined;
}

const routePartsOf = new WeakMap<Route, RouteParts>();

/**
 * The URL parts of a route, read once per route: routes are never changed once made, and each
 * `URL` getter slices its text again (seven of them per request cost ~10 µs here).
 */
function routeParts(route: Route): RouteParts {
  let parts = routePartsOf.get(route);
  if (parts === undefined) {
    const { url } = route;
    parts = {
      base: url.pathname.endsWith('/') ? url.pathname : `${url.pathname}/`,
      host: url.host,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port === '' ? undefined : Number(url.port),
    };
    routePartsOf.set(route, parts);
  }
  return parts;
}

/** A query value encoded as SigV4's canonical query encodes it. */
function encodeQueryValue(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/** One GET or HEAD with node:http(s); resolves at the response head. */
function request(
  method: 'GET' | 'HEAD',
  url: URL,
  path: string,
  options: {
    headers: Record<string, string>;
    agent: HttpAgent | HttpsAgent;
    timeoutMs: number;
    signal: AbortSignal | undefined;
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
    req.end();
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

/** The text of an XML element's content: the five predefined entities and character references. */
function unescapeXml(text: string): string {
  if (!text.includes('&')) return text;
  // An ETag as S3 sends it: `&quot;<hex>[-<parts>]&quot;`, one per listed object.
  const q = '&quot;';
  if (
    text.startsWith(q) &&
    text.endsWith(q) &&
    text.indexOf('&', q.length) === text.length - q.length
  ) {
    return `"${text.slice(q.length, -q.length)}"`;
  }
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
 * `undefined` for anything else — another root element, a document cut short, a CDATA section
 * or comment, an object without a key, size or ETag — so the SDK reads it instead. S3 and
 * S3-compatible stores send this one flat shape; the checks keep a surprise from being misread.
 */
export function parseListPage(xml: string): LeanListPage | undefined {
  const root = xml.indexOf('<ListBucketResult');
  if (root < 0 || !xml.trimEnd().endsWith('</ListBucketResult>')) return undefined;
  if (xml.includes('<![CDATA[') || xml.includes('<!--')) return undefined;
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

/**
 * Read a ListObjectVersions answer (`ListVersionsResult`): its versions and delete markers in
 * document order, truncation and next markers, keys left URL-encoded as sent. Returns
 * `undefined` for anything else — another root element, a document cut short, a CDATA section
 * or comment, an entry without a key, version ID or IsLatest, a version without a size or
 * ETag — so the SDK reads it instead (and history.ts recovers the order).
 */
export function parseVersionPage(xml: string): LeanVersionPage | undefined {
  const root = xml.indexOf('<ListVersionsResult');
  if (root < 0 || !xml.trimEnd().endsWith('</ListVersionsResult>')) return undefined;
  if (xml.includes('<![CDATA[') || xml.includes('<!--')) return undefined;
  const entries: LeanVersionEntry[] = [];
  // Versions and delete markers in document order (`<VersionId>` does not match).
  const tags = /<(Version|DeleteMarker)>/g;
  for (let m = tags.exec(xml); m !== null; m = tags.exec(xml)) {
    const kind = m[1] === 'Version' ? 'version' : 'marker';
    const start = m.index + m[0].length;
    const end = xml.indexOf(`</${m[1]}>`, start);
    if (end < 0) return undefined;
    tags.lastIndex = end;
    const key = element(xml, 'Key', start, end);
    const versionId = element(xml, 'VersionId', start, end);
    const latest = element(xml, 'IsLatest', start, end);
    const modified = element(xml, 'LastModified', start, end);
    if (key === undefined || versionId === undefined) return undefined;
    if (latest !== 'true' && latest !== 'false') return undefined;
    let size: number | undefined;
    let etag: string | undefined;
    if (kind === 'version') {
      const text = element(xml, 'Size', start, end);
      etag = element(xml, 'ETag', start, end);
      if (text === undefined || etag === undefined || !/^\d+$/.test(text)) return undefined;
      size = Number(text);
    }
    entries.push({
      kind,
      key,
      versionId,
      isLatest: latest === 'true',
      lastModified: modified === undefined ? undefined : new Date(modified),
      size,
      etag,
    });
  }
  // The top-level fields, looked up with the entries cut out (a key cannot hide a tag).
  const outside = xml.replace(/<(Version|DeleteMarker|CommonPrefixes)>[\s\S]*?<\/\1>/g, '');
  const truncated = element(outside, 'IsTruncated', 0, outside.length);
  if (truncated !== 'true' && truncated !== 'false') return undefined;
  return {
    encodingType: element(outside, 'EncodingType', 0, outside.length),
    entries,
    isTruncated: truncated === 'true',
    nextKeyMarker: element(outside, 'NextKeyMarker', 0, outside.length),
    nextVersionIdMarker: element(outside, 'NextVersionIdMarker', 0, outside.length),
  };
}
