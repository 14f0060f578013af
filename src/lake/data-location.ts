/**
 * {@link DataLocation}: the stable identity of one managed object.
 *
 * A DataLocation names an object by URI (`file:///root/key` on a local stage, `s3://bucket/key`
 * on S3), with its content type, exact size and SHA-256. It is never an expiring URL and never
 * carries credentials, so it can be stored in a table and opened next year by any process that
 * has access to the stage.
 *
 * {@link parseDataLocation} is strict: exactly the four fields, each of the right type, a size
 * that is a safe non-negative integer and a digest of exactly 64 hexadecimal characters. Whether
 * the URI lies inside a given stage is the stage's check (it differs per stage), not this one's.
 *
 * @module
 */

import { readFile } from 'node:fs/promises';
import { DEFAULT_CONTENT_TYPE } from '../core/content-type.js';
import { ObjectIntegrityError } from '../core/errors.js';
import { InvalidDataLocation } from './errors.js';

/** The identity of one managed object. Immutable once published. */
export interface DataLocation {
  /** `file:///abs/root/key` (local stage) or `s3://bucket/key` (S3 stage). */
  readonly uri: string;
  /** The MIME type given at upload (`application/octet-stream` when none was). */
  readonly contentType: string;
  /** The exact size in bytes. */
  readonly sizeBytes: number;
  /** The SHA-256 of the bytes, 64 lowercase hexadecimal characters. */
  readonly sha256: string;
}

const FIELDS = ['uri', 'contentType', 'sizeBytes', 'sha256'] as const;
const HEX64 = /^[0-9a-fA-F]{64}$/;
// A content type is printable ASCII without control characters; this is an identity field, not
// a place to smuggle header lines.
const CONTENT_TYPE = /^[\x21-\x7e][\x20-\x7e]{0,254}$/;

/** The content type used when an upload names none (defined with the one content-type rule). */
export { DEFAULT_CONTENT_TYPE };

/**
 * Check a digest before any storage is touched: exactly 64 hexadecimal characters. Returns it in
 * lowercase. Throws `ObjectIntegrityError('InvalidDigest')`.
 */
export function checkDigest(sha256: unknown, uri?: string): string {
  if (typeof sha256 !== 'string' || !HEX64.test(sha256)) {
    const shown = typeof sha256 === 'string' ? JSON.stringify(sha256.slice(0, 80)) : typeof sha256;
    throw new ObjectIntegrityError(
      'InvalidDigest',
      `sha256 must be exactly 64 hexadecimal characters, not ${shown}`,
      { uri },
    );
  }
  return sha256.toLowerCase();
}

/** Check a content type (printable ASCII, 1..255 characters). Throws {@link InvalidDataLocation}. */
export function checkContentType(contentType: unknown, uri?: string): string {
  if (typeof contentType !== 'string' || !CONTENT_TYPE.test(contentType)) {
    throw new InvalidDataLocation(
      `contentType must be 1..255 printable ASCII characters, not ${JSON.stringify(contentType)}`,
      { uri },
    );
  }
  return contentType;
}

/**
 * Validate a DataLocation (already parsed from JSON, or built by hand) and return a frozen copy
 * with the digest in lowercase. Throws {@link InvalidDataLocation} for a missing, extra or
 * mistyped field and `ObjectIntegrityError('InvalidDigest')` for a digest that is not 64 hex
 * characters. Performs no I/O.
 */
export function checkDataLocation(value: unknown): DataLocation {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidDataLocation('a DataLocation is a JSON object');
  }
  const record = value as Record<string, unknown>;
  const uri = typeof record.uri === 'string' ? record.uri : undefined;
  for (const key of Object.keys(record)) {
    if (!(FIELDS as readonly string[]).includes(key)) {
      throw new InvalidDataLocation(`unknown DataLocation field ${JSON.stringify(key)}`, { uri });
    }
  }
  for (const key of FIELDS) {
    if (!(key in record)) {
      throw new InvalidDataLocation(`DataLocation field ${key} is missing`, { uri });
    }
  }
  if (uri === undefined || uri === '') {
    throw new InvalidDataLocation('DataLocation uri must be a non-empty string');
  }
  const sizeBytes = record.sizeBytes;
  if (typeof sizeBytes !== 'number' || !Number.isSafeInteger(sizeBytes) || sizeBytes < 0) {
    throw new InvalidDataLocation(
      `DataLocation sizeBytes must be a non-negative safe integer, not ${JSON.stringify(sizeBytes)}`,
      { uri },
    );
  }
  const contentType = checkContentType(record.contentType, uri);
  const sha256 = checkDigest(record.sha256, uri);
  return Object.freeze({ uri, contentType, sizeBytes, sha256 });
}

/**
 * Parse a DataLocation from its JSON text (or from an already-parsed value); see
 * {@link checkDataLocation} for the rules. Throws {@link InvalidDataLocation} for text that is
 * not JSON.
 */
export function parseDataLocation(json: string | unknown): DataLocation {
  if (typeof json !== 'string') return checkDataLocation(json);
  return checkDataLocation(parseLocationJson(json, 'a DataLocation must be JSON'));
}

/**
 * The one parser of location JSON text (a DataLocation, or what a `@file.json` holds): JSON,
 * after a UTF-8 byte-order mark at its start if there is one (editors on Windows write one).
 * Throws {@link InvalidDataLocation} with `message` for text that is not JSON.
 */
export function parseLocationJson(text: string, message: string): unknown {
  try {
    return JSON.parse(text.startsWith('\ufeff') ? text.slice(1) : text);
  } catch (cause) {
    throw new InvalidDataLocation(message, { cause });
  }
}

/**
 * The JSON value of a location file (`@file.json` on the command line), read as UTF-8 and
 * parsed by {@link parseLocationJson}. Throws {@link InvalidDataLocation} when it cannot be read
 * or is not JSON.
 */
export async function readLocationFile(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (cause) {
    throw new InvalidDataLocation(`cannot read the location file ${file}`, { cause });
  }
  return parseLocationJson(text, `${file} is not JSON: a DataLocation must be JSON`);
}

/** The canonical JSON text of a location (fields in a fixed order, no whitespace). */
export function formatDataLocation(location: DataLocation): string {
  const { uri, contentType, sizeBytes, sha256 } = location;
  return JSON.stringify({ uri, contentType, sizeBytes, sha256 });
}
