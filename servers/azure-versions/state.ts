/**
 * The versions server's in-memory account: containers, blobs with every version, uncommitted
 * blocks, and the one clock that mints version IDs and ETags.
 *
 * A blob is a list of immutable versions, oldest first, and a pointer to the current one (none
 * after a delete of the base blob, as on a real account with versioning on). Version IDs are
 * timestamps with seven fractional digits, as Azure's are, and strictly increasing across the
 * whole server, so two writes in the same millisecond still order; an ETag is the same instant
 * as a FILETIME in hex, so it changes on every write too.
 *
 * @module
 */

/** 100-nanosecond ticks between 1601-01-01 (FILETIME) and 1970-01-01. */
const FILETIME_EPOCH_OFFSET = 116444736000000000n;

/** One minted instant: its ticks since 1970 and the wall-clock date. */
export interface Instant {
  ticks: bigint;
  date: Date;
}

/** Mints strictly increasing instants (the version ID and ETag source). */
export class Clock {
  #last = 0n;

  /** The next instant: now, or one tick after the previous one if the clock has not moved. */
  next(): Instant {
    const now = BigInt(Date.now()) * 10000n;
    this.#last = now > this.#last ? now : this.#last + 1n;
    return { ticks: this.#last, date: new Date(Number(this.#last / 10000n)) };
  }
}

/** A version ID for `instant`: `2026-12-01T14:23:25.1234567Z`. */
export function versionIdOf(instant: Instant): string {
  const iso = instant.date.toISOString(); // ...T14:23:25.123Z
  const subMs = (instant.ticks % 10000n).toString().padStart(4, '0');
  return `${iso.slice(0, -1)}${subMs}Z`;
}

/** The shape a version ID must have (anything else is a 400 from the server). */
export const VERSION_ID_PATTERN = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$/;

/** An ETag for `instant`, unquoted: `0x8DE...`. */
export function etagOf(instant: Instant): string {
  return `0x${(instant.ticks + FILETIME_EPOCH_OFFSET).toString(16).toUpperCase()}`;
}

/** The standard HTTP properties a blob carries. */
export interface ContentProperties {
  contentType: string;
  contentEncoding: string | undefined;
  contentLanguage: string | undefined;
  contentDisposition: string | undefined;
  cacheControl: string | undefined;
  /** The blob's MD5, as stored (computed for Put Blob, given for Put Block List). */
  contentMd5: Buffer | undefined;
}

/** One committed block of a version: a slice of the version's bytes. */
export interface CommittedBlock {
  id: string;
  offset: number;
  size: number;
}

/** What a completed copy recorded on the version it made. */
export interface CopyRecord {
  id: string;
  source: string;
  completed: Date;
  bytes: number;
}

/** One immutable version of a blob. */
export interface BlobVersion {
  versionId: string;
  /** Unquoted (`0x...`); headers quote it, listings do not. Changes on Set Blob Properties. */
  etag: string;
  data: Buffer;
  blocks: CommittedBlock[];
  props: ContentProperties;
  /** Metadata as sent: names keep their case, in the order given. */
  metadata: Array<[string, string]>;
  /** When the blob (not this version) was created: kept across overwrites, reset after a delete. */
  created: Date;
  lastModified: Date;
  copy: CopyRecord | undefined;
}

/** A blob name with its versions and its uncommitted blocks. */
export interface BlobEntry {
  name: string;
  /** The name's UTF-8 bytes: listings order by these, as Azure does. */
  key: Buffer;
  /** Every version still kept, oldest first. */
  versions: BlobVersion[];
  /** The current version, or `undefined` when the base blob was deleted (or never committed). */
  current: BlobVersion | undefined;
  /** Staged blocks by ID, replaced when staged again, dropped by a commit or a Put Blob. */
  uncommitted: Map<string, Buffer>;
}

/** A container. */
export interface ContainerEntry {
  name: string;
  etag: string;
  lastModified: Date;
  metadata: Array<[string, string]>;
  blobs: Map<string, BlobEntry>;
}

/** The whole account. */
export class AccountState {
  readonly clock = new Clock();
  readonly containers = new Map<string, ContainerEntry>();

  /** The entry for `name` in `container`, made (empty) when `create` and absent. */
  blob(container: ContainerEntry, name: string, create: true): BlobEntry;
  blob(container: ContainerEntry, name: string, create?: false): BlobEntry | undefined;
  blob(container: ContainerEntry, name: string, create = false): BlobEntry | undefined {
    let entry = container.blobs.get(name);
    if (!entry && create) {
      entry = {
        name,
        key: Buffer.from(name, 'utf8'),
        versions: [],
        current: undefined,
        uncommitted: new Map(),
      };
      container.blobs.set(name, entry);
    }
    return entry;
  }

  /**
   * Make a new version of `entry` and make it current. The instant is minted here, so the
   * version ID and the ETag are fresh and later than every earlier one.
   */
  addVersion(
    entry: BlobEntry,
    fields: Pick<BlobVersion, 'data' | 'blocks' | 'props' | 'metadata' | 'copy'>,
  ): BlobVersion {
    const instant = this.clock.next();
    const version: BlobVersion = {
      ...fields,
      versionId: versionIdOf(instant),
      etag: etagOf(instant),
      created: entry.current?.created ?? instant.date,
      lastModified: instant.date,
    };
    entry.versions.push(version);
    entry.current = version;
    return version;
  }

  /** Forget `entry` when nothing is left of it (no version, no staged block). */
  prune(container: ContainerEntry, entry: BlobEntry): void {
    if (entry.versions.length === 0 && entry.uncommitted.size === 0) {
      container.blobs.delete(entry.name);
    }
  }
}
