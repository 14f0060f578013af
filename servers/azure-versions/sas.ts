/**
 * Shared access signatures for the versions server: service SAS (container, blob and blob-version
 * scope) and account SAS, both signed with the account key, in the string-to-sign of version
 * 2020-12-06 and later (what SDK 12.32 signs by default).
 *
 * A SAS is checked the way the service checks one: the signature over the fields as they appear
 * in the query, the time window, the protocol (this server speaks only HTTP, so an HTTPS-only SAS
 * is refused, as Azure would refuse it over HTTP), the IP range, the scope (a blob SAS opens that
 * blob only; `sr=bv` that version only, because the version ID is part of what is signed) and the
 * permission letter the operation needs. User delegation SAS and stored access policies are not
 * implemented and are refused, with a message saying so.
 *
 * @module
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { OperationName } from './faults.js';

/** A refusal: the status, the `x-ms-error-code` and a message. */
export interface SasRefusal {
  status: number;
  code: string;
  message: string;
}

/** What a request wants, for the SAS check. */
export interface SasRequest {
  account: string;
  key: Buffer;
  op: OperationName;
  container: string | undefined;
  blob: string | undefined;
  /** The `versionid` the request targets, if any. */
  versionId: string | undefined;
  /** True when a write would create the blob (the `c` permission is then enough). */
  creating: boolean;
  /** The client's address, for `sip`. */
  remoteAddress: string;
}

/** Response headers a service SAS overrides on reads (`rscc`, `rscd`, ...). */
export type SasOverrides = Record<string, string>;

/** The outcome of a SAS check. */
export type SasResult = { ok: true; overrides: SasOverrides } | ({ ok: false } & SasRefusal);

/** Clock skew tolerated on `st`, as the service tolerates some. */
const START_SKEW_MS = 15 * 60 * 1000;

const OVERRIDE_HEADERS: Array<[string, string]> = [
  ['rscc', 'cache-control'],
  ['rscd', 'content-disposition'],
  ['rsce', 'content-encoding'],
  ['rscl', 'content-language'],
  ['rsct', 'content-type'],
];

function refuse(status: number, code: string, message: string): SasResult {
  return { ok: false, status, code, message };
}

/** The resource level of an operation (account SAS `srt`). */
function levelOf(op: OperationName): 's' | 'c' | 'o' {
  if (op === 'ListContainers' || op === 'GetAccountInfo') return 's';
  if (
    op === 'CreateContainer' ||
    op === 'DeleteContainer' ||
    op === 'GetContainerProperties' ||
    op === 'ListBlobs'
  ) {
    return 'c';
  }
  return 'o';
}

/** The permission letters any one of which allows `req.op`. */
function permissionsFor(req: SasRequest): string {
  switch (req.op) {
    case 'GetBlob':
    case 'GetBlobProperties':
    case 'GetBlockList':
    case 'GetContainerProperties':
    case 'GetAccountInfo':
      return 'r';
    case 'PutBlob':
    case 'PutBlobFromUrl':
    case 'PutBlockList':
    case 'CopyBlob':
    case 'CopyBlobFromUrl':
      return req.creating ? 'wc' : 'w';
    case 'PutBlock':
      return 'wc';
    case 'SetBlobMetadata':
    case 'SetBlobProperties':
      return 'w';
    case 'DeleteBlob':
      return req.versionId ? 'x' : 'd';
    case 'ListBlobs':
    case 'ListContainers':
      return 'l';
    case 'CreateContainer':
      return 'wc';
    case 'DeleteContainer':
      return 'd';
    default:
      return '';
  }
}

function sign(key: Buffer, text: string): Buffer {
  return createHmac('sha256', key).update(text, 'utf8').digest();
}

function sameSignature(expected: Buffer, given: string): boolean {
  const g = Buffer.from(given, 'base64');
  return g.length === expected.length && timingSafeEqual(g, expected);
}

function ipv4(text: string): number | undefined {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text.replace(/^::ffff:/, ''));
  if (!m) return undefined;
  return m.slice(1).reduce((n, part) => n * 256 + Number(part), 0);
}

function ipAllowed(range: string, address: string): boolean {
  const [low = '', high = low] = range.split('-');
  const a = ipv4(address);
  const l = ipv4(low);
  const h = ipv4(high);
  return a !== undefined && l !== undefined && h !== undefined && a >= l && a <= h;
}

/** True when the query carries a SAS (a `sig` parameter). */
export function hasSas(params: Map<string, string>): boolean {
  return params.has('sig');
}

/**
 * Check the SAS in `params` for `req`. Returns the response headers it overrides when it allows
 * the request, else the refusal to send.
 */
export function checkSas(
  params: Map<string, string>,
  req: SasRequest,
  now = Date.now(),
): SasResult {
  const p = (name: string) => params.get(name) ?? '';
  const sv = p('sv');
  if (sv < '2020-12-06') {
    return refuse(
      403,
      'AuthenticationFailed',
      `SAS version ${sv || '(none)'} is not implemented here (2020-12-06 or later)`,
    );
  }
  if (params.has('skoid')) {
    return refuse(
      403,
      'AuthenticationFailed',
      'user delegation SAS is not implemented by this test server',
    );
  }
  if (params.has('si')) {
    return refuse(
      403,
      'AuthenticationFailed',
      'stored access policies (si=) are not implemented by this test server',
    );
  }
  const isAccount = params.has('ss') || params.has('srt');
  let stringToSign: string;
  if (isAccount) {
    stringToSign = [
      req.account,
      p('sp'),
      p('ss'),
      p('srt'),
      p('st'),
      p('se'),
      p('sip'),
      p('spr'),
      sv,
      p('ses'),
      '',
    ].join('\n');
  } else {
    const sr = p('sr');
    if (!['c', 'b', 'bv'].includes(sr)) {
      return refuse(
        403,
        'AuthenticationFailed',
        `signed resource sr=${sr || '(none)'} is not implemented here (c, b, bv)`,
      );
    }
    if (!req.container) {
      return refuse(
        403,
        'AuthorizationResourceTypeMismatch',
        'a service SAS cannot authorize an account-level operation',
      );
    }
    const blobPart = sr === 'c' ? '' : `/${req.blob ?? ''}`;
    stringToSign = [
      p('sp'),
      p('st'),
      p('se'),
      `/blob/${req.account}/${req.container}${blobPart}`,
      p('si'),
      p('sip'),
      p('spr'),
      sv,
      sr,
      sr === 'bv' ? (req.versionId ?? '') : '',
      p('ses'),
      p('rscc'),
      p('rscd'),
      p('rsce'),
      p('rscl'),
      p('rsct'),
    ].join('\n');
    if (sr !== 'c' && req.blob === undefined) {
      return refuse(
        403,
        'AuthorizationResourceTypeMismatch',
        'a blob SAS cannot authorize a container-level operation',
      );
    }
  }
  if (!sameSignature(sign(req.key, stringToSign), p('sig'))) {
    return refuse(
      403,
      'AuthenticationFailed',
      'the SAS signature does not match (wrong key, or a signed field was changed)',
    );
  }
  const expiry = Date.parse(p('se'));
  if (Number.isNaN(expiry) || now >= expiry) {
    return refuse(403, 'AuthenticationFailed', `the SAS expired (se=${p('se') || '(none)'})`);
  }
  if (params.has('st') && now + START_SKEW_MS < Date.parse(p('st'))) {
    return refuse(403, 'AuthenticationFailed', `the SAS is not valid yet (st=${p('st')})`);
  }
  if (params.has('spr') && !p('spr').split(',').includes('http')) {
    return refuse(
      403,
      'AuthorizationProtocolMismatch',
      `the SAS allows ${p('spr')} only and this server speaks HTTP`,
    );
  }
  if (params.has('sip') && !ipAllowed(p('sip'), req.remoteAddress)) {
    return refuse(
      403,
      'AuthorizationSourceIPMismatch',
      `the SAS allows ${p('sip')}, not ${req.remoteAddress}`,
    );
  }
  if (isAccount) {
    if (!p('ss').includes('b')) {
      return refuse(
        403,
        'AuthorizationServiceMismatch',
        'the account SAS does not include the blob service (ss)',
      );
    }
    if (!p('srt').includes(levelOf(req.op))) {
      return refuse(
        403,
        'AuthorizationResourceTypeMismatch',
        `the account SAS resource types (srt=${p('srt')}) do not cover ${req.op}`,
      );
    }
  }
  const needed = permissionsFor(req);
  if (!needed || ![...needed].some((letter) => p('sp').includes(letter))) {
    return refuse(
      403,
      'AuthorizationPermissionMismatch',
      `${req.op} needs SAS permission ${needed.split('').join(' or ') || '(none available)'}, the SAS has sp=${p('sp')}`,
    );
  }
  const overrides: SasOverrides = {};
  if (!isAccount) {
    for (const [param, header] of OVERRIDE_HEADERS) {
      if (params.has(param)) overrides[header] = p(param);
    }
  }
  return { ok: true, overrides };
}
