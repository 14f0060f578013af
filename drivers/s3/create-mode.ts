/**
 * How `_create` keeps "only if absent" on a bucket ({@link probeCreateMode}): S3 honours
 * `If-None-Match: *`, some S3-compatible stores do not (Ceph 16 ignores it on versioned buckets),
 * so the driver asks the store once per bucket by trying.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import type { CreateMode } from '../../src/contract/primitives.js';
import { Exists, StoreError } from '../../src/core/errors.js';
import type { CreateFallback } from './config.js';
import type { SdkRun } from './sdk-reader.js';

/** Where `_createMode` writes its probe objects (removed again, every version). */
export const PROBE_PREFIX = '.provcat/probe/';

/** What {@link probeCreateMode} needs of the store. */
export interface CreateProbe {
  /** The store's `_create` (PutObject with `If-None-Match: *`). */
  create(key: string, body: Uint8Array): Promise<unknown>;
  /** SDK calls, offline-guarded and error-mapped (the store's call helper). */
  call: SdkRun;
  /** Whether the bucket's versioning is enabled. */
  versioned(): Promise<boolean>;
  /** What to fall back to when the condition is ignored. */
  fallback: CreateFallback;
  debug(message: string): void;
}

/**
 * Probe `bucket`: a random key under `.provcat/probe/` is created twice; if the second create
 * succeeds, the store ignores `If-None-Match: *` (a store answering 501 Not Implemented counts
 * as ignoring it). Every version of the probe is deleted afterwards. Returns `atomic` when the
 * condition is honoured; otherwise `oldest-version-wins` if `fallback` allows it and the bucket
 * keeps versions, else `none`.
 */
export async function probeCreateMode(bucket: string, probe: CreateProbe): Promise<CreateMode> {
  const key = `${PROBE_PREFIX}${randomUUID()}`;
  const notImplemented = (error: unknown) => error instanceof StoreError && error.status === 501;
  let honoured: boolean | undefined;
  try {
    try {
      await probe.create(key, Buffer.from('provcat create probe 1\n'));
    } catch (error) {
      if (!notImplemented(error)) throw error;
      honoured = false;
    }
    if (honoured === undefined) {
      try {
        await probe.create(key, Buffer.from('provcat create probe 2\n'));
        honoured = false;
      } catch (error) {
        if (error instanceof Exists) honoured = true;
        else if (notImplemented(error)) honoured = false;
        else throw error;
      }
    }
  } finally {
    await removeProbe(bucket, key, probe);
  }
  const versioned = await probe.versioned();
  const mode: CreateMode = honoured
    ? 'atomic'
    : versioned && probe.fallback === 'oldest-version-wins'
      ? 'oldest-version-wins'
      : 'none';
  probe.debug(
    `createMode ${bucket}: If-None-Match ${honoured ? 'honoured' : 'ignored'}, versioning ${versioned}, mode ${mode}`,
  );
  return mode;
}

/** Delete every version of the probe key. A failure is logged: the probe's answer stands. */
async function removeProbe(bucket: string, key: string, probe: CreateProbe): Promise<void> {
  try {
    await probe.call({ bucket, key, op: 'probe cleanup' }, async (client, sdk) => {
      const r = await client.send(
        new sdk.ListObjectVersionsCommand({ Bucket: bucket, Prefix: key }),
      );
      const ids = [...(r.Versions ?? []), ...(r.DeleteMarkers ?? [])].filter((v) => v.Key === key);
      for (const v of ids) {
        await client.send(
          new sdk.DeleteObjectCommand({ Bucket: bucket, Key: key, VersionId: v.VersionId }),
        );
      }
    });
  } catch (error) {
    probe.debug(`createMode ${bucket}: removing probe ${key} failed: ${String(error)}`);
  }
}
