/**
 * The one multipart engine: uploads (for `S3Store._put` and the managed-objects stage) and
 * multipart copies.
 *
 * **Upload.** Parts come from a {@link PartSource} (parts.ts): byte ranges streamed from a file,
 * or pooled buffers filled from a stream, handed out in part-number order. At most
 * `partsInFlight` parts are being sent at once; a part is released (its buffer given back) when
 * its response arrives, so a stream's memory is at most `partsInFlight` × `partSize`, and a
 * file's a few read chunks per part. Each ETag is kept under its part number and the parts are
 * completed in number order, whatever order their responses arrive in. Progress is the number of
 * bytes in parts the store has acknowledged.
 *
 * Retries: a buffered part is retried by the SDK itself. The SDK never retries a streamed body
 * (it cannot rewind a stream), so a file part that fails with a retryable error (a network
 * error, a timeout, 5xx, throttling) is sent again from here with a fresh stream of its range,
 * up to the client's `maxAttempts`, with the SDK's backoff (full jitter from 100 ms, doubling) —
 * but never once the stall watchdog has fired (nor does the SDK retry a cancelled request).
 *
 * **Stall watchdog.** A store that takes a part's bytes and never answers (Ceph with a full OSD)
 * would otherwise hold an upload for attempts × the idle-socket timeout per part. The upload as
 * a whole moves when the store acknowledges a part or the request of a part reads body bytes
 * beyond what any earlier attempt of that part had read (`onRead` of the part's body; a resend
 * of bytes the store already took is not progress, so retries cannot extend the deadline). A
 * buffered part is given to the SDK as bytes (signed, retried by the SDK), and a middleware at
 * the SDK's innermost step swaps in a fresh stream of the buffer for each request it writes, so
 * its bytes are seen moving too (the SDK's retry logic still sees bytes). The
 * clock runs only while at least one part is being sent (its request, or the backoff before a
 * resend): waiting for a slow source stream or the digest read is not the store's stall. When
 * nothing moved for `stallTimeoutMs` (default 120 s, the idle-socket timeout), the upload fails
 * like on any other failure: no part starts or is sent again, the parts in flight are cancelled,
 * and the upload is aborted — or kept when the caller keeps it (`abortOnFailure: false`) — and
 * it rejects with {@link UploadStalled}, whose message says which of the two happened. The
 * watchdog does not cover CreateMultipartUpload and AbortMultipartUpload (each bounded to 30 s)
 * nor CompleteMultipartUpload (AWS may take minutes on a large upload, keeping the connection
 * alive meanwhile; the idle-socket timeout covers it). So a stall fails the upload within
 * `stallTimeoutMs` plus at most 30 s for the abort.
 *
 * Hooks the managed-objects stage uses: the source's digests (whole object, each part), an
 * existing upload id and the parts already acknowledged by an earlier attempt (`trusted`: a part
 * whose digest still matches is not sent again), `onPart` after each acknowledged part (a
 * checkpoint write; the part's bytes count as progress only after it), and `abortOnFailure: false`
 * to keep the upload for a later retry.
 *
 * Limits: part numbers 1..`maxParts` (10,000 on S3). A source of known size that needs more is
 * refused before anything is sent; a stream is read once more after a full last-allowed part:
 * end of input completes normally, more data is {@link PartLimitExceeded} before that part is sent.
 *
 * **Failure and cancellation.** On the first failure (a part refused, the source failing or
 * changing, the caller's AbortSignal) no new part starts, the parts in flight are cancelled, and
 * once every one has settled the upload is aborted (AbortMultipartUpload, bounded to 30 s and
 * independent of the caller's signal), so no incomplete upload is left behind to be billed. Only a
 * crash of the process itself can leave one; buckets should have an
 * `AbortIncompleteMultipartUpload` lifecycle rule for that (docs/drivers/s3.md). The upload is
 * created with a 30 s bound of its own rather than the caller's signal: an upload created on the
 * server while the client gave up waiting would be left open with no id to abort it by.
 *
 * Errors: S3 failures are mapped by the driver's one mapping (errors.ts: NotFound, StoreError
 * with status and the SDK error as cause); the source's failures are SourceError/SourceChanged;
 * a cancelled upload rejects with the signal's reason (`isAbort`).
 *
 * **Copy.** Objects above the copy threshold (5 GiB, S3's CopyObject limit) are copied with
 * UploadPartCopy byte ranges, each conditional on the source's ETag so a source replaced
 * mid-copy fails the copy instead of mixing two objects.
 *
 * @module
 */
import { Readable } from 'node:stream';
import type { CompletedPart, S3Client, UploadPartCommand } from '@aws-sdk/client-s3';
import { raceAbort } from '../../src/concurrency.js';
import {
  isAbort,
  type ProvcatError,
  type StalledUploadOutcome,
  StoreError,
  UploadStalled,
} from '../../src/errors.js';
import { DEFAULT_STALL_TIMEOUT_MS, MAX_PARTS, partSizeFor } from './config.js';
import {
  errorName,
  mapS3Error,
  PartLimitExceeded,
  SourceError,
  s3UriText,
  statusOf,
} from './errors.js';
import { copySource } from './keys.js';
import type { Part, PartSource } from './parts.js';
import type { S3Sdk } from './sdk.js';

/** What a multipart operation needs: the client, the SDK module, where, and a debug log. */
export interface MultipartTarget {
  client: S3Client;
  sdk: S3Sdk;
  bucket: string;
  key: string;
  debug(message: string): void;
}

/** What a completed multipart upload or copy reports. */
export interface MultipartResult {
  /** The object's ETag; Ceph sends none on completion, then it comes from a HEAD. */
  etag: string;
  versionId: string | undefined;
  size: number;
}

/** How long creating or aborting an upload may take (bounded cleanup, not the caller's work). */
export const ABORT_TIMEOUT_MS = 30_000;

/** A part acknowledged by an earlier attempt of a resumed upload. */
export interface TrustedPart {
  etag: string;
  /** SHA-256 (hex) of the part's bytes when they were sent. */
  sha256: string;
}

/** A part the store holds now, reported to {@link UploadMultipartOptions.onPart}. */
export interface AcknowledgedPart {
  number: number;
  etag: string;
  /** The part's SHA-256 (hex), when the source computes part digests. */
  sha256: string | undefined;
  /** False for a trusted part that was verified and kept without sending it. */
  sent: boolean;
}

/** Options of {@link uploadMultipart}. */
export interface UploadMultipartOptions {
  /** Bytes per part (for messages; the source cuts the parts). */
  partSize: number;
  /** Parts sent at once, at least 1. */
  partsInFlight: number;
  /** Highest part number (default 10,000). */
  maxParts?: number | undefined;
  /** Content-Type of a new upload. */
  contentType?: string | undefined;
  /** Continue this existing upload instead of creating one. */
  uploadId?: string | undefined;
  /** Parts acknowledged by an earlier attempt: kept, unsent, when their digest still matches. */
  trusted?: ReadonlyMap<number, TrustedPart> | undefined;
  /** After each acknowledged (or kept) part, before its bytes count as progress. */
  onPart?: ((part: AcknowledgedPart) => Promise<void>) | undefined;
  /** Cumulative bytes in acknowledged parts. */
  onProgress?: ((bytes: number) => void) | undefined;
  /** Abort the multipart upload when the upload fails (default true). */
  abortOnFailure?: boolean | undefined;
  /**
   * Fail with {@link UploadStalled} when nothing moves for this long while parts are being sent
   * (milliseconds; default {@link DEFAULT_STALL_TIMEOUT_MS}); see the module comment.
   */
  stallTimeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** What {@link uploadMultipart} produced. */
export interface UploadMultipartResult {
  uploadId: string;
  /** ETag of the completed object as the completion returned it (Ceph: empty). */
  etag: string | undefined;
  versionId: string | undefined;
  size: number;
  /** SHA-256 (hex) of the whole object, when the source computes digests. */
  sha256: string | undefined;
  /** `{ number, etag }` of parts 1..n, in order. */
  parts: Array<{ number: number; etag: string }>;
  /** Parts actually sent (trusted parts kept are not). */
  sent: number;
}

function mapped(error: unknown, target: MultipartTarget, op: string): unknown {
  return isAbort(error) ? error : mapS3Error(error, { bucket: target.bucket, key: target.key, op });
}

/** An AbortController that follows `parent` until disposed. */
function linked(parent: AbortSignal | undefined): AbortController & { dispose(): void } {
  const controller = new AbortController() as AbortController & { dispose(): void };
  const onAbort = () => controller.abort(parent?.reason);
  if (parent?.aborted) onAbort();
  else parent?.addEventListener('abort', onAbort, { once: true });
  controller.dispose = () => parent?.removeEventListener('abort', onAbort);
  return controller;
}

/**
 * Create a multipart upload (bounded to {@link ABORT_TIMEOUT_MS}, not cancelled by any caller
 * signal; see the module comment). Errors are mapped.
 */
export async function createMultipartUpload(
  target: MultipartTarget,
  contentType: string | undefined,
): Promise<string> {
  const { client, sdk, bucket, key } = target;
  let uploadId: string | undefined;
  try {
    const created = await client.send(
      new sdk.CreateMultipartUploadCommand({ Bucket: bucket, Key: key, ContentType: contentType }),
      { abortSignal: AbortSignal.timeout(ABORT_TIMEOUT_MS) },
    );
    uploadId = created.UploadId;
  } catch (error) {
    throw mapS3Error(error, { bucket, key, op: 'CreateMultipartUpload' });
  }
  if (!uploadId) {
    throw new StoreError('CreateMultipartUpload returned no UploadId', {
      uri: s3UriText(bucket, key),
    });
  }
  return uploadId;
}

/**
 * Upload `source`'s parts as one object with a multipart upload; see the module comment. The
 * source must not be empty (send an empty object with one PutObject) and is not closed here.
 */
export async function uploadMultipart(
  target: MultipartTarget,
  source: PartSource,
  options: UploadMultipartOptions,
): Promise<UploadMultipartResult> {
  const { client, sdk, bucket, key } = target;
  const maxParts = options.maxParts ?? MAX_PARTS;
  const window = Math.max(1, options.partsInFlight);
  const inner = linked(options.signal);
  const signal = inner.signal;
  // The first failure; set from part callbacks, so read it through `failed()` (TypeScript would
  // otherwise narrow a local it cannot see assigned).
  let failure: { error: unknown } | undefined;
  const failed = () => failure;
  const fail = (error: unknown) => {
    failure ??= { error };
    if (!signal.aborted) inner.abort(error);
  };
  const inflight = new Set<Promise<void>>();
  const etags = new Map<number, string>();
  const slots = new Slots(window);
  // Set when the watchdog fires; its `reason` is then the upload's failure.
  let stall: Stall | undefined;
  const stalled = () => stall;
  const watchdog = new Watchdog(options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS, (idleMs) => {
    const waiting = [...watchdog.waiting].sort((a, b) => a - b);
    const what = `nothing moved for ${seconds(idleMs)} (no part acknowledged, no new body byte taken by the store; part${waiting.length === 1 ? '' : 's'} ${waiting.join(', ')} waiting)`;
    const reason = new Error(what);
    reason.name = 'TimeoutError';
    stall = { idleMs, reason };
    target.debug(`multipart ${bucket}/${key}: stalled: ${what}; cancelling the parts`);
    fail(reason);
  });
  let uploadId = options.uploadId;
  let count = 0;
  let sent = 0;
  let acknowledged = 0;
  const acknowledge = async (
    part: Part,
    etag: string,
    sha256: string | undefined,
    wasSent: boolean,
  ) => {
    etags.set(part.number, etag);
    await options.onPart?.({ number: part.number, etag, sha256, sent: wasSent });
    acknowledged += part.size;
    options.onProgress?.(acknowledged);
  };
  try {
    if (source.size !== undefined && Math.ceil(source.size / options.partSize) > maxParts) {
      throw new PartLimitExceeded(
        `${bucket}/${key}: ${source.size} bytes need more than ${maxParts} parts of ${options.partSize} bytes`,
      );
    }
    signal.throwIfAborted();
    if (uploadId === undefined) {
      uploadId = await createMultipartUpload(target, options.contentType);
      target.debug(
        `multipart ${bucket}/${key}: upload ${uploadId}, parts of ${options.partSize} bytes`,
      );
      signal.throwIfAborted();
    }
    const id = uploadId;
    const attempts = await maxAttempts(client);
    for (;;) {
      await slots.acquire(signal);
      let part: Part | undefined;
      try {
        if (failed()) break;
        part = await source.next(signal);
      } finally {
        if (!part) slots.release();
      }
      if (!part) break;
      const current = part;
      if (current.number > maxParts) {
        current.release();
        slots.release();
        throw new PartLimitExceeded(
          `${bucket}/${key}: the source needs more than ${maxParts} parts of ${options.partSize} bytes (at most ${maxParts * options.partSize} bytes)`,
        );
      }
      count = current.number;
      const trusted = options.trusted?.get(current.number);
      const task = (async () => {
        try {
          if (trusted !== undefined) {
            const sha256 = await current.digest(signal);
            if (trusted.sha256 === sha256) {
              await acknowledge(current, trusted.etag, sha256, false);
              return;
            }
            target.debug(
              `multipart ${bucket}/${key}: part ${current.number} differs from the checkpoint; sending it again`,
            );
          }
          sent++;
          const etag = await sendPart(target, id, current, signal, attempts, watchdog);
          await acknowledge(current, etag, await current.digest(signal), true);
        } catch (error) {
          fail(error);
        } finally {
          current.release();
          slots.release();
        }
      })();
      inflight.add(task);
      void task.finally(() => inflight.delete(task));
    }
    await Promise.all(inflight);
    watchdog.stop();
    const late = failed();
    if (late) throw late.error;
    if (count === 0)
      throw new Error(`internal: multipart upload of ${bucket}/${key} without parts`);
    const summary = await source.finish(signal);
    const parts: Array<{ number: number; etag: string }> = [];
    for (let number = 1; number <= count; number++) {
      const etag = etags.get(number);
      if (etag === undefined)
        throw new Error(`internal: part ${number} of ${bucket}/${key} has no ETag`);
      parts.push({ number, etag });
    }
    let completed: { ETag?: string | undefined; VersionId?: string | undefined };
    try {
      completed = await client.send(
        new sdk.CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key: key,
          UploadId: id,
          MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.number, ETag: p.etag })) },
        }),
        { abortSignal: signal },
      );
    } catch (error) {
      throw mapped(error, target, 'CompleteMultipartUpload');
    }
    target.debug(
      `multipart ${bucket}/${key}: completed ${count} parts (${sent} sent), ${summary.size} bytes`,
    );
    return {
      uploadId: id,
      etag: completed.ETag,
      versionId: completed.VersionId,
      size: summary.size,
      sha256: summary.sha256,
      parts,
      sent,
    };
  } catch (error) {
    fail(error);
    watchdog.stop();
    await Promise.allSettled(inflight);
    const original = failed()?.error ?? error;
    const stop = stalled();
    const abort = options.abortOnFailure !== false;
    if (uploadId !== undefined && stop !== undefined && original === stop.reason) {
      throw await stalledError(target, uploadId, stop, abort);
    }
    if (uploadId !== undefined && abort) {
      throw await abortMultipartUpload(target, uploadId, original);
    }
    throw original;
  } finally {
    watchdog.stop();
    inner.dispose();
  }
}

/** The watchdog fired: how long nothing had moved, and the failure it raised (saying so). */
interface Stall {
  idleMs: number;
  reason: Error;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}

/**
 * The error of a stalled upload, after aborting the upload (`abort`) or keeping it: an
 * {@link UploadStalled} whose message and `outcome` say which, and whether the abort failed.
 */
async function stalledError(
  target: MultipartTarget,
  uploadId: string,
  stall: Stall,
  abort: boolean,
): Promise<UploadStalled> {
  let outcome: StalledUploadOutcome = 'kept';
  let cause: unknown = stall.reason;
  if (abort) {
    const abortError = await tryAbort(target, uploadId);
    outcome = abortError === undefined ? 'aborted' : 'abort-failed';
    if (abortError !== undefined) {
      cause = new AggregateError(
        [stall.reason, abortError],
        'the upload stalled, then its abort failed',
      );
    }
  }
  const done =
    outcome === 'kept'
      ? `multipart upload ${uploadId} kept so that a retry can resume it`
      : outcome === 'aborted'
        ? `multipart upload ${uploadId} aborted`
        : `aborting multipart upload ${uploadId} failed too, so it remains until an AbortIncompleteMultipartUpload lifecycle rule removes it`;
  const uri = s3UriText(target.bucket, target.key);
  return new UploadStalled(
    `upload of ${uri} stalled: ${stall.reason.message}; no part is sent again; ${done}`,
    { uri, cause, uploadId, stalledMs: Math.round(stall.idleMs), outcome },
  );
}

/**
 * The stall clock of one upload (see the module comment). Parts being sent bracket their
 * attempts with {@link begin}/{@link end} and report progress with {@link moved}; when parts
 * are being sent and nothing moved for `timeoutMs`, `onStall` is called once with how long
 * nothing moved. One timer, re-armed for the time left when it finds progress.
 */
class Watchdog {
  /** Numbers of the parts being sent. */
  readonly waiting = new Set<number>();
  private last = 0;
  private timer: NodeJS.Timeout | undefined;
  private done = false;

  constructor(
    private readonly timeoutMs: number,
    private readonly onStall: (idleMs: number) => void,
  ) {}

  /** Part `number` starts being sent (all its attempts). */
  begin(number: number): void {
    if (this.done) return;
    if (this.waiting.size === 0) {
      this.last = performance.now();
      this.timer ??= this.arm(this.timeoutMs);
    }
    this.waiting.add(number);
  }

  /** Part `number` is no longer being sent (acknowledged, failed or cancelled). */
  end(number: number): void {
    this.waiting.delete(number);
  }

  /** The store acknowledged a part, or took body bytes it had not taken before. */
  moved(): void {
    this.last = performance.now();
  }

  /** No more stalls (the upload completed or failed). */
  stop(): void {
    this.done = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(ms: number): NodeJS.Timeout {
    return setTimeout(() => this.check(), Math.max(1, Math.ceil(ms)));
  }

  private check(): void {
    this.timer = undefined;
    // Nothing being sent: the clock stops; `begin` restarts it.
    if (this.done || this.waiting.size === 0) return;
    const idle = performance.now() - this.last;
    if (idle < this.timeoutMs) {
      this.timer = this.arm(this.timeoutMs - idle);
      return;
    }
    this.done = true;
    this.onStall(idle);
  }
}

/** At most `limit` holders at once; `acquire` waits for a free slot (rejects when `signal` aborts). */
class Slots {
  private used = 0;
  private waiters: Array<() => void> = [];
  constructor(private readonly limit: number) {}

  async acquire(signal: AbortSignal): Promise<void> {
    while (this.used >= this.limit) {
      await raceAbort(
        new Promise<void>((resolve) => {
          this.waiters.push(resolve);
        }),
        signal,
      );
    }
    signal.throwIfAborted();
    this.used++;
  }

  release(): void {
    this.used--;
    this.waiters.shift()?.();
  }
}

async function maxAttempts(client: S3Client): Promise<number> {
  try {
    const n = await client.config.maxAttempts();
    return Number.isSafeInteger(n) && n >= 1 ? n : 3;
  } catch {
    return 3; // the client's own default; a provider that fails here fails every call anyway
  }
}

/** Errors without an HTTP status that mean "no answer, try again" (the SDK's own lists). */
const TRANSIENT = new Set([
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
]);

/**
 * Would sending a part again help? A network failure or timeout (no answer), 5xx, 429 or 408:
 * yes. A refusal (4xx), a source failure or a cancellation: no.
 */
function retryable(error: unknown): boolean {
  if (error instanceof SourceError || isAbort(error)) return false;
  if ((error as { $retryable?: unknown } | null)?.$retryable) return true;
  const status = statusOf(error);
  if (status !== undefined) return status >= 500 || status === 429 || status === 408;
  const code = (error as { code?: unknown } | null)?.code;
  return (
    TRANSIENT.has(errorName(error)) ||
    (typeof code === 'string' && TRANSIENT.has(code)) ||
    (error instanceof Error && error.message === 'socket hang up')
  );
}

/** Wait `ms`, or reject when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return raceAbort(
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
    signal,
  ).finally(() => clearTimeout(timer));
}

/**
 * Send one part; resolve with its ETag once the store acknowledged it and the source confirmed
 * what was sent. A resendable part is sent again after a retryable failure, unless `signal`
 * aborted (the watchdog fired, or any other failure). Progress goes to `watchdog`: bytes read by
 * the request beyond the furthest any attempt reached, and the acknowledgement (see the module
 * comment). Errors are mapped.
 */
async function sendPart(
  target: MultipartTarget,
  uploadId: string,
  part: Part,
  signal: AbortSignal,
  attempts: number,
  watchdog: Watchdog,
): Promise<string> {
  const { client, sdk, bucket, key } = target;
  // The furthest byte of the part any request has read.
  let reached = 0;
  watchdog.begin(part.number);
  try {
    for (let attempt = 1; ; attempt++) {
      const body = await part.body(signal, (position) => {
        if (position > reached) {
          reached = position;
          watchdog.moved();
        }
      });
      // A body that fails (the file cannot be read, or changed) must also end its request: the
      // server would wait for the missing bytes.
      const request = linked(signal);
      let bodyError: { error: unknown } | undefined;
      if (body.body instanceof Readable) {
        body.body.once('error', (error) => {
          bodyError ??= { error };
          request.abort(error);
        });
      }
      try {
        let etag: string | undefined;
        try {
          const command = new sdk.UploadPartCommand({
            Bucket: bucket,
            Key: key,
            UploadId: uploadId,
            PartNumber: part.number,
            Body: body.body,
            ContentLength: part.size,
          });
          if (body.restream !== undefined) streamEachRequest(command, body.restream);
          const out = await client.send(command, { abortSignal: request.signal });
          etag = out.ETag;
          watchdog.moved();
        } catch (error) {
          throw bodyError ? bodyError.error : error;
        }
        if (!etag)
          throw new StoreError(`UploadPart ${part.number} of ${bucket}/${key} returned no ETag`);
        await body.sent(signal);
        return etag;
      } catch (error) {
        if (!part.resendable || attempt >= attempts || signal.aborted || !retryable(error)) {
          throw mapped(error, target, 'UploadPart');
        }
        const delay = Math.min(20_000, Math.random() * 100 * 2 ** attempt);
        target.debug(
          `multipart ${bucket}/${key}: part ${part.number} failed (${errorName(error)}), sending it again in ${Math.round(delay)} ms (attempt ${attempt + 1} of ${attempts})`,
        );
        await sleep(delay, signal);
      } finally {
        body.dispose();
        request.dispose();
      }
    }
  } finally {
    watchdog.end(part.number);
  }
}

/**
 * Have each request of `command` (each attempt the SDK makes) write a fresh stream from `open`
 * instead of the bytes in its body. The middleware sits at the innermost step, after the retry
 * logic and the signer, which see (and sign) the bytes. It puts the bytes back once the request
 * settled: the retry logic must find bytes there, as it does not retry a streamed body (today
 * the signer hands a signed copy of the request on, so the retry logic's own object is never
 * changed; the restore keeps that true should the signer sign in place).
 */
function streamEachRequest(command: UploadPartCommand, open: () => Readable): void {
  command.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { body?: unknown } | undefined;
      if (!request) return next(args);
      const bytes = request.body;
      const stream = open();
      request.body = stream;
      try {
        return await next(args);
      } finally {
        request.body = bytes;
        if (!stream.destroyed) stream.destroy();
      }
    },
    { step: 'deserialize', name: 'provcatStreamBody' },
  );
}

/**
 * The ETag of a completed multipart object: the completion's, or, when the store sent an empty
 * one (Ceph 16), a HEAD's of the version just written.
 */
export async function completedEtag(
  target: MultipartTarget,
  etag: string | undefined,
  versionId: string | undefined,
  signal?: AbortSignal,
): Promise<string> {
  if (etag && etag !== '""') return etag;
  const head = await target.client.send(
    new target.sdk.HeadObjectCommand({
      Bucket: target.bucket,
      Key: target.key,
      VersionId: versionId,
    }),
    { abortSignal: signal },
  );
  if (!head.ETag) throw new StoreError('the completed object has no ETag');
  return head.ETag;
}

/**
 * Abort a multipart upload after `cause` failed it, bounded to {@link ABORT_TIMEOUT_MS} and
 * independent of any caller signal (which may be why it is aborted). Returns the error the
 * caller should see: `cause` itself — unless the abort failed too and `cause` is a StoreError,
 * which is then replaced by a StoreError that says the incomplete upload remains, with both
 * errors as cause. Typed errors (an abort, a source failure, the part limit) keep their type;
 * a failed abort is logged.
 */
export async function abortMultipartUpload(
  target: MultipartTarget,
  uploadId: string,
  cause: unknown,
): Promise<unknown> {
  const abortError = await tryAbort(target, uploadId);
  if (abortError === undefined || !(cause instanceof StoreError)) return cause;
  const original: ProvcatError = cause;
  return new StoreError(
    `${original.message}; aborting multipart upload ${uploadId} failed too, so it remains until an AbortIncompleteMultipartUpload lifecycle rule removes it`,
    {
      uri: original.uri,
      cause: new AggregateError([cause, abortError], 'upload failed, then its abort failed'),
      status: cause.status,
    },
  );
}

/**
 * AbortMultipartUpload, bounded to {@link ABORT_TIMEOUT_MS} and independent of any caller
 * signal: `undefined` when the upload is gone (aborted now, or a 404: already gone), else the
 * abort's error (logged).
 */
async function tryAbort(target: MultipartTarget, uploadId: string): Promise<unknown> {
  try {
    await target.client.send(
      new target.sdk.AbortMultipartUploadCommand({
        Bucket: target.bucket,
        Key: target.key,
        UploadId: uploadId,
      }),
      { abortSignal: AbortSignal.timeout(ABORT_TIMEOUT_MS) },
    );
    target.debug(`multipart ${target.bucket}/${target.key}: aborted upload ${uploadId}`);
    return undefined;
  } catch (abortError) {
    if (statusOf(abortError) === 404) return undefined; // already gone: nothing is left behind
    target.debug(
      `multipart ${target.bucket}/${target.key}: aborting upload ${uploadId} failed: ${String(abortError)}`,
    );
    return abortError;
  }
}

/** What a multipart copy copies from. */
export interface CopySourceInfo {
  versionId: string | undefined;
  size: number;
  etag: string;
  contentType?: string | undefined;
  contentEncoding?: string | undefined;
  contentDisposition?: string | undefined;
  cacheControl?: string | undefined;
  metadata?: Record<string, string> | undefined;
}

/**
 * Copy `sourceKey` (one version of it, or the current object) to `target.key` in the same bucket
 * with UploadPartCopy, `partsInFlight` ranges at once. Aborts the upload on failure.
 */
export async function copyMultipart(
  target: MultipartTarget,
  sourceKey: string,
  source: CopySourceInfo,
  options: { partSize: number; partsInFlight: number; signal?: AbortSignal | undefined },
): Promise<MultipartResult> {
  const { client, sdk, bucket, key } = target;
  const partSize = partSizeFor(options.partSize, source.size);
  const count = Math.max(1, Math.ceil(source.size / partSize));
  const inner = new AbortController();
  const onAbort = () => inner.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  let uploadId: string | undefined;
  try {
    options.signal?.throwIfAborted();
    const created = await client.send(
      new sdk.CreateMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        ContentType: source.contentType,
        ContentEncoding: source.contentEncoding,
        ContentDisposition: source.contentDisposition,
        CacheControl: source.cacheControl,
        Metadata: source.metadata,
      }),
      { abortSignal: inner.signal },
    );
    uploadId = created.UploadId;
    if (!uploadId) throw new StoreError('CreateMultipartUpload returned no UploadId');
    const id = uploadId;
    const parts: CompletedPart[] = [];
    let next = 0;
    let failure: { error: unknown } | undefined;
    const failed = () => failure;
    const worker = async () => {
      for (;;) {
        if (failure) return;
        const index = next++;
        if (index >= count) return;
        const start = index * partSize;
        const end = Math.min(source.size, start + partSize) - 1;
        try {
          const response = await client.send(
            new sdk.UploadPartCopyCommand({
              Bucket: bucket,
              Key: key,
              UploadId: id,
              PartNumber: index + 1,
              CopySource: copySource(bucket, sourceKey, source.versionId),
              CopySourceRange: `bytes=${start}-${end}`,
              CopySourceIfMatch: source.etag,
            }),
            { abortSignal: inner.signal },
          );
          const etag = response.CopyPartResult?.ETag;
          if (!etag) throw new StoreError(`UploadPartCopy ${index + 1} returned no ETag`);
          parts[index] = { PartNumber: index + 1, ETag: etag };
        } catch (error) {
          failure ??= { error };
          inner.abort(error);
          return;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(options.partsInFlight, count) }, worker));
    const failedCopy = failed();
    if (failedCopy) throw failedCopy.error;
    const completed = await client.send(
      new sdk.CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        UploadId: id,
        MultipartUpload: { Parts: parts },
      }),
      { abortSignal: inner.signal },
    );
    const etag = await completedEtag(target, completed.ETag, completed.VersionId, inner.signal);
    target.debug(`copy ${bucket}/${sourceKey} -> ${key}: ${count} parts of ${partSize} bytes`);
    return { etag, versionId: completed.VersionId, size: source.size };
  } catch (error) {
    inner.abort(error);
    const failure = mapped(error, target, 'copy');
    throw uploadId === undefined ? failure : await abortMultipartUpload(target, uploadId, failure);
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
  }
}
