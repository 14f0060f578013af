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
 * Debug log: `NODE_DEBUG=provcat:http1`.
 *
 * @module
 */

import net from 'node:net';
import { Readable } from 'node:stream';
import type * as tls from 'node:tls';
import { debuglog } from 'node:util';
import type { BodySink } from '../contract/primitives.js';
import { abortError, StoreError } from '../core/errors.js';
import { nodeTls } from './builtins.js';

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
/** A buffer with less free room than this is retired (tiny reads cost a system call each). */
const MIN_READ_BYTES = 64 * 1024;

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

/** The head of an accepted response: status 200 or 206 with a Content-Length. */
export interface ResponseHead {
  status: 200 | 206;
  /**
   * Header values by lower-case name; a repeated header's values joined with `", "`. A
   * null-prototype object.
   */
  headers: Readonly<Record<string, string>>;
  /** The body's exact length, from Content-Length. */
  contentLength: number;
}

/** Why a response was handed back to the caller's normal path. */
export type FallbackReason =
  /** Connect, send or receive failed (or timed out) before a complete response head. */
  | 'network'
  /** A status other than 200 or 206 (see {@link DownloadFallback.status}). */
  | 'status'
  /** A 1xx interim response. */
  | 'informational'
  /** A 200/206 without Content-Length. */
  | 'no-content-length'
  /** A response with a Transfer-Encoding header (chunked or otherwise). */
  | 'transfer-encoding'
  /** Anything the strict parser does not read: bad status line, folding, bad Content-Length. */
  | 'malformed'
  /** The response head is larger than {@link DownloadOptions.maxHeaderBytes}. */
  | 'header-too-large'
  /** The sink's {@link DownloadSink.head} returned `false`. */
  | 'refused';

/**
 * The caller should send the request its normal way. No body byte was delivered; the
 * connection was closed.
 */
export interface DownloadFallback {
  fallback: FallbackReason;
  /** A human-readable detail, for debug logs. */
  detail: string;
  /** The response status, when a status line was read. */
  status?: number | undefined;
  /** The underlying error of a `network` fallback. */
  cause?: unknown;
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

/** A response at its head; the body not yet consumed. See {@link openDownload}. */
export interface Http1Response extends ResponseHead {
  /**
   * Deliver the body to `sink`. Resolves after the last byte's `data` call resolved; rejects
   * with the transfer's error (an AbortError for an abort, a {@link StoreError} for a network
   * failure, or the sink's own error). When it settles, no `data` call is running and none
   * will follow. Call at most once.
   */
  pipeTo(sink: BodySink): Promise<void>;
  /** Give up the body: the connection is destroyed. No-op once the transfer ended. */
  discard(): void;
}

/** A response read whole by {@link fetchWhole}: its head and every body byte. */
export interface WholeResponse extends ResponseHead {
  /** The body, exactly `contentLength` bytes, in memory of its own (not a reused buffer). */
  body: Buffer;
  /**
   * Give the body's memory back, to be reused by later whole reads. Optional (a body never
   * released is garbage-collected), idempotent; call it once the body was used (written out),
   * and never read `body` afterwards.
   */
  release(): void;
}

/** True when `outcome` is a {@link DownloadFallback}. */
export function isFallback<T extends object>(
  outcome: T | DownloadFallback,
): outcome is DownloadFallback {
  return 'fallback' in outcome;
}

/**
 * Reusable read buffers, shared by connections. Keeps up to `maxIdle` idle buffers per size;
 * counts what it hands out so tests and diagnostics can check the memory bound.
 */
export class DownloadBufferPool {
  private readonly idle = new Map<number, Buffer[]>();
  /** Buffers handed out and not yet given back. */
  outstanding = 0;
  /** The most buffers that were out at once. */
  peakOutstanding = 0;
  /** Buffers allocated over the pool's life. */
  allocated = 0;

  constructor(readonly maxIdle = 4) {}

  /** A buffer of `size` bytes (contents undefined): an idle one, else a new one. */
  take(size: number): Buffer {
    this.outstanding++;
    if (this.outstanding > this.peakOutstanding) this.peakOutstanding = this.outstanding;
    const reused = this.idle.get(size)?.pop();
    if (reused) return reused;
    this.allocated++;
    // Outside Node's small-buffer slab; the socket overwrites it before anyone reads it.
    return Buffer.allocUnsafeSlow(size);
  }

  /** Give back a buffer from {@link take}; it must not be used afterwards. */
  give(buffer: Buffer): void {
    this.outstanding--;
    const list = this.idle.get(buffer.length);
    if (!list) this.idle.set(buffer.length, [buffer]);
    else if (list.length < this.maxIdle) list.push(buffer);
  }
}

const sharedBuffers = new DownloadBufferPool();

/** Options of {@link Http1Pool}. */
export interface Http1PoolOptions {
  /** Idle connections kept per origin (set it to the caller's concurrency). Default 16. */
  maxIdlePerOrigin?: number | undefined;
  /** An idle connection is closed after this long. Default 4,000 ms (below common server keep-alive timeouts). */
  idleTimeoutMs?: number | undefined;
}

/**
 * Keep-alive connections by origin (scheme, host, port and TLS options). Idle connections do
 * not keep the process alive, are closed after `idleTimeoutMs`, and are dropped as soon as the
 * server closes them or sends anything unasked. Each idle connection keeps one read buffer.
 *
 * Idle time is kept by one sweep timer per pool, not by the socket's timeout: switching a
 * socket's timeout between the transfer's and the pool's on every small GET (each switch makes
 * a timer and a bound function) showed in profiles of many small files. The sweep closes a
 * connection within a quarter of `idleTimeoutMs` after its time, and {@link take} never hands
 * out one idle for longer than `idleTimeoutMs`.
 */
export class Http1Pool {
  private readonly idle = new Map<string, Connection[]>();
  readonly maxIdlePerOrigin: number;
  readonly idleTimeoutMs: number;
  private sweeper: NodeJS.Timeout | undefined;

  constructor(options: Http1PoolOptions = {}) {
    this.maxIdlePerOrigin = options.maxIdlePerOrigin ?? 16;
    this.idleTimeoutMs = options.idleTimeoutMs ?? 4_000;
  }

  /** Idle connections right now (all origins). */
  get idleCount(): number {
    let n = 0;
    for (const list of this.idle.values()) n += list.length;
    return n;
  }

  /** Close every idle connection. */
  close(): void {
    for (const list of this.idle.values()) for (const c of [...list]) c.destroy();
    this.idle.clear();
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }

  /** @internal An idle connection to `key`, marked in use, or `undefined`. */
  take(key: string): Connection | undefined {
    const list = this.idle.get(key);
    for (let conn = list?.pop(); conn !== undefined; conn = list?.pop()) {
      if (monotonicMs() - conn.idleSince >= this.idleTimeoutMs) {
        conn.destroy();
        continue;
      }
      conn.socket.ref();
      return conn;
    }
    return undefined;
  }

  /** @internal Keep `conn` for reuse (or close it when the origin has enough). */
  put(conn: Connection): void {
    const list = this.idle.get(conn.key) ?? [];
    if (list.length >= this.maxIdlePerOrigin) {
      conn.destroy();
      return;
    }
    list.push(conn);
    this.idle.set(conn.key, list);
    conn.socket.unref();
    conn.idleSince = monotonicMs();
    if (this.sweeper === undefined) {
      this.sweeper = setInterval(() => this.sweep(), Math.max(10, this.idleTimeoutMs / 4));
      this.sweeper.unref();
    }
  }

  /** Close the connections idle for `idleTimeoutMs`; stop sweeping once none is left. */
  private sweep(): void {
    const now = monotonicMs();
    let left = 0;
    for (const list of this.idle.values()) {
      for (const conn of [...list]) {
        if (now - conn.idleSince >= this.idleTimeoutMs) conn.destroy();
        else left++;
      }
    }
    if (left === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  /** @internal Forget `conn` (it closed). */
  remove(conn: Connection): void {
    const list = this.idle.get(conn.key);
    const i = list?.indexOf(conn) ?? -1;
    if (list && i >= 0) list.splice(i, 1);
  }
}

/** Where to connect. */
interface Origin {
  secure: boolean;
  host: string;
  port: number;
  /** The pool key. */
  key: string;
  tls: tls.ConnectionOptions | undefined;
}

/** What a connection needs to read. */
interface ReadConfig {
  bufferBytes: number;
  buffers: number;
  bufferPool: DownloadBufferPool;
}

/** Whole bodies up to this size are cut from a shared slab (see {@link wholeBody}). */
const WHOLE_SLAB_MAX = 64 * 1024;
const WHOLE_SLAB_BYTES = 1024 * 1024;
/** Released slabs kept for reuse. */
const WHOLE_SLABS_KEPT = 2;

/** A region whole bodies are cut from; `live` counts bodies cut from it and not yet released. */
interface WholeSlab {
  buf: Buffer;
  used: number;
  live: number;
}
let wholeSlab: WholeSlab = { buf: Buffer.alloc(0), used: 0, live: 0 };
const spareWholeSlabs: WholeSlab[] = [];
const noop = (): void => {};

/**
 * Memory for a body read whole, and the function that gives it back. Small ones are cut from a
 * 1 MiB slab, as Node's own Buffer pool does for tiny buffers (a separate backing store per
 * 4 KiB body cost more than the rest of its handling). Once every body cut from a slab was
 * released, the slab is used again: fresh memory costs a page fault per 4 KiB on first touch,
 * which on these VMs cost more than the copy into it. A body never released keeps its slab
 * alive until the garbage collector takes both.
 */
function wholeBody(n: number): { body: Buffer; release: () => void } {
  if (n > WHOLE_SLAB_MAX) return { body: Buffer.allocUnsafeSlow(n), release: noop };
  let slab = wholeSlab;
  if (slab.used + n > slab.buf.length) {
    if (slab.live === 0 && slab.buf.length > 0) {
      slab.used = 0;
    } else {
      slab = spareWholeSlabs.pop() ?? {
        buf: Buffer.allocUnsafeSlow(WHOLE_SLAB_BYTES),
        used: 0,
        live: 0,
      };
      wholeSlab = slab;
    }
  }
  const body = slab.buf.subarray(slab.used, slab.used + n);
  // Keep later bodies 8-byte aligned.
  slab.used += (n + 7) & ~7;
  slab.live++;
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    slab.live--;
    if (slab.live > 0) return;
    if (slab === wholeSlab) {
      slab.used = 0;
    } else if (spareWholeSlabs.length < WHOLE_SLABS_KEPT) {
      slab.used = 0;
      spareWholeSlabs.push(slab);
    }
  };
  return { body, release };
}

/** One read buffer of a connection: bytes [0, filled) were read into it. */
interface Slab {
  buf: Buffer;
  filled: number;
  /** Why it is still needed: 1 while armed in the socket, plus 1 per chunk cut from it. */
  holds: number;
}

/** Bytes [from, to) of a slab, waiting for (or in) the sink. */
interface Slice {
  slab: Slab;
  from: number;
  to: number;
}

/** The socket events a transfer reacts to. */
interface ConnectionOwner {
  onConnected(): void;
  onBytes(slab: Slab, start: number, n: number): void;
  onSocketError(error: Error): void;
  onEnd(): void;
  onTimeout(): void;
  onClose(): void;
}

const tlsIds = new WeakMap<object, number>();
let nextTlsId = 1;

/** One socket with its read buffers. See the module comment for how buffers move. */
class Connection {
  /** When it last went idle in its pool ({@link monotonicMs}). */
  idleSince = 0;
  readonly socket: net.Socket;
  readonly key: string;
  owner: ConnectionOwner | undefined;
  /** Served a transfer before (a failure before any byte may be a stale keep-alive). */
  reused = false;
  /** False once the server said `close`, sent extra bytes, or half-closed. */
  reusable = true;
  closed = false;
  /** Connected (and TLS handshake done). */
  connected = false;
  private cur: Slab;
  private next: Buffer;
  private held = 0;
  /** Reading stopped because the buffer budget is used up. */
  private starved = false;
  private idleTimeoutMs = 0;
  /** The socket's timeout as last set (each `setTimeout` makes a timer object: skip repeats). */
  private armedMs = 0;
  private readonly minRead: number;

  constructor(
    origin: Origin,
    private readonly config: ReadConfig,
    private readonly pool: Http1Pool | undefined,
  ) {
    this.key = origin.key;
    this.minRead = Math.min(MIN_READ_BYTES, Math.ceil(config.bufferBytes / 4));
    this.cur = this.takeSlab();
    this.next = this.cur.buf;
    // `buffer` is asked once when the handle is made (inside connect) and after every read.
    const onread = {
      buffer: () => this.next,
      callback: (n: number) => this.onRead(n),
    };
    if (origin.secure) {
      const options: tls.ConnectionOptions & { onread: net.OnReadOpts } = {
        ...(net.isIP(origin.host) === 0 ? { servername: origin.host } : {}),
        ...origin.tls,
        host: origin.host,
        port: origin.port,
        onread,
      };
      this.socket = nodeTls().connect(options);
    } else {
      this.socket = net.connect({ host: origin.host, port: origin.port, onread });
    }
    this.socket.once(origin.secure ? 'secureConnect' : 'connect', () => {
      this.connected = true;
      this.owner?.onConnected();
    });
    this.socket.on('error', (error) => {
      if (this.owner) this.owner.onSocketError(error);
      else debug('idle connection to %s: %s', this.key, String(error));
      this.destroy();
    });
    this.socket.on('end', () => {
      this.reusable = false;
      if (this.owner) this.owner.onEnd();
      else this.destroy();
    });
    this.socket.on('timeout', () => {
      if (this.owner) this.owner.onTimeout();
      else this.destroy();
    });
    this.socket.on('close', () => {
      this.closed = true;
      this.pool?.remove(this);
      this.owner?.onClose();
      // The socket reads into nothing any more: its armed buffer can go back.
      this.drop(this.cur);
    });
  }

  /** Start counting idle time (0: stop). Paused reading never counts. */
  setIdleTimeout(ms: number): void {
    this.idleTimeoutMs = ms;
    if (!this.starved) this.armTimeout(ms);
  }

  /** Set the socket's timeout, unless it is set to `ms` already. */
  armTimeout(ms: number): void {
    if (ms === this.armedMs) return;
    this.armedMs = ms;
    this.socket.setTimeout(ms);
  }

  /** True when the slab is the one the socket reads into (its chunks may still grow). */
  isArmed(slab: Slab): boolean {
    return slab === this.cur && !this.closed;
  }

  /** Release one hold of a slab; the last one gives its buffer back. */
  drop(slab: Slab): void {
    if (--slab.holds > 0) return;
    this.config.bufferPool.give(slab.buf);
    this.held--;
    if (this.starved && this.held < this.config.buffers && !this.closed) {
      this.starved = false;
      this.armTimeout(this.idleTimeoutMs);
      this.socket.resume();
    }
  }

  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    this.pool?.remove(this);
    this.socket.destroy();
  }

  private takeSlab(): Slab {
    this.held++;
    return { buf: this.config.bufferPool.take(this.config.bufferBytes), filled: 0, holds: 1 };
  }

  /** The onread callback: `n` bytes landed at `cur.filled`. Returns false to stop reading. */
  private onRead(n: number): boolean {
    const slab = this.cur;
    const start = slab.filled;
    slab.filled += n;
    if (this.owner) {
      this.owner.onBytes(slab, start, n);
    } else {
      debug('connection to %s: %d unasked bytes while idle; closing', this.key, n);
      this.destroy();
    }
    if (this.closed) return false;
    if (slab.holds === 1) {
      // Nothing cut from this buffer is held any more (the owner copied or handed back every
      // byte): read into it from the start again. Small responses then reuse the same few
      // pages instead of walking through fresh ones (a page fault each, ~18 µs in these VMs).
      slab.filled = 0;
      this.next = slab.buf;
      return true;
    }
    if (slab.buf.length - slab.filled >= this.minRead) {
      this.next = slab.buf.subarray(slab.filled);
      return true;
    }
    // Retire the slab (it returns once its chunks are handed back) and arm a fresh one.
    this.drop(slab);
    this.cur = this.takeSlab();
    this.next = this.cur.buf;
    if (this.held < this.config.buffers) return true;
    this.starved = true;
    this.armTimeout(0);
    return false;
  }
}

/** The outcome of one attempt on one connection. */
type Attempt = Http1Response | WholeResponse | DownloadFallback | 'retry';

/** A parsed, accepted response head, plus whether the connection may be reused. */
type HeadResult = (ResponseHead & { keepAlive: boolean }) | DownloadFallback;

/** One request/response on a connection. */
class Transfer implements ConnectionOwner {
  private phase: 'head' | 'wait' | 'body' | 'done' | 'failed' = 'head';
  private sawByte = false;
  private match = 0;
  private readonly headParts: Buffer[] = [];
  private headBytes = 0;
  private head: ResponseHead | undefined;
  private keepAlive = false;
  private received = 0;
  private delivered = 0;
  private readonly pending: Slice[] = [];
  private sink: BodySink | undefined;
  private batchBytes = 0;
  private sinkBusy = false;
  private failure: unknown;
  private piped: { resolve: () => void; reject: (error: unknown) => void } | undefined;

  constructor(
    private readonly conn: Connection,
    private readonly requestText: string,
    private readonly options: {
      signal: AbortSignal | undefined;
      idleTimeoutMs: number;
      connectTimeoutMs: number;
      maxHeaderBytes: number;
      uri: string | undefined;
      /** The request's URL and target, for {@link label}. */
      url: URL;
      target: string;
      pool: Http1Pool | undefined;
      /** Read the body whole when it is at most this long (see {@link fetchWhole}). */
      wholeUpTo?: number | undefined;
    },
    private readonly settle: (outcome: Attempt) => void,
    private readonly reject: (error: unknown) => void,
  ) {}

  /** The request for logs and errors, without its query (it may hold a presigned signature). */
  private label(): string {
    const { url, target } = this.options;
    const q = target.indexOf('?');
    return `${url.origin}${q < 0 ? target : target.slice(0, q)}`;
  }

  start(): void {
    this.conn.owner = this;
    this.conn.setIdleTimeout(
      this.conn.connected ? this.options.idleTimeoutMs : this.options.connectTimeoutMs,
    );
    if (this.options.signal) watchAbort(this.options.signal, this);
    this.conn.socket.write(this.requestText, 'latin1');
  }

  // --- socket events ----------------------------------------------------------------------

  onBytes(slab: Slab, start: number, n: number): void {
    this.sawByte = true;
    if (this.phase === 'head') {
      const buf = slab.buf;
      const end = start + n;
      let i = start;
      let m = this.match;
      // Find CR LF CR LF, carrying a partial match across reads.
      while (i < end && m < 4) {
        const c = buf[i++];
        m = c === (m % 2 === 0 ? 13 : 10) ? m + 1 : c === 13 ? 1 : 0;
      }
      this.match = m;
      this.headBytes += i - start;
      if (this.headBytes > this.options.maxHeaderBytes) {
        this.fallBack({
          fallback: 'header-too-large',
          detail: `response head over ${this.options.maxHeaderBytes} bytes`,
        });
        return;
      }
      let text: string;
      if (m === 4 && this.headParts.length === 0) {
        // The whole head in one read (the common case): decoded straight from the buffer.
        text = buf.toString('latin1', start, i);
      } else {
        // The head is small and parsed once: a copy keeps it independent of buffer reuse.
        this.headParts.push(Buffer.from(buf.subarray(start, i)));
        if (m < 4) return;
        text = Buffer.concat(this.headParts).toString('latin1');
      }
      const parsed = parseHead(text);
      if (isFallback(parsed)) {
        this.fallBack(parsed);
        return;
      }
      // Bytes past the body in this very read spoil the connection before anything can hand it
      // back to the pool (a body of 0 bytes completes inside accept).
      if (end - i > parsed.contentLength) this.conn.reusable = false;
      this.accept(parsed);
      if (i < end) this.addBody(slab, i, end - i);
      return;
    }
    if (this.phase === 'wait' || this.phase === 'body') {
      this.addBody(slab, start, n);
      return;
    }
    // After the body (or a failure): bytes nobody asked for.
    this.conn.reusable = false;
  }

  onConnected(): void {
    if (this.phase === 'head') this.conn.setIdleTimeout(this.options.idleTimeoutMs);
  }

  onSocketError(error: Error): void {
    this.lost(error.message, error);
  }

  onEnd(): void {
    this.lost('the server closed the connection', undefined);
  }

  onTimeout(): void {
    const message = this.conn.connected
      ? `no byte for ${this.options.idleTimeoutMs} ms`
      : `not connected after ${this.options.connectTimeoutMs} ms`;
    const error = Object.assign(new Error(message), { code: 'ETIMEDOUT' });
    this.lost(error.message, error, true);
  }

  onClose(): void {
    this.lost('the connection closed', undefined);
  }

  // --- head -------------------------------------------------------------------------------

  private accept(parsed: ResponseHead & { keepAlive: boolean }): void {
    // Built field by field: object rest and spread copy through V8's slow paths in code that
    // runs interpreted, once or twice per GET.
    const head: ResponseHead = {
      status: parsed.status,
      headers: parsed.headers,
      contentLength: parsed.contentLength,
    };
    this.head = head;
    this.keepAlive = parsed.keepAlive;
    this.phase = 'wait';
    const upTo = this.options.wholeUpTo;
    if (upTo !== undefined) {
      this.readWhole(head, upTo);
      return;
    }
    const response: Http1Response = {
      status: head.status,
      headers: head.headers,
      contentLength: head.contentLength,
      pipeTo: (sink) => this.pipeTo(sink),
      discard: () => this.discard(),
    };
    this.settle(response);
  }

  /**
   * {@link fetchWhole}: copy the body into one Buffer of its exact length as it arrives (the
   * read buffers are released at once), then settle with it; a body over `upTo` is refused
   * before any byte is read.
   */
  private readWhole(head: ResponseHead, upTo: number): void {
    if (head.contentLength > upTo) {
      this.fallBack({
        fallback: 'refused',
        detail: `body of ${head.contentLength} bytes, over ${upTo}`,
        status: head.status,
      });
      return;
    }
    const { body, release } = wholeBody(head.contentLength);
    let at = 0;
    this.pipeTo({
      data: (chunk) => {
        at += chunk.copy(body, at);
      },
    }).then(
      () =>
        this.settle({
          status: head.status,
          headers: head.headers,
          contentLength: head.contentLength,
          body,
          release,
        }),
      (error: unknown) => {
        release();
        this.reject(error);
      },
    );
  }

  /** End before any body byte: the caller takes its normal path. */
  private fallBack(outcome: DownloadFallback): void {
    this.phase = 'failed';
    this.detach();
    this.conn.destroy();
    debug('%s: fallback %s (%s)', this.label(), outcome.fallback, outcome.detail);
    this.settle(outcome);
  }

  /** The connection failed, ended or timed out. */
  private lost(detail: string, cause: unknown, timedOut = false): void {
    if (this.phase === 'head') {
      if (this.conn.reused && !this.sawByte && !timedOut) {
        this.phase = 'failed';
        this.detach();
        this.conn.destroy();
        debug('%s: reused connection was dead (%s); retrying on a new one', this.label(), detail);
        this.settle('retry');
        return;
      }
      this.fallBack({
        fallback: 'network',
        detail: `${detail} before the response head`,
        cause,
      });
      return;
    }
    if (this.phase !== 'wait' && this.phase !== 'body') return;
    const length = this.head?.contentLength ?? 0;
    if (this.received === length) {
      // Every body byte is already here; only the connection is spoiled.
      this.conn.reusable = false;
      return;
    }
    const message = `GET ${this.label()}: ${detail} after ${this.received} of ${length} body bytes`;
    this.fail(new StoreError(message, { uri: this.options.uri, cause }));
  }

  /** @internal The request's signal aborted ({@link watchAbort}). */
  abort(): void {
    const signal = this.options.signal as AbortSignal;
    if (this.phase === 'head') {
      this.phase = 'failed';
      this.detach();
      this.conn.destroy();
      this.reject(abortError(signal));
      return;
    }
    this.fail(abortError(signal));
  }

  // --- body -------------------------------------------------------------------------------

  private addBody(slab: Slab, from: number, n: number): void {
    const length = this.head?.contentLength ?? 0;
    const take = Math.min(n, length - this.received);
    if (take < n) {
      debug('%s: %d bytes past Content-Length; not reusing the connection', this.label(), n - take);
      this.conn.reusable = false;
    }
    if (take <= 0) return;
    const last = this.pending[this.pending.length - 1];
    if (last && last.slab === slab && last.to === from) {
      last.to += take;
    } else {
      slab.holds++;
      this.pending.push({ slab, from, to: from + take });
    }
    this.received += take;
    // Once everything is here, a slow sink may outlast the idle timeout: `lost` then only
    // marks the connection spent (no byte is missing), so the timer need not be stopped.
    if (this.phase === 'body') this.pump();
  }

  private pipeTo(sink: BodySink): Promise<void> {
    if (this.phase === 'failed') return Promise.reject(this.failure);
    if (this.phase !== 'wait') return Promise.reject(new Error('pipeTo may be called once'));
    this.phase = 'body';
    this.sink = sink;
    this.batchBytes = sink.batchBytes ?? 0;
    return new Promise<void>((resolve, reject) => {
      this.piped = { resolve, reject };
      this.pump();
    });
  }

  private discard(): void {
    if (this.phase !== 'wait' && this.phase !== 'body') return;
    this.fail(new StoreError(`GET ${this.label()}: body discarded`, { uri: this.options.uri }));
  }

  /** Hand pending chunks to the sink, one call at a time; complete when all are through. */
  private pump(): void {
    const sink = this.sink as BodySink;
    const length = this.head?.contentLength ?? 0;
    while (!this.sinkBusy && this.phase === 'body') {
      const slice = this.pending[0];
      if (!slice) {
        if (this.delivered === length) this.complete();
        return;
      }
      const size = slice.to - slice.from;
      const growing = this.conn.isArmed(slice.slab) && this.received < length;
      if (growing && size < this.batchBytes) return;
      this.pending.shift();
      // Busy during the call too: an abort fired from inside `data` must wait for it.
      this.sinkBusy = true;
      let result: void | Promise<void>;
      try {
        result = sink.data(slice.slab.buf.subarray(slice.from, slice.to));
      } catch (error) {
        this.afterCall(slice, size, error, true);
        return;
      }
      if (result !== undefined && typeof (result as Promise<void>).then === 'function') {
        (result as Promise<void>).then(
          () => {
            this.afterCall(slice, size, undefined, false);
            this.pump();
          },
          (error: unknown) => this.afterCall(slice, size, error, true),
        );
        return;
      }
      this.afterCall(slice, size, undefined, false);
    }
  }

  /** A `data` call ended: its buffer goes back; a failure meanwhile now rejects. */
  private afterCall(slice: Slice, size: number, error: unknown, failed: boolean): void {
    this.sinkBusy = false;
    this.conn.drop(slice.slab);
    // The first failure wins: a sink error after an abort still rejects with the abort.
    if (failed) this.fail(error);
    else this.delivered += size;
    if (this.phase === 'failed') this.rejectPipe();
  }

  private complete(): void {
    this.phase = 'done';
    this.detach();
    const pool = this.options.pool;
    this.conn.owner = undefined;
    if (pool && this.keepAlive && this.conn.reusable && !this.conn.closed) {
      this.conn.reused = true;
      pool.put(this.conn);
    } else {
      this.conn.destroy();
    }
    this.piped?.resolve();
  }

  /** Fail after the head: destroy the socket, reject once no sink call is running. */
  private fail(error: unknown): void {
    if (this.phase !== 'wait' && this.phase !== 'body') return;
    this.phase = 'failed';
    this.failure = error;
    this.detach();
    this.conn.destroy();
    for (const slice of this.pending.splice(0)) this.conn.drop(slice.slab);
    if (!this.sinkBusy) this.rejectPipe();
  }

  private rejectPipe(): void {
    const piped = this.piped;
    this.piped = undefined;
    piped?.reject(this.failure);
  }

  /**
   * Stop listening for an abort. The socket's timer stays: every caller next destroys the
   * connection or gives it to the pool, which sets its own.
   */
  private detach(): void {
    if (this.options.signal) abortWatchers.get(this.options.signal)?.delete(this);
  }
}

/**
 * The transfers in flight under each signal. One abort listener per signal, not one per
 * transfer: adding and removing an EventTarget listener cost ~9 µs per GET here (a fresh
 * process with the CLI's V8 settings, 1,000 pairs), and a folder fetch shares one signal among
 * all its GETs.
 */
const abortWatchers = new WeakMap<AbortSignal, Set<Transfer>>();

/** Call `transfer.abort()` when `signal` aborts, unless {@link Transfer.detach} came first. */
function watchAbort(signal: AbortSignal, transfer: Transfer): void {
  let watching = abortWatchers.get(signal);
  if (watching === undefined) {
    const set = new Set<Transfer>();
    watching = set;
    abortWatchers.set(signal, set);
    signal.addEventListener(
      'abort',
      () => {
        // abort() detaches, deleting from the set: go over a copy.
        for (const t of [...set]) t.abort();
      },
      { once: true },
    );
  }
  watching.add(transfer);
}

/**
 * Monotonic milliseconds (`process.uptime` reads libuv's monotonic clock). The global
 * `performance` would load perf_hooks' modules (~1.5 ms) into a process that needs nothing else
 * from them.
 */
function monotonicMs(): number {
  return process.uptime() * 1000;
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const STATUS_LINE = /^HTTP\/1\.([01]) ([0-9]{3})(?: [\t\x20-\x7e\x80-\xff]*)?$/;

/**
 * Read a response head (everything up to and including the blank line, as latin1). Accepts
 * only what it fully understands; anything else is a fallback.
 */
export function parseHead(text: string): HeadResult {
  if (!text.endsWith('\r\n\r\n')) {
    return { fallback: 'malformed', detail: 'response head not terminated by CRLF CRLF' };
  }
  const first = text.indexOf('\r\n');
  const statusLine = STATUS_LINE.exec(text.slice(0, first));
  if (!statusLine) {
    return {
      fallback: 'malformed',
      detail: `bad status line ${JSON.stringify(text.slice(0, first))}`,
    };
  }
  const minor = statusLine[1] as string;
  const status = Number(statusLine[2]);
  const headers: Record<string, string> = Object.create(null);
  const lengths: string[] = [];
  // One sticky match per header line (name, then the value without leading blanks); the
  // final CRLF of the head is left over.
  const end = text.length - 2;
  for (let at = first + 2; at < end; at = HEADER_LINE.lastIndex) {
    HEADER_LINE.lastIndex = at;
    const m = HEADER_LINE.exec(text);
    if (m === null) return badHeaderLine(text.slice(at, text.indexOf('\r\n', at)), status);
    const key = (m[1] as string).toLowerCase();
    let value = m[2] as string;
    const last = value.charCodeAt(value.length - 1);
    if (last === 0x20 || last === 0x09) value = value.replace(TRAILING_BLANKS, '');
    if (key === 'content-length') lengths.push(value);
    const seen = headers[key];
    headers[key] = seen === undefined ? value : `${seen}, ${value}`;
  }
  if (status >= 100 && status < 200) {
    return { fallback: 'informational', detail: `interim response ${status}`, status };
  }
  if (status !== 200 && status !== 206) {
    return { fallback: 'status', detail: `status ${status}`, status };
  }
  if (headers['transfer-encoding'] !== undefined) {
    return {
      fallback: 'transfer-encoding',
      detail: `Transfer-Encoding: ${headers['transfer-encoding']}`,
      status,
    };
  }
  if (lengths.length === 0) {
    return { fallback: 'no-content-length', detail: 'no Content-Length', status };
  }
  // Repeats (in one field or several) are allowed only when identical (RFC 9110 §8.6).
  const only =
    lengths.length === 1 && DIGITS.test(lengths[0] as string) ? lengths[0] : oneLength(lengths);
  if (only === undefined || !DIGITS.test(only)) {
    return { fallback: 'malformed', detail: `bad Content-Length ${lengths.join(', ')}`, status };
  }
  const contentLength = Number(only);
  if (!Number.isSafeInteger(contentLength)) {
    return { fallback: 'malformed', detail: `Content-Length ${only} too large`, status };
  }
  const connection = headers.connection;
  const tokens =
    connection === undefined
      ? []
      : connection
          .toLowerCase()
          .split(',')
          .map((s) => s.trim());
  // RFC 9112 §9.3: `close` ends the connection whatever the version; an HTTP/1.0 one
  // persists only with `keep-alive`.
  const keepAlive = !tokens.includes('close') && (minor === '1' || tokens.includes('keep-alive'));
  return { status, headers, contentLength, keepAlive };
}

/**
 * A header line: a token, a colon, optional blanks, then a value of visible characters, blanks
 * and obs-text that starts with a visible one (so the blanks before it can be matched one way
 * only: no backtracking over a long run of them), up to CRLF. A folded line (one that starts
 * with a blank) or a control character does not match.
 */
const HEADER_LINE =
  /([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[\t ]*((?:[\x21-\x7e\x80-\xff][\t\x20-\x7e\x80-\xff]*)?)\r\n/y;
const TRAILING_BLANKS = /[\t ]+$/;

/** The fallback for a header line {@link HEADER_LINE} does not match, saying what is wrong. */
function badHeaderLine(line: string, status: number): DownloadFallback {
  const colon = line.indexOf(':');
  const name = colon > 0 ? line.slice(0, colon) : '';
  if (!TOKEN.test(name)) {
    return { fallback: 'malformed', detail: `bad header line ${JSON.stringify(line)}`, status };
  }
  return { fallback: 'malformed', detail: `bad value of header ${name}`, status };
}

const DIGITS = /^[0-9]{1,16}$/;

/** Blanks (SP, HTAB: RFC 9110's OWS) at either end of a list element. */
const OWS_EDGES = /^[\t ]+|[\t ]+$/g;

/**
 * The one value of repeated or listed Content-Lengths, or `undefined` when they differ. Only
 * OWS is trimmed around each element (`String.prototype.trim` would take obs-text's NBSP too).
 */
function oneLength(lengths: string[]): string | undefined {
  const values = new Set(lengths.flatMap((v) => v.split(',').map((s) => s.replace(OWS_EDGES, ''))));
  return values.size === 1 ? [...values][0] : undefined;
}

/** Origins already worked out, by URL text and buffer settings (without TLS options). */
const origins = new Map<string, Origin>();

/** The connect target of a URL, and its pool key ({@link makeOrigin}, kept for reuse). */
function originOf(
  url: URL,
  tlsOptions: tls.ConnectionOptions | undefined,
  reading: string,
): Origin {
  // A folder fetch asks this for every GET to one server: seven URL getters, each slicing the
  // URL's text again, cost ~5 µs per request here.
  if (tlsOptions !== undefined) return makeOrigin(url, tlsOptions, reading);
  const id = `${reading} ${url.href}`;
  let origin = origins.get(id);
  if (origin === undefined) {
    origin = makeOrigin(url, undefined, reading);
    if (origins.size >= 64) origins.clear();
    origins.set(id, origin);
  }
  return origin;
}

/** The connect target of a URL, and its pool key. Throws TypeError for a scheme it cannot speak. */
function makeOrigin(
  url: URL,
  tlsOptions: tls.ConnectionOptions | undefined,
  reading: string,
): Origin {
  const secure = url.protocol === 'https:';
  if (!secure && url.protocol !== 'http:') {
    throw new TypeError(`unsupported protocol ${url.protocol} (http: or https: only)`);
  }
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  const port = url.port === '' ? (secure ? 443 : 80) : Number(url.port);
  let key = `${url.protocol}//${url.host}:${port}#${reading}`;
  if (secure && tlsOptions) {
    let id = tlsIds.get(tlsOptions);
    if (id === undefined) {
      id = nextTlsId++;
      tlsIds.set(tlsOptions, id);
    }
    key += `#tls${id}`;
  }
  return { secure, host, port, key, tls: secure ? tlsOptions : undefined };
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
