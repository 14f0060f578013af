/**
 * Just enough HTTP/1.1 for the fault proxy: heads, where each message's body begins and ends
 * (Content-Length, chunked, bodiless responses, interim `100 Continue`), message after message.
 *
 * @module
 */

const MAX_HEAD = 64 * 1024;

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
export class MessageParser {
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

export function framingOf(head: Head, bodyless: boolean): Framing {
  if (bodyless) return 'none';
  const te = head.headers.get('transfer-encoding');
  if (te && /(^|,)\s*chunked\s*$/i.test(te)) return 'chunked';
  if (head.headers.has('content-length')) return 'length';
  return head.status ? 'close' : 'none';
}
