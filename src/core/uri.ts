/**
 * Strict URIs for objects, folders and pinned versions.
 *
 * `scheme://bucket/a/b.csv` names a file, `scheme://bucket/a/` (trailing `/`) or
 * `scheme://bucket` a folder. `?at=version:ID` pins one version of one file, `?at=commit:ID`
 * pins a provcat commit (a folder, or anything below the committed folder).
 *
 * There is exactly one encode/decode boundary: {@link Uri.parse} percent-decodes each path
 * segment into key bytes and {@link Uri.toString} encodes them back, so every key, including ones
 * with `%`, `+`, spaces or non-ASCII characters, survives URI -> key -> URI -> key unchanged. `+`
 * is always a plus, never a space. Unencoded spaces and non-ASCII characters are accepted on input
 * for convenience; a bare `%` is not (write `%25`).
 *
 * Parsing refuses, with {@link UriError}: empty segments (`a//b`), `.` and `..` segments (also
 * when percent-encoded, `%2e%2e`), NUL and other control characters, an encoded `/` (`%2F`)
 * inside a segment, fragments, and any query other than one `at=`. A key that fails these rules
 * cannot be named by a URI, so a folder holding one cannot be fetched faithfully; listings
 * report it as an error instead of skipping it.
 *
 * @module
 */
import { UriError } from './errors.js';

/** What `?at=` pins: one version of one file, or a provcat commit. */
export interface At {
  readonly kind: 'version' | 'commit';
  readonly id: string;
}

const SCHEME = /^[a-z][a-z0-9+.-]*$/;
const BUCKET = /^[a-z0-9][a-z0-9._-]{0,221}$/;
const COMMIT_ID = /^[0-9a-f]{64}$/;
// RFC 3986 pchar minus '%' (always encoded) — the characters a segment may show unencoded.
const PLAIN = /[A-Za-z0-9\-._~!$&'()*+,;=:@]/;

/** Why a key segment cannot be named by a URI, or `undefined` when it can. */
export function segmentProblem(segment: string): string | undefined {
  if (segment === '') return 'empty path segment (a//b)';
  if (segment === '.' || segment === '..') return `'${segment}' segment`;
  if (segment.includes('/')) return "'/' inside a segment (%2F)";
  if (CONTROL.test(segment)) return 'NUL or control character';
  if (!isWellFormed(segment)) return 'lone UTF-16 surrogate (not valid UTF-8)';
  return undefined;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what we refuse
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * Why no URI can name the key `key` (a folder's key ends in `/`; `''` is the bucket), or
 * `undefined` when one can. A key that starts with `/` has an empty first segment: `/` itself
 * (another client's folder marker at a bucket root) would otherwise read as the bucket.
 */
export function keyNameProblem(key: string): string | undefined {
  const body = key.endsWith('/') ? key.slice(0, -1) : key;
  if (body === '') return key === '' ? undefined : segmentProblem('');
  // The character checks run once over the whole key (a listing makes a URI per key); a
  // segment is looked at closely only when the key has such a character or may be odd.
  const suspect = CONTROL.test(body) || !isWellFormed(body);
  for (const seg of body.split('/')) {
    if (suspect || seg === '' || seg === '.' || seg === '..') {
      const problem = segmentProblem(seg);
      if (problem) return problem;
    }
  }
  return undefined;
}

/** No lone UTF-16 surrogate: `String.prototype.isWellFormed` (ES2024, in V8 since Node 20). */
function isWellFormed(s: string): boolean {
  return (s as unknown as { isWellFormed(): boolean }).isWellFormed();
}

/**
 * `scheme://bucket/key` for messages and errors, each key segment encoded as a {@link Uri}
 * prints it; nothing is refused (a key no URI could name is still shown). With `versionId`, the
 * URI of that version (`?at=version:ID`), as a user names it.
 */
export function uriText(scheme: string, bucket: string, key = '', versionId?: string): string {
  const base = `${scheme}://${bucket}/${key.split('/').map(encodeSegment).join('/')}`;
  return versionId === undefined ? base : `${base}?at=version:${encodeURIComponent(versionId)}`;
}

/** Percent-encode one key segment (UTF-8, uppercase hex); inverse of the decoding in parse. */
export function encodeSegment(segment: string): string {
  let out = '';
  for (const ch of segment) {
    if (PLAIN.test(ch)) out += ch;
    else
      for (const b of Buffer.from(ch, 'utf8'))
        out += `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function decodeSegment(raw: string, text: string): string {
  if (/%(?![0-9A-Fa-f]{2})/.test(raw)) {
    throw new UriError(`bad percent-escape in '${raw}' (write a literal % as %25)`, { uri: text });
  }
  const bytes: number[] = [];
  for (let i = 0; i < raw.length; ) {
    if (raw[i] === '%') {
      bytes.push(Number.parseInt(raw.slice(i + 1, i + 3), 16));
      i += 3;
    } else {
      const cp = raw.codePointAt(i) as number;
      const ch = String.fromCodePoint(cp);
      for (const b of Buffer.from(ch, 'utf8')) bytes.push(b);
      i += ch.length;
    }
  }
  const buf = Buffer.from(bytes);
  let decoded: string;
  try {
    decoded = new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch (cause) {
    throw new UriError(`'${raw}' does not decode to UTF-8`, { uri: text, cause });
  }
  return decoded;
}

/** A parsed, validated provcat URI. Immutable. */
export class Uri {
  /** `s3`, `gs`, `az`, `local`, ... */
  readonly scheme: string;
  /** The bucket (or Azure container). */
  readonly bucket: string;
  /** The decoded path segments; empty for the bucket itself. */
  readonly segments: readonly string[];
  /** True for a folder (a trailing `/`, or the bucket). */
  readonly isFolder: boolean;
  /** The pin, if the URI has `?at=`. */
  readonly at: At | undefined;

  private constructor(
    scheme: string,
    bucket: string,
    segments: readonly string[],
    isFolder: boolean,
    at: At | undefined,
  ) {
    this.scheme = scheme;
    this.bucket = bucket;
    this.segments = segments;
    this.isFolder = isFolder || segments.length === 0;
    this.at = at;
  }

  /** Parse and validate a URI string. Throws {@link UriError} with the reason. */
  static parse(text: string): Uri {
    if (typeof text !== 'string') throw new UriError('a URI must be a string');
    const m = /^([^:/?#]+):\/\/([^/?#]*)(\/[^?#]*)?(\?[^#]*)?(#.*)?$/.exec(text);
    if (!m)
      throw new UriError(`not a URI of the form scheme://bucket/key: '${text}'`, { uri: text });
    const [, scheme = '', bucket = '', path = '', query, fragment] = m;
    if (!SCHEME.test(scheme)) throw new UriError(`bad scheme '${scheme}'`, { uri: text });
    if (fragment !== undefined) throw new UriError('a URI may not have a #fragment', { uri: text });
    Uri.checkBucket(bucket, text);
    let rawSegments = path === '' ? [] : path.slice(1).split('/');
    let isFolder = path === '' || path === '/';
    if (path === '/') rawSegments = [];
    else if (rawSegments.length > 0 && rawSegments[rawSegments.length - 1] === '') {
      isFolder = true;
      rawSegments = rawSegments.slice(0, -1);
    }
    const segments = rawSegments.map((raw) => {
      const seg = decodeSegment(raw, text);
      const problem = segmentProblem(seg);
      if (problem) throw new UriError(`${problem} in '${text}'`, { uri: text });
      return seg;
    });
    const at = query === undefined ? undefined : Uri.parseQuery(query.slice(1), text);
    if (at?.kind === 'version' && isFolder) {
      throw new UriError('?at=version: names one file; a folder takes ?at=commit:', { uri: text });
    }
    return new Uri(scheme, bucket, segments, isFolder, at);
  }

  private static checkBucket(bucket: string, text: string): void {
    if (!BUCKET.test(bucket)) {
      throw new UriError(
        `bad bucket name '${bucket}' (lowercase letters, digits, '.', '-', '_'; starting with a letter or digit)`,
        { uri: text },
      );
    }
  }

  private static parseQuery(query: string, text: string): At {
    const m = /^at=(version|commit):(.+)$/.exec(query);
    if (!m) {
      throw new UriError(`the only query is ?at=version:ID or ?at=commit:ID, not '?${query}'`, {
        uri: text,
      });
    }
    const kind = m[1] as At['kind'];
    let id: string;
    try {
      id = decodeURIComponent(m[2] as string);
    } catch (cause) {
      throw new UriError(`bad percent-escape in '?${query}'`, { uri: text, cause });
    }
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what we refuse
    if (id === '' || /[\u0000-\u001f\u007f]/.test(id)) {
      throw new UriError(`bad ${kind} ID in '${text}'`, { uri: text });
    }
    if (kind === 'commit' && !COMMIT_ID.test(id)) {
      throw new UriError('a commit ID is 64 lowercase hex characters (a SHA-256)', { uri: text });
    }
    return { kind, id };
  }

  /**
   * The URI naming `key` in `bucket`: a key ending in `/` (or empty) is a folder. Throws
   * {@link UriError} for a key no URI can name (`a//b`, `..`, control characters).
   */
  static fromKey(scheme: string, bucket: string, key: string, at?: At): Uri {
    const text = `${scheme}://${bucket}/${key}`;
    if (!SCHEME.test(scheme)) throw new UriError(`bad scheme '${scheme}'`, { uri: text });
    Uri.checkBucket(bucket, text);
    const problem = keyNameProblem(key);
    if (problem) throw new UriError(`key ${JSON.stringify(key)}: ${problem}`, { uri: text });
    const isFolder = key === '' || key.endsWith('/');
    const body = isFolder ? key.slice(0, -1) : key;
    return new Uri(scheme, bucket, body === '' ? [] : body.split('/'), isFolder, at);
  }

  /** The key, joined on first use (a folder fetch asks each listed file's key several times). */
  #key: string | undefined;

  /** The object key: segments joined by `/`; empty for the bucket. No trailing `/`. */
  get key(): string {
    this.#key ??= this.segments.join('/');
    return this.#key;
  }

  /** The listing prefix of this URI as a folder: `key/`, or empty for the bucket. */
  get prefix(): string {
    return this.segments.length === 0 ? '' : `${this.key}/`;
  }

  /** The last segment (the file or folder name), or the bucket for the bucket. */
  get name(): string {
    return this.segments[this.segments.length - 1] ?? this.bucket;
  }

  /** True when this URI is the bucket itself. */
  get isBucket(): boolean {
    return this.segments.length === 0;
  }

  /** The folder this URI is in (the bucket's parent is the bucket). Keeps `?at=`. */
  parent(): Uri {
    return new Uri(this.scheme, this.bucket, this.segments.slice(0, -1), true, this.pinForFolder());
  }

  /**
   * A URI below this folder: `rel` is a key relative to it (`a/b.csv`, or `a/` for a folder).
   * Keeps a commit pin (the commit covers everything below); a version pin does not carry over.
   */
  join(rel: string): Uri {
    const child = Uri.fromKey(this.scheme, this.bucket, this.prefix + rel);
    return child.withAt(this.at?.kind === 'commit' ? this.at : undefined);
  }

  /** The same location with another pin (or none). */
  withAt(at: At | undefined): Uri {
    if (at?.kind === 'version' && this.isFolder) {
      throw new UriError('?at=version: names one file; a folder takes ?at=commit:', {
        uri: this.toString(),
      });
    }
    return new Uri(this.scheme, this.bucket, this.segments, this.isFolder, at);
  }

  /** The same location as a folder (trailing `/`). */
  asFolder(): Uri {
    return new Uri(this.scheme, this.bucket, this.segments, true, this.pinForFolder());
  }

  /** The key of `other` relative to this folder, or `undefined` when it is not below it. */
  relative(other: Uri): string | undefined {
    if (other.scheme !== this.scheme || other.bucket !== this.bucket) return undefined;
    const p = this.prefix;
    const k = other.isFolder && other.segments.length > 0 ? `${other.key}/` : other.key;
    return k.startsWith(p) ? k.slice(p.length) : undefined;
  }

  /** True when `other` is this folder or below it (same scheme and bucket). */
  contains(other: Uri): boolean {
    if (other.scheme !== this.scheme || other.bucket !== this.bucket) return false;
    if (this.segments.length > other.segments.length) return false;
    return this.segments.every((s, i) => other.segments[i] === s);
  }

  private pinForFolder(): At | undefined {
    return this.at?.kind === 'commit' ? this.at : undefined;
  }

  /** The canonical text: segments percent-encoded, `/` after a folder, `?at=` last. */
  toString(): string {
    const path = this.segments.map(encodeSegment).join('/');
    const tail = this.isFolder && this.segments.length > 0 ? '/' : '';
    const base = `${this.scheme}://${this.bucket}/${path}${tail}`;
    return this.at ? `${base}?at=${this.at.kind}:${encodeURIComponent(this.at.id)}` : base;
  }

  /** JSON form: the canonical text. */
  toJSON(): string {
    return this.toString();
  }

  /** True when both name the same location and pin. */
  equals(other: Uri): boolean {
    return this.toString() === other.toString();
  }
}

/** Accept a string or a {@link Uri}; parse strings strictly. */
export function toUri(uri: Uri | string): Uri {
  return typeof uri === 'string' ? Uri.parse(uri) : uri;
}
