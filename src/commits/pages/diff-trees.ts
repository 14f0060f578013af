/**
 * {@link diffTrees}: the file records that differ between two commits under one prefix. Where
 * both commits are format 2, pages with equal hashes are skipped whole, so the pages read follow
 * the change (about one page per height per changed file), not the folder; otherwise the two
 * file streams are merged in key order.
 *
 * @module
 */
import { compareUtf8 } from '../../core/keys.js';
import { canonicalJson } from '../../logs/canonical-json.js';
import type { CommitFile } from '../format.js';
import { type CommitTree, prefixEnd, type TreeNode } from './tree.js';

/** A key whose records differ: on one side only, or on both with other records. */
export interface TreeChange {
  key: string;
  /** The record in the first commit, if it holds the key. */
  a?: CommitFile | undefined;
  /** The record in the second commit, if it holds the key. */
  b?: CommitFile | undefined;
}

type Item = { file: CommitFile } | { node: TreeNode };

/** One side of the merge: a stack of pages and files (format 2) or a file stream (format 1). */
class Side {
  private readonly stack: Item[] = [];
  private stream: AsyncIterator<CommitFile> | undefined;
  private head: Item | undefined;
  private readonly end: string | undefined;

  constructor(
    private readonly tree: CommitTree,
    private readonly prefix: string,
  ) {
    this.end = prefixEnd(prefix);
    const root = tree.root;
    if (root) this.stack.push({ node: root });
    else this.stream = tree.files(prefix)[Symbol.asyncIterator]();
  }

  async peek(): Promise<Item | undefined> {
    if (!this.stream) return this.stack[this.stack.length - 1];
    if (this.head === undefined) {
      const next = await this.stream.next();
      if (!next.done) this.head = { file: next.value };
    }
    return this.head;
  }

  pop(): void {
    if (this.stream) this.head = undefined;
    else this.stack.pop();
  }

  /** Replace the page on top with its children under the prefix. */
  async expand(): Promise<void> {
    const top = this.stack.pop() as { node: TreeNode };
    const children = await this.tree.children(top.node);
    for (let i = children.length - 1; i >= 0; i--) {
      const child = children[i] as CommitFile | TreeNode;
      if ('key' in child) {
        if (child.key.startsWith(this.prefix)) this.stack.push({ file: child });
        continue;
      }
      const ref = child.ref;
      if (
        ref &&
        (compareUtf8(ref.last, this.prefix) < 0 ||
          (this.end !== undefined && compareUtf8(ref.first, this.end) >= 0))
      ) {
        continue;
      }
      this.stack.push({ node: child });
    }
  }
}

const first = (n: TreeNode) => n.ref?.first;
const last = (n: TreeNode) => n.ref?.last;

/** `a` lies wholly before `b` (both ranges known). */
function before(a: string | undefined, b: string | undefined): boolean {
  return a !== undefined && b !== undefined && compareUtf8(a, b) < 0;
}

/**
 * Every key under `prefix` whose file record differs between commits `a` and `b` (added,
 * removed, or another record), in key order. Records are compared as canonical JSON; the caller
 * decides which differences are changes of bytes (`sameBytes`).
 */
export async function* diffTrees(
  a: CommitTree,
  b: CommitTree,
  prefix: string,
): AsyncGenerator<TreeChange> {
  const left = new Side(a, prefix);
  const right = new Side(b, prefix);
  for (;;) {
    const x = await left.peek();
    const y = await right.peek();
    if (x === undefined && y === undefined) return;
    if (x === undefined || y === undefined) {
      const side = x === undefined ? right : left;
      const item = (x ?? y) as Item;
      if ('node' in item) await side.expand();
      else {
        yield x === undefined
          ? { key: item.file.key, b: item.file }
          : { key: item.file.key, a: item.file };
        side.pop();
      }
      continue;
    }
    if ('node' in x && 'node' in y) {
      if (x.node.hash === y.node.hash) {
        left.pop();
        right.pop();
      } else if (before(last(x.node), first(y.node))) await left.expand();
      else if (before(last(y.node), first(x.node))) await right.expand();
      else if (x.node.height > y.node.height) await left.expand();
      else if (y.node.height > x.node.height) await right.expand();
      else {
        await left.expand();
        await right.expand();
      }
      continue;
    }
    if ('node' in x && 'file' in y) {
      if (before(y.file.key, first(x.node))) {
        yield { key: y.file.key, b: y.file };
        right.pop();
      } else await left.expand();
      continue;
    }
    if ('file' in x && 'node' in y) {
      if (before(x.file.key, first(y.node))) {
        yield { key: x.file.key, a: x.file };
        left.pop();
      } else await right.expand();
      continue;
    }
    const fx = (x as { file: CommitFile }).file;
    const fy = (y as { file: CommitFile }).file;
    const order = compareUtf8(fx.key, fy.key);
    if (order < 0) {
      yield { key: fx.key, a: fx };
      left.pop();
    } else if (order > 0) {
      yield { key: fy.key, b: fy };
      right.pop();
    } else {
      if (canonicalJson(fx) !== canonicalJson(fy)) yield { key: fx.key, a: fx, b: fy };
      left.pop();
      right.pop();
    }
  }
}
