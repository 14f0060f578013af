/**
 * The fault proxy's public types: the fault rules (what each matches on, and what it does), the
 * fault kinds, the proxy's options, its handle and its counters (`provcat/testing`).
 *
 * @module
 */

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
