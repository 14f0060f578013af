/**
 * The HTTP side of the server: reading request bodies (with the `dropRequest` fault) and
 * writing replies (with `status`, `dropResponse` and `mangle` faults), in one place for every
 * route, so a fault works the same on an upload chunk, a listing or a download.
 *
 * Bodies are read in full before a handler runs: handlers then touch the store synchronously,
 * which is what keeps a precondition check and its write atomic. Downloads are written chunk
 * by chunk with backpressure, from subarrays of the stored bytes.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ApiError } from './api-error.js';
import type { MangleMode } from './faults.js';
import { renderMedia } from './media.js';
import type { Reply } from './reply.js';
import type { ChunkBody } from './resumable.js';

/**
 * Reads a request body. With `dropAfter`, destroys the connection once that many bytes have
 * arrived (keeping exactly those bytes) and reports the body as aborted.
 */
export function readBody(req: IncomingMessage, dropAfter: number | undefined): Promise<ChunkBody> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    let done = false;
    const finish = (aborted: boolean) => {
      if (done) return;
      done = true;
      resolve({ chunks, bytes, aborted });
    };
    const drop = () => {
      finish(true);
      req.socket.destroy();
    };
    if (dropAfter !== undefined && dropAfter <= 0) {
      drop();
      return;
    }
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      if (dropAfter !== undefined && bytes + chunk.length >= dropAfter) {
        const keep = dropAfter - bytes;
        if (keep > 0) chunks.push(chunk.subarray(0, keep));
        bytes += keep;
        drop();
        return;
      }
      chunks.push(chunk);
      bytes += chunk.length;
    });
    req.on('end', () => finish(false));
    req.on('close', () => finish(!req.complete));
    req.on('error', () => finish(true));
  });
}

/** The body chunks of a reply as one Buffer (JSON bodies, multipart parsing). */
export function concatBody(body: ChunkBody): Buffer {
  return body.chunks.length === 1 ? (body.chunks[0] as Buffer) : Buffer.concat(body.chunks);
}

/** The reply for an error, JSON or XML by route (no body for 304, which must not have one). */
export function errorReply(error: ApiError, xml: boolean): Reply {
  if (error.status === 304) return { kind: 'empty', status: 304, headers: { ...error.headers } };
  if (xml) {
    return {
      kind: 'text',
      status: error.status,
      body: error.xml(),
      contentType: 'application/xml; charset=UTF-8',
      headers: { ...error.headers },
    };
  }
  return {
    kind: 'text',
    status: error.status,
    body: error.json(),
    contentType: 'application/json; charset=UTF-8',
    headers: { ...error.headers },
  };
}

/** Response faults that apply to one reply. */
export interface ResponseFaults {
  dropResponseAfter: number | undefined;
  mangle: MangleMode | undefined;
}

/**
 * Writes a reply; resolves with the body bytes written once the response is finished (or the
 * connection dropped by a `dropResponse` fault, or closed by the client).
 */
export async function writeReply(
  req: IncomingMessage,
  res: ServerResponse,
  reply: Reply,
  faults: ResponseFaults,
): Promise<number> {
  let status: number;
  let headers: Record<string, string>;
  let chunks: Buffer[];
  switch (reply.kind) {
    case 'json': {
      status = reply.status;
      headers = { 'content-type': 'application/json; charset=UTF-8', ...reply.headers };
      chunks = [Buffer.from(JSON.stringify(reply.body))];
      break;
    }
    case 'text':
      status = reply.status;
      headers = { 'content-type': reply.contentType, ...reply.headers };
      chunks = [Buffer.from(reply.body)];
      break;
    case 'empty':
      status = reply.status;
      headers = { ...reply.headers };
      chunks = [];
      break;
    case 'media': {
      const rendered = renderMedia(reply, faults.mangle);
      status = rendered.status;
      headers = rendered.headers;
      chunks = rendered.chunks;
      break;
    }
  }
  if (reply.kind !== 'media') {
    let length = 0;
    for (const chunk of chunks) length += chunk.length;
    headers['content-length'] = String(length);
  }
  if (status === 304 || status === 204) delete headers['content-length'];
  const head = req.method === 'HEAD' || status === 304 || status === 204;
  // 499 is not in Node's table of reason phrases.
  const reason =
    status === 499 ? 'Client Closed Request' : status === 308 ? 'Resume Incomplete' : undefined;
  if (reason === undefined) res.writeHead(status, headers);
  else res.writeHead(status, reason, headers);
  if (head) {
    res.end();
    await onceFinished(res);
    return 0;
  }
  let written = 0;
  const limit = faults.dropResponseAfter;
  for (const chunk of chunks) {
    if (res.destroyed) return written;
    if (limit !== undefined && written + chunk.length >= limit) {
      const part = chunk.subarray(0, Math.max(0, limit - written));
      written += part.length;
      await new Promise<void>((resolve) => res.write(part, () => resolve()));
      res.socket?.destroy();
      return written;
    }
    written += chunk.length;
    if (!res.write(chunk)) await drained(res);
  }
  if (limit !== undefined && written >= limit) {
    res.socket?.destroy();
    return written;
  }
  res.end();
  await onceFinished(res);
  return written;
}

/** Resolves on `drain` or `close`, whichever comes first, and leaves no listener behind. */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

function onceFinished(res: ServerResponse): Promise<void> {
  if (res.writableFinished || res.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    res.once('finish', () => resolve());
    res.once('close', () => resolve());
  });
}
