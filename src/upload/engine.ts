/**
 * The one upload engine: one object sent in parts through a driver's `PartProtocol`, for
 * `ObjectStore.put` of large sources and for managed uploads (src/lake), on every store.
 *
 * **Parts** come from a {@link PartSource} (part-source.ts): byte ranges streamed from a file
 * (file-parts.ts), or pooled buffers filled from a stream (buffered-parts.ts), handed out in
 * part-number order. At most `partsInFlight` parts are being sent at once (one for a `sequential`
 * protocol: a GCS session takes its bytes in order); a part is released (its buffer given back)
 * when the store acknowledged it, so a stream's memory is at most `partsInFlight` × `partSize`. Tokens are kept by part number and the parts are
 * completed in number order, whatever order their responses arrive in. Progress is the bytes in
 * parts the store acknowledged.
 *
 * **Retries** follow the one policy (src/core/retry.ts). A part in memory is retried by the
 * driver's SDK; a file part is sent again from here with a fresh stream of its range — but never
 * once the stall watchdog fired (send-part.ts).
 *
 * **Stall watchdog.** A store that takes a part's bytes and never answers would otherwise hold an
 * upload for attempts × the idle-socket timeout per part. The upload moves when the store
 * acknowledges a part or a part's request reads body bytes beyond what any earlier attempt of
 * that part had read (a resend is not progress). The clock runs only while a part is being sent:
 * waiting for a slow source is not the store's stall. When nothing moved for `stallTimeoutMs`
 * (default 120 s), the parts in flight are cancelled, none is sent again, and the upload is
 * aborted — or kept for a resume (`abortOnFailure: false`) — and `UploadStalled` says
 * which.
 *
 * **The other requests** — create, list parts, complete, abort — are bounded by the same stall
 * timeout and sent again when one has no answer in time (requests.ts); a completion that stalled
 * for good is an `UploadStalled` too.
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
import type { CompletedPart, ObjectInfo } from '../contract/primitives.js';
import { PartLimitExceeded, SourceChanged } from '../core/errors.js';
import type { Part, PartSource } from './part-source.js';
import {
  abortUpload,
  completeUpload,
  createUpload,
  isRequestStall,
  linkedController,
  type Stall,
  seconds,
  stalledError,
  stallOf,
  type UploadTarget,
} from './requests.js';
import { sendPart } from './send-part.js';
import { Slots, Watchdog } from './watchdog.js';

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
  /** See the module comment; default `DEFAULT_STALL_TIMEOUT_MS` (settings.ts). */
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

/**
 * Send `source`'s parts as one object; see the module comment. The source must not be empty (an
 * empty object is one plain put) and is not closed here.
 */
export async function uploadParts(
  target: UploadTarget,
  source: PartSource,
  options: UploadPartsOptions,
): Promise<UploadPartsResult> {
  const { protocol } = target;
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
      upload = await createUpload(bounded, {
        contentType: options.contentType,
        size: source.size,
        sha256: options.sha256,
      });
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
          const token = await sendPart(current, { target, upload: ref, offset, signal, watchdog });
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
      info = await completeUpload(bounded, ref, parts, {
        size: summary.size,
        contentType: options.contentType,
        sha256: options.sha256 ?? (protocol.digestAtComplete ? summary.sha256 : undefined),
        stallTimeoutMs,
        signal,
      });
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
