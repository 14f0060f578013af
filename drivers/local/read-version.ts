/**
 * Reading one version of the local store: the whole of it, as its immutable file
 * (`GetResult.file`, which the cache copies with the kernel) and a stream opened on first use,
 * or a byte range as S3 honours it: a range whose start is at or past the end of the object is
 * refused (`StoreError`, status 416); an end past the object is clamped to its size, and
 * `contentRange` / `contentLength` say what was actually sent (`bytes start-(size-1)/size`).
 *
 * @module
 */
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { addAbortSignal, type Readable } from 'node:stream';
import type { GetOptions, GetResult } from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';
import { fsError } from './fs-errors.js';
import type { KeyPath } from './key-paths.js';
import type { VersionFile } from './layout.js';
import { infoOf } from './versions.js';

/** Read the version `v` of `key` (see the module comment). */
export async function openVersion(
  key: string,
  where: KeyPath,
  v: VersionFile,
  options: GetOptions,
): Promise<GetResult> {
  const info = infoOf(key, v);
  const size = info.size;
  let range: { start: number; end: number } | undefined;
  if (options.range !== undefined) {
    const { start, end } = options.range;
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start) {
      throw new StoreError(`invalid byte range [${start}, ${end}) for ${where.uri}`, {
        uri: where.uri,
        status: 416,
      });
    }
    if (start >= size) {
      throw new StoreError(
        `byte range [${start}, ${end}) starts at or past the end of ${where.uri} (${size} bytes)`,
        { uri: where.uri, status: 416 },
      );
    }
    range = { start, end: Math.min(end, size) };
  }
  const file = path.join(where.dir, v.name);
  if (range === undefined) {
    // The whole version: an immutable file, so the caller may copy it itself (`file`); the
    // stream is opened only when asked for.
    let body: Readable | undefined;
    const signal = options.signal;
    return {
      get body() {
        if (body === undefined) {
          body = createReadStream(file);
          if (signal !== undefined) addAbortSignal(signal, body);
        }
        return body;
      },
      file: { path: file, size },
      info,
      contentLength: size,
    };
  }
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, 'r');
  } catch (error) {
    throw fsError(error, `cannot read ${where.uri}`, where.uri);
  }
  const body = handle.createReadStream({ start: range.start, end: range.end - 1 });
  if (options.signal !== undefined) addAbortSignal(options.signal, body);
  return {
    body,
    info,
    contentLength: range.end - range.start,
    contentRange: `bytes ${range.start}-${range.end - 1}/${size}`,
  };
}
