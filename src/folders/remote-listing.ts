/**
 * The store side of a push: what the store folder holds, from one flat listing, keeping of each
 * object only what the push compares and records (src/folders/push.ts, push-plan.ts).
 *
 * @module
 */
import type { ObjectInfo } from '../contract/primitives.js';
import type { StoreContext } from '../contract/store-context.js';
import { NotFound } from '../core/errors.js';
import { isMetaKey } from '../core/keys.js';

/**
 * What a push keeps of a listed object: the fields that prove it unchanged and name its version,
 * not its time (a `Date` a file is about a tenth of a push's memory per file).
 */
function kept(o: ObjectInfo): ObjectInfo {
  const out: ObjectInfo = { key: o.key, size: o.size, version: o.version };
  if (o.versionId !== undefined) out.versionId = o.versionId;
  if (o.etag !== undefined) out.etag = o.etag;
  if (o.sha256 !== undefined) out.sha256 = o.sha256;
  if (o.md5 !== undefined) out.md5 = o.md5;
  return out;
}

/**
 * What a store folder holds, from one flat listing, a page at a time (in the listing's order):
 * each object by the key below the folder, keys raw, `.provcat/` left out, kept as {@link kept}.
 * A missing bucket holds nothing.
 */
export async function* remotePages(
  store: Pick<StoreContext, '_pages'>,
  bucket: string,
  prefix: string,
  signal: AbortSignal | undefined,
): AsyncGenerator<[string, ObjectInfo][]> {
  try {
    for await (const page of store._pages(bucket, prefix, { signal })) {
      const out: [string, ObjectInfo][] = [];
      for (const o of page.objects) {
        if (o.key.endsWith('/') || !o.key.startsWith(prefix)) continue;
        if (prefix === '' && isMetaKey(o.key)) continue;
        out.push([o.key.slice(prefix.length), kept(o)]);
      }
      yield out;
    }
  } catch (error) {
    // A missing bucket holds nothing: the first put makes it (the local store) or says NotFound.
    if (!(error instanceof NotFound)) throw error;
  }
}

/** {@link remotePages} whole, by the key below the folder. */
export async function listRemote(
  store: Pick<StoreContext, '_pages'>,
  bucket: string,
  prefix: string,
  signal: AbortSignal | undefined,
): Promise<Map<string, ObjectInfo>> {
  const out = new Map<string, ObjectInfo>();
  for await (const page of remotePages(store, bucket, prefix, signal)) {
    for (const [rel, info] of page) out.set(rel, info);
  }
  return out;
}
