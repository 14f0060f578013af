/**
 * The strict HTTP/1.1 response-head parser of the lean download (src/net/http1-download.ts),
 * and what it hands back: an accepted head, or a {@link DownloadFallback} telling the caller to
 * take its normal path.
 *
 * It reads only what it fully understands: a status line, a header block (CRLF line ends, no
 * folding, names case-insensitive, repeated headers joined), a status of 200 or 206, exactly one
 * Content-Length (repeats only when identical) and no Transfer-Encoding. Anything else is a
 * fallback, decided before any body byte reaches a consumer; nothing is guessed.
 * test/unit/http1-parser.fuzz.test.ts holds it to Node's own parser (llhttp).
 *
 * @module
 */

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
  /** The response head is larger than `DownloadOptions.maxHeaderBytes` (http1-download.ts). */
  | 'header-too-large'
  /** The sink's `DownloadSink.head` (http1-download.ts) returned `false`. */
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

/** True when `outcome` is a {@link DownloadFallback}. */
export function isFallback<T extends object>(
  outcome: T | DownloadFallback,
): outcome is DownloadFallback {
  return 'fallback' in outcome;
}

/** A parsed, accepted response head, plus whether the connection may be reused. */
export type HeadResult = (ResponseHead & { keepAlive: boolean }) | DownloadFallback;

/** An HTTP token (RFC 9110 §5.6.2): a header name. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A field value of visible characters, blanks and obs-text (no CR, LF or other control). */
export const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
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
