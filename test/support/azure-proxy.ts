/**
 * A small HTTP proxy in front of an Azure blob endpoint (Azurite, the versions server) for tests
 * of the Azure driver and stage: it names and counts every request by its Blob service operation
 * (`PutBlock` with its part number, `PutBlockList`, `GetBlob`, ...), can slow block uploads down,
 * and can break Get Blob answers the ways a bad proxy or server would — a range ignored (a 200
 * without Content-Range), a wrong Content-Range, a body cut off — which neither server does.
 *
 * Requests go through unchanged (Shared Key signs the path, query and `x-ms-*` headers, not the
 * host), so the driver's lean path and the SDK both work through it. Only answers are altered.
 *
 * @module
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** How Get Blob answers are altered. */
export type AzureProxyMode = 'pass' | 'strip-range' | 'wrong-content-range' | 'cut-body';

/** A running proxy. */
export interface AzureProxy {
  /** The blob endpoint through the proxy (same path as the target's). */
  readonly endpoint: string;
  /** Operation names in the order requests arrived. */
  readonly names: string[];
  /** Part numbers of `PutBlock` requests (from their block IDs), in order. */
  readonly blocks: number[];
  count(op: string): number;
  clear(): void;
  mode: AzureProxyMode;
  /** Milliseconds each `PutBlock` waits before it is forwarded. */
  blockDelayMs: number;
  close(): Promise<void>;
}

/** The Blob service operation a request is. */
export function operationOf(method: string, url: URL, headers: http.IncomingHttpHeaders): string {
  const comp = url.searchParams.get('comp');
  if (comp === 'list') return 'ListBlobs';
  if (comp === 'block') return 'PutBlock';
  if (comp === 'blocklist') return method === 'PUT' ? 'PutBlockList' : 'GetBlockList';
  if (method === 'PUT') return headers['x-ms-copy-source'] ? 'CopyBlob' : 'PutBlob';
  if (method === 'HEAD') return 'GetBlobProperties';
  if (method === 'DELETE') return 'DeleteBlob';
  if (method === 'GET' && comp === null) return 'GetBlob';
  return `${method} ${comp ?? ''}`.trim();
}

/** Start a proxy to `target` (a blob endpoint such as `http://127.0.0.1:PORT/devstoreaccount1`). */
export async function startAzureProxy(target: string): Promise<AzureProxy> {
  const upstream = new URL(target);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const names: string[] = [];
  const blocks: number[] = [];
  const state = { mode: 'pass' as AzureProxyMode, blockDelayMs: 0 };
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', upstream);
    const op = operationOf(req.method ?? 'GET', url, req.headers);
    names.push(op);
    if (op === 'PutBlock') {
      const id = Buffer.from(url.searchParams.get('blockid') ?? '', 'base64').toString('latin1');
      blocks.push(Number(/-(\d+)$/.exec(id)?.[1] ?? -1));
      if (state.blockDelayMs > 0) await new Promise((r) => setTimeout(r, state.blockDelayMs));
    }
    const forward = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: upstream.host },
        agent,
      },
      (answer) => {
        const headers = { ...answer.headers };
        const alter = op === 'GetBlob' && answer.statusCode === 206 ? state.mode : 'pass';
        if (alter === 'strip-range') delete headers['content-range'];
        if (alter === 'wrong-content-range') {
          headers['content-range'] = String(headers['content-range']).replace(
            /bytes (\d+)-/,
            (_, a: string) => `bytes ${Number(a) + 1}-`,
          );
        }
        res.writeHead(alter === 'strip-range' ? 200 : (answer.statusCode ?? 502), headers);
        if (alter !== 'cut-body') {
          answer.pipe(res);
          return;
        }
        let sent = 0;
        const half = Number(headers['content-length'] ?? 0) / 2;
        answer.on('data', (chunk: Buffer) => {
          if (sent >= half) return;
          res.write(chunk.subarray(0, Math.max(0, half - sent)));
          sent += chunk.length;
          if (sent >= half) res.destroy();
        });
      },
    );
    forward.on('error', (error) => res.destroy(error));
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}${upstream.pathname.replace(/\/$/, '')}`,
    names,
    blocks,
    count: (name) => names.filter((n) => n === name).length,
    clear() {
      names.length = 0;
      blocks.length = 0;
    },
    get mode() {
      return state.mode;
    },
    set mode(m) {
      state.mode = m;
    },
    get blockDelayMs() {
      return state.blockDelayMs;
    },
    set blockDelayMs(ms) {
      state.blockDelayMs = ms;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        agent.destroy();
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}
