/**
 * Fault knobs and the request log of the versions server: what a test arms to see a client
 * survive (or correctly refuse) a broken exchange, and the record it asserts on afterwards.
 *
 * A fault matches requests by operation, method, container and blob name, fires on the next
 * `times` matches (once by default) and then disarms itself, so a retry that follows sees a
 * healthy server. The kinds cover the failures a storage client must tell apart:
 * - `status`: an error answer (503 `ServerBusy` by default) and nothing applied;
 * - `delay`: the request waits, then runs normally;
 * - `drop-request`: the connection is closed before anything is applied;
 * - `drop-response`: the request is applied, then the connection closes instead of the answer
 *   (a lost commit response);
 * - `drop-mid-body`: the answer's status, headers and part of its body are sent, then the
 *   connection closes (for answers without a body, the same as `drop-response`).
 *
 * @module
 */

/** The operations the server tells apart (the names Microsoft's REST reference uses). */
export type OperationName =
  | 'ListContainers'
  | 'GetAccountInfo'
  | 'CreateContainer'
  | 'DeleteContainer'
  | 'GetContainerProperties'
  | 'ListBlobs'
  | 'PutBlob'
  | 'PutBlobFromUrl'
  | 'PutBlock'
  | 'PutBlockList'
  | 'GetBlockList'
  | 'GetBlob'
  | 'GetBlobProperties'
  | 'DeleteBlob'
  | 'CopyBlob'
  | 'CopyBlobFromUrl'
  | 'SetBlobMetadata'
  | 'SetBlobProperties'
  | 'Unsupported';

/** Which requests a fault applies to; every field given must match. */
export interface FaultMatch {
  op?: OperationName | OperationName[];
  method?: string;
  container?: string;
  /** The blob name, exactly, or a pattern it must match. */
  blob?: string | RegExp;
}

/** One armed fault. */
export type Fault = FaultMatch & { times?: number } & (
    | { kind: 'status'; status?: number; code?: string }
    | { kind: 'delay'; ms: number }
    | { kind: 'drop-request' }
    | { kind: 'drop-response' }
    | { kind: 'drop-mid-body'; afterBytes?: number }
  );

/** An armed fault with its remaining count. */
export interface ArmedFault {
  readonly fault: Fault;
  /** How many more matching requests it fires on. */
  remaining: number;
  /** How many times it fired. */
  fired: number;
}

/** What a request is, for matching and for the log. */
export interface RequestTarget {
  op: OperationName;
  method: string;
  container: string | undefined;
  blob: string | undefined;
}

function matches(m: FaultMatch, t: RequestTarget): boolean {
  if (m.op !== undefined && !(Array.isArray(m.op) ? m.op : [m.op]).includes(t.op)) return false;
  if (m.method !== undefined && m.method.toUpperCase() !== t.method) return false;
  if (m.container !== undefined && m.container !== t.container) return false;
  if (m.blob !== undefined) {
    if (t.blob === undefined) return false;
    if (typeof m.blob === 'string' ? m.blob !== t.blob : !m.blob.test(t.blob)) return false;
  }
  return true;
}

/** The fault registry a server exposes as `faults`. */
export class Faults {
  readonly #armed: ArmedFault[] = [];

  /** Arm `fault`; it fires on the next `times` (default 1) matching requests. */
  inject(fault: Fault): ArmedFault {
    const armed: ArmedFault = { fault, remaining: fault.times ?? 1, fired: 0 };
    this.#armed.push(armed);
    return armed;
  }

  /** Disarm everything. */
  clear(): void {
    this.#armed.length = 0;
  }

  /** The faults still armed. */
  get pending(): readonly ArmedFault[] {
    return this.#armed.filter((a) => a.remaining > 0);
  }

  /** Take every armed fault that matches `target` (each one fires once per request). */
  take(target: RequestTarget): Fault[] {
    const fired: Fault[] = [];
    for (const armed of this.#armed) {
      if (armed.remaining > 0 && matches(armed.fault, target)) {
        armed.remaining--;
        armed.fired++;
        fired.push(armed.fault);
      }
    }
    for (let i = this.#armed.length - 1; i >= 0; i--) {
      if ((this.#armed[i] as ArmedFault).remaining <= 0) this.#armed.splice(i, 1);
    }
    return fired;
  }
}

/** One request as the server saw it. */
export interface LogEntry extends RequestTarget {
  /** Order of arrival, from 1. */
  seq: number;
  /** The path and query as sent. */
  url: string;
  /** The `versionid` query parameter, if any. */
  versionId: string | undefined;
  /** Request headers, names lower-cased (`authorization` included: the dev key is public). */
  headers: Record<string, string>;
  /** Request body length in bytes. */
  bytesIn: number;
  /** The status sent, or `undefined` when the connection was dropped before an answer. */
  status: number | undefined;
  /** The `x-ms-error-code` sent with an error answer. */
  errorCode: string | undefined;
  /** The `x-ms-version-id` sent, for writes and reads. */
  responseVersionId: string | undefined;
  /** The faults that fired on this request, by kind. */
  faults: Fault['kind'][];
}

/** The request log a server exposes as `log`. */
export class RequestLog {
  readonly #entries: LogEntry[] = [];
  #seq = 0;

  /** Every request since the start (or the last {@link clear}), in order of arrival. */
  get entries(): readonly LogEntry[] {
    return this.#entries;
  }

  /** The requests matching `m` (all fields given must match). */
  filter(m: FaultMatch = {}): LogEntry[] {
    return this.#entries.filter((e) => matches(m, e));
  }

  /** How many requests match `m`. */
  count(m: FaultMatch = {}): number {
    return this.filter(m).length;
  }

  /** Forget what was logged. */
  clear(): void {
    this.#entries.length = 0;
  }

  /** @internal Start an entry for a request (the server fills in the answer). */
  begin(
    fields: Omit<LogEntry, 'seq' | 'status' | 'errorCode' | 'responseVersionId' | 'faults'>,
  ): LogEntry {
    const entry: LogEntry = {
      ...fields,
      seq: ++this.#seq,
      status: undefined,
      errorCode: undefined,
      responseVersionId: undefined,
      faults: [],
    };
    this.#entries.push(entry);
    return entry;
  }
}
