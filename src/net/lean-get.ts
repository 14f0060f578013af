/**
 * A driver's own GET of one object over the HTTP/1.1 client (http1-download.ts), and the
 * {@link GetResult} made of its response: the part of every lean read path that does not depend
 * on the store.
 *
 * A small object whose size the caller expects (`wholeUpTo`) is read whole into memory, one
 * copy out of the reused buffers; a larger one, or one without `wholeUpTo`, is a stream. The
 * result then offers the bytes the cheapest way it has them — `bytes` (read whole) or `pipeTo`
 * (reused buffers straight into the cache's sink) — and a Readable made only when asked for: a
 * stream per small GET is allocation the cache never needs.
 *
 * @module
 */
import { Readable } from 'node:stream';
import type { GetResult, ObjectInfo } from '../contract/primitives.js';
import {
  type DownloadFallback,
  type DownloadOptions,
  type DownloadRequest,
  fetchWhole,
  type Http1Response,
  isFallback,
  openDownload,
  responseReadable,
  type WholeResponse,
} from './http1-download.js';

/**
 * One GET: read whole when `wholeUpTo` is given and the body is at most that long, else a
 * response whose body is unread. A {@link DownloadFallback} (never `refused`) when the response
 * is not one the client reads. Rejects as {@link openDownload} and {@link fetchWhole} do.
 */
export async function leanGet(
  request: DownloadRequest,
  options: DownloadOptions & { wholeUpTo?: number | undefined },
): Promise<Http1Response | WholeResponse | DownloadFallback> {
  const { wholeUpTo, ...rest } = options;
  if (wholeUpTo !== undefined) {
    const whole = await fetchWhole(request, { ...rest, maxBytes: wholeUpTo });
    if (!isFallback(whole) || whole.fallback !== 'refused') return whole;
  }
  return openDownload(request, rest);
}

/**
 * The GetResult of a lean response (see the module comment), describing it with `info`. The
 * caller must consume it: `bytes` (then `release`), `pipeTo`, or `body`.
 */
export function leanGetResult(info: ObjectInfo, res: Http1Response | WholeResponse): GetResult {
  const common = {
    info,
    contentLength: res.contentLength,
    contentRange: res.headers['content-range'],
  };
  let body: Readable | undefined;
  if ('body' in res) {
    const bytes = res.body;
    return {
      ...common,
      bytes,
      release: res.release,
      get body() {
        body ??= Readable.from([bytes], { objectMode: false });
        return body;
      },
    };
  }
  return {
    ...common,
    // The stream closes when the transfer ends either way, as if it had been read.
    pipeTo: (sink) => res.pipeTo(sink).finally(() => body?.destroy()),
    get body() {
      body ??= responseReadable(res);
      return body;
    },
  };
}
