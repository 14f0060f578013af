/**
 * HTTP conditions and byte ranges for the versions server, with the answers Azure gives.
 *
 * Conditions are checked against the version a request acts on (the current one for writes and
 * for reads of the base blob). A write with `If-None-Match: *` onto a live blob answers the
 * configured "exists" status (409 `BlobAlreadyExists` or 412 `ConditionNotMet`); every other
 * failed condition on a write or delete is 412 `ConditionNotMet`; on a read, `If-None-Match` and
 * `If-Modified-Since` answer 304 and the others 412.
 *
 * Ranges are `bytes=start-end` or `bytes=start-` (in `x-ms-range`, which wins, or `Range`). A
 * start at or past the end, or any range of an empty blob, is 416 `InvalidRange`; an end past the
 * end is cut to the last byte. Suffix ranges (`bytes=-n`) and other shapes are refused with 400
 * rather than served whole, so a client that sends one learns it here.
 *
 * @module
 */
import { header, type OpContext, ServiceError } from './reply.js';
import type { BlobVersion } from './state.js';

/** What a request is about to do to its target. */
export type Intent = 'read' | 'write' | 'delete';

function etagList(value: string): string[] {
  return value.split(',').map((s) => s.trim().replace(/^W\//, '').replace(/^"|"$/g, ''));
}

function seconds(date: Date): number {
  return Math.floor(date.getTime() / 1000);
}

function parseDate(ctx: OpContext, name: string): number | undefined {
  const v = header(ctx, name);
  if (v === undefined) return undefined;
  const t = Date.parse(v);
  if (Number.isNaN(t))
    throw new ServiceError(400, 'InvalidHeaderValue', `${name} is not an HTTP date.`);
  return Math.floor(t / 1000);
}

/**
 * Check `If-Match`, `If-None-Match`, `If-Modified-Since` and `If-Unmodified-Since` against
 * `target` (undefined when the blob does not exist). Throws the error answer when one fails.
 */
export function checkConditions(
  ctx: OpContext,
  target: BlobVersion | undefined,
  intent: Intent,
): void {
  const notMet = () =>
    new ServiceError(
      412,
      'ConditionNotMet',
      'The condition specified using HTTP conditional header(s) is not met.',
    );
  const notModified = () => new ServiceError(304, 'ConditionNotMet', 'The blob was not modified.');
  const ifMatch = header(ctx, 'if-match');
  if (ifMatch !== undefined) {
    const ok =
      target !== undefined && (ifMatch.trim() === '*' || etagList(ifMatch).includes(target.etag));
    if (!ok) throw notMet();
  }
  const ifNoneMatch = header(ctx, 'if-none-match');
  if (ifNoneMatch !== undefined && target !== undefined) {
    if (ifNoneMatch.trim() === '*') {
      if (intent === 'write') {
        throw ctx.settings.existsStatus === 409
          ? new ServiceError(409, 'BlobAlreadyExists', 'The specified blob already exists.')
          : notMet();
      }
      throw intent === 'read' ? notModified() : notMet();
    }
    if (etagList(ifNoneMatch).includes(target.etag))
      throw intent === 'read' ? notModified() : notMet();
  }
  const since = parseDate(ctx, 'if-modified-since');
  if (since !== undefined && target !== undefined && seconds(target.lastModified) <= since) {
    throw intent === 'read' ? notModified() : notMet();
  }
  const unmodifiedSince = parseDate(ctx, 'if-unmodified-since');
  if (
    unmodifiedSince !== undefined &&
    target !== undefined &&
    seconds(target.lastModified) > unmodifiedSince
  ) {
    throw notMet();
  }
}

/** Check the `x-ms-source-if-*` conditions of a copy against its source version. */
export function checkSourceConditions(ctx: OpContext, source: BlobVersion): void {
  const notMet = () =>
    new ServiceError(
      412,
      'SourceConditionNotMet',
      'The source condition specified using HTTP conditional header(s) is not met.',
    );
  const ifMatch = header(ctx, 'x-ms-source-if-match');
  if (ifMatch !== undefined && ifMatch.trim() !== '*' && !etagList(ifMatch).includes(source.etag))
    throw notMet();
  const ifNoneMatch = header(ctx, 'x-ms-source-if-none-match');
  if (
    ifNoneMatch !== undefined &&
    (ifNoneMatch.trim() === '*' || etagList(ifNoneMatch).includes(source.etag))
  ) {
    throw notMet();
  }
  const since = parseDate(ctx, 'x-ms-source-if-modified-since');
  if (since !== undefined && seconds(source.lastModified) <= since) throw notMet();
  const unmodifiedSince = parseDate(ctx, 'x-ms-source-if-unmodified-since');
  if (unmodifiedSince !== undefined && seconds(source.lastModified) > unmodifiedSince)
    throw notMet();
}

/** A resolved byte range: `start` to `end` inclusive. */
export interface ByteRange {
  start: number;
  end: number;
}

/**
 * The range a read asks for, resolved against `size`, or `undefined` for the whole blob. Throws
 * 416 `InvalidRange` (with `Content-Range: bytes * /size`) or 400 for shapes Azure does not take.
 */
export function requestedRange(ctx: OpContext, size: number): ByteRange | undefined {
  const name = header(ctx, 'x-ms-range') !== undefined ? 'x-ms-range' : 'range';
  const value = header(ctx, name);
  if (value === undefined) return undefined;
  const m = /^bytes=(\d+)-(\d*)$/.exec(value.trim());
  if (!m) {
    throw new ServiceError(
      400,
      'InvalidHeaderValue',
      `${name}: ${value} is not bytes=start-end or bytes=start- (suffix ranges are not served).`,
    );
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Number(m[2]);
  if (end < start && m[2] !== '') {
    throw new ServiceError(
      416,
      'InvalidRange',
      'The range specified is invalid for the current size of the resource.',
      {
        'content-range': `bytes */${size}`,
      },
    );
  }
  if (start >= size) {
    throw new ServiceError(
      416,
      'InvalidRange',
      'The range specified is invalid for the current size of the resource.',
      {
        'content-range': `bytes */${size}`,
      },
    );
  }
  return { start, end: Math.min(end, size - 1) };
}
