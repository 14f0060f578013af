/**
 * `ObjectStore.put` of one object on any driver: one request (`_put`) when the source is small,
 * the upload engine over the driver's part protocol when it is large.
 *
 * The choice needs the size. A file's and bytes' size is known; a stream of unknown size is read
 * one part ahead, and if it ends inside that part (and under the threshold) it is one plain put
 * of those bytes instead. A file's parts are byte ranges streamed from disk (no part is held in
 * memory); a stream's or bytes' parts go through pooled part buffers. For a huge known size the
 * part size is raised (in whole MiB) so the object fits in the protocol's part count. Where the
 * protocol records a SHA-256 at completion (`digestAtComplete`, Azure), a put in parts without
 * one computes it from the bytes sent, so that fetches can check the object.
 *
 * @module
 */
import { stat } from 'node:fs/promises';
import type { ObjectInfo, PartProtocol, PutOptions, PutSource } from '../contract/primitives.js';
import { SourceError } from '../core/errors.js';
import type { PartBufferPool } from './buffer-pool.js';
import { BufferedParts } from './buffered-parts.js';
import { uploadParts } from './engine.js';
import { FileParts } from './file-parts.js';
import type { PartSource } from './part-source.js';
import { partSizeFor, type UploadSettings } from './settings.js';
import { BytesReader, StreamReader } from './stream-readers.js';

/** What {@link putObject} needs of the store. */
export interface PutTarget {
  protocol: PartProtocol;
  /** One request: `_put` of the store. */
  putOne(source: PutSource, options: PutOptions): Promise<ObjectInfo>;
  key: string;
  uri: string;
  settings: UploadSettings;
  /** Part buffers for stream sources (reused across uploads of the store). */
  pool: PartBufferPool;
  debug(message: string): void;
}

/**
 * Write one object from a file path, a stream or bytes (see the module comment). A source that is
 * not exactly its declared `size` fails the put; on failure a source stream is destroyed and an
 * upload in parts is aborted. Progress is bytes sent (one request) or bytes in acknowledged parts.
 */
export async function putObject(
  target: PutTarget,
  source: PutSource,
  options: PutOptions = {},
): Promise<ObjectInfo> {
  const { settings, protocol } = target;
  let size = options.size;
  if (source instanceof Uint8Array) {
    if (size !== undefined && size !== source.length) {
      throw new RangeError(`size ${size} given for ${source.length} bytes`);
    }
    size = source.length;
  }
  // A protocol that records a SHA-256 at completion gets one of the bytes sent (parts.ts proves
  // they are the bytes hashed), unless the caller gave its own.
  const digest = options.sha256 === undefined && protocol.digestAtComplete === true;
  let parts: PartSource | undefined;
  let failed = true;
  try {
    if (typeof source === 'string') {
      if (size === undefined) {
        try {
          size = (await stat(source)).size;
        } catch (cause) {
          throw new SourceError(`cannot read ${source}: ${(cause as Error).message}`, { cause });
        }
      }
      if (size <= settings.multipartThreshold) {
        failed = false;
        return await target.putOne(source, { ...options, size });
      }
      const file = await FileParts.open(source, {
        partSize: partSizeFor(settings.partSize, size, protocol),
        digest,
      });
      parts = file;
      if (file.size !== size) {
        throw new SourceError(`${source} has ${file.size} bytes, not its declared ${size}`);
      }
    } else if (size !== undefined && size <= settings.multipartThreshold) {
      failed = false;
      return await target.putOne(source, { ...options, size });
    } else {
      const partSize = partSizeFor(settings.partSize, size, protocol);
      const reader =
        source instanceof Uint8Array ? new BytesReader(source) : new StreamReader(source);
      const buffered = new BufferedParts(reader, {
        partSize,
        pool: target.pool,
        expectedSize: size,
        digest,
      });
      parts = buffered;
      if (size === undefined) {
        // Unknown size: one part decides. A stream that ends inside it is one plain put.
        const first = await buffered.peek(options.signal);
        if (
          first === undefined ||
          (first.size < partSize && first.size <= settings.multipartThreshold)
        ) {
          const data = first?.bytes ?? new Uint8Array();
          const info = await target.putOne(data, { ...options, size: data.length });
          failed = false;
          return info;
        }
      }
    }
    const partSize = partSizeFor(settings.partSize, size, protocol);
    const result = await uploadParts(
      { protocol, key: target.key, uri: target.uri, debug: target.debug },
      parts,
      {
        partSize,
        partsInFlight: settings.partsInFlight,
        stallTimeoutMs: settings.stallTimeoutMs,
        contentType: options.contentType,
        sha256: options.sha256,
        signal: options.signal,
        onProgress: options.onProgress,
      },
    );
    failed = false;
    return result.info;
  } finally {
    await parts?.close(failed);
  }
}
