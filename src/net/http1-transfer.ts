/**
 * One request and its response on one connection of the lean download
 * (src/net/http1-download.ts): the {@link Transfer} finds the response head in the socket's
 * reads, parses it (src/net/http1-parser.ts), then hands the body to the consumer's sink in
 * order, chunk by chunk, straight out of the connection's reused read buffers.
 *
 * @module
 */

import { debuglog } from 'node:util';
import type { BodySink } from '../contract/primitives.js';
import { abortError, StoreError } from '../core/errors.js';
import { wholeBody } from './http1-buffers.js';
import type { Connection, ConnectionOwner, Http1Pool, Slab, Slice } from './http1-connection.js';
import { type DownloadFallback, isFallback, parseHead, type ResponseHead } from './http1-parser.js';

const debug = debuglog('provcat:http1');

/** A response at its head; the body not yet consumed. See `openDownload` (http1-download.ts). */
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

/** A response read whole by `fetchWhole` (http1-download.ts): its head and every body byte. */
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

/** The outcome of one attempt on one connection. */
export type Attempt = Http1Response | WholeResponse | DownloadFallback | 'retry';

/** One request/response on a connection. */
export class Transfer implements ConnectionOwner {
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
      /** Read the body whole when it is at most this long (`fetchWhole`, http1-download.ts). */
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
   * `fetchWhole` (http1-download.ts): copy the body into one Buffer of its exact length as it
   * arrives (the read buffers are released at once), then settle with it; a body over `upTo` is
   * refused before any byte is read.
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
