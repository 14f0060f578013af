/**
 * {@link TreeBuilder}: turn a stream of file records in key order into a tree of pages, writing
 * each page as soon as it is complete, so memory holds at most one open page per height.
 *
 * @module
 */
import { InvalidArgument } from '../../core/errors.js';
import { compareUtf8 } from '../../core/keys.js';
import { type CommitFile, sha256Hex } from '../format.js';
import {
  endsPage,
  MAX_LEAF_BYTES,
  MAX_PAGE_ENTRIES,
  PAGE_FORMAT,
  type Page,
  type PageRef,
  pageBytes,
} from './page-format.js';

/** Where the builder sends each finished page: its hash, canonical bytes and height. */
export type PageSink = (hash: string, bytes: Buffer, height: number) => Promise<void>;

/** The root of a finished tree. */
export interface TreeRoot {
  /** SHA-256 of the root page. */
  root: string;
  /** The root page's height. */
  height: number;
  /** How many files the tree holds. */
  count: number;
}

interface OpenPage {
  entries: (CommitFile | PageRef)[];
  bytes: number;
  /** Pages this height has finished so far. */
  emitted: number;
}

/**
 * Builds a page tree from file records added in strictly ascending UTF-8 key order
 * (`InvalidArgument` otherwise). The tree depends only on the records, never on how they were
 * fed: the same files give the same root hash, and a changed file changes only its leaf and
 * the pages above it (page-format.ts).
 */
export class TreeBuilder {
  private readonly open: OpenPage[] = [];
  private last: string | undefined;
  private count = 0;

  constructor(private readonly sink: PageSink) {}

  /** Add the next file record (its key after every key added before). */
  async add(file: CommitFile): Promise<void> {
    if (this.last !== undefined && compareUtf8(this.last, file.key) >= 0) {
      throw new InvalidArgument(
        `page tree: ${JSON.stringify(file.key)} does not follow ${JSON.stringify(this.last)}`,
      );
    }
    this.last = file.key;
    this.count++;
    const leaf = this.level(0);
    leaf.entries.push(file);
    leaf.bytes += JSON.stringify(file).length;
    if (
      endsPage(file.key, 0) ||
      leaf.entries.length >= MAX_PAGE_ENTRIES ||
      leaf.bytes >= MAX_LEAF_BYTES
    ) {
      await this.flush(0);
    }
  }

  /** Finish the tree (at least one file added) and return its root. */
  async finish(): Promise<TreeRoot> {
    if (this.count === 0) throw new InvalidArgument('page tree: no files');
    for (let h = 0; ; h++) {
      const level = this.level(h);
      const top = h === this.open.length - 1;
      if (top && level.emitted === 0) {
        if (h > 0 && level.entries.length === 1) {
          const only = level.entries[0] as PageRef;
          return { root: only.page, height: h - 1, count: this.count };
        }
        const ref = await this.write(h, level.entries);
        return { root: ref.page, height: h, count: this.count };
      }
      if (level.entries.length > 0) await this.flush(h);
    }
  }

  private level(h: number): OpenPage {
    let level = this.open[h];
    if (!level) {
      level = { entries: [], bytes: 0, emitted: 0 };
      this.open[h] = level;
    }
    return level;
  }

  private async write(height: number, entries: (CommitFile | PageRef)[]): Promise<PageRef> {
    const page: Page =
      height === 0
        ? { format: PAGE_FORMAT, height: 0, files: entries as CommitFile[] }
        : { format: PAGE_FORMAT, height, pages: entries as PageRef[] };
    const bytes = pageBytes(page);
    const hash = sha256Hex(bytes);
    await this.sink(hash, bytes, height);
    const firstEntry = entries[0] as CommitFile | PageRef;
    const lastEntry = entries[entries.length - 1] as CommitFile | PageRef;
    const first = 'key' in firstEntry ? firstEntry.key : (firstEntry as PageRef).first;
    const last = 'key' in lastEntry ? lastEntry.key : (lastEntry as PageRef).last;
    const count =
      height === 0 ? entries.length : (entries as PageRef[]).reduce((n, r) => n + r.count, 0);
    return { page: hash, first, last, count };
  }

  private async flush(h: number): Promise<void> {
    const level = this.level(h);
    const ref = await this.write(h, level.entries);
    level.entries = [];
    level.bytes = 0;
    level.emitted++;
    const up = this.level(h + 1);
    up.entries.push(ref);
    if (endsPage(ref.last, h + 1) || up.entries.length >= MAX_PAGE_ENTRIES) {
      await this.flush(h + 1);
    }
  }
}
