/**
 * Managed-stage descriptors: the versioned, credential-free description of where managed objects
 * live.
 *
 * ```json
 * { "version": 1, "kind": "local", "root": "/srv/lake" }
 * { "version": 1, "kind": "s3", "bucket": "lake", "prefix": "managed", "region": "us-east-1",
 *   "endpoint": "http://127.0.0.1:7480", "forcePathStyle": true, "tenant": "acme" }
 * ```
 *
 * A descriptor holds storage topology only. Credentials come from the SDK's default chain in the
 * process that uses the stage; a descriptor that carries any field its kind does not list (an
 * access key, say) is refused rather than ignored, and so is any version other than 1 — a reader
 * must never half-understand a newer format. `tenant` names one child segment of the stage's
 * prefix: the stage then accepts only locations below it. Each driver registers its kind
 * (src/lake/stage-kinds.ts) with its own fields; this module checks what every kind shares.
 *
 * @module
 */
import '../store/registry.js';
import { checkTenant, fail } from './descriptor-fields.js';
import { StageConfigError } from './errors.js';
import { type StageDescriptor, type StageKind, stageKind, stageKinds } from './stage-kinds.js';

export type { StageDescriptor } from './stage-kinds.js';

/**
 * Parse a stage descriptor from JSON text or an already-parsed value. Strict: version must be 1,
 * `kind` a registered kind, every field of the right type and no other field. Returns a frozen,
 * normalized descriptor. Throws {@link StageConfigError}. Performs no I/O.
 */
export function parseStageDescriptor(json: string | unknown): StageDescriptor {
  return parseWithKind(json).descriptor;
}

/** {@link parseStageDescriptor}, also returning the descriptor's kind. */
export function parseWithKind(json: string | unknown): {
  descriptor: StageDescriptor;
  kind: StageKind;
} {
  let value: unknown = json;
  if (typeof json === 'string') {
    try {
      value = JSON.parse(json);
    } catch (cause) {
      throw new StageConfigError('stage descriptor: not JSON', { cause });
    }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail('must be a JSON object');
  }
  const record = value as Record<string, unknown>;
  if (record.version !== 1) {
    fail(`unsupported version ${JSON.stringify(record.version)} (this provcat reads version 1)`);
  }
  const kind = typeof record.kind === 'string' ? stageKind(record.kind) : undefined;
  if (kind === undefined) {
    const known = stageKinds()
      .map((k) => JSON.stringify(k.kind))
      .join(', ');
    return fail(`kind must be one of ${known}, not ${JSON.stringify(record.kind)}`);
  }
  const tenant = checkTenant(record.tenant);
  return { descriptor: kind.parse(record, tenant), kind };
}
