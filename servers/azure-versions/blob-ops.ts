/**
 * The blob operations of the versions server, on an account with blob versioning on.
 *
 * Every write that changes a blob's content or metadata (Put Blob, Put Block List, Copy Blob,
 * Copy Blob From URL, Put Blob From URL, Set Blob Metadata) mints a new version, makes it current
 * and answers its ID in `x-ms-version-id`. Deleting the base blob leaves every version and makes
 * none current (a later HEAD of the base blob is 404 `BlobNotFound`); deleting with `versionid=`
 * removes that version only. Reads with `versionid=` serve exactly that version and say
 * `x-ms-is-current-version: true` only when it is the current one; a well-formed ID that does not
 * exist is 404, a malformed one 400 — never the current blob in its place.
 *
 * Set Blob Properties changes the current version in place (new ETag, same version ID), as Azure
 * documents that it creates no version.
 *
 * @module
 */
import { createHash, randomUUID } from 'node:crypto';
import { checkConditions, checkSourceConditions, requestedRange } from './conditions.js';
import {
  containerOf,
  header,
  metadataHeaders,
  metadataOf,
  type OpContext,
  type Reply,
  ServiceError,
} from './reply.js';
import { checkSas, hasSas } from './sas.js';
import {
  type BlobEntry,
  type BlobVersion,
  type CommittedBlock,
  type ContainerEntry,
  type ContentProperties,
  etagOf,
  VERSION_ID_PATTERN,
} from './state.js';
import { blocksXml, parseBlockList, XML_DECLARATION } from './xml.js';

/** The service's limits that clients of block blobs must respect. */
const MAX_COMMITTED_BLOCKS = 50_000;
const MAX_UNCOMMITTED_BLOCKS = 100_000;
const MAX_BLOCK_ID_BYTES = 64;
const MAX_NAME_LENGTH = 1024;
const MAX_RANGE_MD5_BYTES = 4 * 1024 * 1024;

function md5(data: Buffer): Buffer {
  return createHash('md5').update(data).digest();
}

function quoted(etag: string): string {
  return `"${etag}"`;
}

/** The blob name of the request (validated), or a 400. */
export function blobNameOf(ctx: OpContext): string {
  const name = ctx.blobName;
  if (name === undefined || name === '') {
    throw new ServiceError(400, 'InvalidUri', 'The request URI names no blob.');
  }
  if (name.length > MAX_NAME_LENGTH) {
    throw new ServiceError(
      400,
      'OutOfRangeInput',
      'The specified resource name length is not within the permissible limits.',
    );
  }
  return name;
}

/** The `versionid` of the request, validated, or `undefined`. */
export function versionIdParam(ctx: OpContext): string | undefined {
  const id = ctx.params.get('versionid');
  if (id === undefined) return undefined;
  if (!VERSION_ID_PATTERN.test(id)) {
    throw new ServiceError(
      400,
      'InvalidQueryParameterValue',
      `Value for one of the query parameters specified in the request URI is invalid: versionid=${id}.`,
    );
  }
  return id;
}

function noVersionOnWrite(ctx: OpContext): void {
  if (ctx.params.has('versionid')) {
    throw new ServiceError(
      400,
      'InvalidQueryParameterValue',
      'versionid is not allowed on a write: versions are immutable.',
    );
  }
}

function blobNotFound(): ServiceError {
  return new ServiceError(404, 'BlobNotFound', 'The specified blob does not exist.');
}

/** The version a read or delete acts on: the one named by `versionid`, else the current one. */
function targetVersion(entry: BlobEntry | undefined, versionId: string | undefined): BlobVersion {
  const v = versionId ? entry?.versions.find((x) => x.versionId === versionId) : entry?.current;
  if (!v) throw blobNotFound();
  return v;
}

function writeHeaders(v: BlobVersion): Record<string, string> {
  return {
    etag: quoted(v.etag),
    'last-modified': v.lastModified.toUTCString(),
    'x-ms-version-id': v.versionId,
    'x-ms-request-server-encrypted': 'true',
  };
}

function propsFromRequest(
  ctx: OpContext,
  fallbackToRequest: boolean,
): Omit<ContentProperties, 'contentMd5'> {
  const pick = (blobHeader: string, requestHeader: string) =>
    header(ctx, blobHeader) ?? (fallbackToRequest ? header(ctx, requestHeader) : undefined);
  return {
    contentType: pick('x-ms-blob-content-type', 'content-type') ?? 'application/octet-stream',
    contentEncoding: pick('x-ms-blob-content-encoding', 'content-encoding'),
    contentLanguage: pick('x-ms-blob-content-language', 'content-language'),
    contentDisposition: header(ctx, 'x-ms-blob-content-disposition'),
    cacheControl: pick('x-ms-blob-cache-control', 'cache-control'),
  };
}

function md5Header(ctx: OpContext, name: string): Buffer | undefined {
  const v = header(ctx, name);
  if (v === undefined) return undefined;
  const b = Buffer.from(v, 'base64');
  if (b.length !== 16) throw new ServiceError(400, 'InvalidMd5', `${name} is not a base64 MD5.`);
  return b;
}

function checkBodyMd5(ctx: OpContext, name: string, actual: Buffer): void {
  const given = md5Header(ctx, name);
  if (given && !given.equals(actual)) {
    throw new ServiceError(
      400,
      'Md5Mismatch',
      'The MD5 value specified in the request did not match with the MD5 value calculated by the server.',
    );
  }
}

function blobTypeIsBlock(ctx: OpContext): void {
  const type = header(ctx, 'x-ms-blob-type');
  if (type !== 'BlockBlob') {
    throw new ServiceError(
      type === undefined ? 400 : 501,
      type === undefined ? 'MissingRequiredHeader' : 'NotImplemented',
      type === undefined
        ? 'x-ms-blob-type is required.'
        : `${type} blobs are not implemented by this test server (block blobs only).`,
    );
  }
}

/** Put Blob: one request, one new version. */
export function putBlob(ctx: OpContext): Reply {
  noVersionOnWrite(ctx);
  blobTypeIsBlock(ctx);
  const container = containerOf(ctx);
  const name = blobNameOf(ctx);
  const entry = ctx.state.blob(container, name);
  checkConditions(ctx, entry?.current, 'write');
  const digest = md5(ctx.body);
  checkBodyMd5(ctx, 'content-md5', digest);
  checkBodyMd5(ctx, 'x-ms-blob-content-md5', digest);
  const target = ctx.state.blob(container, name, true);
  target.uncommitted.clear();
  const v = ctx.state.addVersion(target, {
    data: ctx.body,
    blocks: [],
    props: { ...propsFromRequest(ctx, true), contentMd5: digest },
    metadata: metadataOf(ctx),
    copy: undefined,
  });
  return { status: 201, headers: { ...writeHeaders(v), 'content-md5': digest.toString('base64') } };
}

function validBlockId(id: string | undefined): string {
  if (id === undefined || id === '') {
    throw new ServiceError(400, 'MissingRequiredQueryParameter', 'blockid is required.');
  }
  const decoded = Buffer.from(id, 'base64');
  if (
    !/^[A-Za-z0-9+/]+={0,2}$/.test(id) ||
    id.length % 4 !== 0 ||
    decoded.length > MAX_BLOCK_ID_BYTES
  ) {
    throw new ServiceError(
      400,
      'InvalidQueryParameterValue',
      `The block ID ${id} is not Base64 of at most 64 bytes.`,
    );
  }
  return id;
}

/** The length every block ID of `entry` has, if it has any. */
function blockIdLength(entry: BlobEntry): number | undefined {
  for (const id of entry.uncommitted.keys()) return id.length;
  for (const b of entry.current?.blocks ?? []) return b.id.length;
  return undefined;
}

/** Put Block: stage one block (no version: nothing is visible until Put Block List). */
export function putBlock(ctx: OpContext): Reply {
  noVersionOnWrite(ctx);
  if (header(ctx, 'x-ms-copy-source') !== undefined) {
    throw new ServiceError(
      501,
      'NotImplemented',
      'Put Block From URL is not implemented by this test server.',
    );
  }
  const container = containerOf(ctx);
  const name = blobNameOf(ctx);
  const id = validBlockId(ctx.params.get('blockid'));
  const digest = md5(ctx.body);
  checkBodyMd5(ctx, 'content-md5', digest);
  const entry = ctx.state.blob(container, name, true);
  const length = blockIdLength(entry);
  if (length !== undefined && length !== id.length) {
    ctx.state.prune(container, entry);
    throw new ServiceError(
      400,
      'InvalidBlobOrBlock',
      'The specified blob or block content is invalid: all block IDs of a blob must have the same length.',
    );
  }
  if (!entry.uncommitted.has(id) && entry.uncommitted.size >= MAX_UNCOMMITTED_BLOCKS) {
    throw new ServiceError(
      409,
      'BlockCountExceedsLimit',
      'The uncommitted block count cannot exceed the maximum limit of 100,000 blocks.',
    );
  }
  entry.uncommitted.delete(id); // re-staging moves it to the end, as a fresh block
  entry.uncommitted.set(id, ctx.body);
  return {
    status: 201,
    headers: { 'content-md5': digest.toString('base64'), 'x-ms-request-server-encrypted': 'true' },
  };
}

/** Put Block List: commit staged and committed blocks as a new version. */
export function putBlockList(ctx: OpContext): Reply {
  noVersionOnWrite(ctx);
  const container = containerOf(ctx);
  const name = blobNameOf(ctx);
  checkBodyMd5(ctx, 'content-md5', md5(ctx.body));
  const list = parseBlockList(ctx.body.toString('utf8'));
  if (typeof list === 'string')
    throw new ServiceError(
      400,
      'InvalidXmlDocument',
      `XML specified is not syntactically valid: ${list}.`,
    );
  if (list.length > MAX_COMMITTED_BLOCKS) {
    throw new ServiceError(
      400,
      'BlockListTooLong',
      'The block list may not contain more than 50,000 blocks.',
    );
  }
  const entry = ctx.state.blob(container, name);
  checkConditions(ctx, entry?.current, 'write');
  const committed = new Map((entry?.current?.blocks ?? []).map((b) => [b.id, b]));
  const parts: Buffer[] = [];
  const blocks: CommittedBlock[] = [];
  let offset = 0;
  for (const { source, id } of list) {
    let data: Buffer | undefined;
    if (source !== 'Committed') data = entry?.uncommitted.get(id);
    if (!data && source !== 'Uncommitted') {
      const b = committed.get(id);
      if (b && entry?.current) data = entry.current.data.subarray(b.offset, b.offset + b.size);
    }
    if (!data) {
      throw new ServiceError(
        400,
        'InvalidBlockList',
        `The specified block list is invalid: no ${source.toLowerCase()} block ${id}.`,
      );
    }
    parts.push(data);
    blocks.push({ id, offset, size: data.length });
    offset += data.length;
  }
  const target = ctx.state.blob(container, name, true);
  target.uncommitted.clear();
  const v = ctx.state.addVersion(target, {
    data: Buffer.concat(parts),
    blocks,
    props: { ...propsFromRequest(ctx, false), contentMd5: md5Header(ctx, 'x-ms-blob-content-md5') },
    metadata: metadataOf(ctx),
    copy: undefined,
  });
  return {
    status: 201,
    headers: { ...writeHeaders(v), 'content-md5': md5(ctx.body).toString('base64') },
  };
}

/** Get Block List: the committed blocks of the current version and/or the staged ones. */
export function getBlockList(ctx: OpContext): Reply {
  const container = containerOf(ctx);
  const entry = ctx.state.blob(container, blobNameOf(ctx));
  if (ctx.params.has('snapshot') || ctx.params.has('versionid')) {
    throw new ServiceError(
      501,
      'NotImplemented',
      'Get Block List of a snapshot or version is not implemented by this test server.',
    );
  }
  const type = (ctx.params.get('blocklisttype') ?? 'committed').toLowerCase();
  if (!['committed', 'uncommitted', 'all'].includes(type)) {
    throw new ServiceError(
      400,
      'InvalidQueryParameterValue',
      `blocklisttype=${type} is not committed, uncommitted or all.`,
    );
  }
  if (!entry || (!entry.current && entry.uncommitted.size === 0)) throw blobNotFound();
  let xml = `${XML_DECLARATION}<BlockList>`;
  if (type !== 'uncommitted')
    xml += `<CommittedBlocks>${blocksXml(entry.current?.blocks ?? [])}</CommittedBlocks>`;
  if (type !== 'committed') {
    const staged = [...entry.uncommitted].map(([id, data]) => ({ id, size: data.length }));
    xml += `<UncommittedBlocks>${blocksXml(staged)}</UncommittedBlocks>`;
  }
  xml += '</BlockList>';
  const headers: Record<string, string> = { 'content-type': 'application/xml' };
  if (entry.current) {
    headers.etag = quoted(entry.current.etag);
    headers['last-modified'] = entry.current.lastModified.toUTCString();
    headers['x-ms-blob-content-length'] = String(entry.current.data.length);
  }
  return { status: 200, headers, body: xml };
}

function readHeaders(entry: BlobEntry, v: BlobVersion): Record<string, string> {
  const p = v.props;
  const h: Record<string, string> = {
    'last-modified': v.lastModified.toUTCString(),
    'x-ms-creation-time': v.created.toUTCString(),
    etag: quoted(v.etag),
    'accept-ranges': 'bytes',
    'x-ms-blob-type': 'BlockBlob',
    'x-ms-version-id': v.versionId,
    'x-ms-lease-state': 'available',
    'x-ms-lease-status': 'unlocked',
    'x-ms-server-encrypted': 'true',
    ...metadataHeaders(v.metadata),
  };
  if (v === entry.current) h['x-ms-is-current-version'] = 'true';
  if (p.contentType) h['content-type'] = p.contentType;
  if (p.contentEncoding) h['content-encoding'] = p.contentEncoding;
  if (p.contentLanguage) h['content-language'] = p.contentLanguage;
  if (p.contentDisposition) h['content-disposition'] = p.contentDisposition;
  if (p.cacheControl) h['cache-control'] = p.cacheControl;
  if (v.copy) {
    h['x-ms-copy-id'] = v.copy.id;
    h['x-ms-copy-status'] = 'success';
    h['x-ms-copy-source'] = v.copy.source;
    h['x-ms-copy-progress'] = `${v.copy.bytes}/${v.copy.bytes}`;
    h['x-ms-copy-completion-time'] = v.copy.completed.toUTCString();
  }
  return h;
}

/** Get Blob (GET) and Get Blob Properties (HEAD), of the current version or of `versionid`. */
export function getBlob(ctx: OpContext, head: boolean): Reply {
  if (ctx.params.has('snapshot')) {
    throw new ServiceError(
      501,
      'NotImplemented',
      'Snapshots are not implemented by this test server.',
    );
  }
  const container = containerOf(ctx);
  const entry = ctx.state.blob(container, blobNameOf(ctx));
  const v = targetVersion(entry, versionIdParam(ctx));
  checkConditions(ctx, v, 'read');
  const h = readHeaders(entry as BlobEntry, v);
  if (head) {
    h['content-length'] = String(v.data.length);
    if (v.props.contentMd5) h['content-md5'] = v.props.contentMd5.toString('base64');
    h['x-ms-access-tier'] = 'Hot';
    h['x-ms-access-tier-inferred'] = 'true';
    return { status: 200, headers: { ...h, ...ctx.overrides } };
  }
  const range = requestedRange(ctx, v.data.length);
  if (!range) {
    if (v.props.contentMd5) h['content-md5'] = v.props.contentMd5.toString('base64');
    return { status: 200, headers: { ...h, ...ctx.overrides }, body: v.data };
  }
  const body = v.data.subarray(range.start, range.end + 1);
  h['content-range'] = `bytes ${range.start}-${range.end}/${v.data.length}`;
  if (v.props.contentMd5) h['x-ms-blob-content-md5'] = v.props.contentMd5.toString('base64');
  if (header(ctx, 'x-ms-range-get-content-md5') === 'true') {
    if (body.length > MAX_RANGE_MD5_BYTES) {
      throw new ServiceError(
        400,
        'OutOfRangeInput',
        'x-ms-range-get-content-md5 needs a range of at most 4 MiB.',
      );
    }
    h['content-md5'] = md5(body).toString('base64');
  }
  return { status: 206, headers: { ...h, ...ctx.overrides }, body };
}

/** Delete Blob: the base blob (versions stay, none current) or one version. */
export function deleteBlob(ctx: OpContext): Reply {
  if (ctx.params.has('snapshot') || header(ctx, 'x-ms-delete-snapshots') === 'only') {
    throw new ServiceError(
      501,
      'NotImplemented',
      'Snapshots are not implemented by this test server.',
    );
  }
  if (ctx.params.has('deletetype')) {
    throw new ServiceError(
      501,
      'NotImplemented',
      'Permanent delete is not implemented by this test server.',
    );
  }
  const container = containerOf(ctx);
  const entry = ctx.state.blob(container, blobNameOf(ctx));
  const versionId = versionIdParam(ctx);
  const v = targetVersion(entry, versionId);
  checkConditions(ctx, v, 'delete');
  const e = entry as BlobEntry;
  if (versionId) {
    e.versions = e.versions.filter((x) => x !== v);
    if (e.current === v) e.current = undefined;
  } else {
    e.current = undefined;
    e.uncommitted.clear();
  }
  ctx.state.prune(container, e);
  return { status: 202, headers: { 'x-ms-delete-type-permanent': 'false' } };
}

/** Where a copy reads from. */
interface CopySource {
  url: string;
  container: ContainerEntry;
  entry: BlobEntry;
  version: BlobVersion;
}

function cannotVerify(status: number, message: string): ServiceError {
  return new ServiceError(status, 'CannotVerifyCopySource', message);
}

function resolveCopySource(ctx: OpContext, needsAuthorization: boolean): CopySource {
  const raw = header(ctx, 'x-ms-copy-source') as string;
  let url: URL;
  try {
    url = new URL(raw);
  } catch (cause) {
    throw new ServiceError(
      400,
      'InvalidHeaderValue',
      `x-ms-copy-source is not a URL: ${(cause as Error).message}`,
    );
  }
  const segments = url.pathname.split('/');
  if (url.port !== String(ctx.port) || segments[1] !== ctx.account || segments.length < 4) {
    throw cannotVerify(
      403,
      `This test server copies only from its own account (${ctx.endpoint}/container/blob), not from ${url.origin}${url.pathname}.`,
    );
  }
  const containerName = decodeURIComponent(segments[2] as string);
  const blobName = decodeURIComponent(segments.slice(3).join('/'));
  const params = new Map<string, string>();
  for (const [k, v] of url.searchParams) params.set(k.toLowerCase(), v);
  if (params.has('snapshot'))
    throw new ServiceError(
      501,
      'NotImplemented',
      'Snapshots are not implemented by this test server.',
    );
  const versionId = params.get('versionid');
  if (versionId !== undefined && !VERSION_ID_PATTERN.test(versionId)) {
    throw cannotVerify(400, `The copy source names a malformed versionid=${versionId}.`);
  }
  if (header(ctx, 'x-ms-copy-source-authorization') !== undefined) {
    throw cannotVerify(
      403,
      'x-ms-copy-source-authorization (OAuth) is not implemented by this test server; authorize the source with a SAS.',
    );
  }
  if (hasSas(params)) {
    const verdict = checkSas(params, {
      account: ctx.account,
      key: ctx.key,
      op: 'GetBlob',
      container: containerName,
      blob: blobName,
      versionId,
      creating: false,
      remoteAddress: ctx.remoteAddress,
    });
    if (!verdict.ok)
      throw cannotVerify(403, `The copy source's SAS is refused: ${verdict.message}`);
  } else if (needsAuthorization) {
    throw cannotVerify(
      403,
      'Copy Blob From URL and Put Blob From URL need a source that is public or authorized with a SAS; this source has no SAS.',
    );
  }
  const container = ctx.state.containers.get(containerName);
  const entry = container ? ctx.state.blob(container, blobName) : undefined;
  const version = versionId
    ? entry?.versions.find((v) => v.versionId === versionId)
    : entry?.current;
  if (!container || !entry || !version)
    throw cannotVerify(404, 'The specified blob does not exist.');
  checkSourceConditions(ctx, version);
  const shown = new URL(raw);
  if (shown.searchParams.has('sig')) shown.searchParams.set('sig', 'REDACTED');
  return { url: shown.toString(), container, entry, version };
}

/**
 * Copy Blob (`x-ms-copy-source`), Copy Blob From URL (`x-ms-requires-sync: true`) and Put Blob
 * From URL (with `x-ms-blob-type`): the source version's bytes become a new current version of
 * the destination. Copies complete at once (status `success`).
 */
export function copyBlob(
  ctx: OpContext,
  kind: 'CopyBlob' | 'CopyBlobFromUrl' | 'PutBlobFromUrl',
): Reply {
  noVersionOnWrite(ctx);
  if (kind === 'PutBlobFromUrl') blobTypeIsBlock(ctx);
  const container = containerOf(ctx);
  const name = blobNameOf(ctx);
  const source = resolveCopySource(ctx, kind !== 'CopyBlob');
  const dest = ctx.state.blob(container, name);
  checkConditions(ctx, dest?.current, 'write');
  const src = source.version;
  const metadata = metadataOf(ctx);
  const copyProps =
    kind !== 'PutBlobFromUrl' || header(ctx, 'x-ms-copy-source-blob-properties') !== 'false';
  const props = copyProps
    ? { ...src.props }
    : { ...propsFromRequest(ctx, false), contentMd5: src.props.contentMd5 };
  const target = ctx.state.blob(container, name, true);
  if (kind === 'PutBlobFromUrl') target.uncommitted.clear();
  const copyId = randomUUID();
  const v = ctx.state.addVersion(target, {
    data: src.data,
    blocks: src.blocks.map((b) => ({ ...b })),
    props,
    metadata: metadata.length > 0 || kind === 'PutBlobFromUrl' ? metadata : [...src.metadata],
    copy:
      kind === 'PutBlobFromUrl'
        ? undefined
        : { id: copyId, source: source.url, completed: new Date(), bytes: src.data.length },
  });
  if (kind === 'PutBlobFromUrl') {
    const h = writeHeaders(v);
    if (src.props.contentMd5) h['content-md5'] = src.props.contentMd5.toString('base64');
    return { status: 201, headers: h };
  }
  return {
    status: 202,
    headers: { ...writeHeaders(v), 'x-ms-copy-id': copyId, 'x-ms-copy-status': 'success' },
  };
}

/** Set Blob Metadata: a new version with the same bytes and the new metadata. */
export function setBlobMetadata(ctx: OpContext): Reply {
  noVersionOnWrite(ctx);
  const container = containerOf(ctx);
  const entry = ctx.state.blob(container, blobNameOf(ctx));
  const cur = targetVersion(entry, undefined);
  checkConditions(ctx, cur, 'write');
  const v = ctx.state.addVersion(entry as BlobEntry, {
    data: cur.data,
    blocks: cur.blocks.map((b) => ({ ...b })),
    props: { ...cur.props },
    metadata: metadataOf(ctx),
    copy: undefined,
  });
  return { status: 200, headers: writeHeaders(v) };
}

/** Set Blob Properties: replace the HTTP properties of the current version (no new version). */
export function setBlobProperties(ctx: OpContext): Reply {
  noVersionOnWrite(ctx);
  const container = containerOf(ctx);
  const entry = ctx.state.blob(container, blobNameOf(ctx));
  const cur = targetVersion(entry, undefined);
  checkConditions(ctx, cur, 'write');
  cur.props = {
    ...propsFromRequest(ctx, false),
    contentType: header(ctx, 'x-ms-blob-content-type') ?? '',
    contentMd5: md5Header(ctx, 'x-ms-blob-content-md5'),
  };
  const instant = ctx.state.clock.next();
  cur.etag = etagOf(instant);
  cur.lastModified = instant.date;
  return {
    status: 200,
    headers: { etag: quoted(cur.etag), 'last-modified': cur.lastModified.toUTCString() },
  };
}
