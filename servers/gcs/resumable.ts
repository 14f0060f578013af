/**
 * Resumable upload sessions (`uploadType=resumable`), following
 * cloud.google.com/storage/docs/performing-resumable-uploads and .../resumable-uploads:
 *
 * - `POST .../o?uploadType=resumable&name=N` (JSON metadata body, `X-Upload-Content-Type`,
 *   `X-Upload-Content-Length`, preconditions in the query) opens a session: 200, the session
 *   URI in `Location`. Preconditions are checked here (a doomed upload fails before its bytes
 *   are sent) and again, atomically, when the object is written.
 * - `PUT <session>` with `Content-Range: bytes a-b/T` (or `a-b/*`, `a-*\/*`, `a-*\/T`) appends a
 *   chunk. Not final: 308 with `Range: bytes=0-N` (no `Range` while nothing is committed).
 *   Final (the bytes reach T, or `a-*\/*` ends the stream): 200 with the object resource.
 * - `PUT <session>` with an empty body and `Content-Range: bytes *\/*` asks for the committed
 *   offset (308 as above); `bytes *\/T` finalizes when T bytes are committed.
 * - `DELETE <session>` cancels it: 499, as the docs' "Cancel an upload" and Google's own
 *   storage-testbench answer.
 *
 * Choices where the docs leave room (each documented in docs/testing-servers.md):
 * - A chunk starting before the committed offset: the bytes already committed are skipped
 *   ("resent data" in resumable-uploads; storage-testbench does the same).
 * - A chunk starting after it (a gap): 503 with a text/plain body "Invalid request.  According
 *   to the Content-Range header, the upload offset is A byte(s), which exceeds already
 *   uploaded size of C byte(s)." — what GCS answers, quoted byte for byte in java-storage's
 *   ITJsonResumableSessionQueryTaskTest and googleapis/google-cloud-go#1507. Nothing is
 *   committed from it.
 * - A non-final chunk must end on a multiple of 256 KiB (the docs' rule for chunk sizes):
 *   `unalignedChunk: 'reject'` (default) answers 400 and commits nothing; `'truncate'` commits
 *   the aligned part and reports it in the 308's `Range`, as Google's upload front end is
 *   reported to do, so clients that re-send the tail are exercised.
 * - A chunk whose connection breaks mid-body (a client killed, or a `dropRequest` fault):
 *   `partialChunkCommit: 'quantum'` (default) keeps the received bytes up to the last 256 KiB
 *   boundary, `'none'` keeps nothing, `'all'` keeps every byte that arrived. GCS documents only
 *   that the committed offset must be asked for, never assumed; 'quantum' is the case a
 *   client handles least often (a resume point inside its own part).
 * - After completion, any request to the session answers the same outcome again (200 with the
 *   object, or the error that ended it); after a cancel, 410 Gone. Sessions never expire.
 * - `X-Goog-Hash` on the final request and `crc32c` / `md5Hash` in the session metadata are
 *   checked against the bytes: a mismatch is 400 and no object is written, as on GCS.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { ApiError, invalid } from './api-error.js';
import { ContentBuilder } from './content.js';
import { empty, json, type Reply } from './reply.js';
import { objectResource } from './resources.js';
import {
  type Preconditions,
  requirePreconditions,
  type Store,
  type WritableMetadata,
} from './store.js';

/** Non-final chunks end on multiples of this (256 KiB). */
export const UPLOAD_QUANTUM = 256 * 1024;

/** What happens to a non-final chunk that does not end on a 256 KiB boundary. */
export type UnalignedChunkPolicy = 'reject' | 'truncate';
/** What is kept of a chunk whose request body was cut off. */
export type PartialChunkPolicy = 'quantum' | 'none' | 'all';

/** A session's state. */
export type SessionState = 'active' | 'completed' | 'failed' | 'cancelled';

/** A session as tests see it ({@link GcsTestServer.sessions}). */
export interface UploadSessionInfo {
  /** The `upload_id` in the session URI. */
  id: string;
  /** The session URI handed out in `Location`. */
  uri: string;
  bucket: string;
  name: string;
  state: SessionState;
  /** Bytes committed (what a status query reports). */
  committed: number;
  /** `X-Upload-Content-Length` from the session's start, when given. */
  declaredSize: number | undefined;
  /** The generation written, once completed. */
  generation: string | undefined;
  /** Milliseconds since the epoch. */
  createdAt: number;
}

interface Session {
  readonly id: string;
  readonly uri: string;
  readonly bucket: string;
  readonly name: string;
  readonly meta: WritableMetadata;
  readonly preconditions: Preconditions;
  readonly declaredSize: number | undefined;
  /** Hashes the client declared in the session metadata (base64). */
  readonly declared: { crc32c?: string; md5?: string };
  readonly createdAt: number;
  readonly content: ContentBuilder;
  state: SessionState;
  outcome: Reply | undefined;
  generation: string | undefined;
}

/** Parsed `Content-Range` of a session request. */
type ChunkRange =
  | { kind: 'query'; total: number | undefined }
  | { kind: 'data'; first: number; last: number | '*'; total: number | '*' };

/** Parses a session request's Content-Range; absent means the whole object in one request. */
export function parseChunkRange(header: string | undefined): ChunkRange {
  if (header === undefined || header.trim() === '') {
    return { kind: 'data', first: 0, last: '*', total: '*' };
  }
  const text = header.trim();
  const query = /^bytes \*\/(\d+|\*)$/.exec(text);
  if (query !== null) {
    return { kind: 'query', total: query[1] === '*' ? undefined : Number(query[1]) };
  }
  // `-?\d+` for the last byte: the SDK sends `bytes N-(N-1)/N` for an empty final chunk.
  const data = /^bytes (\d+)-(-?\d+|\*)\/(\d+|\*)$/.exec(text);
  if (data === null) throw invalid(`Invalid Content-Range header: ${header}`);
  return {
    kind: 'data',
    first: Number(data[1]),
    last: data[2] === '*' ? '*' : Number(data[2]),
    total: data[3] === '*' ? '*' : Number(data[3]),
  };
}

/** A chunk request's body, as the HTTP layer read it. */
export interface ChunkBody {
  chunks: readonly Buffer[];
  bytes: number;
  /** True when the connection broke before the body ended. */
  aborted: boolean;
}

/** Options of the session registry (live references to the server's settings). */
export interface SessionSettings {
  unalignedChunk(): UnalignedChunkPolicy;
  partialChunkCommit(): PartialChunkPolicy;
  now(): number;
}

/** Parses `x-goog-hash: crc32c=...,md5=...`. */
function parseGoogHash(header: string | undefined): { crc32c?: string; md5?: string } {
  const result: { crc32c?: string; md5?: string } = {};
  for (const part of (header ?? '').split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const key = part.slice(0, eq).trim().toLowerCase();
    const value = part.slice(eq + 1).trim();
    if (key === 'crc32c') result.crc32c = value;
    if (key === 'md5') result.md5 = value;
  }
  return result;
}

/** Copies `[from, to)` of a chunk body (offsets within the body) into the builder. */
function appendRange(target: ContentBuilder, body: ChunkBody, from: number, to: number): void {
  let offset = 0;
  for (const chunk of body.chunks) {
    const end = offset + chunk.length;
    if (end > from && offset < to) {
      target.append(
        chunk.subarray(Math.max(0, from - offset), Math.min(chunk.length, to - offset)),
      );
    }
    offset = end;
    if (offset >= to) break;
  }
}

/** The resumable sessions of one server. */
export class UploadSessions {
  private readonly sessions = new Map<string, Session>();
  private readonly store: Store;
  private readonly settings: SessionSettings;

  constructor(store: Store, settings: SessionSettings) {
    this.store = store;
    this.settings = settings;
  }

  /** Every session ever opened, oldest first. */
  list(): UploadSessionInfo[] {
    return [...this.sessions.values()].map((s) => ({
      id: s.id,
      uri: s.uri,
      bucket: s.bucket,
      name: s.name,
      state: s.state,
      committed: s.content.size,
      declaredSize: s.declaredSize,
      generation: s.generation,
      createdAt: s.createdAt,
    }));
  }

  /**
   * Opens a session. `base` is the server URL the client reached (for the session URI).
   * Checks that the bucket exists and that the preconditions hold now (404 / 412 otherwise).
   */
  open(
    base: string,
    bucket: string,
    name: string,
    meta: WritableMetadata,
    preconditions: Preconditions,
    declaredSize: number | undefined,
    declared: { crc32c?: string; md5?: string },
  ): Reply {
    const b = this.store.bucket(bucket);
    requirePreconditions(this.store.live(b, name), preconditions);
    const id = randomBytes(24).toString('base64url');
    const uri = `${base}/upload/storage/v1/b/${encodeURIComponent(bucket)}/o?uploadType=resumable&name=${encodeURIComponent(name)}&upload_id=${id}`;
    this.sessions.set(id, {
      id,
      uri,
      bucket,
      name,
      meta,
      preconditions,
      declaredSize,
      declared,
      createdAt: this.settings.now(),
      content: new ContentBuilder(),
      state: 'active',
      outcome: undefined,
      generation: undefined,
    });
    return empty(200, { location: uri, 'x-guploader-uploadid': id });
  }

  private session(id: string): Session {
    const session = this.sessions.get(id);
    if (session === undefined) {
      throw new ApiError(404, 'notFound', `No upload session with id ${id}.`);
    }
    if (session.state === 'cancelled') {
      throw new ApiError(410, 'gone', 'The upload session was cancelled.');
    }
    return session;
  }

  /** The bucket a session writes to (for access checks before its body is read). */
  bucketOf(id: string): string | undefined {
    return this.sessions.get(id)?.bucket;
  }

  /** `DELETE <session>`: cancels it; 499 with an empty body. */
  cancel(id: string): Reply {
    const session = this.session(id);
    if (session.state === 'completed') {
      throw new ApiError(400, 'invalid', 'The upload session is already complete.');
    }
    session.state = 'cancelled';
    return empty(499);
  }

  /** 308 with the committed range (none while nothing is committed). */
  private incomplete(session: Session, noRedirect: boolean): Reply {
    const headers: Record<string, string> = {};
    const committed = session.content.size;
    if (committed > 0) headers.range = `bytes=0-${committed - 1}`;
    if (noRedirect) {
      headers['x-http-status-code-override'] = '308';
      return empty(200, headers);
    }
    return empty(308, headers);
  }

  /**
   * A `PUT` (or `POST`) to a session: a status query, a chunk, or the final chunk. Returns
   * undefined when the body was cut off (there is nobody to answer; what was received is
   * committed per `partialChunkCommit`).
   */
  put(
    id: string,
    base: string,
    headers: Readonly<Record<string, string | string[] | undefined>>,
    body: ChunkBody,
  ): Reply | undefined {
    const session = this.session(id);
    const header = (name: string) => {
      const value = headers[name];
      return Array.isArray(value) ? value.join(',') : value;
    };
    if (session.outcome !== undefined) return session.outcome;
    const noRedirect = header('x-guploader-no-308') === 'yes';
    const range = parseChunkRange(header('content-range'));
    const committed = session.content.size;

    if (range.kind === 'query') {
      if (body.aborted) return undefined;
      if (body.bytes > 0) throw invalid('A status query (bytes */...) must have an empty body.');
      if (range.total !== undefined) {
        if (committed > range.total) {
          throw invalid(`${committed} bytes are committed, more than the total ${range.total}.`);
        }
        if (committed === range.total) return this.finalize(session, base, header('x-goog-hash'));
      }
      return this.incomplete(session, noRedirect);
    }

    const { first } = range;
    if (range.last !== '*' && !body.aborted) {
      const declared = range.last - first + 1;
      if (declared !== body.bytes) {
        throw invalid(
          `The Content-Range header (${header('content-range')}) declares ${declared} bytes, the body has ${body.bytes}.`,
        );
      }
    }
    const total =
      range.total === '*' ? (range.last === '*' ? first + body.bytes : undefined) : range.total;
    if (total !== undefined && first + body.bytes > total) {
      throw invalid(`The chunk ends past the object's total size ${total}.`);
    }
    if (
      total !== undefined &&
      session.declaredSize !== undefined &&
      total !== session.declaredSize
    ) {
      throw invalid(
        `The total size ${total} differs from X-Upload-Content-Length ${session.declaredSize}.`,
      );
    }
    if (first > committed) {
      if (body.aborted) return undefined;
      return {
        kind: 'text',
        status: 503,
        contentType: 'text/plain; charset=utf-8',
        body: `Invalid request.  According to the Content-Range header, the upload offset is ${first} byte(s), which exceeds already uploaded size of ${committed} byte(s).`,
      };
    }
    // Bytes already committed are skipped ("resent data"); `end` is where this body ends.
    const skip = committed - first;
    const end = first + body.bytes;

    if (body.aborted) {
      const policy = this.settings.partialChunkCommit();
      const keepTo =
        policy === 'all'
          ? end
          : policy === 'quantum'
            ? Math.floor(end / UPLOAD_QUANTUM) * UPLOAD_QUANTUM
            : committed;
      if (keepTo > committed) appendRange(session.content, body, skip, keepTo - first);
      return undefined;
    }

    if (total !== undefined && end === total) {
      if (committed > total) {
        throw invalid(`${committed} bytes are committed, more than the total ${total}.`);
      }
      if (end > committed) appendRange(session.content, body, skip, body.bytes);
      return this.finalize(session, base, header('x-goog-hash'));
    }
    let keepTo = end;
    if (end % UPLOAD_QUANTUM !== 0) {
      if (this.settings.unalignedChunk() === 'reject') {
        throw invalid(
          `A non-final chunk must end on a multiple of ${UPLOAD_QUANTUM} bytes (256 KiB); this one ends at ${end}.`,
        );
      }
      keepTo = Math.floor(end / UPLOAD_QUANTUM) * UPLOAD_QUANTUM;
    }
    if (keepTo > committed) appendRange(session.content, body, skip, keepTo - first);
    return this.incomplete(session, noRedirect);
  }

  /** Writes the object (checks sizes, hashes and preconditions); the outcome is kept. */
  private finalize(session: Session, base: string, googHash: string | undefined): Reply {
    const content = session.content.build();
    const finish = (reply: Reply, state: SessionState): Reply => {
      session.outcome = reply;
      session.state = state;
      return reply;
    };
    const fail = (error: ApiError) =>
      finish(
        {
          kind: 'json',
          status: error.status,
          body: JSON.parse(error.json()),
          headers: error.headers,
        },
        'failed',
      );
    if (session.declaredSize !== undefined && content.size !== session.declaredSize) {
      return fail(
        invalid(
          `The upload has ${content.size} bytes, X-Upload-Content-Length said ${session.declaredSize}.`,
        ),
      );
    }
    const client = { ...session.declared, ...parseGoogHash(googHash) };
    if (client.crc32c !== undefined && client.crc32c !== content.crc32c) {
      return fail(
        invalid(
          `Provided CRC32C "${client.crc32c}" doesn't match calculated CRC32C "${content.crc32c}".`,
        ),
      );
    }
    if (client.md5 !== undefined && client.md5 !== content.md5) {
      return fail(
        invalid(
          `Provided MD5 hash "${client.md5}" doesn't match calculated MD5 hash "${content.md5}".`,
        ),
      );
    }
    try {
      const version = this.store.insert(
        session.bucket,
        session.name,
        content,
        session.meta,
        session.preconditions,
      );
      session.generation = version.generation;
      return finish(json(200, objectResource(version, base)), 'completed');
    } catch (error) {
      if (error instanceof ApiError) return fail(error);
      throw error;
    }
  }
}
