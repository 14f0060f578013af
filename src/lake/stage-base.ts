/**
 * {@link StageBase}: the reads both stages share.
 *
 * `open`, `openWeb` and `openRange` do the same thing on every stage: validate the location
 * (the digest first, then containment), validate the range, honour an already aborted signal —
 * all before any I/O — then ask the backend for one stream and wrap it in the verifying wrappers
 * of verify.ts. Only the backend call differs (a file read, a GET), so a stage implements just
 * {@link StageBase.readWhole} and {@link StageBase.readRange}, and the order of the checks
 * cannot drift between stages. `readTo` is `open` delivered to a sink instead of a stream; a
 * backend that can deliver into reused buffers (the S3 driver's lean GET) overrides
 * {@link StageBase.openWholeSink} so no chunk is copied on the way.
 *
 * @module
 */
import { Readable } from 'node:stream';
import type { ReadableStream } from 'node:stream/web';
import { ObjectIntegrityError } from '../errors.js';
import type { BodySink } from '../net/http1-download.js';
import { abortError } from './errors.js';
import { checkDataLocation, type DataLocation } from './location.js';
import { checkRange, type ReadOptions } from './stage.js';
import { capRange, VerifyingSink, verifyWhole } from './verify.js';

/** Deliver a stream to a sink chunk by chunk (the stream is destroyed at the end either way). */
export function streamToSink(body: Readable): (sink: BodySink) => Promise<void> {
  return async (sink) => {
    try {
      for await (const chunk of body as AsyncIterable<Buffer>) await sink.data(chunk);
    } finally {
      body.destroy();
    }
  };
}

/** The shared read path of the stages; see the module comment. */
export abstract class StageBase {
  /**
   * Check that `uri` is inside this stage and return where the backend finds it (a path, a
   * key). Throws `ObjectIntegrityError('OutsideStage')`. No I/O.
   */
  protected abstract resolve(uri: string): string;

  /**
   * One backend stream of the whole object at `where`: at least `sizeBytes + 1` bytes when the
   * object is longer than declared (so `TooLong` can be seen). A missing object rejects with
   * NotFound here, not on the stream.
   */
  protected abstract readWhole(
    where: string,
    location: DataLocation,
    signal: AbortSignal | undefined,
  ): Promise<Readable>;

  /**
   * One backend stream of `[start, end)` of the object at `where` (a range already checked
   * against `sizeBytes`), after any check of the backend's response headers.
   */
  protected abstract readRange(
    where: string,
    location: DataLocation,
    start: number,
    end: number,
    signal: AbortSignal | undefined,
  ): Promise<Readable>;

  /**
   * Open a location for a verified sequential read: the stream ends successfully only if the
   * object is exactly `sizeBytes` long and its SHA-256 matches (see `ManagedStage.open`).
   */
  async open(location: DataLocation, options: ReadOptions = {}): Promise<Readable> {
    const loc = checkDataLocation(location);
    const where = this.resolve(loc.uri);
    if (options.signal?.aborted) throw abortError(options.signal);
    const backend = await this.readWhole(where, loc, options.signal);
    return verifyWhole(backend, {
      uri: loc.uri,
      expected: loc.sizeBytes,
      sha256: loc.sha256,
      signal: options.signal,
    });
  }

  /**
   * The whole object at `where`, ready to be delivered to a sink (the same backend read as
   * {@link readWhole}; a missing object rejects here). Default: the stream of `readWhole`,
   * chunk by chunk.
   */
  protected async openWholeSink(
    where: string,
    location: DataLocation,
    signal: AbortSignal | undefined,
  ): Promise<(sink: BodySink) => Promise<void>> {
    return streamToSink(await this.readWhole(where, location, signal));
  }

  /**
   * {@link open} delivered to `sink` instead of a stream: resolves once exactly `sizeBytes`
   * bytes with the declared SHA-256 went to `sink`; rejects with `ObjectIntegrityError`
   * (`TooLong`, `PrematureEof` — also for a backend cut off mid-body —, `DigestMismatch`), the
   * sink's own error, or an AbortError. `sink` sees bytes before the digest is known, so it
   * must keep them provisional (a temp file) until this resolves. A chunk is valid only until
   * its `data` call resolves: it may be a reused read buffer.
   */
  async readTo(location: DataLocation, sink: BodySink, options: ReadOptions = {}): Promise<void> {
    const loc = checkDataLocation(location);
    const where = this.resolve(loc.uri);
    if (options.signal?.aborted) throw abortError(options.signal);
    const pipe = await this.openWholeSink(where, loc, options.signal);
    const verifier = new VerifyingSink(sink, {
      uri: loc.uri,
      expected: loc.sizeBytes,
      sha256: loc.sha256,
    });
    try {
      await pipe(verifier);
    } catch (error) {
      if (options.signal?.aborted) throw abortError(options.signal);
      if (error instanceof ObjectIntegrityError || verifier.raisedBySink(error)) throw error;
      throw verifier.cutShort(error instanceof Error ? error : new Error(String(error)));
    }
    verifier.end();
  }

  /** {@link open} as a web `ReadableStream` (the same checks; errors surface on the stream). */
  async openWeb(
    location: DataLocation,
    options: ReadOptions = {},
  ): Promise<ReadableStream<Uint8Array>> {
    return Readable.toWeb(await this.open(location, options)) as ReadableStream<Uint8Array>;
  }

  /**
   * Open the half-open range `[start, end)`: exactly `end - start` bytes or `PrematureEof`;
   * nothing is claimed about the whole-object digest (see `ManagedStage.openRange`).
   */
  async openRange(
    location: DataLocation,
    start: number,
    end: number,
    options: ReadOptions = {},
  ): Promise<Readable> {
    const loc = checkDataLocation(location);
    const where = this.resolve(loc.uri);
    checkRange(loc, start, end);
    if (options.signal?.aborted) throw abortError(options.signal);
    const backend = await this.readRange(where, loc, start, end, options.signal);
    return capRange(backend, { uri: loc.uri, expected: end - start, signal: options.signal });
  }
}
