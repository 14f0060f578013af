/**
 * The `local` stage descriptor kind: managed objects as plain files under a root directory.
 *
 * ```json
 * { "version": 1, "kind": "local", "root": "/srv/lake", "tenant": "acme" }
 * ```
 *
 * Locations are `file:///abs/root/[tenant/]ab/abcdef…`; the stage string is `file:///abs/root/`.
 * The storage is stage-files.ts (not the versioned `local://` store: see there why).
 *
 * @module
 */
import { fileURLToPath } from 'node:url';
import { checkFields, fail, normalizeRoot } from '../../src/lake/descriptor-fields.js';
import { StageConfigError } from '../../src/lake/errors.js';
import { fileLocations, fileUriSegments } from '../../src/lake/location-keys.js';
import type { StageDescriptor, StageKind } from '../../src/lake/stage-kinds.js';

/** A stage whose objects are plain files under `root`. */
export interface LocalStageDescriptor extends StageDescriptor {
  readonly version: 1;
  readonly kind: 'local';
  /** Absolute, normalized directory. */
  readonly root: string;
}

const FIELDS = ['version', 'kind', 'root', 'tenant'];

function asLocal(descriptor: StageDescriptor): LocalStageDescriptor {
  return descriptor as LocalStageDescriptor;
}

/** The `local` kind (see the module comment). */
export const localStageKind: StageKind = {
  kind: 'local',

  parse(record, tenant) {
    checkFields(record, FIELDS);
    if (typeof record.root !== 'string') fail('root must be a string');
    return Object.freeze({
      version: 1,
      kind: 'local',
      root: normalizeRoot(record.root),
      ...(tenant === undefined ? {} : { tenant }),
    });
  },

  fromString(text) {
    if (!text.startsWith('file://')) return undefined;
    const body = text.endsWith('/') ? text.slice(0, -1) : text;
    let root: string;
    try {
      fileUriSegments(body);
      root = fileURLToPath(body);
    } catch (cause) {
      throw new StageConfigError(`not a usable file:///abs/root/ stage: ${text}`, { cause });
    }
    return localStageKind.parse({ version: 1, kind: 'local', root }, undefined);
  },

  locations(descriptor) {
    const d = asLocal(descriptor);
    return fileLocations(d.root, d.tenant ?? '');
  },

  identity(descriptor) {
    const d = asLocal(descriptor);
    return `local|${d.root}|${d.tenant ?? ''}`;
  },

  async backend(descriptor) {
    const d = asLocal(descriptor);
    const { StageFiles } = await import('./stage-files.js');
    const locations = localStageKind.locations(d);
    return new StageFiles(d.root, locations.keyPrefix, (key) => locations.uriOf(key));
  },
};
