/**
 * Version listings in the store's own order.
 *
 * ListObjectVersions answers with one sequence of `<Version>` and `<DeleteMarker>` elements, in
 * key order and, within a key, newest first. The SDK parses them into two separate arrays,
 * `Versions` and `DeleteMarkers`, each in document order, but loses how the two interleave.
 * Rebuilding the order from `LastModified` is not exact: two changes of one key in the same
 * millisecond (or second, on stores with coarser clocks) tie, and then a delete marker could sort
 * on the wrong side of a version — a commit snapshot would then be wrong about what was current.
 *
 * So a small middleware on the command reads the response body once, records the sequence of
 * element names (`V`, `D`, ...), and hands the same bytes on to the SDK's parser. The two arrays
 * are then merged by that sequence: exactly the store's order. If the counts disagree, the
 * listing is refused (fail closed), never guessed.
 *
 * This is the SDK path. The lean path (list-xml.ts `parseVersionPage`) reads the entries in document
 * order directly; {@link sdkVersionPage} puts the SDK's answer in the same shape.
 *
 * @module
 */
import type {
  DeleteMarkerEntry,
  ListObjectVersionsCommand,
  ListObjectVersionsCommandOutput,
  ObjectVersion,
} from '@aws-sdk/client-s3';
import { StoreError } from '../../src/core/errors.js';
import type { LeanVersionEntry, LeanVersionPage } from './list-xml.js';

/** One entry of a version listing page, in the store's order. */
export type VersionEntry =
  | { kind: 'version'; entry: ObjectVersion }
  | { kind: 'marker'; entry: DeleteMarkerEntry };

/** Records the element order of one ListObjectVersions response. */
export interface OrderRecorder {
  /** `true` for a `<Version>`, `false` for a `<DeleteMarker>`, in document order. */
  order: boolean[] | undefined;
}

/** Attach the order-recording middleware to `command`; read the order from the returned recorder after `send`. */
export function recordVersionOrder(command: ListObjectVersionsCommand): OrderRecorder {
  const recorder: OrderRecorder = { order: undefined };
  command.middlewareStack.add(
    (next) => async (args) => {
      const result = await next(args);
      const response = result.response as { statusCode?: number; body?: unknown };
      const body = response.body;
      if (
        response.statusCode === 200 &&
        body !== null &&
        typeof body === 'object' &&
        Symbol.asyncIterator in body
      ) {
        const chunks: Buffer[] = [];
        for await (const chunk of body as AsyncIterable<Buffer>) chunks.push(chunk);
        const bytes = Buffer.concat(chunks);
        // Element names cannot occur inside text: a key's `<` is escaped as `&lt;`.
        recorder.order = Array.from(
          bytes.toString('utf8').matchAll(/<(Version|DeleteMarker)>/g),
          (m) => m[1] === 'Version',
        );
        response.body = bytes;
      }
      return result;
    },
    { step: 'deserialize', priority: 'low', name: 'provcatVersionOrder' },
  );
  return recorder;
}

/** Merge a page's versions and delete markers into the store's order (see the module comment). */
export function mergeVersionPage(
  versions: ObjectVersion[],
  markers: DeleteMarkerEntry[],
  recorder: OrderRecorder,
): VersionEntry[] {
  const order = recorder.order;
  if (order === undefined || order.length !== versions.length + markers.length) {
    throw new StoreError(
      `cannot tell the order of a version listing page (${versions.length} versions, ${markers.length} delete markers, ${order?.length ?? 'no'} elements seen)`,
    );
  }
  const out: VersionEntry[] = [];
  let v = 0;
  let d = 0;
  for (const isVersion of order) {
    const next = isVersion ? versions[v++] : markers[d++];
    if (next === undefined) throw new StoreError('version listing page out of step');
    out.push(
      isVersion
        ? { kind: 'version', entry: next as ObjectVersion }
        : { kind: 'marker', entry: next as DeleteMarkerEntry },
    );
  }
  return out;
}

/**
 * The SDK's ListObjectVersions answer as a lean page (keys as sent), entries in the store's
 * order. StoreError for an entry without a key or version ID, or a page whose order is unknown.
 */
export function sdkVersionPage(
  r: ListObjectVersionsCommandOutput,
  recorder: OrderRecorder,
): LeanVersionPage {
  const entries = mergeVersionPage(r.Versions ?? [], r.DeleteMarkers ?? [], recorder).map(
    (item): LeanVersionEntry => {
      const e = item.entry;
      if (e.Key === undefined || e.VersionId === undefined) {
        throw new StoreError('a version listing entry without a key or version ID');
      }
      const version = item.kind === 'version' ? item.entry : undefined;
      return {
        kind: item.kind,
        key: e.Key,
        versionId: e.VersionId,
        isLatest: e.IsLatest === true,
        lastModified: e.LastModified,
        size: version ? (version.Size ?? 0) : undefined,
        etag: version?.ETag,
      };
    },
  );
  return {
    encodingType: r.EncodingType,
    entries,
    isTruncated: r.IsTruncated === true,
    nextKeyMarker: r.NextKeyMarker,
    nextVersionIdMarker: r.NextVersionIdMarker,
  };
}
