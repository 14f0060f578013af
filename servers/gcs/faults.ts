/**
 * Fault knobs: rules that make matching requests fail the ways a real network and a real
 * GCS front end do, so a driver's retry, resume and integrity paths can be tested.
 *
 * A rule matches by method, a regular expression on the raw path (as sent, still
 * percent-encoded, without the query) and optionally a predicate on the whole request, and
 * fires on the next `times` matching requests (default 1; `Infinity` for all), then retires.
 * Rules can be added, listed and cleared at any time, also while requests are in flight; a
 * request picks its rules when it arrives.
 *
 * Kinds:
 * - `status`: answer this status (default 503 `backendError`) with the JSON error, after
 *   reading the body (an upload chunk so answered commits nothing);
 * - `delay`: wait `ms` before handling the request;
 * - `dropRequest`: destroy the connection once `afterBytes` bytes of the request body have
 *   arrived (the bytes past that point are not seen by the server);
 * - `dropResponse`: send the headers and `afterBytes` bytes of the response body, then destroy
 *   the connection;
 * - `mangle`: corrupt a media download (JSON `alt=media` or a signed-URL GET): `ignoreRange`
 *   (200 with the whole object), `wrongContentRange` (the header shifted by one byte, body
 *   right), `flipByte` (one byte of the body inverted), `truncate` (one byte short, headers
 *   describing the full range), `extend` (one byte more than the range).
 *
 * @module
 */

/** The request as fault rules see it. */
export interface FaultRequest {
  method: string;
  /** Raw path, percent-encoded as sent, without the query. */
  path: string;
  query: URLSearchParams;
  headers: Readonly<Record<string, string | string[] | undefined>>;
  /** True for a media download (JSON `alt=media` or a signed-URL GET); only these are mangled. */
  media: boolean;
}

/** How a `mangle` rule corrupts a media response. */
export type MangleMode = 'ignoreRange' | 'wrongContentRange' | 'flipByte' | 'truncate' | 'extend';

/** Which requests a rule applies to, and how many times. */
export interface FaultMatch {
  /** HTTP method, case-insensitive; any when omitted. */
  method?: string;
  /** Tested against the raw path; any when omitted. */
  path?: RegExp;
  /** Further condition on the request. */
  when?: (request: FaultRequest) => boolean;
  /** How many matching requests the rule fires on (default 1). */
  times?: number;
}

/** A fault rule, by kind. */
export type FaultSpec =
  | (FaultMatch & { kind: 'status'; status?: number; reason?: string; message?: string })
  | (FaultMatch & { kind: 'delay'; ms: number })
  | (FaultMatch & { kind: 'dropRequest'; afterBytes: number })
  | (FaultMatch & { kind: 'dropResponse'; afterBytes: number })
  | (FaultMatch & { kind: 'mangle'; mode: MangleMode });

/** A registered rule: its spec, id and how many times it has fired. */
export type FaultRule = FaultSpec & { readonly id: number; fired: number; remaining: number };

/** The faults that fire for one request. */
export interface FaultPlan {
  delayMs: number;
  status: { status: number; reason: string; message: string } | undefined;
  dropRequestAfter: number | undefined;
  dropResponseAfter: number | undefined;
  mangle: MangleMode | undefined;
  /** Ids of the rules that fired. */
  fired: number[];
}

/** The set of fault rules of one server. */
export class Faults {
  private readonly rules: FaultRule[] = [];
  private nextId = 1;

  /** Adds a rule; returns its id (for {@link remove}). */
  add(spec: FaultSpec): number {
    const times = spec.times ?? 1;
    if (!(times > 0)) throw new RangeError('times must be positive');
    const rule = { ...spec, id: this.nextId++, fired: 0, remaining: times } as FaultRule;
    this.rules.push(rule);
    return rule.id;
  }

  /** Answer `status` (default 503) to the next matching request(s). */
  failWith(match: FaultMatch & { status?: number; reason?: string; message?: string }): number {
    return this.add({ ...match, kind: 'status' });
  }

  /** Delay matching requests by `ms` (default: every matching request). */
  delay(match: FaultMatch & { ms: number }): number {
    return this.add({ times: Number.POSITIVE_INFINITY, ...match, kind: 'delay' });
  }

  /** Drop the connection after `afterBytes` bytes of the request body (an upload chunk). */
  dropRequest(match: FaultMatch & { afterBytes: number }): number {
    return this.add({ ...match, kind: 'dropRequest' });
  }

  /** Drop the connection after `afterBytes` bytes of the response body (a download). */
  dropResponse(match: FaultMatch & { afterBytes: number }): number {
    return this.add({ ...match, kind: 'dropResponse' });
  }

  /** Corrupt matching media downloads. */
  mangle(match: FaultMatch & { mode: MangleMode }): number {
    return this.add({ ...match, kind: 'mangle' });
  }

  /** Removes one rule. */
  remove(id: number): void {
    const at = this.rules.findIndex((rule) => rule.id === id);
    if (at >= 0) this.rules.splice(at, 1);
  }

  /** Removes every rule. */
  clear(): void {
    this.rules.length = 0;
  }

  /** The rules still active (copies). */
  list(): FaultRule[] {
    return this.rules.map((rule) => ({ ...rule }));
  }

  /** Takes the rules that fire for this request (counting them down). */
  plan(request: FaultRequest): FaultPlan {
    const plan: FaultPlan = {
      delayMs: 0,
      status: undefined,
      dropRequestAfter: undefined,
      dropResponseAfter: undefined,
      mangle: undefined,
      fired: [],
    };
    for (const rule of [...this.rules]) {
      if (rule.method !== undefined && rule.method.toUpperCase() !== request.method) continue;
      if (rule.path !== undefined && !rule.path.test(request.path)) continue;
      if (rule.when !== undefined && !rule.when(request)) continue;
      let used = true;
      switch (rule.kind) {
        case 'delay':
          plan.delayMs += rule.ms;
          break;
        case 'status':
          if (plan.status !== undefined) used = false;
          else {
            plan.status = {
              status: rule.status ?? 503,
              reason: rule.reason ?? 'backendError',
              message: rule.message ?? 'Injected fault: the service is unavailable.',
            };
          }
          break;
        case 'dropRequest':
          if (plan.dropRequestAfter !== undefined) used = false;
          else plan.dropRequestAfter = rule.afterBytes;
          break;
        case 'dropResponse':
          if (plan.dropResponseAfter !== undefined) used = false;
          else plan.dropResponseAfter = rule.afterBytes;
          break;
        case 'mangle':
          if (plan.mangle !== undefined || !request.media) used = false;
          else plan.mangle = rule.mode;
          break;
      }
      if (!used) continue;
      rule.fired++;
      rule.remaining--;
      plan.fired.push(rule.id);
      if (rule.remaining <= 0) this.remove(rule.id);
    }
    return plan;
  }
}
