/**
 * The one retry policy: what is retried, how many times, and how long to wait in between.
 *
 * - **What**: a request that got no answer (connection reset, refused, timed out, a socket hang
 *   up) or an answer that says "try again" (HTTP 5xx, 429, 408). Never a refusal (other 4xx:
 *   {@link PermissionDenied}, {@link NotFound}, a failed condition), a failure of the caller's
 *   own source ({@link SourceError}), or a cancellation.
 * - **How many times**: {@link RETRY_ATTEMPTS} attempts in all (the first and two more).
 * - **Backoff**: "full jitter" — a random wait in `[0, min(cap, base × 2^attempt))`, base
 *   {@link RETRY_BASE_MS}, cap {@link RETRY_CAP_MS} — so that many clients failing together do not
 *   come back together.
 *
 * Where it applies: the cloud SDKs retry their own requests with this attempt count (each driver
 * configures its client from {@link RETRY_ATTEMPTS}); the upload engine (src/upload) resends a
 * part whose body the SDK cannot rewind (a stream of a file range) with {@link withRetries}. A
 * stalled upload (the engine's watchdog) is never retried: nothing moved, so nothing would.
 *
 * @module
 */
import { raceAbort } from './concurrency.js';
import {
  abortError,
  isAbort,
  NotFound,
  PermissionDenied,
  PreconditionFailed,
  ProvcatError,
  SourceError,
  StoreError,
} from './errors.js';

/** Attempts per request in all, the first included. */
export const RETRY_ATTEMPTS = 3;
/** The first backoff's upper bound (milliseconds); it doubles per attempt. */
export const RETRY_BASE_MS = 100;
/** No backoff waits longer than this (milliseconds). */
export const RETRY_CAP_MS = 20_000;

/** Error codes and names that mean "no answer" (Node's socket errors, SDK timeouts). */
const NO_ANSWER = new Set([
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'ENOTFOUND',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

function statusTryAgain(status: number): boolean {
  return status >= 500 || status === 429 || status === 408;
}

/** True when an error (or its cause chain) is a network failure without an answer. */
function noAnswer(error: unknown, depth = 0): boolean {
  if (depth > 4 || typeof error !== 'object' || error === null) return false;
  const e = error as { code?: unknown; name?: unknown; message?: unknown; cause?: unknown };
  if (typeof e.code === 'string' && NO_ANSWER.has(e.code)) return true;
  if (typeof e.name === 'string' && NO_ANSWER.has(e.name)) return true;
  if (e.message === 'socket hang up') return true;
  return noAnswer(e.cause, depth + 1);
}

/**
 * Would sending the same request again help? See the module comment. Works on provcat errors
 * (by class and `status`) and on raw SDK or socket errors (by status, code and name).
 */
export function isRetryable(error: unknown): boolean {
  if (isAbort(error) || error instanceof SourceError) return false;
  if (
    error instanceof NotFound ||
    error instanceof PermissionDenied ||
    error instanceof PreconditionFailed
  ) {
    return false;
  }
  if (error instanceof StoreError) {
    if (error.status !== undefined) return statusTryAgain(error.status);
    return noAnswer(error.cause);
  }
  if (error instanceof ProvcatError) return false;
  const raw = error as {
    $retryable?: unknown;
    $metadata?: { httpStatusCode?: unknown };
    statusCode?: unknown;
    status?: unknown;
    code?: unknown;
  } | null;
  if (raw?.$retryable) return true;
  const status = raw?.$metadata?.httpStatusCode ?? raw?.statusCode ?? raw?.status ?? raw?.code;
  if (typeof status === 'number') return statusTryAgain(status);
  return noAnswer(error);
}

/** A backoff's scale: the first wait's upper bound and the longest wait (milliseconds). */
export interface Backoff {
  /** The first backoff's upper bound; it doubles per attempt. */
  baseMs: number;
  /** No wait is longer. */
  capMs: number;
}

/** The backoff of requests to a store ({@link RETRY_BASE_MS}, {@link RETRY_CAP_MS}). */
export const RETRY_BACKOFF: Readonly<Backoff> = { baseMs: RETRY_BASE_MS, capMs: RETRY_CAP_MS };

/**
 * The wait before attempt `attempt + 1` (attempt counts from 1): full jitter, a random wait in
 * `[0, min(cap, base × 2^attempt))`. `backoff` scales it for a loop that is not a request retry
 * (a commit that lost its log entry to another, a snapshot whose two listings differ).
 */
export function backoffMs(
  attempt: number,
  random: () => number = Math.random,
  backoff: Readonly<Backoff> = RETRY_BACKOFF,
): number {
  return Math.min(backoff.capMs, random() * backoff.baseMs * 2 ** attempt);
}

/** Wait `ms`, or reject with an AbortError when `signal` aborts (the one sleep of provcat). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const wait = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  return (signal ? raceAbort(wait, signal) : wait).finally(() => clearTimeout(timer));
}

/** Options of {@link withRetries}. */
export interface RetryOptions {
  /** Attempts in all (default {@link RETRY_ATTEMPTS}). */
  attempts?: number | undefined;
  /** Stops retrying (and the wait) when it aborts. */
  signal?: AbortSignal | undefined;
  /** Whether `error` is worth another attempt (default {@link isRetryable}). */
  retryable?: ((error: unknown) => boolean) | undefined;
  /** Told before each wait, for debug logs. */
  onRetry?: ((error: unknown, attempt: number, delayMs: number) => void) | undefined;
}

/**
 * Run `attempt(n)` until it succeeds, fails with an error the policy does not retry, or runs out
 * of attempts; the last error is thrown as it was. An abort of `signal` stops at once, with an
 * AbortError.
 */
export async function withRetries<T>(
  attempt: (n: number) => Promise<T>,
  options: RetryOptions = {},
): Promise<T> {
  const attempts = Math.max(1, options.attempts ?? RETRY_ATTEMPTS);
  const retryable = options.retryable ?? isRetryable;
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (error) {
      if (options.signal?.aborted) throw abortError(options.signal);
      if (n >= attempts || !retryable(error)) throw error;
      const delay = backoffMs(n);
      options.onRetry?.(error, n, delay);
      await sleep(delay, options.signal);
    }
  }
}
