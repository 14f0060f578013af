/**
 * The request log: one record per request the server received, in arrival order, written
 * when the request is over (answered, or its connection dropped). Tests assert on it — how
 * many GETs a refetch made, how many upload bytes reached a session after a resume — without
 * reaching into the server's state.
 *
 * @module
 */

/** One request as the server saw it. */
export interface RequestRecord {
  /** HTTP method. */
  method: string;
  /** Raw path as sent (percent-encoded), without the query. */
  path: string;
  /** Query parameters, decoded (the last value wins for repeated names). */
  query: Record<string, string>;
  /** Request headers, names lowercased (repeated headers joined with ", "). */
  headers: Record<string, string>;
  /** Request body bytes the server read (up to a drop, when one was injected). */
  bodyBytes: number;
  /** Response body bytes written. */
  responseBytes: number;
  /** Status answered; 0 when the connection ended without a response. */
  status: number;
  /** Arrival time, milliseconds since the epoch (the server's clock). */
  time: number;
  /** Milliseconds from arrival to the end of the response (or of the connection). */
  durationMs: number;
  /** The resumable upload session the request was about, when it was one. */
  uploadId: string | undefined;
  /** Ids of the fault rules that fired on it. */
  faults: number[];
}

/** What {@link countRequests} selects. */
export interface RecordFilter {
  method?: string;
  /** Tested against the raw path. */
  path?: RegExp;
  /** Only records with this status. */
  status?: number;
  /** Further condition. */
  when?: (record: RequestRecord) => boolean;
}

/** Whether a record passes the filter. */
export function matchesRecord(record: RequestRecord, filter: RecordFilter): boolean {
  if (filter.method !== undefined && record.method !== filter.method.toUpperCase()) return false;
  if (filter.path !== undefined && !filter.path.test(record.path)) return false;
  if (filter.status !== undefined && record.status !== filter.status) return false;
  return filter.when === undefined || filter.when(record);
}

/** How many records pass the filter. */
export function countRequests(log: readonly RequestRecord[], filter: RecordFilter = {}): number {
  let n = 0;
  for (const record of log) if (matchesRecord(record, filter)) n++;
  return n;
}

/**
 * Upload body bytes that reached the server for resumable sessions: for one session id, or
 * all sessions when omitted. Counts what arrived, committed or not (a chunk sent twice counts
 * twice), which is what "the resume sent only the missing bytes" is measured by.
 */
export function uploadBytesReceived(log: readonly RequestRecord[], uploadId?: string): number {
  let n = 0;
  for (const record of log) {
    if (record.uploadId === undefined) continue;
    if (uploadId !== undefined && record.uploadId !== uploadId) continue;
    if (record.method === 'PUT' || record.method === 'POST') n += record.bodyBytes;
  }
  return n;
}
