/**
 * The verified reads of the one stage: `open`, `readTo`, `openWeb`, `openRange`.
 *
 * Each validates the location (the digest first, then containment), the range, and an already
 * aborted signal — all before any I/O — then asks the backend for one read and wraps it in the
 * verifying wrappers of verify.ts. A whole read asks for the whole object, so a long object
 * shows its extra byte (`TooLong`); a range read is one ranged request whose `Content-Range` and
 * `Content-Length` must be exactly the ones asked for before the body is exposed
 * (`RangeMismatch` otherwise — no HEAD, no buffering: a proxy that ignores Range is caught).
 * `readTo` delivers to a sink; a backend whose GET reads into reused buffers (`pipeTo`, the S3
 * driver's lean path) hands them on with no copy.
 *
 * @module
 */
import { Readable } from 'node:stream';
import type { ReadableStream } from 'node:stream/web';
import type { BodySink, GetResult } from '../contract/primitives.js';
import { ObjectIntegrityError } from '../core/errors.js';
import type { StageBackend } from './backend.js';
import { checkDataLocation, type DataLocation } from './data-location.js';
import { abortError } from './errors.js';
import { checkRange, type ReadOptions } from './stage-contract.js';
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

/** The reads of a stage over `backend`, with `keyOf` its containment check. */
export class StageReads {
  constructor(
    private readonly backend: () => Promise<StageBackend>,
    private readonly keyOf: (uri: string) => string,
  ) {}

  /** One GET (a byte range when given); aborts come out as AbortError. */
  private async get(
    key: string,
    range: { start: number; end: number } | undefined,
    signal: AbortSignal | undefined,
  ): Promise<GetResult> {
    const backend = await this.backend();
    try {
      return await backend.get(key, { range, signal });
    } catch (error) {
      if (signal?.aborted) throw abortError(signal);
      throw error;
    }
  }

  /** See `ManagedStage.open`. */
  async open(location: DataLocation, options: ReadOptions = {}): Promise<Readable> {
    const loc = checkDataLocation(location);
    const key = this.keyOf(loc.uri);
    if (options.signal?.aborted) throw abortError(options.signal);
    const out = await this.get(key, undefined, options.signal);
    return verifyWhole(out.body, {
      uri: loc.uri,
      expected: loc.sizeBytes,
      sha256: loc.sha256,
      signal: options.signal,
    });
  }

  /** See `ManagedStage.readTo`. */
  async readTo(location: DataLocation, sink: BodySink, options: ReadOptions = {}): Promise<void> {
    const loc = checkDataLocation(location);
    const key = this.keyOf(loc.uri);
    if (options.signal?.aborted) throw abortError(options.signal);
    const out = await this.get(key, undefined, options.signal);
    const pipeTo = out.pipeTo;
    const pipe = pipeTo === undefined ? streamToSink(out.body) : (s: BodySink) => pipeTo(s);
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

  /** See `ManagedStage.openWeb`. */
  async openWeb(
    location: DataLocation,
    options: ReadOptions = {},
  ): Promise<ReadableStream<Uint8Array>> {
    return Readable.toWeb(await this.open(location, options)) as ReadableStream<Uint8Array>;
  }

  /** See `ManagedStage.openRange`. */
  async openRange(
    location: DataLocation,
    start: number,
    end: number,
    options: ReadOptions = {},
  ): Promise<Readable> {
    const loc = checkDataLocation(location);
    const key = this.keyOf(loc.uri);
    checkRange(loc, start, end);
    if (options.signal?.aborted) throw abortError(options.signal);
    const out = await this.get(key, { start, end }, options.signal);
    const wantRange = `bytes ${start}-${end - 1}/${loc.sizeBytes}`;
    if (out.contentRange !== wantRange || out.contentLength !== end - start) {
      out.body.destroy();
      throw new ObjectIntegrityError(
        'RangeMismatch',
        `asked ${loc.uri} for ${wantRange} (${end - start} bytes); the response declared Content-Range ${
          out.contentRange === undefined ? '(none)' : JSON.stringify(out.contentRange)
        } and Content-Length ${out.contentLength}`,
        { uri: loc.uri },
      );
    }
    return capRange(out.body, { uri: loc.uri, expected: end - start, signal: options.signal });
  }
}
