/**
 * The `gs` stage descriptor kind (src/lake/bucket-stage.ts): managed objects in one GCS bucket
 * below one key prefix,
 * `{ "version": 1, "kind": "gs", "bucket": "lake", "prefix": "managed", "endpoint"?, "tenant"? }`.
 *
 * No credentials (Application Default Credentials apply where the stage is used). The stage
 * string `gs://bucket/prefix/` takes its endpoint from `STORAGE_EMULATOR_HOST` (config.ts); a
 * descriptor without `endpoint` always means Google's, whatever the environment says.
 *
 * @module
 */
import type { Storage } from '@google-cloud/storage';
import { bucketStageKind } from '../../src/lake/bucket-stage.js';
import { checkEndpoint } from '../../src/lake/descriptor-fields.js';
import type { StageDescriptor, StageKind } from '../../src/lake/stage-kinds.js';
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

/** The `gs` kind (see the module comment). */
export const gcsStageKind: StageKind = bucketStageKind({
  kind: 'gs',
  bucketName: { pattern: /^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/, what: 'a GCS bucket name' },
  fields: ['endpoint'],
  own: ({ endpoint }) => (endpoint === undefined ? {} : { endpoint: checkEndpoint(endpoint) }),
  fromEnv(env) {
    const { custom, endpoint } = resolveGcsConfig({}, env);
    return custom ? { endpoint } : {};
  },
  endpoint: (d) => (d as GcsStageDescriptor).endpoint ?? '',
  async store(descriptor, options) {
    const { GcsStore } = await import('./gcs-store.js');
    // The descriptor decides the endpoint: the environment's must not redirect the stage.
    const { STORAGE_EMULATOR_HOST: _, ...env } = options.env ?? process.env;
    return new GcsStore({
      client: options.client as Storage | undefined,
      apiEndpoint: (descriptor as GcsStageDescriptor).endpoint,
      offline: options.offline,
      env,
    });
  },
});
