/**
 * Media downloads: the `Range` header and the bytes, headers and status of the answer, for
 * JSON `alt=media` and signed-URL GETs alike.
 *
 * Range handling follows RFC 9110 §14 as GCS applies it (cloud.google.com/storage/docs/
 * json_api/v1/objects/get, "Range"): one `bytes=a-b`, `bytes=a-` or `bytes=-n`; `b` past the
 * end is clamped; a start at or past the end (or any range of an empty object) is 416 with
 * `Content-Range: bytes *\/SIZE`; a header that is not one byte range is ignored (200 with the
 * whole object). A satisfiable range is 206 with `Content-Range: bytes a-b/SIZE`.
 *
 * @module
 */
import { ApiError } from './api-error.js';
import type { MangleMode } from './faults.js';
import type { Reply } from './reply.js';
import { mediaHeaders } from './resources.js';
import type { ObjectVersion } from './store.js';

/** The byte range a `Range` header asks of an object of `size` bytes (end exclusive). */
export function parseRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | undefined {
  if (header === undefined) return undefined;
  const match = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (match === null) return undefined;
  const [, a = '', b = ''] = match;
  if (a === '' && b === '') return undefined;
  const unsatisfiable = () =>
    new ApiError(416, 'requestedRangeNotSatisfiable', 'The requested range cannot be satisfied.', {
      xmlCode: 'InvalidRange',
      headers: { 'content-range': `bytes */${size}` },
    });
  if (a === '') {
    const suffix = Number(b);
    if (suffix === 0 || size === 0) throw unsatisfiable();
    return { start: Math.max(0, size - suffix), end: size };
  }
  const start = Number(a);
  if (start >= size) throw unsatisfiable();
  if (b === '') return { start, end: size };
  const last = Number(b);
  if (last < start) return undefined;
  return { start, end: Math.min(size, last + 1) };
}

/** The media reply for a GET of `version` with the request's `Range` header. */
export function mediaReply(
  version: ObjectVersion,
  rangeHeader: string | undefined,
  xml: boolean,
): Reply {
  const range = parseRange(rangeHeader, version.content.size);
  if (range === undefined) {
    return { kind: 'media', status: 200, version, start: 0, end: version.content.size, xml };
  }
  return { kind: 'media', status: 206, version, start: range.start, end: range.end, xml };
}

/** Status, headers and body chunks of a media reply, with a `mangle` fault applied. */
export function renderMedia(
  reply: Extract<Reply, { kind: 'media' }>,
  mangle: MangleMode | undefined,
): { status: number; headers: Record<string, string>; chunks: Buffer[] } {
  const { version } = reply;
  const size = version.content.size;
  let { status, start, end } = reply;
  if (mangle === 'ignoreRange') {
    status = 200;
    start = 0;
    end = size;
  }
  const headers = mediaHeaders(version, reply.xml);
  let chunks = [...version.content.range(start, end)];
  if (status === 206) {
    const shift = mangle === 'wrongContentRange' ? 1 : 0;
    headers['content-range'] = `bytes ${start + shift}-${end - 1 + shift}/${size}`;
  }
  if (mangle === 'flipByte' && end > start) {
    const body = Buffer.concat(chunks);
    const at = Math.floor(body.length / 2);
    body[at] = (body[at] as number) ^ 0xff;
    chunks = [body];
  } else if (mangle === 'truncate' && end > start) {
    chunks = [Buffer.concat(chunks).subarray(0, end - start - 1)];
  } else if (mangle === 'extend') {
    chunks = [...chunks, Buffer.from([0x2a])];
  }
  let length = 0;
  for (const chunk of chunks) length += chunk.length;
  headers['content-length'] = String(length);
  return { status, headers, chunks };
}
