/**
 * The requests of an upload that are not parts — create, list parts, complete, abort — for the
 * upload engine (engine.ts) and for managed uploads (src/lake/upload.ts), and how a failed or
 * stalled upload ends (aborted, or kept for a resume).
 *
 * **Each is bounded by the stall timeout** ({@link boundedRequest}): one that has no answer
 * within `stallTimeoutMs` is cancelled and sent again, per the retry policy (src/core/retry.ts:
 * {@link RETRY_ATTEMPTS} in all, with backoff); when every attempt stalled, the upload fails with
 * a typed error — a stalled completion with {@link UploadStalled} (the upload then aborted, or
 * kept for a resume), a stalled create or listing with a {@link StoreError} without status. Their
 * answers carry no body bytes the engine could count, so the bound is on the whole answer: a
 * store that takes longer than the stall timeout to complete an upload (AWS may, on a large
 * object, while it sends keep-alive spaces) needs a larger one. A completion sent again may find
 * the upload gone because the stalled attempt did complete it: that is a {@link StoreError}
 * saying so (a resumable upload's retry then finds the object and checks its size and SHA-256,
 * src/lake/upload.ts). Creating and aborting are also bounded to {@link ABORT_TIMEOUT_MS} in all,
 * independent of the caller's signal (an upload created while the caller gave up would be left
 * with no reference to abort it by).
 *
 * @module
 */
import type {
  CompletedPart,
  ListedPart,
  ObjectInfo,
  PartProtocol,
} from '../contract/primitives.js';
import {
  NotFound,
  NotSupported,
  PermissionDenied,
  PreconditionFailed,
  type ProvcatError,
  type StalledUploadOutcome,
  StoreError,
  UploadStalled,
} from '../core/errors.js';
import { RETRY_ATTEMPTS, withRetries } from '../core/retry.js';
import { DEFAULT_STALL_TIMEOUT_MS } from './settings.js';

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
export function stallOf(target: UploadTarget): number {
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
export function isRequestStall(error: unknown): error is Error {
  return error instanceof RequestStall;
}

/** The typed error of a request that stalled for good (not a completion: see completeUpload). */
function stalledRequestError(target: UploadTarget, error: unknown): unknown {
  if (!(error instanceof RequestStall)) return error;
  return new StoreError(`${target.uri}: ${error.message}; the store gave no answer`, {
    uri: target.uri,
    cause: error,
  });
}

/** Options of {@link createUpload}. */
export interface CreateUploadOptions {
  contentType: string | undefined;
  /** The object's size, when known up front. */
  size?: number | undefined;
  /** The SHA-256 to record with the object at create (see `PutOptions.sha256`). */
  sha256?: string | undefined;
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
  options: CreateUploadOptions,
): Promise<string> {
  const { contentType, size, sha256 } = options;
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

/** Options of {@link completeUpload}. */
export interface CompleteUploadOptions {
  /** Bytes in the object. */
  size: number;
  contentType: string | undefined;
  /** The SHA-256 to record with the object at completion, if any. */
  sha256: string | undefined;
  /** The stall timeout of each attempt (the upload's, which may be the call's own). */
  stallTimeoutMs: number;
  signal: AbortSignal;
}

/**
 * {@link PartProtocol.complete} of an upload whose parts were all acknowledged, bounded by the
 * stall timeout (see the module comment). A completion sent again after a stalled one that finds
 * the upload gone is a {@link StoreError} saying the stalled attempt may have completed it; when
 * every attempt stalled, the error is the last stall ({@link isRequestStall}: the engine turns it
 * into {@link UploadStalled}).
 */
export async function completeUpload(
  target: UploadTarget,
  upload: string,
  parts: CompletedPart[],
  options: CompleteUploadOptions,
): Promise<ObjectInfo> {
  const { protocol, key } = target;
  const { stallTimeoutMs, signal } = options;
  return boundedRequest(
    target,
    `completing ${protocol.name} ${upload}`,
    (attempt) =>
      protocol.complete(key, upload, parts, {
        size: options.size,
        contentType: options.contentType,
        sha256: options.sha256,
        signal: attempt,
      }),
    {
      stallTimeoutMs,
      signal,
      afterStall: (error) =>
        error instanceof NotFound
          ? new StoreError(
              `${target.uri}: completing ${protocol.name} ${upload} got no answer within ${seconds(stallTimeoutMs)}, and sent again it found the upload gone: the stalled attempt may have completed it (the object is then there), or it was aborted`,
              { uri: target.uri, cause: error },
            )
          : error,
    },
  );
}

/** The watchdog fired: how long nothing had moved, and the failure it raised (saying so). */
export interface Stall {
  idleMs: number;
  reason: Error;
}

/** `ms` as seconds for messages: one decimal under 10 s ("2.5 s", "120 s"). */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}

/**
 * The error of a stalled upload, after aborting the upload (`abort`) or keeping it: an
 * {@link UploadStalled} whose message and `outcome` say which, and whether the abort failed.
 */
export async function stalledError(
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
