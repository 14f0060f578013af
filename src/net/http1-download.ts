/**
 * One HTTP/1.1 GET whose body arrives in reused buffers: no allocation per socket read.
 *
 * Why: Node's HTTP client allocates a fresh 64 KiB Buffer for every socket read. For a 1 GiB
 * download that is 16,000 ArrayBuffer backing stores (external memory) that die young but pile
 * up between scavenges until V8 starts a full Mark-Compact — measured ~63 of them per GiB with a
 * 9 MB heap, 2.4–3.6 s of user CPU where a raw socket reading into one reused buffer needs
 * 0.13 s. A library cannot raise V8's heap limits for its host process, so the only fix is to
 * not allocate: sockets here are made with `net.connect`/`tls.connect` and the `onread` option,
 * whose `buffer` function hands the socket a region of a small set of reusable buffers.
 * `tls.connect` honours `onread` too (Node 20: decrypted records, ≤ 16 KiB each, land in the
 * same buffers), so https needs no second path. Measured on 1 GiB from Ceph
 * (bench/http1-download-bench.mjs): download CPU 2.1–2.6 s → 1.0–1.1 s with the cache's
 * fsyncs, 0–1 Mark-Compact instead of 4–14 (60–69 inside `provcat fetch`).
 *
 * How the buffers move (per connection, {@link DownloadOptions.buffers} buffers of
 * {@link DownloadOptions.bufferBytes} each, taken from a shared {@link DownloadBufferPool}):
 * - the socket reads into the free tail of the current buffer ("armed" region); consecutive
 *   reads fill one buffer front to back, so the consumer gets large contiguous chunks (up to a
 *   whole buffer) without any copy, however small the individual reads were;
 * - when the tail gets short the buffer is retired and a fresh one is armed; a retired buffer
 *   returns to the pool once every chunk cut from it has been handed back by the consumer;
 * - the armed region is never a byte the consumer holds: when arming would exceed the
 *   connection's buffer budget the socket stops reading (backpressure) and resumes when the
 *   consumer hands a buffer back. Memory is therefore bounded by `buffers × bufferBytes` per
 *   transfer, whatever the speed of the network and of the consumer.
 *
 * The response parser is deliberately small and strict: a status line, a header block (CRLF
 * line ends, no folding, a size limit, names case-insensitive, repeated headers joined), then a
 * body of exactly Content-Length bytes. Anything else — no Content-Length, a Transfer-Encoding,
 * a 1xx, a status other than 200/206, malformed input, a network failure before the response
 * head — ends before any body byte reaches the consumer with a {@link DownloadFallback}: the
 * caller then takes its normal path (the S3 driver's SDK), which owns retries and error
 * mapping. Nothing is guessed. Failures after the head was accepted (reset, early end, idle
 * timeout, abort, a consumer error) reject with a typed error and destroy the socket.
 * test/unit/http1-parser.fuzz.test.ts holds the parser to Node's own (llhttp): every response is
 * read exactly as llhttp reads it, or handed back.
 *
 * Why not undici (the client Node's `fetch` is built on): it was measured against this module
 * on the lean path's two reads, many small objects and one big one, and cost clearly more CPU,
 * wall time and memory on both (docs/performance.md, "undici against the hand-written client").
 *
 * Keep-alive is optional: with an {@link Http1Pool}, a connection whose response was complete,
 * exact and not marked `Connection: close` goes back to a small per-origin idle pool. For one
 * big object reuse saves one TCP (or TLS) handshake, noise next to the transfer; it matters for
 * sequences of smaller downloads. A reused connection that turns out to be dead before the
 * first response byte is replaced once by a fresh one (a GET is idempotent).
 *
 * The parts, one file each: the response-head parser (http1-parser.ts), the read buffers and
 * whole-body slabs (http1-buffers.ts), the sockets and their keep-alive pool
 * (http1-connection.ts), one request and response on a socket (http1-transfer.ts); this file
 * holds the calls (`openDownload`, `fetchWhole`, `download`) and the request they send.
 *
 * Debug log: `NODE_DEBUG=provcat:http1`.
 *
 * @module
 */

import { Readable } from 'node:stream';
import type * as tls from 'node:tls';
import { debuglog } from 'node:util';
import type { BodySink } from '../contract/primitives.js';
import { abortError } from '../core/errors.js';
import { type DownloadBufferPool, sharedBuffers } from './http1-buffers.js';
import { Connection, type Http1Pool, originOf, type ReadConfig } from './http1-connection.js';
import {
  type DownloadFallback,
  FIELD_VALUE,
  isFallback,
  type ResponseHead,
  TOKEN,
} from './http1-parser.js';
import {
  type Attempt,
  type Http1Response,
  Transfer,
  type WholeResponse,
} from './http1-transfer.js';

export { DownloadBufferPool } from './http1-buffers.js';
export { Http1Pool, type Http1PoolOptions } from './http1-connection.js';
export {
  type DownloadFallback,
  type FallbackReason,
  isFallback,
  parseHead,
  type ResponseHead,
} from './http1-parser.js';
export type { Http1Response, WholeResponse } from './http1-transfer.js';

const debug = debuglog('provcat:http1');

/** Without a byte for this long, a transfer is dead (as the S3 driver's socket timeout). */
export const DEFAULT_IDLE_TIMEOUT_MS = 120_000;
/** A connection (TCP, and TLS handshake) not made in this long fails (as the S3 driver's). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** Size of one read buffer. */
export const DEFAULT_BUFFER_BYTES = 1024 * 1024;
/** Read buffers per transfer (one is always armed in the socket). */
export const DEFAULT_BUFFERS = 4;
/** The largest response head (status line and headers) accepted. */
export const DEFAULT_MAX_HEADER_BYTES = 64 * 1024;

/** What to send: one GET, already signed by the caller. */
export interface DownloadRequest {
  /** `http:` or `https:` URL; its origin is connected to. */
  url: string | URL;
  /**
   * The request-target sent on the request line, exactly as given (percent-encoded, starting
   * with `/`). Default: `url.pathname + url.search`. Give it when the signature covers a path
   * that URL parsing could normalize differently.
   */
  target?: string | undefined;
  /**
   * Request headers as signed (names are sent as given). `host` defaults to the URL's host;
   * without a {@link DownloadOptions.pool} a `connection: close` is added unless present.
   */
  headers?: Readonly<Record<string, string>> | undefined;
}

/** Options of {@link openDownload} and {@link download}. */
export interface DownloadOptions {
  /** Aborts the connect, the wait for the head and the body; the call rejects with an AbortError. */
  signal?: AbortSignal | undefined;
  /**
   * Milliseconds without a byte from the server (while the transfer is waiting for one) after
   * which the transfer fails. Time the socket is paused for a slow consumer does not count.
   * Default {@link DEFAULT_IDLE_TIMEOUT_MS}.
   */
  idleTimeoutMs?: number | undefined;
  /**
   * Milliseconds to connect (and finish the TLS handshake); a `network` fallback after that.
   * Default {@link DEFAULT_CONNECT_TIMEOUT_MS}.
   */
  connectTimeoutMs?: number | undefined;
  /** Keep-alive: where complete connections go back, and come from. Default: none (close). */
  pool?: Http1Pool | undefined;
  /** Size of one read buffer. Default {@link DEFAULT_BUFFER_BYTES}. */
  bufferBytes?: number | undefined;
  /** Read buffers one transfer may hold (≥ 2). Default {@link DEFAULT_BUFFERS}. */
  buffers?: number | undefined;
  /** Where read buffers come from and go back. Default: one pool shared by the process. */
  bufferPool?: DownloadBufferPool | undefined;
  /** The largest accepted response head. Default {@link DEFAULT_MAX_HEADER_BYTES}. */
  maxHeaderBytes?: number | undefined;
  /** TLS options for `https:` (`ca`, `rejectUnauthorized`, ...). `servername` defaults to the host. */
  tls?: tls.ConnectionOptions | undefined;
  /** The URI the download is about, attached to errors. */
  uri?: string | undefined;
}

/** A {@link BodySink} that also sees the response head first (for {@link download}). */
export interface DownloadSink extends BodySink {
  /**
   * Called once with the accepted head before any `data`. Return `false` to refuse the
   * response (the download then resolves with the fallback `refused`); a throw or rejection
   * fails the download with that error.
   */
  head?(head: ResponseHead): boolean | undefined | Promise<boolean | undefined>;
}

/** The request's bytes (as a latin1 string). Throws TypeError on header injection. */
function requestText(
  url: URL,
  target: string,
  request: DownloadRequest,
  keepAlive: boolean,
): string {
  if (!/^\/[\x21-\x7e]*$/.test(target)) {
    throw new TypeError(`bad request-target ${JSON.stringify(target)}`);
  }
  let text = `GET ${target} HTTP/1.1\r\n`;
  let host = false;
  let connection = false;
  const headers = request.headers ?? {};
  // for-in, not for-of over entries: in code that runs interpreted, each step of an iterator
  // allocates its result (this runs once per GET).
  for (const name in headers) {
    if (!Object.hasOwn(headers, name)) continue;
    const value = headers[name] as string;
    if (!TOKEN.test(name) || !FIELD_VALUE.test(value)) {
      throw new TypeError(`bad request header ${JSON.stringify(name)}`);
    }
    const lower = name.toLowerCase();
    if (lower === 'host') host = true;
    else if (lower === 'connection') connection = true;
    text += `${name}: ${value}\r\n`;
  }
  if (!host) text += `host: ${url.host}\r\n`;
  if (!keepAlive && !connection) text += 'connection: close\r\n';
  return `${text}\r\n`;
}

/**
 * Send one GET and resolve at the response head: an {@link Http1Response} (status 200 or 206
 * with a Content-Length) whose body the caller must then consume with `pipeTo` or give up with
 * `discard`, or a {@link DownloadFallback} telling the caller to use its normal path (nothing
 * delivered, connection closed). Until `pipeTo`, body bytes are read ahead into at most
 * `buffers` buffers, then reading pauses.
 *
 * Rejects with an AbortError when `signal` aborts before the head, and with a TypeError for a
 * URL or header it cannot send. Never rejects for a network failure before the head (that is
 * a `network` fallback).
 */
export async function openDownload(
  request: DownloadRequest,
  options: DownloadOptions = {},
): Promise<Http1Response | DownloadFallback> {
  return (await exchange(request, options, undefined)) as Http1Response | DownloadFallback;
}

/**
 * Send one GET and read its body whole into memory: a {@link WholeResponse}, or a
 * {@link DownloadFallback} for what {@link openDownload} hands back and for a body longer than
 * `maxBytes` (`refused`, seen from its Content-Length before any body byte is read). For small
 * objects whose size the caller already knows: no stream, no sink, one copy out of the reused
 * read buffers.
 *
 * Rejects like {@link openDownload} before the head, and like {@link download} after it (an
 * AbortError, or a {@link StoreError} for a connection that fails, ends early or stays idle).
 */
export async function fetchWhole(
  request: DownloadRequest,
  options: DownloadOptions & { maxBytes: number },
): Promise<WholeResponse | DownloadFallback> {
  if (!Number.isSafeInteger(options.maxBytes) || options.maxBytes < 0) {
    throw new RangeError('maxBytes must be a whole number ≥ 0');
  }
  return (await exchange(request, options, options.maxBytes)) as WholeResponse | DownloadFallback;
}

/** {@link openDownload}, or {@link fetchWhole} when `wholeUpTo` is set. */
async function exchange(
  request: DownloadRequest,
  options: DownloadOptions,
  wholeUpTo: number | undefined,
): Promise<Http1Response | WholeResponse | DownloadFallback> {
  const url = typeof request.url === 'string' ? new URL(request.url) : request.url;
  const target = request.target ?? `${url.pathname}${url.search}`;
  const text = requestText(url, target, request, options.pool !== undefined);
  const buffers = options.buffers ?? DEFAULT_BUFFERS;
  const bufferBytes = options.bufferBytes ?? DEFAULT_BUFFER_BYTES;
  if (!Number.isSafeInteger(buffers) || buffers < 2) throw new RangeError('buffers must be ≥ 2');
  if (!Number.isSafeInteger(bufferBytes) || bufferBytes < 1024) {
    throw new RangeError('bufferBytes must be ≥ 1024');
  }
  const config: ReadConfig = {
    bufferBytes,
    buffers,
    bufferPool: options.bufferPool ?? sharedBuffers,
  };
  // A pooled connection keeps its buffer settings: only requests with the same ones reuse it.
  const origin = originOf(url, options.tls, `${buffers}x${bufferBytes}`);
  const transferOptions = {
    signal: options.signal,
    idleTimeoutMs: options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
    connectTimeoutMs: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    maxHeaderBytes: options.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES,
    uri: options.uri,
    // For logs and errors (Transfer.label), made only when used: an object literal with a
    // getter, as before, cost a slow-path property definition per request.
    url,
    target,
    pool: options.pool,
    wholeUpTo,
  };
  for (let attempt = 0; ; attempt++) {
    if (options.signal?.aborted) throw abortError(options.signal);
    const pooled = attempt === 0 ? options.pool?.take(origin.key) : undefined;
    const conn = pooled ?? new Connection(origin, config, options.pool);
    if (pooled && debug.enabled) {
      debug('%s%s: reusing a connection', url.origin, target.split('?')[0]);
    }
    const outcome = await new Promise<Attempt>((resolve, reject) => {
      new Transfer(conn, text, transferOptions, resolve, reject).start();
    });
    if (outcome !== 'retry') return outcome;
  }
}

/**
 * Send one GET and deliver its body to `sink`: `sink.head` first (it may refuse), then the
 * body in order through `sink.data` (see {@link BodySink} — a chunk is valid only until its
 * call returns or resolves). Resolves with the head after the last chunk was handled, or with
 * a {@link DownloadFallback} (no body byte delivered) when the response is not one this module
 * reads or the sink refused it.
 *
 * Rejects, after destroying the socket and once no `data` call is running, with an AbortError
 * when `signal` aborts, a {@link StoreError} when the connection fails, ends early or stays
 * idle for `idleTimeoutMs` after the head, or the sink's own error.
 */
export async function download(
  request: DownloadRequest,
  sink: DownloadSink,
  options: DownloadOptions = {},
): Promise<ResponseHead | DownloadFallback> {
  const response = await openDownload(request, options);
  if (isFallback(response)) return response;
  const head: ResponseHead = {
    status: response.status,
    headers: response.headers,
    contentLength: response.contentLength,
  };
  let accepted: boolean | undefined;
  try {
    accepted = await sink.head?.(head);
  } catch (error) {
    response.discard();
    throw error;
  }
  if (accepted === false) {
    response.discard();
    return { fallback: 'refused', detail: 'the sink refused the response', status: head.status };
  }
  await response.pipeTo(sink);
  return head;
}

/**
 * The body as a Node Readable, for consumers that need a stream (compatibility, not speed):
 * each chunk is **copied** out of the reused buffers (a stream's reader may keep its chunks),
 * so this path allocates again, once per chunk of up to a buffer's size. Reading starts on the
 * first `read`; the stream honours backpressure; it errors with the transfer's error;
 * destroying it discards the response.
 */
export function responseReadable(response: Http1Response): Readable {
  let wake: (() => void) | undefined;
  let started = false;
  const readable = new Readable({
    read() {
      const w = wake;
      wake = undefined;
      w?.();
      if (started) return;
      started = true;
      response
        .pipeTo({
          data: (chunk) => {
            if (readable.destroyed || readable.push(Buffer.from(chunk))) return;
            return new Promise<void>((resolve) => {
              wake = resolve;
            });
          },
        })
        .then(
          () => readable.push(null),
          (error: unknown) => readable.destroy(error as Error),
        );
    },
    destroy(error, callback) {
      response.discard();
      const w = wake;
      wake = undefined;
      w?.();
      callback(error);
    },
  });
  return readable;
}
