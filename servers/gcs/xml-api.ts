/**
 * The XML-API paths a V4 signed URL reaches: `GET` / `HEAD /B/O?X-Goog-...` (path style, as
 * the SDK builds them for a custom `apiEndpoint`). The signature is checked first
 * (signed-url.ts); then the object is served like a JSON `alt=media` read — `Range`
 * honoured, `?generation=G` for one generation — with the XML API's ETag (quoted MD5 hex) and
 * `x-goog-meta-*` headers. Errors are XML.
 *
 * Only reads are served: the project's `presign` is read-only, and a signed PUT/POST would be
 * another upload protocol (XML API) that nothing here uses; they answer 501 NotImplemented.
 *
 * @module
 */
import { ApiError } from './api-error.js';
import { mediaReply } from './media.js';
import type { Reply } from './reply.js';
import { type SignedRequest, type SigningKey, verifySignedUrl } from './signed-url.js';
import type { Store } from './store.js';

/** Serves a signed-URL request for object `name` in `bucket`. */
export function signedRead(
  store: Store,
  request: SignedRequest,
  bucket: string,
  name: string,
  keys: readonly SigningKey[],
  now: number,
  clientEmail: string | undefined,
): Reply {
  verifySignedUrl(request, keys, now, clientEmail);
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    throw new ApiError(501, 'notImplemented', `Signed ${request.method} is not supported here.`, {
      xmlCode: 'NotImplemented',
    });
  }
  if (name === '') {
    throw new ApiError(501, 'notImplemented', 'Signed bucket requests are not supported here.', {
      xmlCode: 'NotImplemented',
    });
  }
  const query = new URLSearchParams(request.rawQuery);
  const version = store.select(bucket, name, query.get('generation'));
  const range = request.headers.range;
  return mediaReply(version, Array.isArray(range) ? range.join(',') : range, true);
}
