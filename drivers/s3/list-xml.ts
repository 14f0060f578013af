/**
 * The two S3 listing answers the lean path reads itself: ListObjectsV2's `ListBucketResult`
 * ({@link parseListPage}) and ListObjectVersions' `ListVersionsResult` ({@link parseVersionPage}).
 * The SDK's generic XML parser and schema-driven deserializer cost ~35 ms of CPU for a page of
 * 1,000 keys; these read the one flat shape S3 sends in ~5 ms, and hand anything else back
 * (`undefined`) so the SDK reads it instead.
 *
 * @module
 */

/** One page of a ListObjectsV2 listing, as {@link parseListPage} reads it. */
export interface LeanListPage {
  encodingType: string | undefined;
  prefixes: string[];
  objects: { key: string; size: number; etag: string; lastModified: Date | undefined }[];
  isTruncated: boolean;
  nextToken: string | undefined;
}

/**
 * One entry of a ListObjectVersions page, in the page's own order (key order, newest first
 * within a key, versions and delete markers interleaved as the store sent them). The key is as
 * sent (URL-encoded with `encoding-type=url`).
 */
export interface LeanVersionEntry {
  kind: 'version' | 'marker';
  key: string;
  versionId: string;
  isLatest: boolean;
  lastModified: Date | undefined;
  /** Bytes of a version; `undefined` for a delete marker. */
  size: number | undefined;
  /** The ETag of a version as sent (quoted); `undefined` for a delete marker. */
  etag: string | undefined;
}

/** One page of a ListObjectVersions listing, as {@link parseVersionPage} reads it. */
export interface LeanVersionPage {
  encodingType: string | undefined;
  entries: LeanVersionEntry[];
  isTruncated: boolean;
  nextKeyMarker: string | undefined;
  nextVersionIdMarker: string | undefined;
}

/** The text of an XML element's content: the five predefined entities and character references. */
function unescapeXml(text: string): string {
  if (!text.includes('&')) return text;
  // An ETag as S3 sends it: `&quot;<hex>[-<parts>]&quot;`, one per listed object.
  const q = '&quot;';
  if (
    text.startsWith(q) &&
    text.endsWith(q) &&
    text.indexOf('&', q.length) === text.length - q.length
  ) {
    return `"${text.slice(q.length, -q.length)}"`;
  }
  return text.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos);/g, (_, ref: string) => {
    if (ref[0] === '#') {
      return String.fromCodePoint(
        ref[1] === 'x' ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10),
      );
    }
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[ref] as string;
  });
}

/** The content of the first `<tag>...</tag>` in `xml[from, to)`, or `undefined`. */
function element(xml: string, tag: string, from: number, to: number): string | undefined {
  const open = xml.indexOf(`<${tag}>`, from);
  if (open < 0 || open >= to) return undefined;
  const start = open + tag.length + 2;
  const end = xml.indexOf(`</${tag}>`, start);
  if (end < 0 || end > to) return undefined;
  return unescapeXml(xml.slice(start, end));
}

/** Every `<tag>...</tag>` block in `xml`, as [start, end) of its content. */
function blocks(xml: string, tag: string): [number, number][] {
  const out: [number, number][] = [];
  for (let at = xml.indexOf(`<${tag}>`); at >= 0; at = xml.indexOf(`<${tag}>`, at)) {
    const start = at + tag.length + 2;
    const end = xml.indexOf(`</${tag}>`, start);
    if (end < 0) throw new Error(`unterminated <${tag}>`);
    out.push([start, end]);
    at = end;
  }
  return out;
}

/**
 * Read a ListObjectsV2 answer (`ListBucketResult`): its prefixes, objects (key, size, ETag,
 * last-modified), truncation and continuation token, keys left URL-encoded as sent. Returns
 * `undefined` for anything else — another root element, a document cut short, a CDATA section
 * or comment, an object without a key, size or ETag — so the SDK reads it instead. S3 and
 * S3-compatible stores send this one flat shape; the checks keep a surprise from being misread.
 */
export function parseListPage(xml: string): LeanListPage | undefined {
  const root = xml.indexOf('<ListBucketResult');
  if (root < 0 || !xml.trimEnd().endsWith('</ListBucketResult>')) return undefined;
  if (xml.includes('<![CDATA[') || xml.includes('<!--')) return undefined;
  const objects: LeanListPage['objects'] = [];
  for (const [start, end] of blocks(xml, 'Contents')) {
    const key = element(xml, 'Key', start, end);
    const size = element(xml, 'Size', start, end);
    const etag = element(xml, 'ETag', start, end);
    const modified = element(xml, 'LastModified', start, end);
    if (key === undefined || size === undefined || etag === undefined || !/^\d+$/.test(size)) {
      return undefined;
    }
    objects.push({
      key,
      size: Number(size),
      etag,
      lastModified: modified === undefined ? undefined : new Date(modified),
    });
  }
  const prefixes: string[] = [];
  for (const [start, end] of blocks(xml, 'CommonPrefixes')) {
    const prefix = element(xml, 'Prefix', start, end);
    if (prefix === undefined) return undefined;
    prefixes.push(prefix);
  }
  // The top-level fields, looked up with the blocks cut out (a key cannot hide a tag).
  const outside = xml.replace(/<(Contents|CommonPrefixes)>[\s\S]*?<\/\1>/g, '');
  const truncated = element(outside, 'IsTruncated', 0, outside.length);
  if (truncated !== 'true' && truncated !== 'false') return undefined;
  return {
    encodingType: element(outside, 'EncodingType', 0, outside.length),
    prefixes,
    objects,
    isTruncated: truncated === 'true',
    nextToken: element(outside, 'NextContinuationToken', 0, outside.length),
  };
}

/**
 * Read a ListObjectVersions answer (`ListVersionsResult`): its versions and delete markers in
 * document order, truncation and next markers, keys left URL-encoded as sent. Returns
 * `undefined` for anything else — another root element, a document cut short, a CDATA section
 * or comment, an entry without a key, version ID or IsLatest, a version without a size or
 * ETag — so the SDK reads it instead (and history.ts recovers the order).
 */
export function parseVersionPage(xml: string): LeanVersionPage | undefined {
  const root = xml.indexOf('<ListVersionsResult');
  if (root < 0 || !xml.trimEnd().endsWith('</ListVersionsResult>')) return undefined;
  if (xml.includes('<![CDATA[') || xml.includes('<!--')) return undefined;
  const entries: LeanVersionEntry[] = [];
  // Versions and delete markers in document order (`<VersionId>` does not match).
  const tags = /<(Version|DeleteMarker)>/g;
  for (let m = tags.exec(xml); m !== null; m = tags.exec(xml)) {
    const kind = m[1] === 'Version' ? 'version' : 'marker';
    const start = m.index + m[0].length;
    const end = xml.indexOf(`</${m[1]}>`, start);
    if (end < 0) return undefined;
    tags.lastIndex = end;
    const key = element(xml, 'Key', start, end);
    const versionId = element(xml, 'VersionId', start, end);
    const latest = element(xml, 'IsLatest', start, end);
    const modified = element(xml, 'LastModified', start, end);
    if (key === undefined || versionId === undefined) return undefined;
    if (latest !== 'true' && latest !== 'false') return undefined;
    let size: number | undefined;
    let etag: string | undefined;
    if (kind === 'version') {
      const text = element(xml, 'Size', start, end);
      etag = element(xml, 'ETag', start, end);
      if (text === undefined || etag === undefined || !/^\d+$/.test(text)) return undefined;
      size = Number(text);
    }
    entries.push({
      kind,
      key,
      versionId,
      isLatest: latest === 'true',
      lastModified: modified === undefined ? undefined : new Date(modified),
      size,
      etag,
    });
  }
  // The top-level fields, looked up with the entries cut out (a key cannot hide a tag).
  const outside = xml.replace(/<(Version|DeleteMarker|CommonPrefixes)>[\s\S]*?<\/\1>/g, '');
  const truncated = element(outside, 'IsTruncated', 0, outside.length);
  if (truncated !== 'true' && truncated !== 'false') return undefined;
  return {
    encodingType: element(outside, 'EncodingType', 0, outside.length),
    entries,
    isTruncated: truncated === 'true',
    nextKeyMarker: element(outside, 'NextKeyMarker', 0, outside.length),
    nextVersionIdMarker: element(outside, 'NextVersionIdMarker', 0, outside.length),
  };
}
