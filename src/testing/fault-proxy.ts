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
import { framingOf, MessageParser } from './fault-http-framing.js';
import { Lane } from './fault-lane.js';
import {
  FAULT_KINDS,
  type FaultKind,
  type FaultProxy,
  type FaultProxyOptions,
  type FaultRule,
  type FlipFault,
  type ResetFault,
  type StallFault,
  type StatusFault,
  type TruncateFault,
} from './fault-rules.js';

export {
  FAULT_KINDS,
  type FaultKind,
  type FaultMatch,
  type FaultProxy,
  type FaultProxyOptions,
  type FaultRule,
  type FlipFault,
  type LatencyFault,
  type ProxyStats,
  type ResetFault,
  type StallFault,
  type StatusFault,
  type TruncateFault,
} from './fault-rules.js';

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
