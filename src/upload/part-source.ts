/**
 * What the upload engine (engine.ts) takes its parts from: a {@link PartSource} hands out
 * {@link Part}s in part-number order, and each part gives a {@link PartBody} per attempt at
 * sending it. The sources are a local file (file-parts.ts: byte ranges streamed from disk) and a
 * stream or bytes (buffered-parts.ts: parts read into pooled buffers); the engine hands their
 * parts to a driver's part protocol, whatever the store.
 *
 * **Every body reports what the request reads** (`onRead` of {@link Part.body}): a file range
 * as it is read from disk, a buffer as views of 1 MiB handed to the request one at a time
 * ({@link PartBody.restream}; body-streams.ts). A stream hands out its next chunk only when the
 * request has taken the previous ones (backpressure), so the count follows the bytes the socket
 * accepted within a chunk or two; the engine's stall watchdog (engine.ts) counts them as
 * progress. A buffer is still given to the SDK as bytes — so the SDK signs its SHA-256 (the
 * store checks every byte) and retries it itself — and only the request each attempt writes
 * streams it.
 *
 * @module
 */
import type { Readable } from 'node:stream';

/** One attempt at sending a part: its body, and what to check once the store acknowledged it. */
export interface PartBody {
  /** The bytes (a buffer, or a stream of exactly the part's size). */
  body: Uint8Array | Readable;
  /**
   * A stream for one request, reporting to `onRead` (see `PartUpload.restream` in
   * src/contract/primitives.ts): for bytes in memory a fresh stream of views (no copy) each call,
   * for the request of each attempt the SDK makes to write instead of the bytes; for a file range
   * `body` first, then a fresh stream of the range each call (for an SDK that sends the body again
   * itself). {@link sent} checks the last stream handed out.
   */
  restream?: (() => Readable) | undefined;
  /**
   * After the store acknowledged the part: throw if what was sent is not what the source's
   * digests describe (`SourceChanged`).
   */
  sent(signal: AbortSignal): Promise<void>;
  /** Release the attempt's resources (a stream is destroyed if it has not ended). */
  dispose(): void;
}

/** One part of an upload, handed out by a {@link PartSource} in part-number order. */
export interface Part {
  /** 1-based part number. */
  readonly number: number;
  /** Bytes in the part. */
  readonly size: number;
  /**
   * May the engine send this part again after a retryable failure? True for file ranges (each
   * attempt re-reads the range); false for buffers, which the SDK itself retries.
   */
  readonly resendable: boolean;
  /** The part's SHA-256 (hex) when the source computes part digests, else `undefined`. */
  digest(signal: AbortSignal): Promise<string | undefined>;
  /**
   * A body for one attempt. `onRead(position)` is called as a request reads the body, with how
   * many bytes of the part that request has read so far (it starts again from 0 for each
   * request: another attempt, or a retry of the SDK's).
   */
  body(signal: AbortSignal, onRead?: (position: number) => void): Promise<PartBody>;
  /** The part is done with (sent, skipped or abandoned): give its buffer back. */
  release(): void;
}

/** What the source read, once every part was handed out and acknowledged. */
export interface SourceSummary {
  /** Bytes in the object. */
  size: number;
  /** SHA-256 (hex) of the whole object, when the source computes digests. */
  sha256: string | undefined;
}

/** The parts of one upload. */
export interface PartSource {
  /** Total bytes, when known up front (a file, or a stream of declared size). */
  readonly size: number | undefined;
  /** The next part, or `undefined` after the last. Called one at a time. */
  next(signal: AbortSignal): Promise<Part | undefined>;
  /** After the last part was acknowledged: final checks (the file unchanged) and the digest. */
  finish(signal: AbortSignal): Promise<SourceSummary>;
  /** Release the file or stream (a stream is destroyed when the upload failed). */
  close(failed: boolean): Promise<void>;
}

/** What a source computes besides the parts. */
export interface DigestOptions {
  /** SHA-256 of the whole object, in read order. */
  digest?: boolean | undefined;
  /** SHA-256 of each part. */
  partDigests?: boolean | undefined;
}

/** The message of a failure's cause, for the `SourceError`s the sources throw. */
export function causeMessage(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
