/**
 * The stage kinds of object stores all have one shape, written once here: a descriptor naming
 * one bucket (Azure: container) and a key prefix below it, beside the store's own fields; the
 * stage string `scheme://bucket/prefix/`, whose other fields come from the driver's environment;
 * locations `scheme://bucket/prefix/...`; the identity `scheme|endpoint|bucket|prefix` (stable:
 * checkpoint file names are made of it); and a backend that is the driver's store, imported on
 * first use. A driver's stage-kind module says only what is its own: its bucket names, its fields
 * and how its store is made.
 *
 * @module
 */
import type { ClosableStore } from '../contract/store-context.js';
import {
  checkFields,
  decodeStagePrefix,
  fail,
  joinPrefix,
  normalizePrefix,
} from './descriptor-fields.js';
import { StageConfigError } from './errors.js';
import { objectLocations } from './location-keys.js';
import type { BackendOptions, StageDescriptor, StageKind } from './stage-kinds.js';

/** A descriptor of a bucket stage, as {@link bucketStageKind} reads it. */
export type BucketDescriptor = StageDescriptor & Readonly<Record<string, unknown>>;

/** What a driver says of its stage kind (see the module comment). */
export interface BucketStageSpec {
  /** The descriptor's kind, also the URI scheme (`s3`, `gs`, `az`). */
  kind: string;
  /** The name of the bucket field: `bucket` (default) or `container`. */
  bucketField?: 'bucket' | 'container';
  /** Valid bucket names, and what they are called in a message (`a GCS bucket name`). */
  bucketName: { pattern: RegExp; what: string };
  /** The kind's own fields besides version, kind, bucket, prefix and tenant. */
  fields: readonly string[];
  /** Check the own fields (StageConfigError) and return the ones set, normalized. */
  own(record: Readonly<Record<string, unknown>>): Record<string, unknown>;
  /** The own fields a stage string gets from the environment (a throw is a StageConfigError). */
  fromEnv(env: NodeJS.ProcessEnv): Record<string, unknown>;
  /** The endpoint the identity names (`''` for the store's default). */
  endpoint(descriptor: BucketDescriptor): string;
  /** The store of a parsed descriptor (importing the driver). */
  store(descriptor: BucketDescriptor, options: BackendOptions): Promise<ClosableStore>;
}

/** The {@link StageKind} of a bucket stage (see the module comment). */
export function bucketStageKind(spec: BucketStageSpec): StageKind {
  const field = spec.bucketField ?? 'bucket';
  const all = ['version', 'kind', field, 'prefix', ...spec.fields, 'tenant'];
  const shape = new RegExp(`^${spec.kind}://([^/?#]+)(?:/([^?#]*))?$`);
  const bucketOf = (d: StageDescriptor) => (d as BucketDescriptor)[field] as string;
  const prefixOf = (d: StageDescriptor) =>
    joinPrefix((d as BucketDescriptor).prefix as string, d.tenant);
  const kind: StageKind = {
    kind: spec.kind,
    parse(record, tenant) {
      checkFields(record, all);
      const bucket = record[field];
      if (typeof bucket !== 'string' || !spec.bucketName.pattern.test(bucket)) {
        fail(`${field} must be ${spec.bucketName.what}, not ${JSON.stringify(bucket)}`);
      }
      const { prefix } = record;
      if (typeof prefix !== 'string')
        fail(`prefix must be a string (use "" for the whole ${field})`);
      return Object.freeze({
        version: 1,
        kind: spec.kind,
        [field]: bucket,
        prefix: normalizePrefix(prefix),
        ...spec.own(record),
        ...(tenant === undefined ? {} : { tenant }),
      }) as StageDescriptor;
    },
    fromString(text, env) {
      const m = shape.exec(text);
      if (!m) return undefined;
      let own: Record<string, unknown>;
      try {
        own = spec.fromEnv(env);
      } catch (cause) {
        if (cause instanceof StageConfigError) throw cause;
        throw new StageConfigError(`the stage ${text}: ${(cause as Error).message}`, { cause });
      }
      const prefix = decodeStagePrefix(m[2] ?? '', text);
      return kind.parse({ version: 1, kind: spec.kind, [field]: m[1], prefix, ...own }, undefined);
    },
    locations: (d) => objectLocations(spec.kind, bucketOf(d), prefixOf(d)),
    identity: (d) =>
      `${spec.kind}|${spec.endpoint(d as BucketDescriptor)}|${bucketOf(d)}|${prefixOf(d)}`,
    async backend(d, options) {
      const [store, { storeBackend }] = await Promise.all([
        spec.store(d as BucketDescriptor, options),
        import('./backend.js'),
      ]);
      return storeBackend(store, bucketOf(d));
    },
  };
  return kind;
}
