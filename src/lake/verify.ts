/**
 * The verifying wrappers every read goes through.
 *
 * {@link verifyWhole} caps a backend stream at the declared size, hashes exactly the bytes it
 * delivers, and treats any byte beyond the cap as proof that the object is too long (the
 * backend is asked for at least one byte more than declared, so a long object always shows
 * one). At the backend's end it decides: fewer bytes than declared is `PrematureEof` (with
 * expected and observed counts), a digest other than the declared one is `DigestMismatch`.
 * Only then does the stream end successfully — verification is a property of EOF, and a reader
 * that stops early has been promised nothing.
 *
 * {@link capRange} does the same for a byte range, without a digest: exactly `end - start`
 * bytes, else `PrematureEof` or `TooLong`.
 *
 * Both are `Transform`s piped from the backend: a failure on either side destroys the other, an
 * integrity error is the stream's own error (so `pipeline` or `for await` rejects with it), a
 * backend cut off mid-body is `PrematureEof` too (its error as `cause`), and memory stays at the
 * streams' high-water marks.
 *
 * @module
 */
import { createHash, type Hash } from 'node:crypto';
import { type Readable, Transform, type TransformCallback } from 'node:stream';
import type { BodySink } from '../contract/primitives.js';
import { ObjectIntegrityError } from '../core/errors.js';
import { abortError } from './errors.js';

interface CapOptions {
  uri: string;
  /** Bytes the stream must deliver. */
  expected: number;
  /** Lowercase hex SHA-256 the delivered bytes must have; omit for ranges. */
  sha256?: string | undefined;
  signal?: AbortSignal | undefined;
}

/** What both verifiers keep: the bytes delivered, the running SHA-256, and their errors. */
class Tally {
  delivered = 0;
  private readonly hash: Hash | undefined;
  constructor(private readonly options: CapOptions) {
    this.hash = options.sha256 === undefined ? undefined : createHash('sha256');
  }

  /**
   * The part of `chunk` that may be delivered (counted and hashed here), and `TooLong` when the
   * chunk runs past the cap: nothing beyond it is ever delivered, the excess only proves the
   * object is too long.
   */
  take(chunk: Buffer): { part: Buffer; tooLong: ObjectIntegrityError | undefined } {
    const { expected, uri } = this.options;
    const room = expected - this.delivered;
    const part = chunk.length > room ? chunk.subarray(0, Math.max(0, room)) : chunk;
    const tooLong =
      chunk.length > room
        ? new ObjectIntegrityError(
            'TooLong',
            `${uri} has more than the declared ${expected} bytes`,
            {
              uri,
              expected,
              observed: this.delivered + chunk.length,
            },
          )
        : undefined;
    this.delivered += part.length;
    this.hash?.update(part);
    return { part, tooLong };
  }

  /** The error for a backend that failed before delivering every expected byte. */
  cutShort(cause: Error): ObjectIntegrityError {
    const { expected, uri } = this.options;
    return new ObjectIntegrityError(
      'PrematureEof',
      `${uri} was cut off after ${this.delivered} of ${expected} bytes: ${cause.message}`,
      { uri, expected, observed: this.delivered, cause },
    );
  }

  /** At the backend's end: `PrematureEof`, `DigestMismatch`, or `undefined` when all is well. */
  endError(): ObjectIntegrityError | undefined {
    const { expected, uri, sha256 } = this.options;
    if (this.delivered < expected) {
      return new ObjectIntegrityError(
        'PrematureEof',
        `${uri} ended after ${this.delivered} of ${expected} bytes`,
        { uri, expected, observed: this.delivered },
      );
    }
    if (this.hash !== undefined && sha256 !== undefined) {
      const actual = this.hash.digest('hex');
      if (actual !== sha256) {
        return new ObjectIntegrityError(
          'DigestMismatch',
          `${uri} has SHA-256 ${actual}, not the declared ${sha256}`,
          { uri },
        );
      }
    }
    return undefined;
  }
}

class CappedVerifier extends Transform {
  private readonly tally: Tally;
  constructor(options: CapOptions) {
    super();
    this.tally = new Tally(options);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const { part, tooLong } = this.tally.take(chunk);
    if (part.length > 0) this.push(part);
    callback(tooLong);
  }

  /** The error for a backend that failed before delivering every expected byte. */
  cutShort(cause: Error): ObjectIntegrityError {
    return this.tally.cutShort(cause);
  }

  override _flush(callback: TransformCallback): void {
    callback(this.tally.endError());
  }
}

function join(
  backend: Readable,
  verifier: CappedVerifier,
  signal: AbortSignal | undefined,
): Readable {
  // Not stream.pipeline: a backend that fails mid-body (a connection reset) must surface as
  // PrematureEof with the counts, not as a bare socket error.
  backend.on('error', (error: Error) => {
    if (verifier.destroyed) return;
    verifier.destroy(signal?.aborted ? abortError(signal) : verifier.cutShort(error));
  });
  // The consumer dropped the reader, or the verifier failed: stop the backend too.
  verifier.on('close', () => {
    if (!backend.destroyed) backend.destroy();
  });
  backend.pipe(verifier);
  if (signal) {
    const onAbort = () => verifier.destroy(abortError(signal));
    if (signal.aborted) onAbort();
    else {
      signal.addEventListener('abort', onAbort, { once: true });
      verifier.once('close', () => signal.removeEventListener('abort', onAbort));
    }
  }
  return verifier;
}

/**
 * Wrap the stream of a whole object: cap at `expected` bytes, hash, and fail at EOF unless the
 * object was exactly `expected` bytes with SHA-256 `sha256` (see the module comment). The
 * backend must be able to deliver at least `expected + 1` bytes of a longer object.
 */
export function verifyWhole(
  backend: Readable,
  options: { uri: string; expected: number; sha256: string; signal?: AbortSignal | undefined },
): Readable {
  return join(backend, new CappedVerifier(options), options.signal);
}

/** Wrap the stream of a byte range: exactly `expected` bytes, else `PrematureEof`/`TooLong`. */
export function capRange(
  backend: Readable,
  options: { uri: string; expected: number; signal?: AbortSignal | undefined },
): Readable {
  return join(backend, new CappedVerifier(options), options.signal);
}

/**
 * The checks of {@link verifyWhole} for a body delivered to a sink instead of read from a
 * stream (`ManagedStage.readTo`): bytes beyond `expected` are never passed on (`TooLong`);
 * {@link VerifyingSink.end} raises `PrematureEof` or `DigestMismatch`; a backend failure after
 * some bytes becomes `PrematureEof` with the counts ({@link VerifyingSink.cutShort}). Chunks go
 * to `sink` as they come, so `sink` sees bytes before the digest is known: it must keep them
 * provisional (a temp file, as `cat -o` does) until `end` returned.
 */
export class VerifyingSink implements BodySink {
  private readonly tally: Tally;
  private sinkError: unknown;
  readonly batchBytes: number | undefined;

  constructor(
    private readonly sink: BodySink,
    options: { uri: string; expected: number; sha256: string },
  ) {
    this.tally = new Tally(options);
    this.batchBytes = sink.batchBytes;
  }

  async data(chunk: Buffer): Promise<void> {
    const { part, tooLong } = this.tally.take(chunk);
    if (part.length > 0) {
      try {
        await this.sink.data(part);
      } catch (error) {
        this.sinkError = error;
        throw error;
      }
    }
    if (tooLong) throw tooLong;
  }

  /** True when `error` came from the downstream sink itself (not from the backend). */
  raisedBySink(error: unknown): boolean {
    return this.sinkError !== undefined && error === this.sinkError;
  }

  /** The error for a backend that failed before delivering every expected byte. */
  cutShort(cause: Error): ObjectIntegrityError {
    return this.tally.cutShort(cause);
  }

  /** After the backend's last byte: throws unless exactly `expected` bytes with the SHA-256. */
  end(): void {
    const error = this.tally.endError();
    if (error) throw error;
  }
}
