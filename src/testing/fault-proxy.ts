/**
 * A fault-injecting TCP proxy for HTTP/1.1 storage servers (`provcat/testing`).
 *
 * It sits between a driver and its server and breaks the conversation the way networks and
 * middleboxes do: latency, a connection reset in the middle of a body, a stall, a body cut short,
 * flipped bytes, a 500/503 burst answered by the proxy itself. It works at the TCP level — any
 * HTTP client and any SDK can be pointed at it — and reads just enough HTTP/1.1 to know where
 * each request and response and their bodies begin and end (Content-Length, chunked, bodiless
 * responses, interim `100 Continue`), so faults can be placed on one request of a keep-alive
 * connection, at an exact body offset, and matched on the request line. Everything else is
 * forwarded byte for byte: it never rewrites a header, so signatures that cover `Host` stay valid.
 *
 * Each direction of a connection is a {@link Lane}: an ordered queue of bytes and actions with a
 * release time, which gives latency (bytes are released `ms` after they arrived), stalls (the lane
 * holds) and backpressure (the source is paused while a lane holds too much) in one place.
 *
 * @module
 */
import net from 'node:net';

/** What every fault rule can be matched on, and how often it fires. */
export interface FaultMatch {
  /** Only requests whose method matches (a string is an exact method). */
  method?: RegExp | string | undefined;
  /** Only requests whose request-target (path and query) matches. */
  path?: RegExp | string | undefined;
  /** Chance of firing on each matching exchange; default 1. */
  probability?: number | undefined;
  /** Fire at most this many times, then the rule is spent ("the next N"); default: no limit. */
  next?: number | undefined;
}

/** Delay every byte of the exchange by `ms`, each way (10 ms each way adds 20 ms per round trip). */
export interface LatencyFault extends FaultMatch {
  kind: 'latency';
  ms: number;
}
/**
 * Reset both connections (TCP RST) after `after` body bytes of the request or the response; a
 * request or response without a body is reset at its head, before it is forwarded.
 */
export interface ResetFault extends FaultMatch {
  kind: 'reset';
  direction: 'request' | 'response';
  /** Body bytes forwarded before the reset; default: a random offset inside the body. */
  after?: number | undefined;
}
/** Stop forwarding one direction for `ms` (`Infinity`: until a side closes) after `after` body bytes. */
export interface StallFault extends FaultMatch {
  kind: 'stall';
  direction: 'request' | 'response';
  ms: number;
  after?: number | undefined;
}
/** Close the client's connection cleanly (FIN) after `after` bytes of the response body. */
export interface TruncateFault extends FaultMatch {
  kind: 'truncate';
  after?: number | undefined;
}
/** Invert `count` bytes (default 1) of the response body from offset `after`. */
export interface FlipFault extends FaultMatch {
  kind: 'flip';
  after?: number | undefined;
  count?: number | undefined;
}
/** Answer with `status` (500, 503, ...) from the proxy instead of forwarding; then close. */
export interface StatusFault extends FaultMatch {
  kind: 'status';
  status: number;
  /** Response body; default a short text. */
  body?: string | undefined;
}

/** One fault rule. Rules are evaluated on every request (request faults) and response (response faults). */
export type FaultRule =
  | LatencyFault
  | ResetFault
  | StallFault
  | TruncateFault
  | FlipFault
  | StatusFault;

/** The kinds of fault. */
export type FaultKind = FaultRule['kind'];

/** The kinds, in the order the figures print them. */
export const FAULT_KINDS: readonly FaultKind[] = [
  'latency',
  'reset',
  'stall',
  'truncate',
  'flip',
  'status',
];

/** Counters of a proxy since it started. A fault counts once per exchange it took effect on. */
export interface ProxyStats {
  connections: number;
  requests: number;
  /** Connections dropped because their bytes were not HTTP/1.1 as the proxy reads it. */
  unreadable: number;
  faults: Record<FaultKind, number>;
  /** Why the last unreadable connection was dropped. */
  lastUnreadable?: Error | undefined;
}

/** Options of {@link startFaultProxy}. */
export interface FaultProxyOptions {
  /** The server: `http://host:port`. */
  target: string;
  /** Port to listen on (127.0.0.1); default a free one. */
  port?: number | undefined;
  /** Initial rules (see {@link FaultProxy.set}). */
  faults?: FaultRule[] | undefined;
  /** Random source in [0, 1) for probabilities and offsets; default `Math.random`. */
  random?: (() => number) | undefined;
}

/** A running proxy. */
export interface FaultProxy {
  /** `http://127.0.0.1:<port>`: point the client here instead of at the server. */
  url: string;
  port: number;
  /** Replace the rules; they apply to every exchange that starts from now on, on every connection. */
  set(faults: FaultRule[]): void;
  /** A copy of the counters. */
  stats(): ProxyStats;
  /** Stop listening and destroy every connection. */
  close(): Promise<void>;
}

const MAX_HEAD = 64 * 1024;
/** A lane holding more than this pauses its source until it is down to a quarter. */
const HIGH_WATER = 1024 * 1024;

interface Head {
  /** Request: method; response: status code as text. */
  first: string;
  /** Request: the request-target. */
  target: string;
  status: number;
  headers: Map<string, string>;
}

type Segment =
  | { type: 'head'; data: Buffer; head: Head }
  | { type: 'body' | 'frame'; data: Buffer };

/** The body framing of a message: `bodyless` answers whether a response head has no body. */
type Framing = 'none' | 'length' | 'chunked' | 'close';

/**
 * Splits one direction of HTTP/1.1 into heads, body bytes and chunk framing, message after
 * message. `onEnd` is called at each message's end (with whether it was an interim 1xx).
 */
class MessageParser {
  private buf: Buffer = Buffer.alloc(0);
  private state:
    | 'head'
    | 'length'
    | 'chunk-size'
    | 'chunk-data'
    | 'chunk-crlf'
    | 'trailer'
    | 'close'
    | 'raw' = 'head';
  private left = 0;
  constructor(
    private readonly framing: (head: Head) => Framing,
    private readonly emit: (segment: Segment) => void,
    private readonly onEnd: (interim: boolean) => void,
  ) {}

  feed(data: Buffer): void {
    this.buf = this.buf.length === 0 ? data : Buffer.concat([this.buf, data]);
    while (this.buf.length > 0) {
      if (this.state === 'raw' || this.state === 'close') {
        this.emit({ type: 'body', data: this.take(this.buf.length) });
      } else if (this.state === 'length' || this.state === 'chunk-data') {
        const n = Math.min(this.left, this.buf.length);
        this.emit({ type: 'body', data: this.take(n) });
        this.left -= n;
        if (this.left > 0) continue;
        if (this.state === 'length') this.done(false);
        else this.state = 'chunk-crlf';
      } else if (this.state === 'chunk-crlf') {
        if (this.buf.length < 2) return;
        this.emit({ type: 'frame', data: this.take(2) });
        this.state = 'chunk-size';
      } else {
        const eol = this.buf.indexOf(this.state === 'head' ? '\r\n\r\n' : '\r\n');
        if (eol < 0) {
          if (this.buf.length > MAX_HEAD) throw new Error('fault proxy: HTTP head too long');
          return;
        }
        const line = this.take(eol + (this.state === 'head' ? 4 : 2));
        if (this.state === 'head') this.head(line);
        else if (this.state === 'chunk-size') {
          this.emit({ type: 'frame', data: line });
          this.left = Number.parseInt(line.toString('latin1'), 16);
          if (!Number.isFinite(this.left)) throw new Error('fault proxy: bad chunk size');
          this.state = this.left === 0 ? 'trailer' : 'chunk-data';
        } else {
          this.emit({ type: 'frame', data: line });
          if (line.length === 2) this.done(false);
        }
      }
    }
  }

  private head(data: Buffer): void {
    const lines = data.toString('latin1').split('\r\n');
    const [first = '', target = ''] = (lines[0] ?? '').split(' ');
    const headers = new Map<string, string>();
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':');
      if (colon > 0)
        headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    const status = first.startsWith('HTTP/') ? Number(target) : 0;
    const head: Head = { first: status ? target : first, target, status, headers };
    this.emit({ type: 'head', data, head });
    if (status >= 100 && status < 200 && status !== 101) {
      this.onEnd(true);
      return;
    }
    if (status === 101) {
      this.state = 'raw';
      return;
    }
    const framing = this.framing(head);
    if (framing === 'chunked') this.state = 'chunk-size';
    else if (framing === 'close') this.state = 'close';
    else {
      this.left = framing === 'length' ? Number(headers.get('content-length')) : 0;
      if (this.left > 0) this.state = 'length';
      else this.done(false);
    }
  }

  private done(interim: boolean): void {
    this.state = 'head';
    this.onEnd(interim);
  }

  private take(n: number): Buffer {
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }
}

function framingOf(head: Head, bodyless: boolean): Framing {
  if (bodyless) return 'none';
  const te = head.headers.get('transfer-encoding');
  if (te && /(^|,)\s*chunked\s*$/i.test(te)) return 'chunked';
  if (head.headers.has('content-length')) return 'length';
  return head.status ? 'close' : 'none';
}

type LaneItem = { at: number; data?: Buffer; action?: () => void };

/** One direction of a connection: bytes and actions released in order, each at its time. */
class Lane {
  private readonly queue: LaneItem[] = [];
  private queued = 0;
  private heldUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private waitingDrain = false;
  private last = 0;
  /** Writes not yet handed to the kernel: an action waits for them. */
  private unflushed = 0;
  closed = false;

  constructor(
    private readonly dest: net.Socket,
    private readonly source: net.Socket,
  ) {
    if (dest.connecting) dest.once('connect', this.pump);
  }

  push(item: { data?: Buffer; action?: () => void }, delayMs: number): void {
    if (this.closed) return;
    const at = Math.max(performance.now() + delayMs, this.last);
    this.last = at;
    this.queue.push({ at, ...item });
    this.queued += item.data?.length ?? 0;
    if (this.queued > HIGH_WATER) this.source.pause();
    this.pump();
  }

  /** Release nothing before `now + ms` (`Infinity`: never again). */
  hold(ms: number): void {
    this.heldUntil = Math.max(this.heldUntil, performance.now() + ms);
  }

  close(): void {
    this.closed = true;
    this.queue.length = 0;
    clearTimeout(this.timer);
  }

  private pump = (): void => {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (!this.closed && this.queue.length > 0) {
      if (this.dest.connecting || this.waitingDrain) return;
      const now = performance.now();
      const item = this.queue[0] as LaneItem;
      const wait = Math.max(item.at, this.heldUntil) - now;
      if (wait > 0) {
        if (wait !== Number.POSITIVE_INFINITY) this.timer = setTimeout(this.pump, wait);
        return;
      }
      if (item.action) {
        // A reset or a close comes after the bytes before it are out, as on the wire.
        if (this.unflushed > 0) return;
        this.queue.shift();
        item.action();
        continue;
      }
      this.queue.shift();
      const data = item.data as Buffer;
      this.queued -= data.length;
      if (this.queued <= HIGH_WATER / 4) this.source.resume();
      this.unflushed++;
      const flushed = () => {
        this.unflushed--;
        if (this.unflushed === 0) this.pump();
      };
      if (!this.dest.write(data, flushed)) {
        this.waitingDrain = true;
        this.dest.once('drain', () => {
          this.waitingDrain = false;
          this.pump();
        });
      }
    }
  };
}

/** A fault placed at an offset of a body (its `after` fixed). */
type BodyFault = (ResetFault | StallFault | TruncateFault | FlipFault) & { after: number };

/** What the proxy decided for one request and its response. */
interface Exchange {
  method: string;
  target: string;
  latency: number;
  injected?: StatusFault | undefined;
  /** The request is in (or, with `Expect: 100-continue` or no body, its head is): an injected answer may go. */
  ready: boolean;
  requestFaults: BodyFault[];
  requestBody: number;
  responseFaults: BodyFault[];
  responseBody: number;
  bodyless: boolean;
}

/** Which phase a rule is decided in: at the request head, or at the response head. */
function phaseOf(rule: FaultRule): 'request' | 'response' {
  if (rule.kind === 'latency' || rule.kind === 'status') return 'request';
  if (rule.kind === 'reset' || rule.kind === 'stall') return rule.direction;
  return 'response';
}

/** Start a proxy in front of `options.target`. See the module comment. */
export async function startFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  const target = new URL(options.target);
  const random = options.random ?? Math.random;
  let rules: Array<FaultRule & { left: number }> = [];
  const faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  const counters = { connections: 0, requests: 0, unreadable: 0 };
  const sockets = new Set<net.Socket>();
  let lastUnreadable: Error | undefined;

  const set = (next: FaultRule[]) => {
    rules = next.map((r) => ({ ...r, left: r.next ?? Number.POSITIVE_INFINITY }));
  };
  set(options.faults ?? []);

  /** The rules of a phase that fire on this exchange; each one that fires uses up one of its `next`. */
  const firing = (
    phase: 'request' | 'response',
    method: string,
    path: string,
    body: boolean,
  ): FaultRule[] =>
    rules.filter((r) => {
      if (phaseOf(r) !== phase || r.left <= 0) return false;
      // Faults placed in a body wait for an exchange that has one; a reset then comes at the head.
      if (!body && (r.kind === 'stall' || r.kind === 'truncate' || r.kind === 'flip')) return false;
      if (!matches(r.method, method, true) || !matches(r.path, path, false)) return false;
      if (random() >= (r.probability ?? 1)) return false;
      r.left--;
      return true;
    });

  /** Body faults with their offsets fixed: as given (inside a body of known length), else random. */
  const placed = (fired: FaultRule[], length: number): BodyFault[] =>
    fired
      .filter((f): f is BodyFault => f.kind !== 'latency' && f.kind !== 'status')
      .map((f) => {
        const at = f.after ?? Math.floor(random() * Math.max(1, length));
        return { ...f, after: length > 0 ? Math.min(at, length - 1) : at };
      });

  const server = net.createServer((client) => {
    counters.connections++;
    const upstream = net.connect({
      port: Number(target.port || 80),
      host: target.hostname,
      noDelay: true,
    });
    // Each piece goes out as it is released: Nagle would hold a body behind its head.
    client.setNoDelay(true);
    sockets.add(client).add(upstream);
    const toServer = new Lane(upstream, client);
    const toClient = new Lane(client, upstream);
    const exchanges: Exchange[] = [];
    /** An injected answer is on its way: later requests on this connection are dropped. */
    let answering = false;
    /** The response stream was cut (truncate): the rest of it is dropped. */
    let cut = false;

    const destroy = (reset: boolean) => {
      toServer.close();
      toClient.close();
      for (const s of [client, upstream]) {
        sockets.delete(s);
        if (reset && s.readyState === 'open') s.resetAndDestroy();
        else s.destroy();
      }
    };
    const resetNow = () => {
      faults.reset++;
      destroy(true);
    };
    /** Close the client's side cleanly (FIN) and drop the server's. */
    const cutOff = () => {
      client.end();
      upstream.destroy();
    };
    /** Answer an injected exchange once it is at the front of the queue and its request is in. */
    const flushInjected = () => {
      const x = exchanges[0];
      if (!x?.injected || !x.ready) return;
      exchanges.shift();
      const body = Buffer.from(x.injected.body ?? `fault proxy: injected ${x.injected.status}\n`);
      const head =
        `HTTP/1.1 ${x.injected.status} Injected\r\nContent-Type: text/plain\r\n` +
        `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
      faults.status++;
      toClient.push({ data: Buffer.concat([Buffer.from(head, 'latin1'), body]) }, x.latency);
      toClient.push({ action: cutOff }, x.latency);
    };

    /** Push body bytes through the faults placed at offsets inside them. */
    const forwardBody = (lane: Lane, x: Exchange, data: Buffer, pos: number, list: BodyFault[]) => {
      let out = data;
      let at = pos;
      for (;;) {
        const f = list
          .filter((g) => g.after >= at && g.after < at + out.length)
          .sort((a, b) => a.after - b.after)[0];
        if (!f) break;
        list.splice(list.indexOf(f), 1);
        const split = f.after - at;
        if (f.kind === 'flip') {
          out = Buffer.from(out);
          const end = Math.min(split + (f.count ?? 1), out.length);
          for (let i = split; i < end; i++) out[i] = (out[i] as number) ^ 0xff;
          faults.flip++;
          continue;
        }
        if (split > 0) lane.push({ data: out.subarray(0, split) }, x.latency);
        out = out.subarray(split);
        at = f.after;
        const kind = f.kind;
        const effect =
          kind === 'stall'
            ? () => lane.hold(f.ms)
            : kind === 'reset'
              ? () => destroy(true)
              : cutOff;
        const fire = () => {
          faults[kind]++;
          effect();
        };
        lane.push({ action: fire }, x.latency);
        if (kind === 'truncate') cut = true;
        if (kind !== 'stall') return;
      }
      if (out.length > 0) lane.push({ data: out }, x.latency);
    };

    const requests = new MessageParser(
      (head) => framingOf(head, false),
      (seg) => {
        if (answering) return;
        if (seg.type === 'head') {
          counters.requests++;
          const { first: method, target: path, headers } = seg.head;
          const length = Number(headers.get('content-length') ?? 0);
          const hasBody = length > 0 || framingOf(seg.head, false) === 'chunked';
          const fired = firing('request', method, path, hasBody);
          const latency = fired.reduce((ms, f) => (f.kind === 'latency' ? ms + f.ms : ms), 0);
          if (latency > 0) faults.latency++;
          const injected = fired.find((f): f is StatusFault => f.kind === 'status');
          const x: Exchange = {
            method,
            target: path,
            latency,
            injected,
            ready: /100-continue/i.test(headers.get('expect') ?? '') || !hasBody,
            requestFaults: placed(fired, length),
            requestBody: 0,
            responseFaults: [],
            responseBody: 0,
            bodyless: method === 'HEAD',
          };
          exchanges.push(x);
          if (!hasBody && fired.some((f) => f.kind === 'reset')) {
            // A request without a body is reset before the server sees it.
            answering = true;
            return toServer.push({ action: resetNow }, latency);
          }
          if (!injected) return toServer.push({ data: seg.data }, latency);
          answering = true;
          return flushInjected();
        }
        const x = exchanges[exchanges.length - 1] as Exchange;
        if (seg.type === 'frame') return toServer.push({ data: seg.data }, x.latency);
        x.requestBody += seg.data.length;
        forwardBody(toServer, x, seg.data, x.requestBody - seg.data.length, x.requestFaults);
      },
      () => {
        const x = exchanges[exchanges.length - 1];
        if (x?.injected) {
          x.ready = true;
          flushInjected();
        }
      },
    );

    const responses = new MessageParser(
      (head) =>
        framingOf(
          head,
          exchanges[0]?.bodyless === true || head.status === 204 || head.status === 304,
        ),
      (seg) => {
        if (cut) return;
        const x = exchanges[0];
        if (!x) return toClient.push({ data: seg.data }, 0);
        if (seg.type === 'head') {
          const length = Number(seg.head.headers.get('content-length') ?? 0);
          const framing = framingOf(
            seg.head,
            x.bodyless || seg.head.status === 204 || seg.head.status === 304,
          );
          const hasBody =
            seg.head.status >= 200 && (framing === 'length' ? length > 0 : framing !== 'none');
          if (seg.head.status < 200) return toClient.push({ data: seg.data }, x.latency);
          const fired = firing('response', x.method, x.target, hasBody);
          if (!hasBody && fired.some((f) => f.kind === 'reset')) {
            // A response without a body (a PUT's) is reset instead of delivered: the server did
            // the work, the client never hears of it.
            cut = true;
            return toClient.push({ action: resetNow }, x.latency);
          }
          x.responseFaults = placed(fired, length);
          return toClient.push({ data: seg.data }, x.latency);
        }
        if (seg.type === 'frame') return toClient.push({ data: seg.data }, x.latency);
        x.responseBody += seg.data.length;
        forwardBody(toClient, x, seg.data, x.responseBody - seg.data.length, x.responseFaults);
      },
      (interim) => {
        if (interim) return;
        exchanges.shift();
        flushInjected();
      },
    );

    const feed = (parser: MessageParser) => (data: Buffer) => {
      try {
        parser.feed(data);
      } catch (error) {
        // Not HTTP/1.1 as far as this proxy can tell: drop the connection, as a middlebox would,
        // and count it (a test that sees it can tell the proxy's limit from the driver's fault).
        counters.unreadable++;
        lastUnreadable = error as Error;
        destroy(false);
      }
    };
    client.on('data', feed(requests));
    upstream.on('data', feed(responses));
    // A half-close travels on once what is queued before it has been written.
    client.on('end', () => toServer.push({ action: () => upstream.end() }, 0));
    upstream.on('end', () => toClient.push({ action: () => client.end() }, 0));
    client.on('error', () => destroy(false));
    upstream.on('error', () => destroy(false));
    // A client that is gone wants nothing more; a server that is gone still owes what is queued.
    client.on('close', () => destroy(false));
    upstream.on('close', () => {
      sockets.delete(upstream);
      toClient.push({ action: () => client.end() }, 0);
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    set,
    stats: () => ({ ...counters, faults: { ...faults }, lastUnreadable }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

function matches(pattern: RegExp | string | undefined, value: string, exact: boolean): boolean {
  if (pattern === undefined) return true;
  if (typeof pattern === 'string') return exact ? pattern === value : value.includes(pattern);
  return pattern.test(value);
}
