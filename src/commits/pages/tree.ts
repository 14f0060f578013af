/**
 * {@link CommitTree}: one reader over both commit formats. Files come in key order; one key, or
 * the first key of a prefix, is found by reading the root and one page per height (O(log N)
 * pages); a format 1 commit answers the same calls from its one object.
 *
 * @module
 */
import { compareUtf8 } from '../../core/keys.js';
import type { CommitFile, CommitHead } from '../format.js';
import { isLeaf, type Page, type PageRef } from './page-format.js';
import type { PageReader } from './page-store.js';

/** Pages read ahead while walking an inner page's children in order. */
const READ_AHEAD = 4;

/** The index of the first file whose key is >= `key`. */
export function lowerBoundFiles(files: readonly CommitFile[], key: string): number {
  let lo = 0;
  let hi = files.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareUtf8((files[mid] as CommitFile).key, key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The index of the first child whose last key is >= `key`. */
function lowerBoundRefs(refs: readonly PageRef[], key: string): number {
  let lo = 0;
  let hi = refs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareUtf8((refs[mid] as PageRef).last, key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The smallest key after every key that starts with `prefix` (`undefined`: no such key). */
export function prefixEnd(prefix: string): string | undefined {
  // Keys starting with `prefix` are exactly those >= prefix and < prefix + U+10FFFF…; the
  // successor of the prefix's last code unit bounds them in UTF-8 byte order too.
  for (let i = prefix.length - 1; i >= 0; i--) {
    const c = prefix.charCodeAt(i);
    if (c < 0xffff && !(c >= 0xd7ff && c < 0xe000)) {
      return prefix.slice(0, i) + String.fromCharCode(c + 1);
    }
  }
  return undefined;
}

/** A page and where it is in the tree, as a walk or a diff sees it. */
export interface TreeNode {
  hash: string;
  height: number;
  ref?: PageRef | undefined;
}

/** One commit's files, whatever its format (see the module comment). */
export class CommitTree {
  /**
   * @param head the commit's metadata
   * @param list format 1: every file record
   * @param pages format 2: the reader of the commit's pages
   */
  constructor(
    readonly head: CommitHead,
    private readonly list: readonly CommitFile[] | undefined,
    readonly pages: PageReader | undefined,
  ) {}

  /** The root page, format 2 only. */
  get root(): TreeNode | undefined {
    const tree = this.head.tree;
    return tree ? { hash: tree.root, height: tree.height } : undefined;
  }

  /** Load the page of `node` (format 2). */
  page(node: TreeNode): Promise<Page> {
    const pages = this.pages as PageReader;
    return node.ref
      ? pages.load(node.hash, node.height, { ref: node.ref })
      : pages.load(node.hash, node.height, { count: this.head.count });
  }

  /** The file at exactly `key`, or `undefined`. Root plus one page per height. */
  async fileAt(key: string): Promise<CommitFile | undefined> {
    for await (const f of this.files(key, key)) return f.key === key ? f : undefined;
    return undefined;
  }

  /** True when some file's key starts with `prefix`. */
  async hasUnder(prefix: string): Promise<boolean> {
    for await (const _ of this.files(prefix)) return true;
    return false;
  }

  /** Every file whose key starts with `prefix`, in key order, as an array. */
  async filesUnder(prefix: string): Promise<CommitFile[]> {
    const out: CommitFile[] = [];
    for await (const f of this.files(prefix)) out.push(f);
    return out;
  }

  /**
   * The files whose keys start with `prefix` (default: all), from the first key >= `from`
   * (default `prefix`), in UTF-8 key order. Stops reading pages at the end of the prefix.
   */
  async *files(prefix = '', from: string = prefix): AsyncGenerator<CommitFile> {
    const start = compareUtf8(from, prefix) > 0 ? from : prefix;
    if (this.list) {
      for (let i = lowerBoundFiles(this.list, start); i < this.list.length; i++) {
        const f = this.list[i] as CommitFile;
        if (!f.key.startsWith(prefix)) return;
        yield f;
      }
      return;
    }
    const root = this.root;
    if (!root) return;
    const state = { done: false };
    yield* this.walk(root, start, prefix, state);
  }

  private async *walk(
    node: TreeNode,
    start: string,
    prefix: string,
    state: { done: boolean },
  ): AsyncGenerator<CommitFile> {
    const page = await this.page(node);
    if (isLeaf(page)) {
      for (let i = lowerBoundFiles(page.files, start); i < page.files.length; i++) {
        const f = page.files[i] as CommitFile;
        if (!f.key.startsWith(prefix)) {
          state.done = true;
          return;
        }
        yield f;
      }
      return;
    }
    const refs = page.pages;
    const height = page.height - 1;
    const end = prefixEnd(prefix);
    for (let i = lowerBoundRefs(refs, start); i < refs.length && !state.done; i++) {
      const ref = refs[i] as PageRef;
      if (prefix !== '' && (end === undefined ? false : compareUtf8(ref.first, end) >= 0)) {
        state.done = true;
        return;
      }
      // Read the next few siblings while this one is walked (they are kept in memory). A read
      // ahead that fails is forgotten by the reader and read again, failing, when walked to.
      for (let j = i + 1; j <= i + READ_AHEAD && j < refs.length; j++) {
        const next = refs[j] as PageRef;
        if (end !== undefined && prefix !== '' && compareUtf8(next.first, end) >= 0) break;
        this.page({ hash: next.page, height, ref: next }).catch(() => undefined);
      }
      yield* this.walk({ hash: ref.page, height, ref }, start, prefix, state);
    }
  }

  /** The children of an inner page as nodes (format 2). */
  async children(node: TreeNode): Promise<TreeNode[] | CommitFile[]> {
    const page = await this.page(node);
    if (isLeaf(page)) return page.files;
    return page.pages.map((ref) => ({ hash: ref.page, height: page.height - 1, ref }));
  }

  /**
   * The hashes of every page of the tree (format 2; empty for format 1), found by reading its
   * inner pages only: about one page in 256.
   */
  async pageHashes(): Promise<Set<string>> {
    const out = new Set<string>();
    const root = this.root;
    if (!root) return out;
    const visit = async (node: TreeNode): Promise<void> => {
      out.add(node.hash);
      if (node.height === 0) return;
      for (const child of (await this.children(node)) as TreeNode[]) await visit(child);
    };
    await visit(root);
    return out;
  }
}
