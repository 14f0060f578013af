/**
 * {@link GcsReader}: how the GCS driver reads metadata and listing pages (the JSON API's object
 * resource and `objects.list`). The store picks one reader at construction, never per request:
 * the SDK reader, or the lean reader, which sends the same GETs on the driver's own HTTP/1.1
 * client (no SDK load, a fraction of its CPU; docs/performance.md) and hands any answer but a 200
 * or a 404 to the SDK reader. Media GETs are always the driver's own (gcs-store.ts: an SDK
 * download whose connection drops never settles); writes go through the SDK or the driver's own
 * upload requests.
 *
 * @module
 */
import type { Storage } from '@google-cloud/storage';
import type * as D from '../../src/contract/primitives.js';
import { isAbort, NotFound } from '../../src/core/errors.js';
import type { GcsErrorContext } from './errors.js';
import * as api from './json-api.js';

/** A JSON answer (a listing page of 1,000 resources) larger than this is the SDK's to read. */
const MAX_JSON_BYTES = 32 << 20;

/** One object a read is about (`versionId`: that generation), and the operation, for errors. */
export type ObjectAt = GcsErrorContext & { key: string };

/** The query of one `objects.list` page (`maxResults` counts objects and prefixes). */
export interface PageQuery {
  prefix: string | undefined;
  delimiter: string | undefined;
  versions: 'true' | undefined;
  maxResults: number;
  pageToken: string | undefined;
}

/**
 * The driver's metadata reads. Failures are mapped with the driver's one error mapping
 * (errors.ts; 404 is NotFound); an abort passes as it is. The offline guard is the store's.
 */
export interface GcsReader {
  /** The object resource of the live object, or of `generation`. */
  object(
    at: ObjectAt,
    generation: string | undefined,
    signal?: AbortSignal,
  ): Promise<api.ObjectResource>;
  /** One listing page of `bucket`. */
  page(context: GcsErrorContext, query: PageQuery, signal?: AbortSignal): Promise<api.ObjectsPage>;
  /** The bucket's resource (its versioning). */
  bucket(context: GcsErrorContext, signal?: AbortSignal): Promise<api.BucketResource>;
}

/** One SDK call through the store's offline check, abort race and error mapping. */
export type SdkCall = <T>(
  context: GcsErrorContext,
  fn: (storage: Storage) => Promise<T>,
  signal?: AbortSignal,
) => Promise<T>;

/** The reads as `@google-cloud/storage` calls. */
export class SdkJsonReader implements GcsReader {
  constructor(private readonly call: SdkCall) {}

  object(at: ObjectAt, generation: string | undefined, signal?: AbortSignal) {
    return this.call(
      at,
      async (storage) => {
        const file = storage.bucket(at.bucket).file(at.key, generation ? { generation } : {});
        return (await file.getMetadata())[0] as api.ObjectResource;
      },
      signal,
    );
  }

  async page(context: GcsErrorContext, query: PageQuery, signal?: AbortSignal) {
    const { versions, ...rest } = query;
    const sdkQuery = {
      ...rest,
      versions: versions === 'true' ? true : undefined,
      autoPaginate: false,
    };
    const call = (storage: Storage) => storage.bucket(context.bucket).getFiles(sdkQuery);
    return (await this.call(context, call, signal))[2] as api.ObjectsPage;
  }

  async bucket(context: GcsErrorContext, signal?: AbortSignal) {
    const call = (storage: Storage) => storage.bucket(context.bucket).getMetadata();
    return (await this.call(context, call, signal))[0] as api.BucketResource;
  }
}

/** A GET of the driver's own (gcs-store.ts `ownGet`): the answer, or the provcat error instead. */
export type OwnGet = (
  context: GcsErrorContext,
  url: string,
  o: D.GetOptions,
) => Promise<{ body: Buffer; release(): void } | { discard(): void }>;

/** The reads on the driver's own GETs, the SDK reader behind them (see the module comment). */
export class LeanJsonReader implements GcsReader {
  constructor(
    private readonly endpoint: string,
    private readonly get: OwnGet,
    private readonly debug: (message: string) => void,
    private readonly sdk: GcsReader,
  ) {}

  async object(at: ObjectAt, generation: string | undefined, signal?: AbortSignal) {
    const url = api.apiUrl(this.endpoint, at.bucket, at.key, { generation });
    return (
      (await this.json<api.ObjectResource>(at, url, signal)) ??
      this.sdk.object(at, generation, signal)
    );
  }

  async page(context: GcsErrorContext, query: PageQuery, signal?: AbortSignal) {
    const url = api.apiUrl(this.endpoint, context.bucket, undefined, { ...query });
    return (
      (await this.json<api.ObjectsPage>(context, url, signal)) ??
      this.sdk.page(context, query, signal)
    );
  }

  async bucket(context: GcsErrorContext, signal?: AbortSignal) {
    const url = api.bucketUrl(this.endpoint, context.bucket);
    return (
      (await this.json<api.BucketResource>(context, url, signal)) ??
      this.sdk.bucket(context, signal)
    );
  }

  /** The JSON body, or `undefined` for the SDK to ask (a 404 and an abort thrown). */
  private async json<T>(context: GcsErrorContext, url: string, signal?: AbortSignal) {
    const got = await this.get(context, url, { signal, wholeUpTo: MAX_JSON_BYTES }).catch(
      (error: unknown) => {
        if (error instanceof NotFound || isAbort(error)) throw error;
        return undefined; // the SDK asks again, with its retries and its error
      },
    );
    if (!got || !('body' in got)) return void got?.discard();
    try {
      return JSON.parse(got.body.toString('utf8')) as T;
    } catch (error) {
      return void this.debug(`GET ${url}: ${String(error)}`);
    } finally {
      got.release();
    }
  }
}
