/**
 * The one upload engine: one object sent in parts through a driver's {@link PartProtocol}, for
 * `ObjectStore.put` of large sources and for managed uploads (src/lake), on every store.
 *
 * **Parts** come from a {@link PartSource} (parts.ts): byte ranges streamed from a file, or pooled
 * buffers filled from a stream, handed out in part-number order. At most `partsInFlight` parts are
 * being sent at once (one for a `sequential` protocol: a GCS session takes its bytes in order); a
 * part is released (its buffer given back) when the store acknowledged it, so a stream's memory
 * is at most `partsInFlight` × `partSize`. Tokens are kept by part number and the parts are
 * completed in number order, whatever order their responses arrive in. Progress is the bytes in
 * parts the store acknowledged.
 *
 * **Retries** follow the one policy (src/core/retry.ts). A part in memory is retried by the driver's
 * SDK; a file part, whose body is a stream the SDK cannot rewind, is sent again from here with a
 * fresh stream of its range — but never once the stall watchdog fired. An SDK that resends a
 * body itself (Azure's) is given a body factory instead (`restream`), which reads the range
 * from disk again for each of its attempts: every part body, on every driver, can be sent again.
 *
 * **Stall watchdog.** A store that takes a part's bytes and never answers would otherwise hold an
 * upload for attempts × the idle-socket timeout per part. The upload moves when the store
 * acknowledges a part or a part's request reads body bytes beyond what any earlier attempt of
 * that part had read (a resend is not progress). The clock runs only while a part is being sent:
 * waiting for a slow source is not the store's stall. When nothing moved for `stallTimeoutMs`
 * (default 120 s), the parts in flight are cancelled, none is sent again, and the upload is
 * aborted — or kept for a resume (`abortOnFailure: false`) — and {@link UploadStalled} says
 * which.
 *
 * **The other requests** — create, list parts, complete, abort — are bounded by the same stall
 * timeout ({@link boundedRequest}): one that has no answer within `stallTimeoutMs` is cancelled
 * and sent again, per the retry policy (src/core/retry.ts: {@link RETRY_ATTEMPTS} in all, with
 * backoff); when every attempt stalled, the upload fails with a typed error — a stalled completion
 * with {@link UploadStalled} (the upload then aborted, or kept for a resume), a stalled create or
 * listing with a {@link StoreError} without status. Their answers carry no body bytes the engine
 * could count, so the bound is on the whole answer: a store that takes longer than the stall
 * timeout to complete an upload (AWS may, on a large object, while it sends keep-alive spaces)
 * needs a larger one. A completion sent again may find the upload gone because the stalled
 * attempt did complete it: that is a {@link StoreError} saying so (a resumable upload's retry then
 * finds the object and checks its size and SHA-256, src/lake/upload.ts). Creating and aborting
 * are also bounded to {@link ABORT_TIMEOUT_MS} in all, independent of the caller's signal (an
 * upload created while the caller gave up would be left with no reference to abort it by).
 *
 * **Resumes** (src/lake): an existing upload reference and the parts an earlier attempt had
 * acknowledged (`trusted`: kept unsent when their SHA-256 still matches the source), `onPart`
 * after each acknowledged part (a checkpoint write; its bytes count as progress only after it).
 * A trusted part that no longer matches is sent again — except on a `sequential` protocol, whose
 * committed bytes are final: that is {@link SourceChanged}, and the upload must start afresh.
 *
 * **Failure and cancellation.** On the first failure no part starts, the parts in flight are
 * cancelled, and once each settled the upload is aborted, so nothing is left behind to be billed;
 * only a crash can leave one (the protocol's `leftover` says what removes it). Limits: part
 * numbers 1..`maxParts`; a source of known size that needs more is refused before anything is
 * sent, a stream before the part beyond the limit ({@link PartLimitExceeded}).
 *
 * @module
 */
import type { Readable } from 'node:stream';
import type {
  CompletedPart,
  ListedPart,
  ObjectInfo,
  PartProtocol,
} from '../contract/primitives.js';
import {
  NotFound,
  NotSupported,
  PartLimitExceeded,
  PermissionDenied,
  PreconditionFailed,
  type ProvcatError,
  SourceChanged,
  type StalledUploadOutcome,
  StoreError,
  UploadStalled,
} from '../core/errors.js';
import { RETRY_ATTEMPTS, withRetries } from '../core/retry.js';
import type { Part, PartSource } from './parts.js';
import { DEFAULT_STALL_TIMEOUT_MS } from './settings.js';
import { Slots, Watchdog } from './watchdog.js';

/** How long creating or aborting an upload may take (bounded cleanup, not the caller's work). */
export const ABORT_TIMEOUT_MS = 30_000;

/** Where an upload goes: a protocol bound to its bucket, the key, and a debug log. */
export interface UploadTarget {
  protocol: PartProtocol;
  key: string;
  /** The object's URI, for messages and errors. */
  uri: string;
  debug(message: string): void;
  /**
   * What bounds each request that is not a part ({@link boundedRequest}) when the call gives no
   * `stallTimeoutMs` of its own: milliseconds, default {@link DEFAULT_STALL_TIMEOUT_MS}.
   */
  stallTimeoutMs?: number | undefined;
}

/** A part acknowledged by an earlier attempt of a resumed upload. */
export interface TrustedPart {
  token: string;
  /** SHA-256 (hex) of the part's bytes when they were sent. */
  sha256: string;
}

/** A part the store holds now, reported to {@link UploadPartsOptions.onPart}. */
export interface AcknowledgedPart {
  number: number;
  token: string;
  size: number;
  /** The part's SHA-256 (hex), when the source computes part digests. */
  sha256: string | undefined;
  /** False for a trusted part that was verified and kept without sending it. */
  sent: boolean;
}

/** Options of {@link uploadParts}. */
export interface UploadPartsOptions {
  /** Bytes per part (for messages and offsets; the source cuts the parts). */
  partSize: number;
  /** Parts sent at once, at least 1 (a sequential protocol sends one). */
  partsInFlight: number;
  /** Highest part number (default: the protocol's). */
  maxParts?: number | undefined;
  contentType?: string | undefined;
  /** The SHA-256 to record with the object at create (see `PutOptions.sha256`). */
  sha256?: string | undefined;
  /** Continue this existing upload instead of creating one. */
  upload?: string | undefined;
  /** Parts acknowledged by an earlier attempt: kept, unsent, when their digest still matches. */
  trusted?: ReadonlyMap<number, TrustedPart> | undefined;
  /** After each acknowledged (or kept) part, before its bytes count as progress. */
  onPart?: ((part: AcknowledgedPart) => Promise<void>) | undefined;
  /** Cumulative bytes in acknowledged parts. */
  onProgress?: ((bytes: number) => void) | undefined;
  /** Abort the upload when it fails (default true). */
  abortOnFailure?: boolean | undefined;
  /** See the module comment; default {@link DEFAULT_STALL_TIMEOUT_MS}. */
  stallTimeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** What {@link uploadParts} produced. */
export interface UploadPartsResult {
  /** The protocol's reference to the upload. */
  upload: string;
  /** The object as the completion reported it. */
  info: ObjectInfo;
  size: number;
  /** SHA-256 (hex) of the whole object, when the source computes digests. */
  sha256: string | undefined;
  /** Parts 1..n, in order. */
  parts: CompletedPart[];
  /** Parts actually sent (trusted parts kept are not). */
  sent: number;
}

/** An AbortController that follows `parent` until disposed. */
export function linkedController(
  parent: AbortSignal | undefined,
): AbortController & { dispose(): void } {
  const controller = new AbortController() as AbortController & { dispose(): void };
  const onAbort = () => controller.abort(parent?.reason);
  if (parent?.aborted) onAbort();
  else parent?.addEventListener('abort', onAbort, { once: true });
  controller.dispose = () => parent?.removeEventListener('abort', onAbort);
  return controller;
}

/** The stall timeout of `target`'s requests that are not parts. */
function stallOf(target: UploadTarget): number {
  return target.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS;
}

/**
 * The reason an attempt of a {@link boundedRequest} was cancelled: it had no answer within the
 * stall timeout. A `TimeoutError` (src/core/retry.ts sends such a request again); never the error a
 * caller sees, only its cause.
 */
class RequestStall extends Error {
  override readonly name = 'TimeoutError';
  constructor(what: string, stallMs: number, attempt: number, cause: unknown) {
    super(
      `${what} got no answer within ${seconds(stallMs)} (attempt ${attempt} of ${RETRY_ATTEMPTS})`,
      { cause },
    );
  }
}

/** Options of {@link boundedRequest}. */
interface BoundedRequestOptions {
  /** Each attempt with no answer for this long (ms) is cancelled and sent again. */
  stallTimeoutMs: number;
  /** The caller's: an abort stops at once (an AbortError, not retried). */
  signal?: AbortSignal | undefined;
  /** A bound on all attempts, independent of `signal` (create, abort); reached, it is a stall. */
  totalMs?: number | undefined;
  /**
   * Maps an error of an attempt that follows a stalled one (which the store may have carried out
   * without its answer arriving, say a completion): the store's view may have moved.
   */
  afterStall?: ((error: unknown) => unknown) | undefined;
}

/**
 * One request of the part protocol that is not a part — create, list parts, complete, abort —
 * bounded by the stall timeout (see the module comment): `call` gets a signal that aborts when
 * the attempt has had no answer for `stallTimeoutMs` (or the caller's signal aborts), and a
 * stalled attempt is sent again per the retry policy. Other failures are the protocol's own (its
 * SDK retried them already) and are thrown as they are. When every attempt stalled, or `totalMs`
 * ran out: the last stall, a `TimeoutError` naming `what` whose cause is the attempt's error
 * (callers turn it into their typed error: {@link isRequestStall}).
 */
async function boundedRequest<T>(
  target: UploadTarget,
  what: string,
  call: (signal: AbortSignal) => Promise<T>,
  options: BoundedRequestOptions,
): Promise<T> {
  const { stallTimeoutMs, signal, totalMs } = options;
  const deadline = totalMs === undefined ? undefined : performance.now() + totalMs;
  let stalls = 0;
  let outOfTime = false;
  return withRetries(
    async (n) => {
      const attempt = linkedController(signal);
      const left = deadline === undefined ? stallTimeoutMs : deadline - performance.now();
      const bound = Math.max(1, Math.min(stallTimeoutMs, left));
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        attempt.abort(new RequestStall(what, bound, n, undefined));
      }, bound);
      try {
        return await call(attempt.signal);
      } catch (error) {
        if (timedOut && !signal?.aborted) {
          stalls++;
          // Out of time in all (`totalMs`): this stall is the last.
          if (deadline !== undefined && performance.now() >= deadline - 1) outOfTime = true;
          const stall = new RequestStall(what, bound, n, error);
          target.debug(`${target.uri}: ${stall.message}`);
          throw stall;
        }
        if (stalls > 0 && options.afterStall) throw options.afterStall(error);
        throw error;
      } finally {
        clearTimeout(timer);
        attempt.dispose();
      }
    },
    {
      signal,
      retryable: (error) => error instanceof RequestStall && !outOfTime,
      onRetry: (_error, attempt, delay) =>
        target.debug(
          `${target.uri}: ${what}: sending it again in ${Math.round(delay)} ms (attempt ${attempt + 1} of ${RETRY_ATTEMPTS})`,
        ),
    },
  );
}

/** True for the error a {@link boundedRequest} throws when its request stalled for good. */
function isRequestStall(error: unknown): error is Error {
  return error instanceof RequestStall;
}

/** The typed error of a request that stalled for good (not a completion: see uploadParts). */
function stalledRequestError(target: UploadTarget, error: unknown): unknown {
  if (!(error instanceof RequestStall)) return error;
  return new StoreError(`${target.uri}: ${error.message}; the store gave no answer`, {
    uri: target.uri,
    cause: error,
  });
}

/**
 * Create an upload, each attempt bounded by the target's stall timeout and all of them to
 * {@link ABORT_TIMEOUT_MS}, not cancelled by the caller's signal (see the module comment). A
 * create that stalled for good is a {@link StoreError} without status; an attempt that stalled
 * after reaching the store may leave an upload no one references (the protocol's `leftover`
 * removes it).
 */
export async function createUpload(
  target: UploadTarget,
  contentType: string | undefined,
  size?: number,
  sha256?: string,
): Promise<string> {
  const name = target.protocol.name;
  let upload: string;
  try {
    upload = await boundedRequest(
      target,
      `creating a ${name}`,
      (signal) => target.protocol.create(target.key, { contentType, size, sha256, signal }),
      { stallTimeoutMs: stallOf(target), totalMs: ABORT_TIMEOUT_MS },
    );
  } catch (error) {
    throw stalledRequestError(target, error);
  }
  target.debug(`${name} ${upload} created for ${target.uri}`);
  return upload;
}

/**
 * {@link PartProtocol.listParts} of an open upload (a resume), bounded by the target's stall
 * timeout as every request that is not a part; one that stalled for good is a
 * {@link StoreError} without status.
 */
export async function listUploadParts(
  target: UploadTarget,
  upload: string,
  options: { partSize: number; signal?: AbortSignal | undefined },
): Promise<Map<number, ListedPart> | 'gone'> {
  try {
    return await boundedRequest(
      target,
      `listing the parts of ${target.protocol.name} ${upload}`,
      (signal) =>
        target.protocol.listParts(target.key, upload, { partSize: options.partSize, signal }),
      { stallTimeoutMs: stallOf(target), signal: options.signal },
    );
  } catch (error) {
    throw stalledRequestError(target, error);
  }
}

/**
 * Send `source`'s parts as one object; see the module comment. The source must not be empty (an
 * empty object is one plain put) and is not closed here.
 */
export async function uploadParts(
  target: UploadTarget,
  source: PartSource,
  options: UploadPartsOptions,
): Promise<UploadPartsResult> {
  const { protocol, key } = target;
  const stallTimeoutMs = options.stallTimeoutMs ?? stallOf(target);
  const bounded: UploadTarget = { ...target, stallTimeoutMs };
  const maxParts = Math.min(options.maxParts ?? protocol.maxParts, protocol.maxParts);
  const window = protocol.sequential ? 1 : Math.max(1, options.partsInFlight);
  const inner = linkedController(options.signal);
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
  const tokens = new Map<number, { token: string; size: number }>();
  const slots = new Slots(window);
  let stall: Stall | undefined;
  const stalled = () => stall;
  const watchdog = new Watchdog(stallTimeoutMs, (idleMs) => {
    const waiting = [...watchdog.waiting].sort((a, b) => a - b);
    const what = `nothing moved for ${seconds(idleMs)} (no part acknowledged, no new body byte taken by the store; part${waiting.length === 1 ? '' : 's'} ${waiting.join(', ')} waiting)`;
    const reason = new Error(what);
    reason.name = 'TimeoutError';
    stall = { idleMs, reason };
    target.debug(`upload of ${target.uri}: stalled: ${what}; cancelling the parts`);
    fail(reason);
  });
  let upload = options.upload;
  let count = 0;
  let sent = 0;
  let acknowledged = 0;
  const acknowledge = async (
    part: Part,
    token: string,
    sha256: string | undefined,
    wasSent: boolean,
  ) => {
    tokens.set(part.number, { token, size: part.size });
    await options.onPart?.({ number: part.number, token, size: part.size, sha256, sent: wasSent });
    acknowledged += part.size;
    options.onProgress?.(acknowledged);
  };
  try {
    if (source.size !== undefined && Math.ceil(source.size / options.partSize) > maxParts) {
      throw new PartLimitExceeded(
        `${target.uri}: ${source.size} bytes need more than ${maxParts} parts of ${options.partSize} bytes`,
        { uri: target.uri },
      );
    }
    signal.throwIfAborted();
    if (upload === undefined) {
      upload = await createUpload(bounded, options.contentType, source.size, options.sha256);
      signal.throwIfAborted();
    }
    const ref = upload;
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
          `${target.uri}: the source needs more than ${maxParts} parts of ${options.partSize} bytes (at most ${maxParts * options.partSize} bytes)`,
          { uri: target.uri },
        );
      }
      count = current.number;
      const trusted = options.trusted?.get(current.number);
      const task = (async () => {
        try {
          if (trusted !== undefined) {
            const sha256 = await current.digest(signal);
            if (trusted.sha256 === sha256) {
              await acknowledge(current, trusted.token, sha256, false);
              return;
            }
            if (protocol.sequential) {
              // Bytes a session committed are final: sending the part again would leave the
              // store's bytes, not these, under a digest of these.
              throw new SourceChanged(
                `${target.uri}: part ${current.number} of the source differs from what the ${protocol.name} already committed`,
                { uri: target.uri },
              );
            }
            target.debug(
              `upload of ${target.uri}: part ${current.number} differs from the checkpoint; sending it again`,
            );
          }
          sent++;
          const offset = (current.number - 1) * options.partSize;
          const token = await sendPart(target, ref, current, offset, signal, watchdog);
          await acknowledge(current, token, await current.digest(signal), true);
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
    if (count === 0) throw new Error(`internal: upload of ${target.uri} without parts`);
    const summary = await source.finish(signal);
    const parts: CompletedPart[] = [];
    for (let number = 1; number <= count; number++) {
      const got = tokens.get(number);
      if (got === undefined) throw new Error(`internal: part ${number} of ${target.uri} unsent`);
      parts.push({ number, token: got.token, size: got.size });
    }
    let info: ObjectInfo;
    try {
      info = await boundedRequest(
        bounded,
        `completing ${protocol.name} ${ref}`,
        (attempt) =>
          protocol.complete(key, ref, parts, {
            size: summary.size,
            contentType: options.contentType,
            sha256: options.sha256 ?? (protocol.digestAtComplete ? summary.sha256 : undefined),
            signal: attempt,
          }),
        {
          stallTimeoutMs,
          signal,
          afterStall: (error) =>
            error instanceof NotFound
              ? new StoreError(
                  `${target.uri}: completing ${protocol.name} ${ref} got no answer within ${seconds(stallTimeoutMs)}, and sent again it found the upload gone: the stalled attempt may have completed it (the object is then there), or it was aborted`,
                  { uri: target.uri, cause: error },
                )
              : error,
        },
      );
    } catch (error) {
      // Every attempt stalled: an UploadStalled, as for stalled parts (see the catch below).
      if (isRequestStall(error)) stall = { idleMs: stallTimeoutMs, reason: error };
      throw error;
    }
    target.debug(
      `upload of ${target.uri}: completed ${count} parts (${sent} sent), ${summary.size} bytes`,
    );
    return { upload: ref, info, size: summary.size, sha256: summary.sha256, parts, sent };
  } catch (error) {
    fail(error);
    watchdog.stop();
    await Promise.allSettled(inflight);
    const original = failed()?.error ?? error;
    const stop = stalled();
    const abort = options.abortOnFailure !== false;
    if (upload !== undefined && stop !== undefined && original === stop.reason) {
      throw await stalledError(bounded, upload, stop, abort);
    }
    if (upload !== undefined && abort) throw await abortUpload(bounded, upload, original);
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
  target: UploadTarget,
  upload: string,
  stall: Stall,
  abort: boolean,
): Promise<UploadStalled> {
  let outcome: StalledUploadOutcome = 'kept';
  let cause: unknown = stall.reason;
  if (abort) {
    const abortError = await tryAbort(target, upload);
    outcome = abortError === undefined ? 'aborted' : 'abort-failed';
    if (abortError !== undefined) {
      cause = new AggregateError(
        [stall.reason, abortError],
        'the upload stalled, then its abort failed',
      );
    }
  }
  const name = target.protocol.name;
  const done =
    outcome === 'kept'
      ? `${name} ${upload} kept so that a retry can resume it`
      : outcome === 'aborted'
        ? `${name} ${upload} aborted`
        : `aborting ${name} ${upload} failed too, so it remains until ${target.protocol.leftover}`;
  return new UploadStalled(
    `upload of ${target.uri} stalled: ${stall.reason.message}; no part is sent again; ${done}`,
    { uri: target.uri, cause, uploadId: upload, stalledMs: Math.round(stall.idleMs), outcome },
  );
}

/**
 * Send one part; resolve with its token once the store acknowledged it and the source confirmed
 * what was sent. A resendable part is sent again after a retryable failure, unless `signal`
 * aborted. Progress goes to `watchdog`: bytes read by the request beyond the furthest any attempt
 * reached, and the acknowledgement.
 */
async function sendPart(
  target: UploadTarget,
  upload: string,
  part: Part,
  offset: number,
  signal: AbortSignal,
  watchdog: Watchdog,
): Promise<string> {
  // The furthest byte of the part any request has read.
  let reached = 0;
  watchdog.begin(part.number);
  try {
    return await withRetries(
      async () => {
        const body = await part.body(signal, (position) => {
          if (position > reached) {
            reached = position;
            watchdog.moved();
          }
        });
        // A body that fails (the file cannot be read, or changed) must also end its request:
        // the server would wait for the missing bytes.
        const request = linkedController(signal);
        let bodyError: { error: unknown } | undefined;
        const stream = body.body;
        const watch = (readable: Readable) => {
          readable.once('error', (error) => {
            bodyError ??= { error };
            request.abort(error);
          });
          return readable;
        };
        // A file range's stream (and each fresh one an SDK's own retry asks for) is watched.
        const file = !(stream instanceof Uint8Array);
        if (file) watch(stream);
        const again = body.restream;
        const restream =
          again === undefined
            ? undefined
            : file
              ? () => {
                  const next = again();
                  return next === stream ? next : watch(next);
                }
              : again;
        try {
          let token: string;
          try {
            token = await target.protocol.putPart(target.key, upload, {
              number: part.number,
              offset,
              size: part.size,
              body: stream,
              restream,
              signal: request.signal,
            });
            watchdog.moved();
          } catch (error) {
            throw bodyError ? bodyError.error : error;
          }
          await body.sent(signal);
          return token;
        } finally {
          body.dispose();
          request.dispose();
        }
      },
      {
        attempts: part.resendable ? RETRY_ATTEMPTS : 1,
        signal,
        onRetry: (error, attempt, delay) =>
          target.debug(
            `upload of ${target.uri}: part ${part.number} failed (${String(error)}), sending it again in ${Math.round(delay)} ms (attempt ${attempt + 1} of ${RETRY_ATTEMPTS})`,
          ),
      },
    );
  } finally {
    watchdog.end(part.number);
  }
}

/**
 * Abort an upload after `cause` failed it, bounded to {@link ABORT_TIMEOUT_MS} and independent of
 * any caller signal (which may be why it is aborted). Returns the error the caller should see:
 * `cause` itself — unless the abort failed too and `cause` is a StoreError, which is then replaced
 * by an error of the same class (PermissionDenied stays PermissionDenied) that says the upload
 * remains until the protocol's `leftover`, with both errors as cause. Typed errors (an
 * abort, a source failure, the part limit) keep their type; a failed abort is logged.
 */
export async function abortUpload(
  target: UploadTarget,
  upload: string,
  cause: unknown,
): Promise<unknown> {
  const abortError = await tryAbort(target, upload);
  if (abortError === undefined || !(cause instanceof StoreError)) return cause;
  const original: ProvcatError = cause;
  // The same class as the failure (a refused credential stays PermissionDenied, exit 9).
  const Class =
    cause instanceof PermissionDenied
      ? PermissionDenied
      : cause instanceof PreconditionFailed
        ? PreconditionFailed
        : cause instanceof NotSupported
          ? NotSupported
          : StoreError;
  return new Class(
    `${original.message}; aborting ${target.protocol.name} ${upload} failed too, so it remains until ${target.protocol.leftover}`,
    {
      uri: original.uri,
      cause: new AggregateError([cause, abortError], 'upload failed, then its abort failed'),
      status: cause.status,
    },
  );
}

/**
 * Abort, bounded and independent of any caller signal: `undefined` when the upload is gone
 * (aborted now, or already gone), else the abort's error (logged).
 */
async function tryAbort(target: UploadTarget, upload: string): Promise<unknown> {
  try {
    await boundedRequest(
      target,
      `aborting ${target.protocol.name} ${upload}`,
      (signal) => target.protocol.abort(target.key, upload, { signal }),
      { stallTimeoutMs: stallOf(target), totalMs: ABORT_TIMEOUT_MS },
    );
    target.debug(`upload of ${target.uri}: aborted ${target.protocol.name} ${upload}`);
    return undefined;
  } catch (abortError) {
    target.debug(
      `upload of ${target.uri}: aborting ${target.protocol.name} ${upload} failed: ${String(abortError)}`,
    );
    return abortError;
  }
}
