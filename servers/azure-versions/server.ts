/**
 * A wire-level Azure Blob server with blob versioning, for testing Azure clients through the
 * official SDK over real HTTP: `startAzureVersionsServer()`.
 *
 * Why it exists: Azurite, the only Azure emulator that runs here, has no blob versioning and
 * silently serves, deletes or copies the current blob for any `versionid=`. A versioned store
 * tested against it passes when it should fail. This server implements the part of the Blob
 * REST API a storage driver uses, on an account where versioning is on for every container, from
 * Microsoft's REST reference and what SDK 12.32 sends (see docs/testing-servers.md):
 * containers; Put Blob; Put Block / Put Block List / Get Block List; Get Blob with ranges;
 * Get Blob Properties; Delete Blob; Copy Blob, Copy Blob From URL and Put Blob From URL; Set Blob
 * Metadata / Properties; List Blobs flat and hierarchical with `include=versions`; `versionid=`
 * on reads, deletes and copy sources; conditional headers; Shared Key and SAS authorization.
 * Anything else it refuses with 501 `NotImplemented` and a message, never with a guess.
 *
 * State lives in memory for the life of the server; the server listens on 127.0.0.1 only and
 * knows one account, `devstoreaccount1`, with the development key.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  DEV_ACCOUNT_KEY,
  DEV_ACCOUNT_NAME,
  devBlobEndpoint,
  devConnectionString,
} from '../azure-dev-account.js';
import {
  copyBlob,
  deleteBlob,
  getBlob,
  getBlockList,
  putBlob,
  putBlock,
  putBlockList,
  setBlobMetadata,
  setBlobProperties,
} from './blob-ops.js';
import {
  createContainer,
  deleteContainer,
  getAccountInfo,
  getContainerProperties,
  listBlobsOp,
  listContainersOp,
} from './container-ops.js';
import { type Fault, Faults, type LogEntry, type OperationName, RequestLog } from './faults.js';
import { type OpContext, type Reply, type ServerSettings, ServiceError } from './reply.js';
import { checkSas, hasSas } from './sas.js';
import { sharedKeyProblem } from './shared-key.js';
import { AccountState } from './state.js';
import { errorBody } from './xml.js';

export type { ArmedFault, Fault, FaultMatch, LogEntry, OperationName } from './faults.js';
export type { ServerSettings } from './reply.js';

/** The service version this server answers with (what SDK 12.32 sends). */
const SERVICE_VERSION = '2026-04-06';

/** Request headers of features this server does not implement: refused, never ignored. */
const UNSUPPORTED_HEADERS: Array<[string, string]> = [
  ['x-ms-lease-id', 'leases'],
  ['x-ms-lease-action', 'leases'],
  ['x-ms-encryption-key', 'customer-provided keys'],
  ['x-ms-encryption-scope', 'encryption scopes'],
  ['x-ms-tags', 'blob index tags'],
  ['x-ms-access-tier', 'access tiers'],
  ['x-ms-immutability-policy-until-date', 'immutability policies'],
  ['x-ms-legal-hold', 'legal holds'],
  ['x-ms-structured-body', 'structured message bodies (contentChecksumAlgorithm StorageCrc64)'],
  ['x-ms-content-crc64', 'CRC64 checksums (use Content-MD5)'],
  ['x-ms-source-content-crc64', 'CRC64 checksums (use Content-MD5)'],
];

/** Options of {@link startAzureVersionsServer}. */
export interface AzureVersionsServerOptions {
  /** The port on 127.0.0.1; 0 (the default) picks a free one. */
  port?: number;
  /** The answer to a failed `If-None-Match: *` on a write (default 409); changeable later. */
  existsStatus?: 409 | 412;
  /** The largest request body accepted, in bytes (default 512 MiB); larger is a 413. */
  maxBodyBytes?: number;
}

/** A running versions server. */
export interface AzureVersionsServer {
  /** The blob endpoint, `http://127.0.0.1:PORT/devstoreaccount1`. */
  readonly url: string;
  /** A connection string for the development account with `BlobEndpoint` set to {@link url}. */
  readonly connectionString: string;
  readonly accountName: string;
  /** The development account's key (the well-known public one). */
  readonly accountKey: string;
  readonly port: number;
  /** Every request, in order, with its answer. */
  readonly log: RequestLog;
  /** Fault knobs: arm a drop, a 503 or a delay for the next matching request(s). */
  readonly faults: Faults;
  /** Settings a test may change while the server runs (see {@link ServerSettings}). */
  readonly settings: ServerSettings;
  /** Stop listening and close every connection; the state is gone. */
  close(): Promise<void>;
}

function parseQuery(search: string): Map<string, string> {
  const params = new Map<string, string>();
  for (const part of search.split('&')) {
    if (!part) continue;
    const eq = part.indexOf('=');
    const name = eq < 0 ? part : part.slice(0, eq);
    const value = eq < 0 ? '' : part.slice(eq + 1);
    params.set(decodeURIComponent(name).toLowerCase(), decodeURIComponent(value));
  }
  return params;
}

/** Which operation a request is. */
function route(
  method: string,
  container: string | undefined,
  blob: string | undefined,
  params: Map<string, string>,
  req: IncomingMessage,
): OperationName {
  const comp = params.get('comp');
  const restype = params.get('restype');
  const read = method === 'GET' || method === 'HEAD';
  if (read && restype === 'account' && comp === 'properties') return 'GetAccountInfo';
  if (container === undefined) {
    return method === 'GET' && comp === 'list' ? 'ListContainers' : 'Unsupported';
  }
  if (blob === undefined) {
    if (restype !== 'container') return 'Unsupported';
    if (method === 'PUT' && !comp) return 'CreateContainer';
    if (method === 'DELETE' && !comp) return 'DeleteContainer';
    if (read && !comp) return 'GetContainerProperties';
    if (method === 'GET' && comp === 'list') return 'ListBlobs';
    return 'Unsupported';
  }
  if (method === 'PUT') {
    if (!comp) {
      if (req.headers['x-ms-copy-source'] === undefined) return 'PutBlob';
      if (req.headers['x-ms-blob-type'] !== undefined) return 'PutBlobFromUrl';
      return req.headers['x-ms-requires-sync'] === 'true' ? 'CopyBlobFromUrl' : 'CopyBlob';
    }
    if (comp === 'block') return 'PutBlock';
    if (comp === 'blocklist') return 'PutBlockList';
    if (comp === 'metadata') return 'SetBlobMetadata';
    if (comp === 'properties') return 'SetBlobProperties';
    return 'Unsupported';
  }
  if (method === 'GET' && !comp) return 'GetBlob';
  if (method === 'GET' && comp === 'blocklist') return 'GetBlockList';
  if (method === 'HEAD' && !comp) return 'GetBlobProperties';
  if (method === 'DELETE' && !comp) return 'DeleteBlob';
  return 'Unsupported';
}

function run(op: OperationName, ctx: OpContext): Reply {
  switch (op) {
    case 'ListContainers':
      return listContainersOp(ctx);
    case 'GetAccountInfo':
      return getAccountInfo();
    case 'CreateContainer':
      return createContainer(ctx);
    case 'DeleteContainer':
      return deleteContainer(ctx);
    case 'GetContainerProperties':
      return getContainerProperties(ctx);
    case 'ListBlobs':
      return listBlobsOp(ctx);
    case 'PutBlob':
      return putBlob(ctx);
    case 'PutBlock':
      return putBlock(ctx);
    case 'PutBlockList':
      return putBlockList(ctx);
    case 'GetBlockList':
      return getBlockList(ctx);
    case 'GetBlob':
      return getBlob(ctx, false);
    case 'GetBlobProperties':
      return getBlob(ctx, true);
    case 'DeleteBlob':
      return deleteBlob(ctx);
    case 'CopyBlob':
    case 'CopyBlobFromUrl':
    case 'PutBlobFromUrl':
      return copyBlob(ctx, op);
    case 'SetBlobMetadata':
      return setBlobMetadata(ctx);
    case 'SetBlobProperties':
      return setBlobProperties(ctx);
    default:
      throw new ServiceError(
        501,
        'NotImplemented',
        `This operation is not implemented by the provcat Azure versions test server: ${ctx.method} with query ${[...ctx.params.keys()].join(',') || '(none)'}.`,
      );
  }
}

/** True when a write would create its blob (for the SAS `c` permission). */
function creates(
  state: AccountState,
  op: OperationName,
  container?: string,
  blob?: string,
): boolean {
  if (!['PutBlob', 'PutBlockList', 'CopyBlob', 'CopyBlobFromUrl', 'PutBlobFromUrl'].includes(op))
    return false;
  const c = container ? state.containers.get(container) : undefined;
  return !(c && blob !== undefined && c.blobs.get(blob)?.current);
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer | 'too-large' | 'aborted'> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) over = true;
      if (!over) chunks.push(chunk);
    });
    req.on('end', () => resolve(over ? 'too-large' : Buffer.concat(chunks)));
    // The client went away mid-body (a test's own drop, or a killed process): nothing to answer.
    req.on('aborted', () => resolve('aborted'));
    req.on('error', () => resolve('aborted'));
  });
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Start a versions server on 127.0.0.1 (see the module comment for what it implements). Resolves
 * once it listens; {@link AzureVersionsServer.close} stops it.
 */
export async function startAzureVersionsServer(
  options: AzureVersionsServerOptions = {},
): Promise<AzureVersionsServer> {
  const state = new AccountState();
  const log = new RequestLog();
  const faults = new Faults();
  const settings: ServerSettings = { existsStatus: options.existsStatus ?? 409 };
  const key = Buffer.from(DEV_ACCOUNT_KEY, 'base64');
  const maxBody = options.maxBodyBytes ?? 512 * 1024 * 1024;
  let port = 0;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = (req.method ?? 'GET').toUpperCase();
    const rawUrl = req.url ?? '/';
    const q = rawUrl.indexOf('?');
    const rawPath = q < 0 ? rawUrl : rawUrl.slice(0, q);
    const requestId = randomUUID();
    const common: Record<string, string> = {
      'x-ms-request-id': requestId,
      'x-ms-version': SERVICE_VERSION,
      date: new Date().toUTCString(),
      server: 'provcat-azure-versions-test-server',
    };
    const clientRequestId = req.headers['x-ms-client-request-id'];
    if (typeof clientRequestId === 'string') common['x-ms-client-request-id'] = clientRequestId;

    let params: Map<string, string>;
    let segments: string[];
    let containerName: string | undefined;
    let blobName: string | undefined;
    try {
      params = parseQuery(q < 0 ? '' : rawUrl.slice(q + 1));
      segments = rawPath.split('/');
      containerName = segments[2] ? decodeURIComponent(segments[2]) : undefined;
      const rest = segments.slice(3).join('/');
      blobName = rest ? decodeURIComponent(rest) : undefined;
    } catch (error) {
      sendError(
        res,
        method,
        common,
        undefined,
        new ServiceError(
          400,
          'InvalidUri',
          `The request URI is invalid: ${(error as Error).message}`,
        ),
      );
      return;
    }
    const op = route(method, containerName, blobName, params, req);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
    }
    const entry = log.begin({
      op,
      method,
      container: containerName,
      blob: blobName,
      url: rawUrl,
      versionId: params.get('versionid'),
      headers,
      bytesIn: 0,
    });
    const fired = faults.take(entry);
    entry.faults = fired.map((f) => f.kind);
    const has = (kind: Fault['kind']) => fired.find((f) => f.kind === kind);

    const delayed = has('delay');
    if (delayed && delayed.kind === 'delay') await delay(delayed.ms);
    if (has('drop-request')) {
      req.socket.destroy();
      return;
    }
    const body = await readBody(req, maxBody);
    if (body === 'aborted') return;
    if (body === 'too-large') {
      sendError(
        res,
        method,
        common,
        entry,
        new ServiceError(
          413,
          'RequestBodyTooLarge',
          `The request body is larger than this test server accepts (${maxBody} bytes).`,
        ),
      );
      return;
    }
    entry.bytesIn = body.length;
    const status = has('status');
    if (status && status.kind === 'status') {
      const code = status.code ?? 'ServerBusy';
      sendError(
        res,
        method,
        common,
        entry,
        new ServiceError(status.status ?? 503, code, 'Injected fault: the server is busy.'),
      );
      return;
    }

    let reply: Reply;
    try {
      if (segments[1] !== DEV_ACCOUNT_NAME) {
        throw new ServiceError(
          400,
          'InvalidUri',
          `This server serves the account ${DEV_ACCOUNT_NAME} only (path-style URLs).`,
        );
      }
      const remoteAddress = req.socket.remoteAddress ?? '';
      let overrides: Record<string, string> = {};
      if (hasSas(params)) {
        const verdict = checkSas(params, {
          account: DEV_ACCOUNT_NAME,
          key,
          op,
          container: containerName,
          blob: blobName,
          versionId: params.get('versionid'),
          creating: creates(state, op, containerName, blobName),
          remoteAddress,
        });
        if (!verdict.ok) throw new ServiceError(verdict.status, verdict.code, verdict.message);
        overrides = verdict.overrides;
      } else {
        const problem = sharedKeyProblem(req, DEV_ACCOUNT_NAME, key);
        if (problem) {
          throw new ServiceError(
            403,
            'AuthenticationFailed',
            `Server failed to authenticate the request: ${problem}.`,
          );
        }
      }
      for (const [name, feature] of UNSUPPORTED_HEADERS) {
        if (req.headers[name] !== undefined) {
          throw new ServiceError(
            501,
            'NotImplemented',
            `${feature} (${name}) are not implemented by this test server.`,
          );
        }
      }
      reply = run(op, {
        state,
        settings,
        method,
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        params,
        body,
        containerName,
        blobName,
        endpoint: `http://${req.headers.host ?? `127.0.0.1:${port}`}/${DEV_ACCOUNT_NAME}`,
        port,
        account: DEV_ACCOUNT_NAME,
        key,
        remoteAddress,
        overrides,
      });
    } catch (error) {
      const e =
        error instanceof ServiceError
          ? error
          : new ServiceError(
              500,
              'InternalError',
              `The test server failed: ${(error as Error).stack ?? String(error)}`,
            );
      if (has('drop-response') || has('drop-mid-body')) {
        req.socket.destroy();
        return;
      }
      sendError(res, method, common, entry, e);
      return;
    }
    entry.responseVersionId = reply.headers['x-ms-version-id'];
    if (has('drop-response')) {
      req.socket.destroy();
      return;
    }
    const payload =
      reply.body === undefined
        ? undefined
        : Buffer.isBuffer(reply.body)
          ? reply.body
          : Buffer.from(reply.body, 'utf8');
    const out: Record<string, string> = { ...common, ...reply.headers };
    if (method !== 'HEAD' || out['content-length'] === undefined) {
      out['content-length'] = String(method === 'HEAD' ? 0 : (payload?.length ?? 0));
    }
    entry.status = reply.status;
    const cut = has('drop-mid-body');
    if (cut && cut.kind === 'drop-mid-body') {
      res.writeHead(reply.status, out);
      const n = payload
        ? Math.min(cut.afterBytes ?? Math.floor(payload.length / 2), payload.length)
        : 0;
      if (payload && n > 0 && method !== 'HEAD') {
        res.write(payload.subarray(0, n), () => req.socket.destroy());
      } else {
        res.flushHeaders();
        setImmediate(() => req.socket.destroy());
      }
      return;
    }
    res.writeHead(reply.status, out);
    res.end(method === 'HEAD' ? undefined : payload);
  }

  function sendError(
    res: ServerResponse,
    method: string,
    common: Record<string, string>,
    entry: LogEntry | undefined,
    e: ServiceError,
  ): void {
    if (entry) {
      entry.status = e.status;
      entry.errorCode = e.code;
    }
    const noBody = method === 'HEAD' || e.status === 304;
    const body = noBody
      ? undefined
      : Buffer.from(errorBody(e.code, e.message, common['x-ms-request-id'] as string), 'utf8');
    res.writeHead(e.status, {
      ...common,
      ...e.headers,
      'x-ms-error-code': e.code,
      ...(body
        ? { 'content-type': 'application/xml', 'content-length': String(body.length) }
        : { 'content-length': '0' }),
    });
    res.end(body);
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      // A bug in the server itself: answer 500 with the stack rather than hang the client.
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(
          `provcat Azure versions test server bug: ${(error as Error).stack ?? String(error)}`,
        );
      } else {
        res.destroy(error as Error);
      }
    });
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  port = (server.address() as AddressInfo).port;
  const url = devBlobEndpoint(port);
  return {
    url,
    connectionString: devConnectionString(url),
    accountName: DEV_ACCOUNT_NAME,
    accountKey: DEV_ACCOUNT_KEY,
    port,
    log,
    faults,
    settings,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      }),
  };
}
