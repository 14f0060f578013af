/**
 * Stage descriptor kinds: what each driver contributes to managed stages, registered by kind as
 * drivers register URI schemes (src/store/registry.ts registers the built-in ones).
 *
 * A kind is small and free of I/O: it validates its descriptor's own fields, reads a CLI stage
 * string of its shape (`s3://bucket/prefix/`), says how locations look (containment is checked
 * before any storage is loaded), and builds the storage backend on first use — only then is the
 * driver's SDK loaded. Everything else about a stage (uploads, checkpoints, verified reads,
 * listing, GC) is the one stage in managed-stage.ts.
 *
 * @module
 */
import type { StageBackend } from './backend.js';
import type { StageLocations } from './location-keys.js';

/** Every stage descriptor: version 1, a registered kind, an optional tenant, the kind's fields. */
export interface StageDescriptor {
  readonly version: 1;
  readonly kind: string;
  /** One child segment of the stage's prefix (or root) that the stage is confined to. */
  readonly tenant?: string | undefined;
  readonly [field: string]: unknown;
}

/** Options a stage passes to its kind's backend factory (besides the descriptor). */
export interface BackendOptions {
  /** The driver's SDK client to use instead of one built from the descriptor (tests, embedders). */
  client?: unknown;
  /** Where the driver reads its environment settings; default `process.env`. */
  env?: NodeJS.ProcessEnv | undefined;
  /** No network call at all (default: `PROVCAT_OFFLINE`): every backend call is `OfflineMiss`. */
  offline?: boolean | undefined;
}

/** One descriptor kind (see the module comment). */
export interface StageKind {
  /** The descriptor's `kind`: `local`, `s3`, `gs`, `az`. */
  readonly kind: string;
  /**
   * Validate the kind's fields of a descriptor (version, kind and tenant are checked already;
   * `tenant` is given normalized) and return the frozen, normalized descriptor. Strict: an
   * unknown field (a credential above all) is refused. Throws StageConfigError. No I/O.
   */
  parse(record: Readonly<Record<string, unknown>>, tenant: string | undefined): StageDescriptor;
  /**
   * The descriptor a CLI stage string names, when the string has this kind's shape
   * (`s3://bucket/prefix/`), with settings the string does not carry read from `env` (the
   * driver's one place for its environment); `undefined` when it is not this kind's.
   */
  fromString?(text: string, env: NodeJS.ProcessEnv): StageDescriptor | undefined;
  /** How locations of a stage look, and its key prefix. No I/O. */
  locations(descriptor: StageDescriptor): StageLocations;
  /**
   * A stable, credential-free name of the stage's storage, for checkpoint file names (a change
   * would orphan checkpoints: keep it stable across releases).
   */
  identity(descriptor: StageDescriptor): string;
  /** The storage behind a stage; called on first use (loads the driver and its SDK). */
  backend(descriptor: StageDescriptor, options: BackendOptions): Promise<StageBackend>;
}

const kinds = new Map<string, StageKind>();

/** Register (or replace) a stage descriptor kind. */
export function registerStageKind(kind: StageKind): void {
  kinds.set(kind.kind, kind);
}

/** The kind named `name`, or `undefined`. */
export function stageKind(name: string): StageKind | undefined {
  return kinds.get(name);
}

/** Every registered kind, sorted by name. */
export function stageKinds(): StageKind[] {
  return [...kinds.values()].sort((a, b) => (a.kind < b.kind ? -1 : 1));
}
