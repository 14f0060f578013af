/**
 * The on-disk format of a GC plan (`provcat.gc-plan/1`), and its verification.
 *
 * ```
 * DIR/pages/<ID>.json    page N: canonical JSON; ID = SHA-256 of its bytes
 * DIR/manifest.json      written last: binds the stage, the cutoff, the totals, the
 *                        references' fingerprint and the page IDs in order
 * DIR/apply.json         apply's checkpoint (apply.ts)
 * ```
 *
 * Pages are drafts until the manifest exists: a directory without `manifest.json` authorizes
 * nothing (`NoManifest`). {@link verifyPlan} reads the manifest and then every page, re-hashing
 * each against the ID the manifest lists and checking that pages chain (`previous`), that object
 * keys ascend strictly across the whole plan, that every candidate is older than the cutoff, and
 * that the totals add up — before apply deletes anything. Apply re-hashes each page again when
 * it uses it.
 *
 * @module
 */
import { constants as fsc } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { sha256Hex } from '../../core/digest.js';
import { canonicalJson, parseCanonical } from '../../logs/canonical-json.js';
import { GcPlanError } from './errors.js';
import { compareUtf8, isReservedKey, keyProblem } from './keys.js';

/** The `format` of a plan manifest. */
export const PLAN_FORMAT = 'provcat.gc-plan/1';
/** The `format` of a plan page. */
export const PAGE_FORMAT = 'provcat.gc-page/1';
/** Entries (objects and uploads) per page by default. */
export const DEFAULT_PAGE_SIZE = 1000;
/** The most entries a page may hold. */
export const MAX_PAGE_SIZE = 10_000;
/** Largest page or manifest file read (bytes). */
const MAX_FILE_BYTES = 64 * 1024 * 1024;

/** One object the plan would delete. */
export interface PlanObject {
  /** Stage-relative key. */
  key: string;
  size: number;
  /** The version the delete is conditional on, or `null` (an inventory file: apply reads it). */
  version: string | null;
  /** Its last modification, ISO 8601 UTC. */
  lastModified: string;
}

/** One stale upload the plan would abort. */
export interface PlanUpload {
  /** Stage-relative key the object would have had. */
  key: string;
  /** The part protocol's reference to it. */
  upload: string;
  /** When it was started, ISO 8601 UTC. */
  initiated: string;
}

/** One page of a plan. */
export interface PlanPage {
  format: typeof PAGE_FORMAT;
  /** 1, 2, ... */
  number: number;
  /** The previous page's ID, `null` for page 1. */
  previous: string | null;
  /** Objects to delete, ascending by key (across the whole plan). */
  objects: PlanObject[];
  /** Uploads to abort. */
  uploads: PlanUpload[];
}

/** The counts a plan records. */
export interface PlanTotals {
  /** Objects inside the stage that the inventory or listing gave (reserved ones included). */
  scanned: number;
  /** Of those: in a reserved folder (the stage's `.provcat/`, or a nested stage's). */
  reserved: number;
  /** Covered by the keep-set. */
  referenced: number;
  /** Not older than the cutoff. */
  young: number;
  /** Without a last-modified time (never candidates). */
  undated: number;
  /** Objects to delete, and their bytes. */
  candidates: number;
  bytes: number;
  /** Stale uploads to abort. */
  uploads: number;
  /** Inventory rows outside the stage (other prefixes, other buckets), ignored. */
  outside: number;
  /** Keys inside the stage that no location can name (`a//b`, control characters), left alone. */
  unnameable: number;
  /**
   * A plan from candidates only (and always there): candidates the store showed gone, of another
   * size or time when planned (HEAD), dropped.
   */
  changed?: number;
}

/** The manifest: what binds a plan. */
export interface PlanManifest {
  format: typeof PLAN_FORMAT;
  /** The stage's identity. */
  stage: string;
  /** When the plan was made (ISO 8601 UTC). */
  created: string;
  /** Objects last modified before this time (ISO 8601 UTC) were candidates. */
  cutoff: string;
  /** `listing`, `inventory` (a file or a cloud's manifest) or `candidates` (an engine's). */
  source: 'listing' | 'inventory' | 'candidates';
  /** The fingerprint of the reference sets the keep-set was read from. */
  references: string;
  /** The keep-set used: its entry count and file digest. */
  keep: { entries: number; sha256: string };
  totals: PlanTotals;
  /** The page IDs, in order. */
  pages: string[];
}

/** Paths inside a plan directory. */
export function planPaths(dir: string) {
  return {
    manifest: path.join(dir, 'manifest.json'),
    pages: path.join(dir, 'pages'),
    page: (id: string) => path.join(dir, 'pages', `${id}.json`),
    checkpoint: path.join(dir, 'apply.json'),
  };
}

/** Canonical bytes of a page or manifest. */
export function planBytes(value: PlanPage | PlanManifest): Buffer {
  return Buffer.from(canonicalJson(value), 'utf8');
}

const text = (v: string | null) => (v === null ? 'null' : JSON.stringify(v));

/**
 * The canonical bytes of a page, written directly (the same bytes as {@link planBytes}: the
 * members are in the order canonical JSON sorts them), without the generic writer's sorting of
 * every object's members — a plan writes a page per thousand candidates.
 */
export function pageBytes(page: PlanPage): Buffer {
  let out = `{"format":${text(page.format)},"number":${page.number},"objects":[`;
  for (let i = 0; i < page.objects.length; i++) {
    const o = page.objects[i] as PlanObject;
    if (i > 0) out += ',';
    out += `{"key":${text(o.key)},"lastModified":${text(o.lastModified)},"size":${o.size},"version":${text(o.version)}}`;
  }
  out += `],"previous":${text(page.previous)},"uploads":[`;
  for (let i = 0; i < page.uploads.length; i++) {
    const u = page.uploads[i] as PlanUpload;
    if (i > 0) out += ',';
    out += `{"initiated":${text(u.initiated)},"key":${text(u.key)},"upload":${text(u.upload)}}`;
  }
  return Buffer.from(`${out}]}`, 'utf8');
}

const HEX64 = /^[0-9a-f]{64}$/;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function corrupt(what: string, why: string, cause?: unknown): GcPlanError {
  return new GcPlanError('Corrupt', `${what}: ${why}`, { cause });
}

/** Parse a page or manifest as canonical JSON (src/logs/canonical-json.ts); `Corrupt` if not. */
function parsePlanFile(bytes: Buffer, what: string): Record<string, unknown> {
  return parseCanonical(bytes, { fail: (_problem, why, cause) => corrupt(what, why, cause) });
}

function checkFields(record: Record<string, unknown>, fields: string[], what: string): void {
  const have = Object.keys(record).sort().join(',');
  const want = [...fields].sort().join(',');
  if (have !== want) throw corrupt(what, `fields ${have}, not ${want}`);
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function isTime(v: unknown): v is string {
  return typeof v === 'string' && ISO_TIME.test(v) && !Number.isNaN(Date.parse(v));
}

async function readCapped(file: string, what: string): Promise<Buffer> {
  let bytes: Buffer;
  try {
    // Only a regular file of the plan directory is read: not through a link, not a folder.
    bytes = await readFile(file, { flag: fsc.O_RDONLY | fsc.O_NOFOLLOW });
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'ENOTDIR') {
      throw corrupt(
        what,
        `${path.dirname(file)} is not a directory (a file where the plan's folder should be)`,
      );
    }
    if (code === 'EISDIR' || code === 'ELOOP') {
      throw corrupt(
        what,
        `${file} is ${code === 'EISDIR' ? 'a directory' : 'a symbolic link'}, not a file`,
      );
    }
    throw error;
  }
  if (bytes.byteLength > MAX_FILE_BYTES) throw corrupt(what, `over ${MAX_FILE_BYTES} bytes`);
  return bytes;
}

/** Read and validate the manifest of plan `dir`; returns it with its ID (SHA-256 of its bytes). */
export async function readManifest(dir: string): Promise<{ id: string; manifest: PlanManifest }> {
  const file = planPaths(dir).manifest;
  let bytes: Buffer;
  try {
    bytes = await readCapped(file, 'the plan manifest');
  } catch (error) {
    if ((error as { code?: string }).code === 'ENOENT') {
      throw new GcPlanError(
        'NoManifest',
        `${dir} has no manifest.json: an unfinished plan authorizes nothing`,
        { cause: error },
      );
    }
    throw error;
  }
  const what = `plan manifest ${file}`;
  const record = parsePlanFile(bytes, what);
  if (record.format !== PLAN_FORMAT) {
    throw new GcPlanError(
      'UnknownFormat',
      `${what} has format ${JSON.stringify(record.format)} (this reader knows ${PLAN_FORMAT})`,
    );
  }
  checkFields(
    record,
    ['format', 'stage', 'created', 'cutoff', 'source', 'references', 'keep', 'totals', 'pages'],
    what,
  );
  const m = record as unknown as PlanManifest;
  if (typeof m.stage !== 'string') throw corrupt(what, 'stage is not a string');
  if (!isTime(m.created) || !isTime(m.cutoff))
    throw corrupt(what, 'created or cutoff is not a time');
  if (m.source !== 'listing' && m.source !== 'inventory' && m.source !== 'candidates') {
    throw corrupt(what, 'unknown source');
  }
  if (typeof m.references !== 'string' || !HEX64.test(m.references)) {
    throw corrupt(what, 'references is not a fingerprint');
  }
  const keep = m.keep as unknown as Record<string, unknown>;
  if (typeof keep !== 'object' || keep === null) throw corrupt(what, 'keep is not an object');
  checkFields(keep, ['entries', 'sha256'], `${what} keep`);
  if (!isCount(keep.entries) || typeof keep.sha256 !== 'string' || !HEX64.test(keep.sha256)) {
    throw corrupt(what, 'keep is not {entries, sha256}');
  }
  const totals = m.totals as unknown as Record<string, unknown>;
  if (typeof totals !== 'object' || totals === null) throw corrupt(what, 'totals is not an object');
  const totalFields = [
    'scanned',
    'reserved',
    'referenced',
    'young',
    'undated',
    'candidates',
    'bytes',
    'uploads',
    'outside',
    'unnameable',
    ...(m.source === 'candidates' ? ['changed'] : []),
  ];
  checkFields(totals, totalFields, `${what} totals`);
  for (const f of totalFields)
    if (!isCount(totals[f])) throw corrupt(what, `totals.${f} is not a count`);
  if (!Array.isArray(m.pages) || !m.pages.every((p) => typeof p === 'string' && HEX64.test(p))) {
    throw corrupt(what, 'pages is not a list of page IDs');
  }
  return { id: sha256Hex(bytes), manifest: m };
}

/**
 * Read page `id` of plan `dir` and check it: its bytes hash to `id` (`DigestMismatch`), it is
 * canonical and valid, it is page `number` following `previous`, every object key is canonical,
 * outside the reserved folder, ascending strictly, and older than `cutoff`.
 */
export async function readPage(
  dir: string,
  id: string,
  number: number,
  previous: string | null,
  cutoffMs: number,
): Promise<PlanPage> {
  const file = planPaths(dir).page(id);
  let bytes: Buffer;
  try {
    bytes = await readCapped(file, `plan page ${id}`);
  } catch (error) {
    if ((error as { code?: string }).code === 'ENOENT') {
      throw new GcPlanError('Corrupt', `plan page ${number} (${file}) is missing`, {
        cause: error,
      });
    }
    throw error;
  }
  const actual = sha256Hex(bytes);
  if (actual !== id) {
    throw new GcPlanError(
      'DigestMismatch',
      `plan page ${number} (${file}) hashes to ${actual}, not to its ID: it was changed`,
    );
  }
  const what = `plan page ${number} (${id})`;
  const record = parsePlanFile(bytes, what);
  if (record.format !== PAGE_FORMAT) {
    throw new GcPlanError('UnknownFormat', `${what} has format ${JSON.stringify(record.format)}`);
  }
  checkFields(record, ['format', 'number', 'previous', 'objects', 'uploads'], what);
  const page = record as unknown as PlanPage;
  if (page.number !== number || page.previous !== previous) {
    throw corrupt(
      what,
      `it is page ${String(page.number)} after ${String(page.previous)}, not page ${number} after ${previous}`,
    );
  }
  if (!Array.isArray(page.objects) || !Array.isArray(page.uploads)) {
    throw corrupt(what, 'objects or uploads is not an array');
  }
  if (page.objects.length + page.uploads.length > MAX_PAGE_SIZE) {
    throw corrupt(what, 'too many entries for one page');
  }
  let last: string | undefined;
  for (const [i, o] of page.objects.entries()) {
    const obj = o as unknown as Record<string, unknown>;
    if (typeof obj !== 'object' || obj === null)
      throw corrupt(what, `objects[${i}] is not an object`);
    checkFields(obj, ['key', 'size', 'version', 'lastModified'], `${what} objects[${i}]`);
    const key = obj.key as string;
    const problem = typeof key === 'string' ? keyProblem(key) : 'not a string';
    if (problem || isReservedKey(key))
      throw corrupt(what, `objects[${i}].key: ${problem ?? 'reserved'}`);
    if (last !== undefined && compareUtf8(last, key) >= 0)
      throw corrupt(what, `objects not in key order at ${JSON.stringify(key)}`);
    last = key;
    if (!isCount(obj.size)) throw corrupt(what, `objects[${i}].size is not a count`);
    if (obj.version !== null && (typeof obj.version !== 'string' || obj.version === '')) {
      throw corrupt(what, `objects[${i}].version is neither null nor a version`);
    }
    if (!isTime(obj.lastModified) || Date.parse(obj.lastModified) >= cutoffMs) {
      throw corrupt(what, `objects[${i}] is not older than the cutoff`);
    }
  }
  for (const [i, u] of page.uploads.entries()) {
    const up = u as unknown as Record<string, unknown>;
    if (typeof up !== 'object' || up === null)
      throw corrupt(what, `uploads[${i}] is not an object`);
    checkFields(up, ['key', 'upload', 'initiated'], `${what} uploads[${i}]`);
    const problem = typeof up.key === 'string' ? keyProblem(up.key) : 'not a string';
    if (problem) throw corrupt(what, `uploads[${i}].key: ${problem}`);
    if (typeof up.upload !== 'string' || up.upload === '')
      throw corrupt(what, `uploads[${i}].upload is empty`);
    if (!isTime(up.initiated) || Date.parse(up.initiated) >= cutoffMs) {
      throw corrupt(what, `uploads[${i}] is not older than the cutoff`);
    }
  }
  return page;
}

/** The first and last object keys of a page (for the cross-page order check). */
export function keyRange(page: PlanPage): { first: string; last: string } | undefined {
  const first = page.objects[0];
  const last = page.objects.at(-1);
  return first && last ? { first: first.key, last: last.key } : undefined;
}

/**
 * Verify plan `dir` for `stageIdentity` as a whole (see the module comment): the manifest, then
 * every page in order, one at a time. Returns the manifest and its ID. Throws
 * {@link GcPlanError}; nothing is trusted before this returns.
 */
export async function verifyPlan(
  dir: string,
  stageIdentity: string,
): Promise<{ id: string; manifest: PlanManifest }> {
  const { id, manifest } = await readManifest(dir);
  if (manifest.stage !== stageIdentity) {
    throw new GcPlanError(
      'WrongStage',
      `the plan in ${dir} is for the stage ${manifest.stage}, not ${stageIdentity}`,
    );
  }
  const cutoffMs = Date.parse(manifest.cutoff);
  let candidates = 0;
  let bytes = 0;
  let uploads = 0;
  let lastKey: string | undefined;
  let previous: string | null = null;
  for (const [i, pageId] of manifest.pages.entries()) {
    const page = await readPage(dir, pageId, i + 1, previous, cutoffMs);
    const range = keyRange(page);
    if (range && lastKey !== undefined && compareUtf8(lastKey, range.first) >= 0) {
      throw corrupt(`plan ${dir}`, `page ${i + 1} does not follow page ${i} in key order`);
    }
    if (range) lastKey = range.last;
    candidates += page.objects.length;
    for (const o of page.objects) bytes += o.size;
    uploads += page.uploads.length;
    previous = pageId;
  }
  const t = manifest.totals;
  if (t.candidates !== candidates || t.bytes !== bytes || t.uploads !== uploads) {
    throw corrupt(
      `plan ${dir}`,
      `its pages hold ${candidates} objects (${bytes} bytes) and ${uploads} uploads; the manifest says ${t.candidates} (${t.bytes}) and ${t.uploads}`,
    );
  }
  return { id, manifest };
}
