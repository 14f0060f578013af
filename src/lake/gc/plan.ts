/**
 * `gc plan`: which objects of a stage no reference set covers and are older than the cutoff,
 * written as a plan (plan-format.ts) that `gc apply` can carry out.
 *
 * 1. The keep-set is read from the reference logs (keep-set.ts) into a sorted file; it fails
 *    closed, and its fingerprint goes into the manifest.
 * 2. The inventory — the stage's listing, every page, or an inventory file — goes through an
 *    external sort by stage-relative key (the store's listing order is not trusted; a file is
 *    in no order). Rows outside the stage's exact prefix (and tenant), or of another bucket, are
 *    ignored. Folders of stages nested in this one (a `.provcat` segment below the top) are
 *    noted here, before any decision; for an inventory file, which need not show them, the
 *    store is asked too before a key becomes a candidate (nested.ts).
 * 3. The sorted inventory is merged with the sorted keep-set ({@link SortedMatcher}). A key is a
 *    candidate only when it is outside the reserved folders, nameable, not covered, has a
 *    last-modified time, and that time is before the cutoff. A key listed twice is an error.
 * 4. Uploads left open (crashed writers: S3 multipart uploads, local `.uploading` temps) started
 *    before the cutoff are added for abort; one without a start time is left alone.
 * 5. Candidates go into pages of `pageSize`, each written content-addressed as it fills; the
 *    manifest is written last. Until it exists, nothing is authorized.
 *
 * Memory is bounded by one sort run, the merge fan-in, one page and one keep-set read buffer;
 * temporary disk holds the keep-set and the inventory once.
 *
 * **The horizon rule.** The cutoff (default 7 days) must exceed the longest time from the end
 * of an upload to the write of the reference that covers it, retries included: an object
 * uploaded and not yet referenced is indistinguishable from an orphan, and only its age keeps
 * it. Objects without a last-modified time are never candidates.
 *
 * @module
 */
import { mkdir, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { sha256Hex } from '../../core/digest.js';
import { NotFound, StoreError } from '../../core/errors.js';
import { writeFileAtomic } from '../../core/fs-atomic.js';
import { checkOutputDirectory } from '../../core/output-file.js';
import type { StageUpload } from '../stage.js';
import type { ReadOptions } from '../stage-contract.js';
import { readCandidates } from './candidates.js';
import { GcPlanError, InventoryError } from './errors.js';
import { ExternalSort, type ExternalSortOptions } from './external-sort.js';
import {
  type InventoryFormat,
  type InventoryRow,
  type KeyEncoding,
  type ListingSource,
  listingInventory,
  readInventoryFile,
} from './inventory.js';
import {
  accountOfEndpoint,
  checkManifest,
  isManifestName,
  readManifestRows,
} from './inventory-manifests.js';
import { writeKeepSet } from './keep-set.js';
import { isReservedKey, keyProblem, nestedStageOf } from './keys.js';
import { KeepSetIndex } from './matcher.js';
import { NestedStages } from './nested.js';
import {
  DEFAULT_PAGE_SIZE,
  MAX_PAGE_SIZE,
  PAGE_FORMAT,
  PLAN_FORMAT,
  type PlanManifest,
  type PlanObject,
  type PlanPage,
  type PlanTotals,
  type PlanUpload,
  pageBytes,
  planBytes,
  planPaths,
} from './plan-format.js';
import type { RefStage } from './refs-log.js';
import { fullKey } from './refs-log.js';
import { makeWorkDir } from './work-dir.js';

/** HEADs of candidates in flight at once (plan from candidates). */
const HEAD_WINDOW = 16;

/** The default cutoff: 7 days. */
export const DEFAULT_OLDER_THAN_MS = 7 * 24 * 60 * 60 * 1000;
/** The longest cutoff: 100 years (36,525 days), further back than any store's times. */
export const MAX_OLDER_THAN_MS = 36_525 * 24 * 60 * 60 * 1000;

/** What planning needs of a stage (a `Stage` is one). */
export interface PlanStage extends RefStage, ListingSource {
  readonly descriptor: object;
  openUploads(options?: ReadOptions): AsyncIterable<StageUpload>;
}

/** Progress of a plan: what has been read and decided so far. */
export interface PlanProgress {
  phase: 'references' | 'inventory' | 'merge' | 'uploads';
  /** Inventory rows read (phase `inventory`) or objects decided (later phases). */
  scanned: number;
  /** Their bytes. */
  bytes: number;
  candidates: number;
}

/** Options of {@link planGc}. */
export interface PlanOptions {
  /** The plan directory; created, and must be empty. */
  out: string;
  /** Objects last modified more than this long ago (ms) are candidates. Default 7 days. */
  olderThanMs?: number | undefined;
  /**
   * Read this inventory instead of listing the stage: one file (inventory.ts) or a cloud's
   * inventory manifest (inventory-manifests.ts; by its name, or `inventoryFormat: 'manifest'`).
   */
  inventory?: string | undefined;
  inventoryFormat?: InventoryFormat | 'manifest' | undefined;
  /** The oldest manifest accepted (ms since it was taken). Default: `olderThanMs`. */
  maxInventoryAgeMs?: number | undefined;
  /** Where a manifest's data files are (default: beside the manifest, see inventory-manifests.ts). */
  inventoryRoot?: string | undefined;
  /** Plan from an engine's candidates file instead (candidates.ts); exclusive with `inventory`. */
  candidates?: string | undefined;
  keyEncoding?: KeyEncoding | undefined;
  /** Where temporary files go (default: the OS temp directory). */
  tmpDir?: string | undefined;
  /** Entries per page (1..10,000; default 1,000). */
  pageSize?: number | undefined;
  signal?: AbortSignal | undefined;
  onProgress?: ((p: PlanProgress) => void) | undefined;
  /** @internal Sort settings (tests force small runs). */
  sort?: Omit<ExternalSortOptions, 'dir'> | undefined;
}

/** What {@link planGc} wrote. */
export interface PlanResult {
  /** The plan's ID: SHA-256 of its manifest. */
  plan: string;
  /** The plan directory. */
  dir: string;
  candidates: number;
  bytes: number;
  uploads: number;
  scanned: number;
  /** Entries in the keep-set. */
  keep: number;
  manifest: PlanManifest;
}

/** An inventory row as sorted: `[stage-relative key, size, lastModified ms | null, version | null]`. */
type Row = [string, number, number | null, string | null];

/** Collects entries into pages and writes each as it fills. */
class PageWriter {
  readonly ids: string[] = [];
  private objects: PlanObject[] = [];
  private uploads: PlanUpload[] = [];

  constructor(
    private readonly dir: string,
    private readonly size: number,
  ) {}

  /** Add one object; a promise only when the page filled and is being written. */
  object(o: PlanObject): Promise<void> | undefined {
    this.objects.push(o);
    return this.objects.length + this.uploads.length >= this.size ? this.flush() : undefined;
  }

  async upload(u: PlanUpload): Promise<void> {
    this.uploads.push(u);
    if (this.objects.length + this.uploads.length >= this.size) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.objects.length + this.uploads.length === 0) return;
    const page: PlanPage = {
      format: PAGE_FORMAT,
      number: this.ids.length + 1,
      previous: this.ids.at(-1) ?? null,
      objects: this.objects,
      uploads: this.uploads,
    };
    this.objects = [];
    this.uploads = [];
    const bytes = pageBytes(page);
    const id = sha256Hex(bytes);
    await writeFileAtomic(planPaths(this.dir).page(id), bytes);
    this.ids.push(id);
  }
}

/**
 * Make `dir` (and `dir/pages`); refuse one that holds anything. Returns whether `dir` was made
 * here (a failed plan then removes it; otherwise only what it wrote inside).
 */
async function prepareOut(dir: string): Promise<boolean> {
  // A file, device, FIFO or symlink is refused before anything is made (src/core/output-file.ts).
  checkOutputDirectory(dir, '--out');
  const made = (await mkdir(dir, { recursive: true })) !== undefined;
  const present = await readdir(dir);
  if (present.length > 0) {
    throw new GcPlanError(
      'Exists',
      `${dir} is not empty (${present.slice(0, 3).join(', ')}${present.length > 3 ? ', …' : ''}): a plan goes into a new directory`,
    );
  }
  await mkdir(planPaths(dir).pages);
  return made;
}

/** The storage account an Azure stage's descriptor names (or its endpoint does), if any. */
function accountOf(stage: PlanStage): string | undefined {
  const d = stage.descriptor as { kind?: unknown; account?: unknown; endpoint?: unknown };
  if (d.kind !== 'az') return undefined;
  if (typeof d.account === 'string') return d.account;
  return typeof d.endpoint === 'string' ? accountOfEndpoint(d.endpoint) : undefined;
}

/** The bucket a stage's descriptor names (Azure: its container), if it names one. */
function bucketOf(stage: PlanStage): string | undefined {
  const d = stage.descriptor as { bucket?: unknown; container?: unknown };
  const bucket = d.bucket ?? d.container;
  return typeof bucket === 'string' ? bucket : undefined;
}

/**
 * Plan garbage collection of `stage` into `options.out` (see the module comment). Throws
 * `ReferenceSetError` when the references cannot be read exactly (no plan is written),
 * {@link InventoryError} for a bad inventory file, {@link GcPlanError} (`Exists`) for a
 * non-empty directory.
 */
export async function planGc(stage: PlanStage, options: PlanOptions): Promise<PlanResult> {
  const olderThanMs = options.olderThanMs ?? DEFAULT_OLDER_THAN_MS;
  if (!Number.isSafeInteger(olderThanMs) || olderThanMs < 0 || olderThanMs > MAX_OLDER_THAN_MS) {
    throw new RangeError(
      `olderThanMs must be an integer in 0..${MAX_OLDER_THAN_MS} (100 years), not ${olderThanMs}`,
    );
  }
  const pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
  if (!Number.isSafeInteger(pageSize) || pageSize < 1 || pageSize > MAX_PAGE_SIZE) {
    throw new RangeError(`pageSize must be an integer in 1..${MAX_PAGE_SIZE}, not ${pageSize}`);
  }
  if (options.inventory !== undefined && options.candidates !== undefined) {
    throw new RangeError('plan from an inventory or from candidates, not both');
  }
  const dir = path.resolve(options.out);
  const created = Date.now();
  const cutoffMs = created - olderThanMs;
  const made = await prepareOut(dir);
  try {
    return await writePlan(stage, options, dir, created, cutoffMs, pageSize);
  } catch (error) {
    // A failed plan leaves no draft behind: the directory can be used again.
    await rm(made ? dir : planPaths(dir).pages, { recursive: true, force: true });
    throw error;
  }
}

async function writePlan(
  stage: PlanStage,
  options: PlanOptions,
  dir: string,
  created: number,
  cutoffMs: number,
  pageSize: number,
): Promise<PlanResult> {
  const signal = options.signal;
  const tmp = await makeWorkDir(options.tmpDir, 'plan');
  const totals: PlanTotals = {
    scanned: 0,
    reserved: 0,
    referenced: 0,
    young: 0,
    undated: 0,
    candidates: 0,
    bytes: 0,
    uploads: 0,
    outside: 0,
    unnameable: 0,
    ...(options.candidates === undefined ? {} : { changed: 0 }),
  };
  const source =
    options.candidates !== undefined
      ? 'candidates'
      : options.inventory !== undefined
        ? 'inventory'
        : 'listing';
  const report = (phase: PlanProgress['phase'], scanned: number, bytes: number) =>
    options.onProgress?.({ phase, scanned, bytes, candidates: totals.candidates });
  try {
    report('references', 0, 0);
    const keep = await writeKeepSet(stage, path.join(tmp, 'keep.jsonl'), {
      tmpDir: tmp,
      signal,
      sort: options.sort,
    });

    // 2. The inventory, sorted by stage-relative key.
    const sorter = new ExternalSort<Row>({ dir: tmp, ...options.sort });
    const nested = new Set<string>();
    const prefix = stage.keyPrefix === '' ? '' : `${stage.keyPrefix}/`;
    const bucket = bucketOf(stage);
    const rows = await rowsOf(stage, options, keep.fingerprint, bucket, created);
    let read = 0;
    let readBytes = 0;
    for await (const row of rows) {
      if (
        (row.bucket !== undefined && bucket !== undefined && row.bucket !== bucket) ||
        !row.key.startsWith(prefix) ||
        row.key.length === prefix.length
      ) {
        totals.outside += 1;
        continue;
      }
      const key = row.key.slice(prefix.length);
      const inner = nestedStageOf(key);
      if (inner !== undefined) nested.add(inner);
      await sorter.add([key, row.size, row.lastModified ?? null, row.version ?? null]);
      read += 1;
      readBytes += row.size;
      if (read % 1000 === 0) report('inventory', read, readBytes);
    }

    // 3. The merge with the keep-set.
    const nestedStages = new KeepSetIndex(nested);
    const pages = new PageWriter(dir, pageSize);
    const matcher = keep.matcher();
    // A listing shows every nested stage's `.provcat/`; an inventory file need not.
    const probe = source === 'listing' ? undefined : new NestedStages(stage, signal);
    let previous: string | undefined;
    let decidedBytes = 0;
    const plan = async (key: string, size: number, version: string | null, mtime: number) => {
      totals.candidates += 1;
      totals.bytes += size;
      const full = pages.object({
        key,
        size,
        version,
        lastModified: new Date(mtime).toISOString(),
      });
      if (full) await full;
    };
    type Pending = { key: string; size: number; result: ReturnType<typeof liveCheck> };
    const heads: Pending[] = [];
    const take = async ({ key, size, result }: Pending) => {
      const live = await result;
      if (typeof live === 'string') totals[live] = (totals[live] ?? 0) + 1;
      else await plan(key, size, live.version, live.mtime);
    };
    try {
      for await (const [key, size, mtime, version] of sorter.sorted()) {
        if (key === previous) {
          const message = `the ${source} names ${JSON.stringify(key)} twice`;
          throw source === 'listing'
            ? new StoreError(message)
            : new InventoryError(`${options.inventory ?? options.candidates}: ${message}`);
        }
        previous = key;
        totals.scanned += 1;
        decidedBytes += size;
        if (totals.scanned % 1000 === 0) report('merge', totals.scanned, decidedBytes);
        if (isReservedKey(key) || (nested.size > 0 && nestedStages.isReferenced(key))) {
          totals.reserved += 1;
        } else if (keyProblem(key) !== undefined) {
          totals.unnameable += 1;
        } else if (await matcher.isReferenced(key)) {
          totals.referenced += 1;
        } else if (mtime === null) {
          totals.undated += 1;
        } else if (mtime >= cutoffMs) {
          totals.young += 1;
        } else if (probe !== undefined && (await probe.around(key)) !== undefined) {
          // A stage nested here that the inventory file does not show (nested.ts).
          totals.reserved += 1;
        } else if (source === 'candidates') {
          // The engine's row is a claim; the store decides (candidates.ts). HEADs run
          // `HEAD_WINDOW` at once and are taken in key order, so pages stay ascending.
          const result = liveCheck(stage, key, size, mtime, cutoffMs, signal);
          // Awaited in order below; this only keeps a rejection that arrives while an earlier
          // HEAD is awaited from being reported as unhandled.
          result.catch(() => undefined);
          heads.push({ key, size, result });
          if (heads.length >= HEAD_WINDOW) await take(heads.shift() as Pending);
        } else {
          await plan(key, size, version, mtime);
        }
      }
      while (heads.length > 0) await take(heads.shift() as Pending);
    } finally {
      await matcher.close();
    }

    // 4. Stale uploads.
    report('uploads', totals.scanned, decidedBytes);
    for await (const u of stage.openUploads({ signal })) {
      if (u.initiated === undefined || u.initiated.getTime() >= cutoffMs) continue;
      if (!u.key.startsWith(prefix)) continue;
      const key = u.key.slice(prefix.length);
      if (keyProblem(key) !== undefined || isReservedKey(key)) continue;
      // A nested stage's uploads are its own.
      if (nestedStageOf(key) !== undefined || (nested.size > 0 && nestedStages.isReferenced(key))) {
        continue;
      }
      totals.uploads += 1;
      await pages.upload({ key, upload: u.upload, initiated: u.initiated.toISOString() });
    }
    await pages.flush();

    // 5. The manifest, last.
    const manifest: PlanManifest = {
      format: PLAN_FORMAT,
      stage: stage.identity,
      created: new Date(created).toISOString(),
      cutoff: new Date(cutoffMs).toISOString(),
      source,
      references: keep.fingerprint,
      keep: { entries: keep.entries, sha256: keep.sha256 },
      totals,
      pages: pages.ids,
    };
    const bytes = planBytes(manifest);
    await writeFileAtomic(planPaths(dir).manifest, bytes);
    return {
      plan: sha256Hex(bytes),
      dir,
      candidates: totals.candidates,
      bytes: totals.bytes,
      uploads: totals.uploads,
      scanned: totals.scanned,
      keep: keep.entries,
      manifest,
    };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** The rows a plan reads: the listing, an inventory file or manifest, or candidates. */
async function rowsOf(
  stage: PlanStage,
  options: PlanOptions,
  fingerprint: string,
  bucket: string | undefined,
  now: number,
): Promise<AsyncIterable<InventoryRow>> {
  const signal = options.signal;
  if (options.candidates !== undefined) {
    return readCandidates(options.candidates, fingerprint, {
      format: options.inventoryFormat === 'manifest' ? undefined : options.inventoryFormat,
      keyEncoding: options.keyEncoding,
      signal,
    });
  }
  if (options.inventory === undefined) return listingInventory(stage, { signal });
  const file = options.inventory;
  if (
    options.inventoryFormat === 'manifest' ||
    (options.inventoryFormat === undefined && isManifestName(file))
  ) {
    const checked = await checkManifest(file, {
      bucket,
      account: accountOf(stage),
      maxAgeMs: options.maxInventoryAgeMs ?? options.olderThanMs ?? DEFAULT_OLDER_THAN_MS,
      now,
      root: options.inventoryRoot,
      keyEncoding: options.keyEncoding,
      signal,
    });
    return readManifestRows(file, checked, signal);
  }
  return readInventoryFile(file, {
    format: options.inventoryFormat,
    keyEncoding: options.keyEncoding,
    signal,
  });
}

/**
 * A candidate as the store shows it now: its version and time to plan, or why it is dropped
 * (`changed`: gone, another size, another time; `young`; `undated`).
 */
async function liveCheck(
  stage: PlanStage,
  key: string,
  size: number,
  mtime: number,
  cutoffMs: number,
  signal: AbortSignal | undefined,
): Promise<{ version: string; mtime: number } | 'changed' | 'young' | 'undated'> {
  const backend = await stage.backend();
  let head: Awaited<ReturnType<typeof backend.head>>;
  try {
    head = await backend.head(fullKey(stage, key), { signal });
  } catch (error) {
    if (error instanceof NotFound) return 'changed';
    throw error;
  }
  const now = head.lastModified?.getTime();
  if (now === undefined) return 'undated';
  if (now >= cutoffMs) return 'young';
  // Stores report times to the second (S3's HEAD) or finer: compare at whole seconds.
  if (head.size !== size || Math.floor(now / 1000) !== Math.floor(mtime / 1000)) return 'changed';
  return { version: head.version, mtime: now };
}
