/**
 * A Google Cloud Storage test server: `node:http` on 127.0.0.1, in memory, speaking the JSON
 * API the way @google-cloud/storage 7.22 uses it, plus V4 signed-URL reads.
 *
 * Why a server of our own: no GCS emulator runs on these machines (../shared/SERVERS.md), and
 * the ones that exist elsewhere lack what provcat depends on (generations, `versions=true`,
 * `ifGenerationMatch`, 308 resumable status). Tests reach it only through the official SDK over
 * HTTP — never by calling into this module's state — so what passes here is what the SDK does
 * against a server that follows the documented protocol. Where the documentation leaves room,
 * the choice is written down in docs/testing-servers.md and in the module that makes it.
 *
 * Layout: routing and the request log here; HTTP body/reply handling and faults in
 * http-layer.ts and faults.ts; the state and its rules in store.ts; handlers in json-api.ts,
 * uploads.ts, resumable.ts, rewrite.ts, xml-api.ts; listing, media ranges, multipart bodies,
 * CRC32C and signed-URL checks each in their own file; the parameters, headers and body fields
 * each route accepts, and the 400s for the rest, in strict.ts.
 *
 * Paths accepted: `/storage/v1/b/...` (the SDK with `apiEndpoint`) and `/b/...` (the SDK with
 * `STORAGE_EMULATOR_HOST`), `/upload/storage/v1/b/B/o` for uploads, `/download/storage/v1/...`
 * for media, and `/B/O?X-Goog-Signature=...` for signed URLs. Every other method or path
 * answers one 501 `notImplemented` in the JSON error shape.
 *
 * @module
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError, invalid } from './api-error.js';
import { Faults } from './faults.js';
import { concatBody, errorReply, readBody, writeReply } from './http-layer.js';
import {
  composeObject,
  deleteBucket,
  deleteObject,
  getBucket,
  getObject,
  insertBucket,
  listBuckets,
  listObjectsRoute,
  patchBucket,
  patchObject,
  type RequestContext,
} from './json-api.js';
import type { Reply } from './reply.js';
import {
  countRequests,
  type RecordFilter,
  type RequestRecord,
  uploadBytesReceived,
} from './request-log.js';
import {
  type PartialChunkPolicy,
  type UnalignedChunkPolicy,
  type UploadSessionInfo,
  UploadSessions,
} from './resumable.js';
import { Rewrites } from './rewrite.js';
import { isSignedUrlQuery, type SigningKey } from './signed-url.js';
import { Store } from './store.js';
import { checkHeaders, checkRequest, type RouteName } from './strict.js';
import { startUpload } from './uploads.js';
import { signedRead } from './xml-api.js';

export type { FaultRule, FaultSpec, MangleMode } from './faults.js';
export type { RecordFilter, RequestRecord } from './request-log.js';
export type { UploadSessionInfo } from './resumable.js';
export type { SigningKey } from './signed-url.js';

/** Options of {@link startGcsServer}; every one but `port` and `host` is also a live setting. */
export interface GcsServerOptions {
  /** Port to listen on; 0 (default) picks a free one. */
  port?: number;
  /** Address to listen on (default 127.0.0.1). */
  host?: string;
  /** Public key(s) V4 signed URLs must verify with (RSA, PEM or KeyObject). */
  signingPublicKey?: SigningKey | readonly SigningKey[];
  /** When set, a signed URL's credential must name this account. */
  signingClientEmail?: string;
  /** Answer 401 to JSON-API requests without an `Authorization` header (default false). */
  requireAuth?: boolean;
  /** At most this many bytes per rewrite call, so large rewrites need several (default: no limit). */
  rewriteBytesPerCall?: number;
  /** A non-final resumable chunk not ending on 256 KiB: 400 (default) or commit the aligned part. */
  unalignedChunk?: UnalignedChunkPolicy;
  /** What is kept of a resumable chunk whose body was cut off (default: up to the last 256 KiB). */
  partialChunkCommit?: PartialChunkPolicy;
  /** The server's clock in milliseconds (signed-URL expiry, timestamps, generations). */
  now?: () => number;
}

/** The server's settings, changeable while it runs (the fault knobs are in `faults`). */
export interface GcsServerSettings {
  signingKeys: SigningKey[];
  signingClientEmail: string | undefined;
  requireAuth: boolean;
  rewriteBytesPerCall: number | undefined;
  unalignedChunk: UnalignedChunkPolicy;
  partialChunkCommit: PartialChunkPolicy;
  now: () => number;
  /** Buckets every request to which answers this status (403 `forbidden` or 401 `required`). */
  deniedBuckets: Map<string, 401 | 403>;
}

/** A running test server. */
export interface GcsTestServer {
  /** `http://127.0.0.1:PORT`, for the SDK's `apiEndpoint` or `STORAGE_EMULATOR_HOST`. */
  readonly url: string;
  readonly port: number;
  /** Every request so far, in arrival order, each added once it is over. */
  readonly log: RequestRecord[];
  /** Empties the log. */
  clearLog(): void;
  /** How many logged requests pass the filter. */
  countRequests(filter?: RecordFilter): number;
  /** Upload body bytes received by resumable sessions (one, or all). */
  uploadBytesReceived(uploadId?: string): number;
  /** Fault rules: add, list, remove, clear — at any time. */
  readonly faults: Faults;
  /** Live settings. */
  readonly settings: GcsServerSettings;
  /** Every resumable session opened, with its state and committed size. */
  sessions(): UploadSessionInfo[];
  /** Rewrites waiting for a call with their token. */
  pendingRewrites(): number;
  /** Every request about `bucket` answers `status` (403 by default) until {@link allowBucket}. */
  denyBucket(bucket: string, status?: 401 | 403): void;
  /** Ends {@link denyBucket}. */
  allowBucket(bucket: string): void;
  /** Stops listening and closes every connection. */
  close(): Promise<void>;
}

/** What a request resolves to before its body is read; `name` says which parameters it takes. */
type Route =
  | {
      kind: 'run';
      name: RouteName | 'signed';
      bucket: string | undefined;
      xml: boolean;
      run: (ctx: RequestContext) => Reply;
    }
  | { kind: 'session'; name: 'uploads.session'; uploadId: string; cancel: boolean };

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch (error) {
    throw invalid(`Malformed percent-encoding in the path (${(error as Error).message}).`);
  }
}

/**
 * The one answer to every request the server does not implement: 501 `notImplemented`, in the
 * JSON API's error shape, naming the method and path.
 */
function notImplemented(method: string, rawPath: string): ApiError {
  return new ApiError(
    501,
    'notImplemented',
    `${method} ${rawPath} is not implemented by the GCS test server (docs/testing-servers.md lists what it implements).`,
    { xmlCode: 'NotImplemented' },
  );
}

/** The server factory; see {@link startGcsServer}. */
class GcsServer {
  readonly log: RequestRecord[] = [];
  readonly faults = new Faults();
  readonly settings: GcsServerSettings;
  readonly store: Store;
  readonly uploads: UploadSessions;
  readonly rewrites = new Rewrites();

  constructor(options: GcsServerOptions) {
    const keys = options.signingPublicKey;
    this.settings = {
      signingKeys: keys === undefined ? [] : Array.isArray(keys) ? [...keys] : [keys as SigningKey],
      signingClientEmail: options.signingClientEmail,
      requireAuth: options.requireAuth ?? false,
      rewriteBytesPerCall: options.rewriteBytesPerCall,
      unalignedChunk: options.unalignedChunk ?? 'reject',
      partialChunkCommit: options.partialChunkCommit ?? 'quantum',
      now: options.now ?? Date.now,
      deniedBuckets: new Map(),
    };
    this.store = new Store(() => this.settings.now());
    this.uploads = new UploadSessions(this.store, {
      unalignedChunk: () => this.settings.unalignedChunk,
      partialChunkCommit: () => this.settings.partialChunkCommit,
      now: () => this.settings.now(),
    });
  }

  /**
   * Resolves method and path to a handler; throws 501 for every method and path not served.
   * Object names are one path segment, percent-encoded as every client sends them (a `/` in a
   * name is `%2F`), so `/o/NAME/acl` is a sub-resource (not implemented), never a name.
   */
  private route(method: string, rawPath: string, rawQuery: string, query: URLSearchParams): Route {
    const unserved = () => notImplemented(method, rawPath);
    if (isSignedUrlQuery(query)) {
      const [bucketRaw = '', ...rest] = rawPath.slice(1).split('/');
      const bucket = decodeSegment(bucketRaw);
      const name = rest.map(decodeSegment).join('/');
      return {
        kind: 'run',
        name: 'signed',
        bucket,
        xml: true,
        run: (ctx) =>
          signedRead(
            ctx.store,
            { method, rawPath, rawQuery, headers: ctx.headers },
            bucket,
            name,
            this.settings.signingKeys,
            this.settings.now(),
            this.settings.signingClientEmail,
          ),
      };
    }
    let area: 'api' | 'upload' | 'download';
    let rest: string;
    if (rawPath.startsWith('/storage/v1/')) {
      area = 'api';
      rest = rawPath.slice('/storage/v1/'.length);
    } else if (rawPath.startsWith('/upload/storage/v1/')) {
      area = 'upload';
      rest = rawPath.slice('/upload/storage/v1/'.length);
    } else if (rawPath.startsWith('/download/storage/v1/')) {
      area = 'download';
      rest = rawPath.slice('/download/storage/v1/'.length);
    } else if (rawPath === '/b' || rawPath.startsWith('/b/')) {
      area = 'api';
      rest = rawPath.slice(1);
    } else {
      throw unserved(); // the XML API without a signature, and everything else
    }
    const s = rest.split('/').map(decodeSegment);
    if (s[0] !== 'b' || s.some((segment, i) => segment === '' && i > 0)) throw unserved();
    const bucket = s[1];
    const run = (name: RouteName, fn: (ctx: RequestContext) => Reply): Route => ({
      kind: 'run',
      name,
      bucket,
      xml: false,
      run: fn,
    });
    const objectName = s[3];

    if (area === 'upload') {
      if (bucket === undefined || s[2] !== 'o' || s.length !== 3) throw unserved();
      const uploadId = query.get('upload_id');
      if (uploadId !== null) {
        if (method === 'PUT' || method === 'POST') {
          return { kind: 'session', name: 'uploads.session', uploadId, cancel: false };
        }
        if (method === 'DELETE') {
          return { kind: 'session', name: 'uploads.session', uploadId, cancel: true };
        }
        throw unserved();
      }
      if (method !== 'POST') throw unserved();
      return run('objects.insert', (ctx) => startUpload(ctx, bucket, this.uploads));
    }
    if (area === 'download') {
      if (bucket === undefined || s[2] !== 'o' || objectName === undefined || s.length !== 4) {
        throw unserved();
      }
      if (method !== 'GET' && method !== 'HEAD') throw unserved();
      query.set('alt', 'media');
      return run('objects.get', (ctx) => getObject(ctx, bucket, objectName));
    }

    if (bucket === undefined) {
      if (method === 'GET') return run('buckets.list', listBuckets);
      if (method === 'POST') return run('buckets.insert', insertBucket);
      throw unserved();
    }
    if (s.length === 2) {
      if (method === 'GET' || method === 'HEAD') {
        return run('buckets.get', (ctx) => getBucket(ctx, bucket));
      }
      if (method === 'PATCH' || method === 'PUT') {
        return run('buckets.patch', (ctx) => patchBucket(ctx, bucket));
      }
      if (method === 'DELETE') return run('buckets.delete', (ctx) => deleteBucket(ctx, bucket));
      throw unserved();
    }
    if (s[2] !== 'o') throw unserved();
    if (s.length === 3) {
      if (method === 'GET') return run('objects.list', (ctx) => listObjectsRoute(ctx, bucket));
      if (method === 'POST') throw invalid('Uploads go to /upload/storage/v1/b/BUCKET/o.');
      throw unserved();
    }
    const name = objectName as string;
    if (s.length === 4) {
      if (method === 'GET' || method === 'HEAD') {
        return run('objects.get', (ctx) => getObject(ctx, bucket, name));
      }
      if (method === 'PATCH' || method === 'PUT') {
        return run('objects.patch', (ctx) => patchObject(ctx, bucket, name));
      }
      if (method === 'DELETE')
        return run('objects.delete', (ctx) => deleteObject(ctx, bucket, name));
      throw unserved();
    }
    if (method !== 'POST') throw unserved();
    const verb = s[4];
    if (verb === 'compose' && s.length === 5) {
      return run('objects.compose', (ctx) => composeObject(ctx, bucket, name));
    }
    if (
      (verb === 'rewriteTo' || verb === 'copyTo') &&
      s[5] === 'b' &&
      s[7] === 'o' &&
      s.length === 9
    ) {
      const src = { bucket, name };
      const dest = { bucket: s[6] as string, name: s[8] as string };
      const copy = verb === 'copyTo';
      return run(copy ? 'objects.copy' : 'objects.rewrite', (ctx) =>
        this.rewrites.call(ctx, src, dest, this.settings.rewriteBytesPerCall, copy),
      );
    }
    throw unserved();
  }

  /** 401/403 when the settings deny this request. */
  private checkAccess(
    bucket: string | undefined,
    xml: boolean,
    headers: IncomingMessage['headers'],
  ): void {
    if (!xml && this.settings.requireAuth && headers.authorization === undefined) {
      throw new ApiError(
        401,
        'required',
        'Anonymous caller does not have storage.objects.get access to the Google Cloud Storage object.',
        { xmlCode: 'AuthenticationRequired' },
      );
    }
    const denied = bucket === undefined ? undefined : this.settings.deniedBuckets.get(bucket);
    if (denied === 401) {
      throw new ApiError(401, 'required', 'Login Required.', { xmlCode: 'AuthenticationRequired' });
    }
    if (denied === 403) {
      throw new ApiError(
        403,
        'forbidden',
        `The caller does not have permission on bucket ${bucket}.`,
        { xmlCode: 'AccessDenied' },
      );
    }
  }

  /** Handles one request, end to end, and logs it. */
  async handle(req: IncomingMessage, res: ServerResponse, port: number): Promise<void> {
    const started = performance.now();
    const method = (req.method ?? 'GET').toUpperCase();
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const rawPath = q < 0 ? url : url.slice(0, q);
    const rawQuery = q < 0 ? '' : url.slice(q + 1);
    const query = new URLSearchParams(rawQuery);
    const base = `http://${req.headers.host ?? `127.0.0.1:${port}`}`;
    const headers: Record<string, string> = {};
    for (const [key, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[key] = Array.isArray(value) ? value.join(', ') : value;
    }
    const uploadId = rawPath.startsWith('/upload/')
      ? (query.get('upload_id') ?? undefined)
      : undefined;
    const media =
      (method === 'GET' || method === 'HEAD') &&
      (query.get('alt') === 'media' || rawPath.startsWith('/download/') || isSignedUrlQuery(query));
    const plan = this.faults.plan({ method, path: rawPath, query, headers: req.headers, media });
    const record: RequestRecord = {
      method,
      path: rawPath,
      query: Object.fromEntries(query.entries()),
      headers,
      bodyBytes: 0,
      responseBytes: 0,
      status: 0,
      time: this.settings.now(),
      durationMs: 0,
      uploadId,
      faults: plan.fired,
    };

    let reply: Reply | undefined;
    let xml = isSignedUrlQuery(query);
    try {
      if (plan.delayMs > 0) await sleep(plan.delayMs);
      const body = await readBody(req, plan.dropRequestAfter);
      record.bodyBytes = body.bytes;
      const route = this.route(method, rawPath, rawQuery, query);
      if (route.kind === 'run') xml = route.xml;
      const bucket = route.kind === 'run' ? route.bucket : this.uploads.bucketOf(route.uploadId);
      if (!body.aborted) {
        this.checkAccess(bucket, xml, req.headers);
        if (route.name === 'signed') checkHeaders('signed URL', req.headers);
        else checkRequest(route.name, query, req.headers, route.name === 'objects.get');
        if (plan.status !== undefined) {
          const { status, reason, message } = plan.status;
          throw new ApiError(status, reason, message);
        }
      }
      const ctx: RequestContext = {
        store: this.store,
        base,
        method,
        query,
        headers: req.headers,
        body: body.aborted ? Buffer.alloc(0) : concatBody(body),
      };
      if (route.kind === 'session') {
        if (route.cancel) reply = body.aborted ? undefined : this.uploads.cancel(route.uploadId);
        else reply = this.uploads.put(route.uploadId, base, req.headers, body);
      } else if (!body.aborted) {
        reply = route.run(ctx);
      }
    } catch (error) {
      if (error instanceof ApiError) {
        reply = errorReply(error, xml);
      } else {
        process.stderr.write(`[gcs test server] ${method} ${url}: ${(error as Error).stack}\n`);
        reply = errorReply(
          new ApiError(500, 'backendError', `Test server bug: ${(error as Error).message}`),
          xml,
        );
      }
    }
    if (reply !== undefined && !res.destroyed && !req.socket.destroyed) {
      record.responseBytes = await writeReply(req, res, reply, {
        dropResponseAfter: plan.dropResponseAfter,
        mangle: plan.mangle,
      });
      record.status = res.headersSent ? res.statusCode : 0;
    } else if (!res.destroyed) {
      res.destroy();
    }
    record.durationMs = performance.now() - started;
    this.log.push(record);
  }
}

/**
 * Starts a GCS test server on 127.0.0.1 (`options.port`, default a free port) and resolves
 * once it listens. The server holds everything in memory and starts empty: make buckets with
 * the SDK's `createBucket` (`versioning: { enabled: true }` for a versioned one).
 */
export async function startGcsServer(options: GcsServerOptions = {}): Promise<GcsTestServer> {
  const core = new GcsServer(options);
  let port = 0;
  const http = createServer((req, res) => {
    core.handle(req, res, port).catch((error: unknown) => {
      process.stderr.write(`[gcs test server] unhandled: ${(error as Error).stack}\n`);
      res.destroy();
    });
  });
  // Large uploads and slow test clients: no server-side request timeout.
  http.requestTimeout = 0;
  http.headersTimeout = 60_000;
  http.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      http.off('error', reject);
      resolve();
    });
  });
  port = (http.address() as AddressInfo).port;
  const host = options.host ?? '127.0.0.1';
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return {
    url,
    port,
    log: core.log,
    clearLog: () => {
      core.log.length = 0;
    },
    countRequests: (filter) => countRequests(core.log, filter),
    uploadBytesReceived: (uploadId) => uploadBytesReceived(core.log, uploadId),
    faults: core.faults,
    settings: core.settings,
    sessions: () => core.uploads.list(),
    pendingRewrites: () => core.rewrites.inProgress,
    denyBucket: (bucket, status = 403) => {
      core.settings.deniedBuckets.set(bucket, status);
    },
    allowBucket: (bucket) => {
      core.settings.deniedBuckets.delete(bucket);
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        http.close((error) => (error === undefined ? resolve() : reject(error)));
        http.closeAllConnections();
      }),
  };
}
