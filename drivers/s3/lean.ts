/**
 * The lean GET path: GetObject sent without the SDK's command stack, on the SDK's own pieces.
 *
 * Why: a folder fetch is one GetObject per file, and for small objects the SDK's per-command
 * machinery (middleware stack resolved per command, endpoint ruleset parameters, schema-driven
 * serde, retry bookkeeping) costs about 2–3 ms of CPU per request — more than the request itself
 * on a LAN (measured in docs/performance.md: a 1,000-file fetch spent ~3 s of CPU in the SDK).
 * Signing the same request with the same signer and sending it with `node:http` costs ~0.3 ms.
 *
 * What stays the SDK's, so there is still one source of truth:
 * - the endpoint: taken from the SDK's own resolution (its endpoint ruleset) of an earlier
 *   GetObject or HeadObject to the same bucket, recorded by a middleware on the store's client;
 *   until the SDK has sent one of those to a bucket, GETs to it go through the SDK;
 * - signing and credentials: the client's own signer (`config.signer`), hence its credential
 *   provider, with the client's clock-skew offset;
 * - failures: a lean request that fails before its body starts (any status but 200/206, a network
 *   error, missing credentials, an abort) is handed to the SDK, whose retries, abort handling
 *   and the driver's one error mapping then decide. A failure after the body started surfaces
 *   on the body stream, as with the SDK.
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
 * Commands whose resolved endpoint is the one GetObject uses for the same bucket (object-level
 * operations with the same endpoint parameters): a single-file fetch learns it from its HEAD.
 */
const LEARN_FROM = new Set(['GetObjectCommand', 'HeadObjectCommand']);

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

/** Sends GetObject requests lean once the SDK has shown the way to a bucket. See the module comment. */
export class LeanGetter {
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
        if (LEARN_FROM.has(context.commandName ?? '') && typeof bucket === 'string') {
          this.learn(bucket, (context as { endpointV2?: ResolvedEndpoint }).endpointV2);
        }
        return next(args);
      },
      { step: 'build', name: 'provcatLeanGetRoute', override: true },
    );
  }

  /** Record the SDK's endpoint for a bucket (once); a bucket it cannot serve is marked `null`. */
  private learn(bucket: string, endpoint: ResolvedEndpoint | undefined): void {
    if (this.routes.has(bucket)) return;
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
      this.routes.set(bucket, null);
      this.debug(`lean get: bucket ${bucket} stays on the SDK path (endpoint or auth scheme)`);
      return;
    }
    this.routes.set(bucket, {
      url,
      signingRegion: scheme.signingRegion as string,
      signingName: scheme.signingName as string,
    });
    this.debug(`lean get: bucket ${bucket} via ${url.origin}${url.pathname}`);
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
    const route = this.routes.get(bucket);
    if (!route) return undefined;
    const { signal } = options;
    try {
      const base = route.url.pathname.endsWith('/') ? route.url.pathname : `${route.url.pathname}/`;
      const path = `${base}${encodeKeyPath(key)}`;
      const query: Record<string, string> =
        options.versionId === undefined ? {} : { versionId: options.versionId };
      const headers: Record<string, string> = {
        host: route.url.host,
        'x-amz-content-sha256': EMPTY_SHA256,
      };
      if (options.range) headers.range = `bytes=${options.range.start}-${options.range.end - 1}`;
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
      const search =
        options.versionId === undefined ? '' : `?versionId=${encodeQueryValue(options.versionId)}`;
      const res = await send(route.url, `${path}${search}`, signed.headers, {
        agent: route.url.protocol === 'https:' ? this.agents.https : this.agents.http,
        timeoutMs: this.socketTimeoutMs,
        signal,
      });
      if (res.statusCode === 200 || res.statusCode === 206) return res;
      res.resume();
      this.debug(`lean get ${bucket}/${key}: HTTP ${res.statusCode}; asking the SDK`);
      return undefined;
    } catch (error) {
      // An abort goes to the SDK path too, which raises it the way every S3 call does.
      if (!signal?.aborted)
        this.debug(`lean get ${bucket}/${key}: ${String(error)}; asking the SDK`);
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
function send(
  url: URL,
  path: string,
  headers: Record<string, string>,
  options: { agent: HttpAgent | HttpsAgent; timeoutMs: number; signal: AbortSignal | undefined },
): Promise<IncomingMessage> {
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
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
