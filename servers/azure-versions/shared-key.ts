/**
 * Shared Key authorization for the versions server: the string-to-sign of Microsoft's
 * "Authorize with Shared Key" (Blob service, version 2009-09-19 and later), recomputed from the
 * request as it arrived on the wire and compared with the signature in `Authorization`.
 *
 * The string-to-sign is the verb, eleven standard headers (Content-Length empty when 0), the
 * canonicalized `x-ms-*` headers and the canonicalized resource (`/account/path` plus the query
 * parameters, lower-cased, sorted, URL-decoded). Two details follow the service rather than the
 * prose of the docs, because a signature only matches when both sides agree byte for byte:
 * - `x-ms-*` headers are sorted the way the service sorts them (a .NET culture-aware order in
 *   which `-` and `'` are ignored on the first pass), not by code unit: `x-ms-meta-ab` sorts
 *   before `x-ms-meta-a-c` although `-` < `b` in ASCII. The JS SDK implements the same order.
 * - query parameters without a value are left out of the canonicalized resource, as the JS SDK
 *   signs them (the docs do not cover empty values).
 *
 * @module
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** How far `x-ms-date` may be from the server's clock (the service allows 15 minutes). */
const MAX_SKEW_MS = 15 * 60 * 1000;

/** The standard headers in the string-to-sign, in order (after the verb). */
const SIGNED_STANDARD_HEADERS = [
  'content-encoding',
  'content-language',
  'content-length',
  'content-md5',
  'content-type',
  'date',
  'if-modified-since',
  'if-match',
  'if-none-match',
  'if-unmodified-since',
  'range',
] as const;

/**
 * First-pass weights of the characters an HTTP header name can hold, in the service's order:
 * punctuation, then `+`, then digits, then letters (case-insensitive). `-` and `'` have no weight
 * on this pass; every other character is ignored too.
 */
const PRIMARY_ORDER = '!#$%&*.^_`|~+0123456789abcdefghijklmnopqrstuvwxyz';

function primaryWeight(ch: string): number {
  return PRIMARY_ORDER.indexOf(ch.toLowerCase()) + 1;
}

/** The tie-break pass: the ignorable marks, `'` before `-`; 0 for any other character. */
function markWeight(ch: string): number {
  if (ch === "'") return 1;
  if (ch === '-') return 2;
  return 0;
}

/**
 * Compare two lower-cased header names in the service's order: first by their weighted
 * characters alone; on a tie, walking both names together, the first position where exactly one
 * holds a mark (`-`, `'`) puts the other first, and different marks order `'` before `-`.
 */
export function compareHeaderNames(a: string, b: string): number {
  const pa = [...a].map(primaryWeight).filter((w) => w > 0);
  const pb = [...b].map(primaryWeight).filter((w) => w > 0);
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    const d = (pa[i] as number) - (pb[i] as number);
    if (d !== 0) return d;
  }
  if (pa.length !== pb.length) return pa.length - pb.length;
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (i >= a.length) return -1;
    if (i >= b.length) return 1;
    const ma = markWeight(a[i] as string);
    const mb = markWeight(b[i] as string);
    if (ma === mb) continue;
    if (ma === 0) return -1;
    if (mb === 0) return 1;
    return ma - mb;
  }
  return 0;
}

/** Header values as received, by lower-cased name (the first occurrence of a repeated header). */
function headerMap(req: IncomingMessage): Map<string, string> {
  const map = new Map<string, string>();
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = (raw[i] as string).toLowerCase();
    if (!map.has(name)) map.set(name, (raw[i + 1] as string).trim());
  }
  return map;
}

/**
 * The canonicalized resource for a request to `path?query` on `account`: `/account` followed by
 * the URL-encoded path as sent, then one `\nname:value` line per query parameter that has a
 * value (names lower-cased and sorted, values URL-decoded).
 */
export function canonicalizedResource(account: string, rawUrl: string): string {
  const url = new URL(rawUrl, 'http://localhost');
  let out = `/${account}${url.pathname || '/'}`;
  const query = url.search.startsWith('?') ? url.search.slice(1) : url.search;
  const params = new Map<string, string>();
  for (const part of query.split('&')) {
    const eq = part.indexOf('=');
    if (eq <= 0 || eq !== part.lastIndexOf('=') || eq === part.length - 1) continue;
    params.set(part.slice(0, eq).toLowerCase(), part.slice(eq + 1));
  }
  for (const name of [...params.keys()].sort()) {
    // Throws URIError on invalid percent-encoding, as the SDK's own decoding would.
    out += `\n${name}:${decodeURIComponent(params.get(name) as string)}`;
  }
  return out;
}

/** The Shared Key string-to-sign of a request, as the server recomputes it. */
export function stringToSign(req: IncomingMessage, account: string): string {
  const headers = headerMap(req);
  const lines: string[] = [(req.method ?? 'GET').toUpperCase()];
  for (const name of SIGNED_STANDARD_HEADERS) {
    const value = headers.get(name) ?? '';
    lines.push(name === 'content-length' && value === '0' ? '' : value);
  }
  const msHeaders = [...headers.entries()]
    .filter(([name]) => name.startsWith('x-ms-'))
    .sort(([a], [b]) => compareHeaderNames(a, b));
  let canonicalHeaders = '';
  for (const [name, value] of msHeaders) canonicalHeaders += `${name}:${value}\n`;
  return `${lines.join('\n')}\n${canonicalHeaders}${canonicalizedResource(account, req.url ?? '/')}`;
}

/** Why a Shared Key request was refused, or `undefined` when its signature is right. */
export function sharedKeyProblem(
  req: IncomingMessage,
  account: string,
  key: Buffer,
  now = Date.now(),
): string | undefined {
  const auth = req.headers.authorization ?? '';
  const match = /^SharedKey ([^:]+):(.+)$/.exec(auth);
  if (!match) {
    return auth === ''
      ? 'no Authorization header (this server accepts SharedKey and SAS only)'
      : 'the Authorization header is not of the form "SharedKey account:signature"';
  }
  if (match[1] !== account) return `the request is signed for account ${match[1]}, not ${account}`;
  const date = req.headers['x-ms-date'] ?? req.headers.date;
  const when = typeof date === 'string' ? Date.parse(date) : Number.NaN;
  if (Number.isNaN(when)) return 'no valid x-ms-date or Date header';
  if (Math.abs(now - when) > MAX_SKEW_MS) {
    return `x-ms-date ${date} is more than 15 minutes from the server's clock`;
  }
  let toSign: string;
  try {
    toSign = stringToSign(req, account);
  } catch (error) {
    return `the request cannot be canonicalized: ${(error as Error).message}`;
  }
  const expected = createHmac('sha256', key).update(toSign, 'utf8').digest();
  const given = Buffer.from(match[2] as string, 'base64');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return 'the signature does not match the string-to-sign computed by the server';
  }
  return undefined;
}
