/**
 * The sockets of the lean download (src/net/http1-download.ts): one {@link Connection} per
 * socket with its read buffers (how the buffers move is told in http1-download.ts's module
 * comment), the keep-alive {@link Http1Pool} they go back to, and the {@link Origin} a URL
 * connects to.
 *
 * @module
 */

import net from 'node:net';
import type * as tls from 'node:tls';
import { debuglog } from 'node:util';
import { nodeTls } from './builtins.js';
import type { DownloadBufferPool } from './http1-buffers.js';

const debug = debuglog('provcat:http1');

/** A buffer with less free room than this is retired (tiny reads cost a system call each). */
const MIN_READ_BYTES = 64 * 1024;

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
export interface Origin {
  secure: boolean;
  host: string;
  port: number;
  /** The pool key. */
  key: string;
  tls: tls.ConnectionOptions | undefined;
}

/** What a connection needs to read. */
export interface ReadConfig {
  bufferBytes: number;
  buffers: number;
  bufferPool: DownloadBufferPool;
}

/** One read buffer of a connection: bytes [0, filled) were read into it. */
export interface Slab {
  buf: Buffer;
  filled: number;
  /** Why it is still needed: 1 while armed in the socket, plus 1 per chunk cut from it. */
  holds: number;
}

/** Bytes [from, to) of a slab, waiting for (or in) the sink. */
export interface Slice {
  slab: Slab;
  from: number;
  to: number;
}

/** The socket events a transfer reacts to. */
export interface ConnectionOwner {
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
export class Connection {
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

/**
 * Monotonic milliseconds (`process.uptime` reads libuv's monotonic clock). The global
 * `performance` would load perf_hooks' modules (~1.5 ms) into a process that needs nothing else
 * from them.
 */
function monotonicMs(): number {
  return process.uptime() * 1000;
}

/** Origins already worked out, by URL text and buffer settings (without TLS options). */
const origins = new Map<string, Origin>();

/** The connect target of a URL, and its pool key ({@link makeOrigin}, kept for reuse). */
export function originOf(
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
