/**
 * The `gs` stage descriptor kind: managed objects in one GCS bucket below one key prefix,
 * `{ "version": 1, "kind": "gs", "bucket": "lake", "prefix": "managed", "endpoint"?, "tenant"? }`.
 *
 * No credentials (Application Default Credentials apply where the stage is used). The stage
 * string `gs://bucket/prefix/` takes its endpoint from `STORAGE_EMULATOR_HOST` (config.ts); a
 * descriptor without `endpoint` always means Google's, whatever the environment says. The
 * backend is a {@link GcsStore}, loaded on first use.
 *
 * @module
 */
import type { Storage } from '@google-cloud/storage';
import {
  checkEndpoint,
  checkFields,
  decodeStagePrefix,
  fail,
  joinPrefix,
  normalizePrefix,
} from '../../src/lake/descriptor-fields.js';
import type { StageDescriptor, StageKind } from '../../src/lake/kinds.js';
import { objectLocations } from '../../src/lake/locations.js';
import { resolveGcsConfig } from './config.js';

/** A stage in one GCS bucket, below one key prefix (`''`: the whole bucket). */
export interface GcsStageDescriptor extends StageDescriptor {
  readonly version: 1;
  readonly kind: 'gs';
  readonly bucket: string;
  readonly prefix: string;
  /** A custom endpoint (an emulator, the test server); absent: Google's. */
  readonly endpoint?: string | undefined;
}

const FIELDS = ['version', 'kind', 'bucket', 'prefix', 'endpoint', 'tenant'];
const BUCKET = /^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/;

/** The `gs` kind (see the module comment). */
export const gcsStageKind: StageKind = {
  kind: 'gs',

  parse(record, tenant) {
    checkFields(record, FIELDS);
    const { bucket, prefix, endpoint } = record;
    if (typeof bucket !== 'string' || !BUCKET.test(bucket)) {
      fail(`bucket must be a GCS bucket name, not ${JSON.stringify(bucket)}`);
    }
    if (typeof prefix !== 'string') fail('prefix must be a string (use "" for the whole bucket)');
    if (endpoint !== undefined) checkEndpoint(endpoint);
    return Object.freeze({
      version: 1,
      kind: 'gs',
      bucket,
      prefix: normalizePrefix(prefix),
      ...(endpoint === undefined ? {} : { endpoint: endpoint as string }),
      ...(tenant === undefined ? {} : { tenant }),
    });
  },

  fromString(text, env) {
    const m = /^gs:\/\/([^/?#]+)(?:\/([^?#]*))?$/.exec(text);
    if (!m) return undefined;
    const { custom, endpoint } = resolveGcsConfig({}, env);
    const prefix = decodeStagePrefix(m[2] ?? '', text);
    const record = {
      version: 1,
      kind: 'gs',
      bucket: m[1],
      prefix,
      ...(custom ? { endpoint } : {}),
    };
    return gcsStageKind.parse(record, undefined);
  },

  locations(descriptor) {
    const d = descriptor as GcsStageDescriptor;
    return objectLocations('gs', d.bucket, joinPrefix(d.prefix, d.tenant));
  },

  identity(descriptor) {
    const d = descriptor as GcsStageDescriptor;
    return `gs|${d.endpoint ?? ''}|${d.bucket}|${joinPrefix(d.prefix, d.tenant)}`;
  },

  async backend(descriptor, options) {
    const d = descriptor as GcsStageDescriptor;
    const [{ GcsStore }, { storeBackend }] = await Promise.all([
      import('./gcs-store.js'),
      import('../../src/lake/backend.js'),
    ]);
    // The descriptor decides the endpoint: the environment's must not redirect the stage.
    const { STORAGE_EMULATOR_HOST: _, ...env } = options.env ?? process.env;
    const store = new GcsStore({
      client: options.client as Storage | undefined,
      apiEndpoint: d.endpoint,
      offline: options.offline,
      env,
    });
    return storeBackend(store, d.bucket);
  },
};
