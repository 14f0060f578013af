/**
 * `uploadType=multipart` bodies: multipart/related with two parts, the object's JSON metadata
 * and then its data (cloud.google.com/storage/docs/uploading-objects#uploading-an-object,
 * json_api/v1/how-tos/multipart-upload). The SDK (through gaxios) frames them as
 * `--B\r\nContent-Type: application/json\r\n\r\n{...}\r\n--B\r\nContent-Type: T\r\n\r\n<data>\r\n--B--`.
 *
 * The data part is found by searching for the closing delimiter from the end, so any bytes
 * (including ones that look like a boundary line) may appear inside the data.
 *
 * @module
 */
import { invalid } from './api-error.js';

/** The two parts of a multipart upload. */
export interface MultipartUpload {
  /** The parsed JSON metadata part. */
  metadata: Record<string, unknown>;
  /** The data part's Content-Type, when it has one. */
  dataContentType: string | undefined;
  /** The data part's bytes (a subarray of the body). */
  data: Buffer;
}

/** The boundary of a `multipart/related; boundary=...` Content-Type; 400 when missing. */
export function multipartBoundary(contentType: string | undefined): string {
  const match = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  const boundary = match?.[1] ?? match?.[2];
  if (!/^multipart\/related/i.test(contentType ?? '') || boundary === undefined) {
    throw invalid('A multipart upload needs Content-Type: multipart/related; boundary=...');
  }
  return boundary;
}

interface Part {
  headers: Record<string, string>;
  body: Buffer;
}

function parsePart(raw: Buffer): Part {
  // A part without headers starts with the empty line itself.
  if (raw.subarray(0, 2).toString() === '\r\n') return { headers: {}, body: raw.subarray(2) };
  const split = raw.indexOf('\r\n\r\n');
  if (split < 0) throw invalid('Malformed multipart part: no header/body separator');
  const headers: Record<string, string> = {};
  for (const line of raw.subarray(0, split).toString('utf8').split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0)
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { headers, body: raw.subarray(split + 4) };
}

/** Splits a multipart/related upload body into its metadata and data parts; 400 if malformed. */
export function parseMultipart(body: Buffer, boundary: string): MultipartUpload {
  const open = Buffer.from(`--${boundary}`);
  const between = Buffer.from(`\r\n--${boundary}`);
  const first = body.indexOf(open);
  if (first < 0) throw invalid('Malformed multipart body: no opening boundary');
  // The metadata part ends at the first delimiter after it; the data part at the last one.
  const metaStart = body.indexOf('\r\n', first + open.length) + 2;
  const metaEnd = body.indexOf(between, metaStart);
  const close = body.lastIndexOf(between);
  if (metaStart < 2 || metaEnd < 0 || close <= metaEnd) {
    throw invalid('Malformed multipart body: expected a metadata part and a data part');
  }
  const afterClose = body.subarray(close + between.length, close + between.length + 2).toString();
  if (afterClose !== '--') throw invalid('Malformed multipart body: no closing boundary');
  const metaPart = parsePart(body.subarray(metaStart, metaEnd));
  const dataStart = body.indexOf('\r\n', metaEnd + between.length) + 2;
  const dataPart = parsePart(body.subarray(dataStart, close));
  let metadata: unknown;
  try {
    metadata = JSON.parse(metaPart.body.toString('utf8') || '{}');
  } catch (error) {
    throw invalid(`The metadata part is not JSON: ${(error as Error).message}`, 'parseError');
  }
  if (metadata === null || typeof metadata !== 'object' || Array.isArray(metadata)) {
    throw invalid('The metadata part must be a JSON object');
  }
  return {
    metadata: metadata as Record<string, unknown>,
    dataContentType: dataPart.headers['content-type'],
    data: dataPart.body,
  };
}
