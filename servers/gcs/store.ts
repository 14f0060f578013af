/**
 * The in-memory state of the GCS test server: buckets, and per object name every generation
 * still kept, with the GCS rules for versioning and preconditions.
 *
 * Atomicity comes from Node's single thread: every mutation below is synchronous, so a
 * precondition check and the write it guards happen with no await between them (request
 * bodies are read in full before the store is touched). That is what makes eight concurrent
 * `ifGenerationMatch=0` inserts produce exactly one winner, as on GCS.
 *
 * Rules followed (cloud.google.com/storage/docs/object-versioning,
 * cloud.google.com/storage/docs/request-preconditions, json_api/v1/objects/delete):
 * - generations are increasing int64 values, unique across the server, rendered as strings;
 *   they start from the clock in microseconds (as GCS's look) and never repeat or go back;
 * - a write on a versioned bucket keeps the previous live generation as noncurrent, stamped
 *   with `timeDeleted`; on an unversioned bucket it drops it;
 * - a delete without `generation` makes the live generation noncurrent (versioned) or drops it;
 *   a delete with `generation` removes exactly that generation, live or not;
 * - `ifGenerationMatch=0` holds only when no live generation exists; `ifGenerationNotMatch=0`
 *   only when one does; metageneration conditions fail on a missing object.
 *
 * @module
 */
import { ApiError, conditionNotMet, invalid, noSuchBucket, noSuchObject } from './api-error.js';
import type { Content } from './content.js';

/** Object metadata a client can set (insert, patch, rewrite destination, compose). */
export interface WritableMetadata {
  contentType?: string;
  contentEncoding?: string;
  contentDisposition?: string;
  contentLanguage?: string;
  cacheControl?: string;
  /** Custom metadata (`x-goog-meta-*` in the XML API). */
  metadata?: Record<string, string>;
}

/** One stored generation of one object. */
export interface ObjectVersion {
  readonly bucket: string;
  readonly name: string;
  /** The generation, a decimal int64. */
  readonly generation: string;
  metageneration: number;
  readonly content: Content;
  contentType: string;
  contentEncoding: string | undefined;
  contentDisposition: string | undefined;
  contentLanguage: string | undefined;
  cacheControl: string | undefined;
  metadata: Record<string, string> | undefined;
  /** Milliseconds since the epoch. */
  readonly timeCreated: number;
  updated: number;
  /** Set when the generation became noncurrent (versioned buckets only). */
  timeDeleted: number | undefined;
  /** How many source objects were composed into it (0 for an ordinary object). */
  readonly componentCount: number;
}

/** One bucket and its objects. */
export interface Bucket {
  readonly name: string;
  readonly project: string;
  versioning: boolean;
  metageneration: number;
  readonly timeCreated: number;
  updated: number;
  readonly location: string;
  readonly storageClass: string;
  /** Per name, every generation kept, oldest first; the live one (if any) is the last. */
  readonly objects: Map<string, ObjectVersion[]>;
}

/** The four object preconditions, as query strings (`undefined` when absent). */
export interface Preconditions {
  ifGenerationMatch?: string | undefined;
  ifGenerationNotMatch?: string | undefined;
  ifMetagenerationMatch?: string | undefined;
  ifMetagenerationNotMatch?: string | undefined;
}

const PRECONDITION_NAMES = [
  'ifGenerationMatch',
  'ifGenerationNotMatch',
  'ifMetagenerationMatch',
  'ifMetagenerationNotMatch',
] as const;

/**
 * Reads the preconditions from a query, with a prefix (`ifSource...` for a rewrite's source).
 * Throws 400 when a value is not a decimal integer.
 */
export function parsePreconditions(query: URLSearchParams, source = false): Preconditions {
  const result: Preconditions = {};
  for (const name of PRECONDITION_NAMES) {
    const key = source ? `ifSource${name.slice(2)}` : name;
    const value = query.get(key);
    if (value === null) continue;
    if (!/^-?\d+$/.test(value)) throw invalid(`Invalid value for ${key}: ${value}`);
    result[name] = String(BigInt(value));
  }
  return result;
}

/**
 * Whether the preconditions hold for `target` (the generation they are about, or undefined
 * when there is none). Returns the failing condition's name, or undefined when all hold.
 */
export function failedPrecondition(
  target: ObjectVersion | undefined,
  p: Preconditions,
): keyof Preconditions | undefined {
  if (p.ifGenerationMatch !== undefined) {
    const ok =
      p.ifGenerationMatch === '0'
        ? target === undefined
        : target?.generation === p.ifGenerationMatch;
    if (!ok) return 'ifGenerationMatch';
  }
  if (p.ifGenerationNotMatch !== undefined) {
    const ok =
      p.ifGenerationNotMatch === '0'
        ? target !== undefined
        : target?.generation !== p.ifGenerationNotMatch;
    if (!ok) return 'ifGenerationNotMatch';
  }
  if (p.ifMetagenerationMatch !== undefined) {
    if (String(target?.metageneration) !== p.ifMetagenerationMatch) return 'ifMetagenerationMatch';
  }
  if (p.ifMetagenerationNotMatch !== undefined) {
    if (target === undefined || String(target.metageneration) === p.ifMetagenerationNotMatch) {
      return 'ifMetagenerationNotMatch';
    }
  }
  return undefined;
}

/** Throws 412 `conditionNotMet` unless the preconditions hold for a write or delete target. */
export function requirePreconditions(target: ObjectVersion | undefined, p: Preconditions): void {
  if (failedPrecondition(target, p) !== undefined) throw conditionNotMet();
}

/**
 * For reads: a failed `...NotMatch` is 304 Not Modified (the value the client has is current),
 * any other failed condition 412, as GCS answers a conditional GET.
 */
export function requireReadPreconditions(target: ObjectVersion, p: Preconditions): void {
  const failed = failedPrecondition(target, p);
  if (failed === undefined) return;
  if (failed === 'ifGenerationNotMatch' || failed === 'ifMetagenerationNotMatch') {
    throw new ApiError(304, 'notModified', 'Not Modified');
  }
  throw conditionNotMet();
}

/** Bucket names GCS accepts (simplified: 3-63 characters of a-z 0-9 - _ ., alphanumeric ends). */
const BUCKET_NAME = /^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/;

/** The server's buckets and objects. */
export class Store {
  private readonly buckets = new Map<string, Bucket>();
  private lastGeneration = 0;
  private readonly now: () => number;

  /** `now` gives the time in milliseconds (the server's clock knob). */
  constructor(now: () => number) {
    this.now = now;
  }

  /** A new generation: greater than every one issued before, near the clock in microseconds. */
  nextGeneration(): string {
    this.lastGeneration = Math.max(this.lastGeneration + 1, Math.floor(this.now() * 1000));
    return String(this.lastGeneration);
  }

  /** Every bucket, in name order. */
  listBuckets(): Bucket[] {
    return [...this.buckets.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** Creates a bucket; 409 `conflict` when it exists, 400 on a name GCS refuses. */
  createBucket(name: string, project: string, versioning: boolean): Bucket {
    if (!BUCKET_NAME.test(name)) throw invalid(`Invalid bucket name: '${name}'`);
    if (this.buckets.has(name)) {
      throw new ApiError(
        409,
        'conflict',
        'Your previous request to create the named bucket succeeded and you already own it.',
      );
    }
    const time = this.now();
    const bucket: Bucket = {
      name,
      project,
      versioning,
      metageneration: 1,
      timeCreated: time,
      updated: time,
      location: 'US',
      storageClass: 'STANDARD',
      objects: new Map(),
    };
    this.buckets.set(name, bucket);
    return bucket;
  }

  /** The bucket, or 404. */
  bucket(name: string): Bucket {
    const bucket = this.buckets.get(name);
    if (bucket === undefined) throw noSuchBucket(name);
    return bucket;
  }

  /** Deletes an empty bucket (no generation of any object left); 409 otherwise. */
  deleteBucket(name: string): void {
    const bucket = this.bucket(name);
    if (bucket.objects.size > 0) {
      throw new ApiError(409, 'conflict', 'The bucket you tried to delete is not empty.');
    }
    this.buckets.delete(name);
  }

  /** Turns versioning on or off (existing generations stay as they are). */
  setVersioning(name: string, enabled: boolean): Bucket {
    const bucket = this.bucket(name);
    bucket.versioning = enabled;
    bucket.metageneration++;
    bucket.updated = this.now();
    return bucket;
  }

  /** The live generation of an object, or undefined. */
  live(bucket: Bucket, name: string): ObjectVersion | undefined {
    const versions = bucket.objects.get(name);
    const last = versions?.[versions.length - 1];
    return last !== undefined && last.timeDeleted === undefined ? last : undefined;
  }

  /**
   * The generation a read or delete is about: `generation` when given (live or noncurrent),
   * else the live one. 404 when there is none.
   */
  select(bucketName: string, name: string, generation: string | null): ObjectVersion {
    const bucket = this.bucket(bucketName);
    if (generation !== null && generation !== '') {
      if (!/^\d+$/.test(generation)) throw invalid(`Invalid generation: ${generation}`);
      const wanted = String(BigInt(generation));
      const found = bucket.objects.get(name)?.find((v) => v.generation === wanted);
      if (found === undefined) throw noSuchObject(bucketName, name, wanted);
      return found;
    }
    const live = this.live(bucket, name);
    if (live === undefined) throw noSuchObject(bucketName, name);
    return live;
  }

  /**
   * Writes a new live generation, after checking the preconditions against the current live
   * one (412 on failure). Synchronous: the check and the write are one step.
   */
  insert(
    bucketName: string,
    name: string,
    content: Content,
    meta: WritableMetadata,
    preconditions: Preconditions,
    componentCount = 0,
  ): ObjectVersion {
    const bucket = this.bucket(bucketName);
    validateObjectName(name);
    const current = this.live(bucket, name);
    requirePreconditions(current, preconditions);
    const time = this.now();
    const version: ObjectVersion = {
      bucket: bucketName,
      name,
      generation: this.nextGeneration(),
      metageneration: 1,
      content,
      contentType: meta.contentType ?? 'application/octet-stream',
      contentEncoding: meta.contentEncoding,
      contentDisposition: meta.contentDisposition,
      contentLanguage: meta.contentLanguage,
      cacheControl: meta.cacheControl,
      metadata: cleanMetadata(meta.metadata),
      timeCreated: time,
      updated: time,
      timeDeleted: undefined,
      componentCount,
    };
    const versions = bucket.objects.get(name) ?? [];
    if (current !== undefined) {
      if (bucket.versioning) current.timeDeleted = time;
      else versions.pop();
    }
    versions.push(version);
    bucket.objects.set(name, versions);
    return version;
  }

  /**
   * Deletes: with `generation`, exactly that generation; without, the live one (kept as
   * noncurrent on a versioned bucket). Preconditions are checked against the target first.
   */
  delete(
    bucketName: string,
    name: string,
    generation: string | null,
    preconditions: Preconditions,
  ): void {
    const bucket = this.bucket(bucketName);
    const target = this.select(bucketName, name, generation);
    requirePreconditions(target, preconditions);
    const versions = bucket.objects.get(name) as ObjectVersion[];
    const explicit = generation !== null && generation !== '';
    if (!explicit && bucket.versioning) {
      target.timeDeleted = this.now();
    } else {
      versions.splice(versions.indexOf(target), 1);
      if (versions.length === 0) bucket.objects.delete(name);
    }
  }

  /**
   * Changes the metadata of one generation (objects.patch); bumps its metageneration.
   * `metadata` keys set to null are removed; `replace` replaces all writable fields (update).
   */
  patch(
    bucketName: string,
    name: string,
    generation: string | null,
    changes: Record<string, unknown>,
    preconditions: Preconditions,
    replace: boolean,
  ): ObjectVersion {
    const target = this.select(bucketName, name, generation);
    requirePreconditions(target, preconditions);
    const fields = [
      'contentType',
      'contentEncoding',
      'contentDisposition',
      'contentLanguage',
      'cacheControl',
    ] as const;
    for (const field of fields) {
      if (field in changes || replace) {
        const value = changes[field];
        if (value === null || value === undefined) {
          if (field === 'contentType') target.contentType = 'application/octet-stream';
          else target[field] = undefined;
        } else if (typeof value === 'string') {
          target[field] = value;
        } else {
          throw invalid(`Invalid value for ${field}`);
        }
      }
    }
    if ('metadata' in changes || replace) {
      const value = changes.metadata;
      if (value === null || value === undefined) {
        target.metadata = undefined;
      } else if (typeof value === 'object') {
        const next: Record<string, string> = replace ? {} : { ...(target.metadata ?? {}) };
        for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
          if (v === null) delete next[key];
          else next[key] = String(v);
        }
        target.metadata = cleanMetadata(next);
      } else {
        throw invalid('Invalid value for metadata');
      }
    }
    target.metageneration++;
    target.updated = this.now();
    return target;
  }
}

/** Object names GCS refuses: empty, over 1024 bytes of UTF-8, `.`/`..`, CR or LF. */
function validateObjectName(name: string): void {
  if (name === '' || Buffer.byteLength(name, 'utf8') > 1024) {
    throw invalid('The object name must be 1-1024 bytes of UTF-8.');
  }
  if (name === '.' || name === '..' || /[\r\n]/.test(name)) {
    throw invalid(`Invalid object name: ${JSON.stringify(name)}`);
  }
}

function cleanMetadata(
  metadata: Record<string, string> | undefined,
): Record<string, string> | undefined {
  if (metadata === undefined || Object.keys(metadata).length === 0) return undefined;
  return { ...metadata };
}
