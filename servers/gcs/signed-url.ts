/**
 * V4 signed-URL checks (GOOG4-RSA-SHA256), as GCS verifies them.
 *
 * Followed: cloud.google.com/storage/docs/authentication/canonical-requests (canonical request =
 * verb, path, canonical query, canonical headers, blank line, signed header names, payload
 * hash), cloud.google.com/storage/docs/authentication/signatures (string-to-sign =
 * `GOOG4-RSA-SHA256\n<X-Goog-Date>\n<date>/<location>/storage/goog4_request\n<hex SHA-256 of the
 * canonical request>`, signature = hex of the RSA-SHA256 signature), and
 * cloud.google.com/storage/docs/access-control/signed-urls (`X-Goog-Expires` at most 604800 s).
 * Cross-checked with what @google-cloud/storage 7.22 signs (src/signer.ts): the path is the
 * bucket and the object name, each segment percent-encoded except `A-Z a-z 0-9 - . _ ~`; query
 * keys and values encoded the same way, sorted by key; payload `UNSIGNED-PAYLOAD`.
 *
 * One deviation, forced by the SDK: it signs the `host` header as the endpoint's *hostname*,
 * without the port (`127.0.0.1`), while a client sends `Host: 127.0.0.1:PORT`. Real GCS never
 * sees a port (it is on 443). The check accepts a signature over either form of the host.
 *
 * Errors as GCS gives them in XML: 400 `AuthorizationQueryParametersError` for missing or
 * malformed parameters, 400 `ExpiredToken` past the expiry, 403 `SignatureDoesNotMatch` for a
 * signature that does not verify with any configured public key.
 *
 * @module
 */
import { createHash, type KeyObject, verify } from 'node:crypto';
import { ApiError } from './api-error.js';

/** A public key the server accepts signatures from (PEM text or a KeyObject). */
export type SigningKey = KeyObject | string;

/** True when the query carries V4 signature parameters (the request is a signed URL). */
export function isSignedUrlQuery(query: URLSearchParams): boolean {
  return query.has('X-Goog-Signature') || query.has('X-Goog-Algorithm');
}

/** RFC 3986 unreserved characters stay; everything else is %XX of its UTF-8 bytes, uppercase. */
function encode(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    // A malformed escape is kept as written: the signature check then fails on it, which is
    // the answer GCS gives for a URL it cannot reconstruct.
    return value;
  }
}

/** The canonical path: each segment decoded and re-encoded, slashes kept. */
function canonicalPath(rawPath: string): string {
  return rawPath
    .split('/')
    .map((segment) => encode(safeDecode(segment)))
    .join('/');
}

/** The canonical query: every parameter but the signature, encoded, sorted by key then value. */
function canonicalQuery(rawQuery: string): string {
  const pairs: [string, string][] = [];
  for (const piece of rawQuery.split('&')) {
    if (piece === '') continue;
    const eq = piece.indexOf('=');
    const key = safeDecode(eq < 0 ? piece : piece.slice(0, eq));
    const value = safeDecode(eq < 0 ? '' : piece.slice(eq + 1));
    if (key === 'X-Goog-Signature') continue;
    pairs.push([encode(key), encode(value)]);
  }
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : 1));
  return pairs.map(([k, v]) => `${k}=${v}`).join('&');
}

function authError(message: string): ApiError {
  return new ApiError(400, 'invalid', message, { xmlCode: 'AuthorizationQueryParametersError' });
}

/** The request as the signature check needs it. */
export interface SignedRequest {
  method: string;
  /** The path as received (still percent-encoded). */
  rawPath: string;
  /** The query string as received, without the `?`. */
  rawQuery: string;
  /** Request headers, names lowercased. */
  headers: Readonly<Record<string, string | string[] | undefined>>;
}

/** What a verified signature says. */
export interface VerifiedSignature {
  /** The account in `X-Goog-Credential`. */
  clientEmail: string;
  /** When the URL stops working, milliseconds since the epoch. */
  expiresAt: number;
}

/**
 * Verifies a V4 RSA signed URL request. Throws an {@link ApiError} (rendered as XML by the
 * route) when a parameter is missing or malformed, when the URL has expired at `now`, or when
 * the signature does not verify with any of `keys` (none configured: every signature fails).
 * `clientEmail`, when given, must be the credential's account.
 */
export function verifySignedUrl(
  request: SignedRequest,
  keys: readonly SigningKey[],
  now: number,
  clientEmail?: string,
): VerifiedSignature {
  const query = new URLSearchParams(request.rawQuery);
  const algorithm = query.get('X-Goog-Algorithm');
  const credential = query.get('X-Goog-Credential');
  const date = query.get('X-Goog-Date');
  const expires = query.get('X-Goog-Expires');
  const signedHeaders = query.get('X-Goog-SignedHeaders');
  const signature = query.get('X-Goog-Signature');
  if (
    algorithm === null ||
    credential === null ||
    date === null ||
    expires === null ||
    signedHeaders === null ||
    signature === null
  ) {
    throw authError(
      'Query-string authentication requires the X-Goog-Algorithm, X-Goog-Credential, X-Goog-Date, X-Goog-Expires, X-Goog-SignedHeaders and X-Goog-Signature parameters.',
    );
  }
  if (algorithm !== 'GOOG4-RSA-SHA256') {
    throw authError(`Unsupported X-Goog-Algorithm: ${algorithm} (this server checks RSA only).`);
  }
  const dateMatch = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(date);
  if (dateMatch === null) throw authError(`Invalid X-Goog-Date: ${date}`);
  const [, y, mo, d, h, mi, s] = dateMatch.map(Number) as number[];
  const signedAt = Date.UTC(y as number, (mo as number) - 1, d, h, mi, s);
  if (!/^\d+$/.test(expires) || Number(expires) < 1 || Number(expires) > 604800) {
    throw authError(`X-Goog-Expires must be 1 to 604800 seconds, not ${expires}.`);
  }
  const slash = credential.indexOf('/');
  const email = credential.slice(0, slash);
  const scope = credential.slice(slash + 1);
  const scopeParts = scope.split('/');
  if (
    slash <= 0 ||
    scopeParts.length !== 4 ||
    scopeParts[0] !== date.slice(0, 8) ||
    scopeParts[2] !== 'storage' ||
    scopeParts[3] !== 'goog4_request'
  ) {
    throw authError(`Invalid X-Goog-Credential: ${credential}`);
  }
  const expiresAt = signedAt + Number(expires) * 1000;
  if (now > expiresAt) {
    throw new ApiError(400, 'expired', 'Invalid argument.', {
      xmlCode: 'ExpiredToken',
      details: `The provided token has expired. Request signature expired at: ${new Date(expiresAt).toISOString()}`,
    });
  }
  if (clientEmail !== undefined && email !== clientEmail) {
    throw new ApiError(403, 'forbidden', `Unknown service account ${email}.`, {
      xmlCode: 'AccessDenied',
    });
  }
  const names = signedHeaders.split(';');
  if (!names.includes('host')) throw authError('X-Goog-SignedHeaders must include host.');
  const header = (name: string): string => {
    const value = request.headers[name];
    const text = Array.isArray(value) ? value.join(',') : (value ?? '');
    return text.trim().replace(/\s{2,}/g, ' ');
  };
  const host = header('host');
  const hostCandidates = [host, host.replace(/:\d+$/, '')].filter(
    (value, i, all) => all.indexOf(value) === i,
  );
  const payload = names.includes('x-goog-content-sha256')
    ? header('x-goog-content-sha256')
    : 'UNSIGNED-PAYLOAD';
  const signatureBytes = Buffer.from(signature, 'hex');
  for (const hostValue of hostCandidates) {
    const canonicalHeaders = [...names]
      .sort()
      .map((name) => `${name}:${name === 'host' ? hostValue : header(name)}\n`)
      .join('');
    const canonicalRequest = [
      request.method,
      canonicalPath(request.rawPath),
      canonicalQuery(request.rawQuery),
      canonicalHeaders,
      signedHeaders,
      payload,
    ].join('\n');
    const stringToSign = [
      'GOOG4-RSA-SHA256',
      date,
      scope,
      createHash('sha256').update(canonicalRequest).digest('hex'),
    ].join('\n');
    for (const key of keys) {
      if (verify('RSA-SHA256', Buffer.from(stringToSign), key, signatureBytes)) {
        return { clientEmail: email, expiresAt };
      }
    }
  }
  throw new ApiError(
    403,
    'forbidden',
    'The request signature we calculated does not match the signature you provided. Check your Google secret key and signing method.',
    { xmlCode: 'SignatureDoesNotMatch' },
  );
}
