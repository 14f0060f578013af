/**
 * List Blobs and List Containers for the versions server, in the order and shape of real Azure.
 *
 * - Names come in UTF-8 byte order (Azurite sorts by UTF-16 code units instead; the two differ
 *   once characters above U+FFFF meet characters from U+E000 to U+FFFF).
 * - With `include=versions` every kept version is an item of its own, oldest first within a name,
 *   and only the current one says `<IsCurrentVersion>true</IsCurrentVersion>`; without it, only
 *   names with a current version are listed. `maxresults` counts blobs, versions and prefixes.
 * - Markers are opaque (base64url of the last item's position, never a plain name), so a client
 *   that builds its own marker fails here as it would against Azure. An empty `<NextMarker/>`
 *   ends paging.
 *
 * @module
 */
import type { BlobEntry, BlobVersion, ContainerEntry } from './state.js';
import { escapeXml, nameElement, XML_DECLARATION } from './xml.js';

/** The service's cap on `maxresults` (and its default). */
export const MAX_RESULTS = 5000;

/** `include=` values this server honours (the others are refused with 501, never ignored). */
export const SUPPORTED_INCLUDES = new Set([
  'metadata',
  'versions',
  'deletedwithversions',
  'copy',
  // Always empty here (no snapshots, no soft delete): listing them lists nothing extra.
  'snapshots',
  'deleted',
]);

/** A listing request, parsed and validated. */
export interface ListBlobsQuery {
  prefix: string;
  delimiter: string | undefined;
  marker: string | undefined;
  maxResults: number;
  include: Set<string>;
}

/** Where a page ended: after this prefix, or after this blob (and version). */
interface Position {
  name: string;
  versionId?: string;
  prefix?: true;
}

const MARKER_TAG = 'pvm1!';

function encodeMarker(position: Position): string {
  return `${MARKER_TAG}${Buffer.from(JSON.stringify(position), 'utf8').toString('base64url')}`;
}

/** Decode a marker this server issued, or `undefined` when it is not one. */
function decodeMarker(marker: string): Position | undefined {
  if (!marker.startsWith(MARKER_TAG)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(marker.slice(MARKER_TAG.length), 'base64url').toString('utf8'));
  } catch (error) {
    if (error instanceof SyntaxError) return undefined;
    throw error;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const p = value as Record<string, unknown>;
  if (typeof p.name !== 'string') return undefined;
  if (p.versionId !== undefined && typeof p.versionId !== 'string') return undefined;
  return p as unknown as Position;
}

/** One item of a listing page. */
type Item =
  | { kind: 'prefix'; name: string }
  | { kind: 'blob'; entry: BlobEntry; version: BlobVersion | undefined; versionsOnly: boolean };

/** The result of {@link listBlobs}: the XML body, or a problem with the query (a 400). */
export type ListResult = { xml: string } | { invalid: string };

function startsWithBytes(key: Buffer, prefix: Buffer): boolean {
  return key.length >= prefix.length && key.subarray(0, prefix.length).equals(prefix);
}

/** The items of a listing in order, starting after `after`, at most `maxResults + 1` of them. */
function collect(
  container: ContainerEntry,
  q: ListBlobsQuery,
  after: Position | undefined,
): Item[] {
  const withVersions = q.include.has('versions');
  const withVersionsOnly = q.include.has('deletedwithversions');
  const listable = (e: BlobEntry) => (withVersions || withVersionsOnly ? true : !!e.current);
  const prefixKey = Buffer.from(q.prefix, 'utf8');
  const entries = [...container.blobs.values()]
    .filter((e) => startsWithBytes(e.key, prefixKey) && e.versions.length > 0)
    .sort((a, b) => Buffer.compare(a.key, b.key));
  const afterKey = after ? Buffer.from(after.name, 'utf8') : undefined;
  const items: Item[] = [];
  for (let i = 0; i < entries.length && items.length <= q.maxResults; i++) {
    const entry = entries[i] as BlobEntry;
    if (after && afterKey) {
      if (after.prefix && startsWithBytes(entry.key, afterKey)) continue;
      const order = Buffer.compare(entry.key, afterKey);
      if (order < 0 || (order === 0 && !after.prefix && !withVersions)) continue;
    }
    const at = q.delimiter ? entry.name.indexOf(q.delimiter, q.prefix.length) : -1;
    if (q.delimiter && at >= 0) {
      // Every name under this prefix is contiguous in byte order: take the group at once, and
      // list the prefix only if something in it would be listed.
      const name = entry.name.slice(0, at + q.delimiter.length);
      const groupKey = Buffer.from(name, 'utf8');
      let any = false;
      for (; i < entries.length && startsWithBytes((entries[i] as BlobEntry).key, groupKey); i++) {
        any ||= listable(entries[i] as BlobEntry);
      }
      i--;
      if (any) items.push({ kind: 'prefix', name });
      continue;
    }
    if (withVersions) {
      for (const version of entry.versions) {
        const seen =
          after && !after.prefix && after.versionId !== undefined && after.name === entry.name;
        if (seen && version.versionId <= (after.versionId as string)) continue;
        items.push({ kind: 'blob', entry, version, versionsOnly: false });
      }
    } else if (entry.current) {
      items.push({ kind: 'blob', entry, version: entry.current, versionsOnly: false });
    } else if (withVersionsOnly) {
      items.push({ kind: 'blob', entry, version: undefined, versionsOnly: true });
    }
  }
  return items;
}

function positionOf(item: Item): Position {
  if (item.kind === 'prefix') return { name: item.name, prefix: true };
  if (item.version && !item.versionsOnly) {
    return { name: item.entry.name, versionId: item.version.versionId };
  }
  return { name: item.entry.name };
}

function httpDate(date: Date): string {
  return date.toUTCString();
}

/** The `<Properties>` of one version, as List Blobs shows them (ETag unquoted). */
export function propertiesXml(v: BlobVersion, entry: BlobEntry): string {
  const p = v.props;
  let out =
    `<Properties><Creation-Time>${httpDate(v.created)}</Creation-Time>` +
    `<Last-Modified>${httpDate(v.lastModified)}</Last-Modified>` +
    `<Etag>${v.etag}</Etag><Content-Length>${v.data.length}</Content-Length>` +
    `<Content-Type>${escapeXml(p.contentType)}</Content-Type>`;
  if (p.contentEncoding)
    out += `<Content-Encoding>${escapeXml(p.contentEncoding)}</Content-Encoding>`;
  if (p.contentLanguage)
    out += `<Content-Language>${escapeXml(p.contentLanguage)}</Content-Language>`;
  if (p.contentMd5) out += `<Content-MD5>${p.contentMd5.toString('base64')}</Content-MD5>`;
  if (p.cacheControl) out += `<Cache-Control>${escapeXml(p.cacheControl)}</Cache-Control>`;
  if (p.contentDisposition) {
    out += `<Content-Disposition>${escapeXml(p.contentDisposition)}</Content-Disposition>`;
  }
  out += '<BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier>';
  out += '<AccessTierInferred>true</AccessTierInferred>';
  if (v === entry.current)
    out += '<LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState>';
  if (v.copy) {
    out +=
      `<CopyId>${v.copy.id}</CopyId><CopyStatus>success</CopyStatus>` +
      `<CopySource>${escapeXml(v.copy.source)}</CopySource>` +
      `<CopyProgress>${v.copy.bytes}/${v.copy.bytes}</CopyProgress>` +
      `<CopyCompletionTime>${httpDate(v.copy.completed)}</CopyCompletionTime>`;
  }
  return `${out}<ServerEncrypted>true</ServerEncrypted></Properties>`;
}

/** `<Metadata>` with one element per entry (empty element when there is none). */
export function metadataXml(metadata: Array<[string, string]>): string {
  if (metadata.length === 0) return '<Metadata/>';
  return `<Metadata>${metadata.map(([k, v]) => `<${k}>${escapeXml(v)}</${k}>`).join('')}</Metadata>`;
}

function itemXml(item: Item, q: ListBlobsQuery): string {
  if (item.kind === 'prefix') return `<BlobPrefix>${nameElement(item.name)}</BlobPrefix>`;
  const { entry, version } = item;
  let out = `<Blob>${nameElement(entry.name)}`;
  if (item.versionsOnly || !version) {
    return `${out}<HasVersionsOnly>true</HasVersionsOnly></Blob>`;
  }
  if (q.include.has('versions')) {
    out += `<VersionId>${version.versionId}</VersionId>`;
    if (version === entry.current) out += '<IsCurrentVersion>true</IsCurrentVersion>';
  }
  out += propertiesXml(version, entry);
  if (q.include.has('metadata')) out += metadataXml(version.metadata);
  return `${out}</Blob>`;
}

/** List Blobs on `container`: the `EnumerationResults` body, or why the query is invalid. */
export function listBlobs(
  container: ContainerEntry,
  q: ListBlobsQuery,
  endpoint: string,
): ListResult {
  let after: Position | undefined;
  if (q.marker) {
    after = decodeMarker(q.marker);
    if (!after)
      return { invalid: `the marker ${JSON.stringify(q.marker)} was not issued by this server` };
  }
  const items = collect(container, q, after);
  const page = items.slice(0, q.maxResults);
  const last = page[page.length - 1];
  const next = items.length > q.maxResults && last ? encodeMarker(positionOf(last)) : '';
  let xml =
    `${XML_DECLARATION}<EnumerationResults ServiceEndpoint="${escapeXml(endpoint)}" ` +
    `ContainerName="${escapeXml(container.name)}">`;
  xml += q.prefix ? `<Prefix>${escapeXml(q.prefix)}</Prefix>` : '<Prefix/>';
  xml += q.marker ? `<Marker>${escapeXml(q.marker)}</Marker>` : '<Marker/>';
  xml += `<MaxResults>${q.maxResults}</MaxResults>`;
  if (q.delimiter) xml += `<Delimiter>${escapeXml(q.delimiter)}</Delimiter>`;
  xml += `<Blobs>${page.map((item) => itemXml(item, q)).join('')}</Blobs>`;
  xml += next ? `<NextMarker>${next}</NextMarker>` : '<NextMarker/>';
  return { xml: `${xml}</EnumerationResults>` };
}

/** List Containers: names in byte order, paged with the same opaque markers. */
export function listContainers(
  containers: Iterable<ContainerEntry>,
  q: { prefix: string; marker: string | undefined; maxResults: number; include: Set<string> },
  endpoint: string,
): ListResult {
  let after: Position | undefined;
  if (q.marker) {
    after = decodeMarker(q.marker);
    if (!after)
      return { invalid: `the marker ${JSON.stringify(q.marker)} was not issued by this server` };
  }
  const afterKey = after ? Buffer.from(after.name, 'utf8') : undefined;
  const all = [...containers]
    .filter((c) => c.name.startsWith(q.prefix))
    .filter((c) => !afterKey || Buffer.compare(Buffer.from(c.name, 'utf8'), afterKey) > 0)
    .sort((a, b) => Buffer.compare(Buffer.from(a.name, 'utf8'), Buffer.from(b.name, 'utf8')));
  const page = all.slice(0, q.maxResults);
  const last = page[page.length - 1];
  const next = all.length > q.maxResults && last ? encodeMarker({ name: last.name }) : '';
  let xml = `${XML_DECLARATION}<EnumerationResults ServiceEndpoint="${escapeXml(endpoint)}">`;
  xml += q.prefix ? `<Prefix>${escapeXml(q.prefix)}</Prefix>` : '<Prefix/>';
  xml += q.marker ? `<Marker>${escapeXml(q.marker)}</Marker>` : '<Marker/>';
  xml += `<MaxResults>${q.maxResults}</MaxResults><Containers>`;
  for (const c of page) {
    xml +=
      `<Container><Name>${escapeXml(c.name)}</Name><Properties>` +
      `<Last-Modified>${httpDate(c.lastModified)}</Last-Modified><Etag>"${c.etag}"</Etag>` +
      '<LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState>' +
      '<HasImmutabilityPolicy>false</HasImmutabilityPolicy><HasLegalHold>false</HasLegalHold>' +
      '</Properties>';
    if (q.include.has('metadata')) xml += metadataXml(c.metadata);
    xml += '</Container>';
  }
  xml += '</Containers>';
  xml += next ? `<NextMarker>${next}</NextMarker>` : '<NextMarker/>';
  return { xml: `${xml}</EnumerationResults>` };
}
