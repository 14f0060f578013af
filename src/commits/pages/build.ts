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
  keyLevel,
  leafBytes,
  MAX_LEAF_BYTES,
  MAX_PAGE_ENTRIES,
  PAGE_FORMAT,
  type PageRef,
  pageBytes,
  recordJson,
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

/** A finished child page as its parent will name it, with the level of its last key. */
interface Child {
  ref: PageRef;
  level: number;
}

/** The open leaf: its records' canonical JSON (each serialized once), first and last key. */
interface OpenLeaf {
  records: string[];
  bytes: number;
  first: string;
  last: string;
  lastLevel: number;
}

/** An open inner page of one height. */
interface OpenInner {
  children: Child[];
  /** Pages this height has finished so far. */
  emitted: number;
}

/**
 * Builds a page tree from file records added in strictly ascending UTF-8 key order
 * (`InvalidArgument` otherwise). The tree depends only on the records, never on how they were
 * fed: the same files give the same root hash, and a changed file changes only its leaf and
 * the pages above it (page-format.ts).
 *
 * Each record is serialized once (`recordJson`) and each key hashed once for its level; a leaf's
 * bytes are its records joined (`leafBytes`), the same bytes `pageBytes` gives.
 */
export class TreeBuilder {
  private leaf: OpenLeaf = { records: [], bytes: 0, first: '', last: '', lastLevel: 0 };
  /** Leaves finished so far. */
  private leaves = 0;
  /** Open inner pages; `inner[0]` has height 1. */
  private readonly inner: OpenInner[] = [];
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
    const text = recordJson(file);
    this.last = file.key;
    this.count++;
    const leaf = this.leaf;
    if (leaf.records.length === 0) leaf.first = file.key;
    leaf.records.push(text);
    leaf.bytes += text.length;
    leaf.last = file.key;
    leaf.lastLevel = keyLevel(file.key);
    if (
      leaf.lastLevel > 0 ||
      leaf.records.length >= MAX_PAGE_ENTRIES ||
      leaf.bytes >= MAX_LEAF_BYTES
    ) {
      await this.flushLeaf();
    }
  }

  /** Finish the tree (at least one file added) and return its root. */
  async finish(): Promise<TreeRoot> {
    if (this.count === 0) throw new InvalidArgument('page tree: no files');
    if (this.leaves === 0) {
      const only = await this.writeLeaf();
      return { root: only.ref.page, height: 0, count: this.count };
    }
    if (this.leaf.records.length > 0) await this.flushLeaf();
    for (let h = 1; ; h++) {
      const level = this.level(h);
      const top = h === this.inner.length;
      if (top && level.emitted === 0) {
        if (level.children.length === 1) {
          const only = level.children[0] as Child;
          return { root: only.ref.page, height: h - 1, count: this.count };
        }
        const ref = await this.writeInner(h, level.children);
        return { root: ref.ref.page, height: h, count: this.count };
      }
      if (level.children.length > 0) await this.flushInner(h);
    }
  }

  private level(h: number): OpenInner {
    let level = this.inner[h - 1];
    if (!level) {
      level = { children: [], emitted: 0 };
      this.inner[h - 1] = level;
    }
    return level;
  }

  private async writeLeaf(): Promise<Child> {
    const { records, first, last, lastLevel } = this.leaf;
    const bytes = leafBytes(records);
    const hash = sha256Hex(bytes);
    await this.sink(hash, bytes, 0);
    return { ref: { page: hash, first, last, count: records.length }, level: lastLevel };
  }

  private async writeInner(height: number, children: Child[]): Promise<Child> {
    const pages = children.map((c) => c.ref);
    const bytes = pageBytes({ format: PAGE_FORMAT, height, pages });
    const hash = sha256Hex(bytes);
    await this.sink(hash, bytes, height);
    const first = (children[0] as Child).ref.first;
    const lastChild = children[children.length - 1] as Child;
    const count = pages.reduce((n, r) => n + r.count, 0);
    return { ref: { page: hash, first, last: lastChild.ref.last, count }, level: lastChild.level };
  }

  private async flushLeaf(): Promise<void> {
    const child = await this.writeLeaf();
    this.leaf = { records: [], bytes: 0, first: '', last: '', lastLevel: 0 };
    this.leaves++;
    await this.push(1, child);
  }

  private async flushInner(h: number): Promise<void> {
    const level = this.level(h);
    const child = await this.writeInner(h, level.children);
    level.children = [];
    level.emitted++;
    await this.push(h + 1, child);
  }

  /** Hand a finished page of height `h - 1` to the open page of height `h`. */
  private async push(h: number, child: Child): Promise<void> {
    const up = this.level(h);
    up.children.push(child);
    if (child.level > h || up.children.length >= MAX_PAGE_ENTRIES) await this.flushInner(h);
  }
}
