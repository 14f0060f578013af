/**
 * The lean path's request signer, built from the SDK's own pieces without the S3 client:
 * `SignatureV4` of `@smithy/signature-v4` (the signer the client wraps, with S3's settings) over
 * the SDK's default credential chain ({@link sdkSignerFactory}), its members called one by one
 * ({@link signFromPieces}) and its derived keys cached ({@link cacheSigningKeys}). See
 * lean-path.ts for why the lean path exists.
 *
 * @module
 */
import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import { hmacSha256Hex, sha256Hex } from '../../src/core/digest.js';
import type { S3Config } from './config.js';
import type { Route } from './route.js';

/** The request shape the SDK's signer takes (a smithy HttpRequest's fields). */
interface SignableRequest {
  method: string;
  protocol: string;
  hostname: string;
  port?: number | undefined;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string>;
}

/** What the lean path needs of a signer: the SDK's `SignatureV4.sign`. */
export interface Signer {
  sign(
    request: SignableRequest,
    options: { signingDate: Date; signingRegion: string; signingService: string },
  ): Promise<{ headers: Record<string, string> }>;
}

/** The bytes of a buffer or view, as a Uint8Array over the same memory. */
function bytesOf(data: ArrayBuffer | ArrayBufferView): Uint8Array {
  return data instanceof ArrayBuffer
    ? new Uint8Array(data)
    : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The SHA-256 (and HMAC-SHA-256) constructor the signer takes, on node:crypto. */
export class Sha256 {
  private hash: Hash | Hmac;
  constructor(private readonly secret?: string | ArrayBuffer | ArrayBufferView) {
    this.hash = this.fresh();
  }
  private fresh(): Hash | Hmac {
    const s = this.secret;
    if (s === undefined) return createHash('sha256');
    return createHmac('sha256', typeof s === 'string' ? s : bytesOf(s));
  }
  update(data: string | ArrayBuffer | ArrayBufferView): void {
    // Strings go in as they are (UTF-8), bytes as a view: no copy per update.
    this.hash.update(typeof data === 'string' ? data : bytesOf(data));
  }
  async digest(): Promise<Uint8Array> {
    return this.hash.digest();
  }
  reset(): void {
    this.hash = this.fresh();
  }
}

/**
 * Signers built from the SDK's pieces, without the S3 client: `SignatureV4` (with S3's
 * `uriEscapePath: false`) over the SDK's default credential chain, resolved once and shared by
 * every route. Both modules are imported on first use (~0.1 s of CPU together, against ~0.25 s
 * for the client).
 */
export function sdkSignerFactory(
  config: Pick<S3Config, 'credentials' | 'awsProfile'> = {
    credentials: undefined,
    awsProfile: undefined,
  },
): (route: Route) => Promise<Signer> {
  let modules:
    | Promise<
        [
          typeof import('@smithy/signature-v4'),
          NonNullable<Awaited<ReturnType<typeof credentialsOf>>>,
        ]
      >
    | undefined;
  const signers = new Map<string, Promise<Signer>>();
  return (route) => {
    const id = `${route.signingName}/${route.signingRegion}`;
    let signer = signers.get(id);
    if (!signer) {
      modules ??= Promise.all([import('@smithy/signature-v4'), credentialChain(config)]);
      const loading = modules;
      signer = loading.then(([sdk, credentials]) =>
        signFromPieces(
          sdk,
          cacheSigningKeys(
            new sdk.SignatureV4({
              credentials,
              region: route.signingRegion,
              service: route.signingName,
              sha256: Sha256,
              uriEscapePath: false,
              applyChecksum: false,
            }),
          ),
        ),
      );
      signers.set(id, signer);
      signer.catch(() => {
        signers.delete(id);
        modules = undefined;
      });
    }
    return signer;
  };
}

/** Resolved credentials, as the SDK's credential provider gives them. */
interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string | undefined;
}

/** The members of the SDK's `SignatureV4` that {@link signFromPieces} calls (protected in its types). */
interface SignerPieces {
  credentialProvider: () => Promise<Credentials>;
  validateResolvedCredentials(credentials: unknown): void;
  formatDate(date: Date): { longDate: string; shortDate: string };
  createCanonicalRequest(
    request: SignableRequest,
    canonicalHeaders: Record<string, string>,
    payloadHash: string,
  ): string;
  getCanonicalHeaderList(canonicalHeaders: Record<string, string>): string;
  getSigningKey(
    credentials: Credentials,
    region: string,
    shortDate: string,
    service: string,
  ): Promise<Uint8Array>;
}

/**
 * Sign the lean path's requests (GET and HEAD, no body, the payload hash in their
 * `x-amz-content-sha256` header) from the SDK signer's own pieces, without the async steps and
 * copies of its `sign` (they were 12 of a cold 1,000-file fetch's 56 MB of allocations, and
 * ~0.05 s of its CPU; docs/performance.md). Everything that decides what is signed stays the
 * SDK's: its credential provider, date format, scope, canonical headers (which headers are
 * signable, how values are trimmed), canonical request (path, query encoding, header order) and
 * signing-key derivation.
 * What is written here is SigV4's fixed frame around them: the string to sign (algorithm, date,
 * scope, the canonical request's SHA-256) and the Authorization header, exactly as the SDK's
 * `signRequest` builds them; test/drivers/s3-lean.test.ts checks the headers equal the SDK's `sign` for
 * every shape the lean path sends. A request this does not cover (no payload hash header, or a
 * header the SDK would drop and regenerate) and an SDK release without these members go to the
 * SDK's `sign` itself.
 */
export function signFromPieces(sdk: typeof import('@smithy/signature-v4'), signer: Signer): Signer {
  const p = signer as unknown as Partial<SignerPieces>;
  if (
    typeof p.credentialProvider !== 'function' ||
    typeof p.validateResolvedCredentials !== 'function' ||
    typeof p.formatDate !== 'function' ||
    typeof p.createCanonicalRequest !== 'function' ||
    typeof p.getCanonicalHeaderList !== 'function' ||
    typeof p.getSigningKey !== 'function'
  ) {
    return signer;
  }
  const pieces = p as SignerPieces;
  const algorithm = sdk.ALGORITHM_IDENTIFIER;
  const generated = new Set(sdk.GENERATED_HEADERS);
  // The SDK's `prepareRequest` would drop a generated header, and the payload hash is read here
  // by its lower-case name only.
  const covered = (headers: Record<string, string>): boolean => {
    for (const name in headers) {
      const lower = name.toLowerCase();
      if (generated.has(lower) || (lower === sdk.SHA256_HEADER && name !== lower)) return false;
    }
    return true;
  };
  // The SDK formats the signing date for every request (an ISO string, two regex replacements):
  // it depends only on the second, so requests signed within one second share it.
  let datedSecond = Number.NaN;
  let dated = { longDate: '', shortDate: '' };
  return {
    async sign(request, options) {
      const payloadHash = request.headers[sdk.SHA256_HEADER];
      if (payloadHash === undefined || !covered(request.headers)) {
        return signer.sign(request, options);
      }
      const { signingDate, signingRegion, signingService } = options;
      const credentials = await pieces.credentialProvider();
      pieces.validateResolvedCredentials(credentials);
      const second = Math.floor(signingDate.getTime() / 1000);
      if (second !== datedSecond) {
        dated = pieces.formatDate(signingDate);
        datedSecond = second;
      }
      const { longDate, shortDate } = dated;
      const scope = sdk.createScope(shortDate, signingRegion, signingService);
      const headers: Record<string, string> = { ...request.headers };
      headers[sdk.AMZ_DATE_HEADER] = longDate;
      if (credentials.sessionToken) headers[sdk.TOKEN_HEADER] = credentials.sessionToken;
      const signed = { ...request, headers };
      const canonicalHeaders = sdk.getCanonicalHeaders(signed);
      const canonical = pieces.createCanonicalRequest(signed, canonicalHeaders, payloadHash);
      const key = await pieces.getSigningKey(credentials, signingRegion, shortDate, signingService);
      const signature = hmacSha256Hex(
        key,
        `${algorithm}\n${longDate}\n${scope}\n${sha256Hex(canonical)}`,
      );
      headers[sdk.AUTH_HEADER] =
        `${algorithm} Credential=${credentials.accessKeyId}/${scope}, ` +
        `SignedHeaders=${pieces.getCanonicalHeaderList(canonicalHeaders)}, Signature=${signature}`;
      return { headers };
    },
  };
}

/** What {@link cacheSigningKeys} wraps: the SDK signer's derivation of a signing key. */
type DeriveKey = (
  credentials: Credentials,
  ...scope: (string | undefined)[]
) => Promise<Uint8Array>;

/**
 * Give the SDK's signer a cache of derived signing keys looked up by the values they are
 * derived from. The SDK's own cache is keyed by an HMAC of the credentials, which it computes
 * again for every request just to look the key up (an HMAC, a hex encoding and a string per
 * request, about a tenth of signing a GET here). A miss still derives through the SDK, so the
 * signature is the SDK's. The method is private in the SDK's types: if a release renames it,
 * this wraps nothing and the SDK signs exactly as before.
 */
export function cacheSigningKeys(signer: object): Signer {
  const s = signer as { getSigningKey?: DeriveKey };
  const derive = s.getSigningKey;
  if (typeof derive === 'function') {
    const keys = new Map<string, Promise<Uint8Array>>();
    s.getSigningKey = (credentials, ...scope) => {
      const { accessKeyId, secretAccessKey, sessionToken } = credentials;
      const id = [accessKeyId, secretAccessKey, sessionToken, ...scope].join('\n');
      let key = keys.get(id);
      if (key === undefined) {
        // Keys are per day and per credentials: a few at most, unless credentials rotate.
        if (keys.size >= 16) keys.clear();
        key = derive.call(signer, credentials, ...scope);
        keys.set(id, key);
        key.catch(() => keys.delete(id));
      }
      return key;
    };
  }
  return signer as Signer;
}

/**
 * The credentials an {@link S3Config} asks for: its static ones, else the SDK's chain for its
 * `awsProfile`; `undefined` when it asks for neither (the client then builds the default chain).
 */
export async function credentialsOf(config: Pick<S3Config, 'credentials' | 'awsProfile'>) {
  if (config.credentials !== undefined) {
    const { accessKeyId, secretAccessKey, sessionToken } = config.credentials;
    const fixed = { accessKeyId, secretAccessKey, sessionToken };
    return async () => fixed;
  }
  if (config.awsProfile === undefined) return undefined;
  const { defaultProvider } = await import('@aws-sdk/credential-provider-node');
  return defaultProvider({ profile: config.awsProfile });
}

/**
 * The credentials to sign with: {@link credentialsOf}, else the SDK's default chain (memoized by
 * the SDK: resolved once, refreshed on expiry).
 */
async function credentialChain(config: Pick<S3Config, 'credentials' | 'awsProfile'>) {
  const given = await credentialsOf(config);
  if (given !== undefined) return given;
  const { defaultProvider } = await import('@aws-sdk/credential-provider-node');
  return defaultProvider({});
}
