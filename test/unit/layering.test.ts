/**
 * The layering rules, held by a test (docs/architecture.md):
 *
 * - the core (src/) imports no driver and no cloud SDK — the one registry that loads the
 *   built-in drivers by scheme (src/store/registry.ts) excepted — and each driver imports only
 *   the core and its own SDK, never another driver;
 * - no import cycle anywhere in src/ or drivers/, type imports and `import()` included;
 * - floors: nothing imports a floor above its own ({@link FLOORS});
 * - domain code (src/ outside src/cli/) never imports src/cli/;
 * - at most six loose files in src/, and no .ts file in src/ or drivers/ over 600 lines.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Every .ts file below `dir`, relative to the repository root. */
function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sources(rel));
    else if (entry.name.endsWith('.ts')) out.push(rel);
  }
  return out;
}

/** `text` without its comments (an `import('x')` in a doc comment is no import). */
function withoutComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

/**
 * Every module specifier a file imports: `import … from '…'`, `import type … from '…'`,
 * `export … from '…'`, `import '…'` and `import('…')`.
 */
function importsOf(text: string): string[] {
  const code = withoutComments(text);
  const found: string[] = [];
  const patterns = [
    /\bfrom\s+['"]([^'"]+)['"]/g,
    /\bimport\s+['"]([^'"]+)['"]/g,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  for (const pattern of patterns) {
    for (const m of code.matchAll(pattern)) found.push(m[1] as string);
  }
  return found;
}

/** The cloud SDK families and the one driver folder each may be imported from. */
const SDKS: Array<{ family: RegExp; driver: string }> = [
  { family: /^@aws-sdk\/|^@smithy\//, driver: 's3' },
  { family: /^@google-cloud\//, driver: 'gcs' },
  { family: /^@azure\//, driver: 'azure' },
];

/** The repository path a relative specifier of `file` lands on (`x.js` → `x.ts`). */
function target(file: string, specifier: string): string {
  const to = path.relative(root, path.resolve(root, path.dirname(file), specifier));
  return to.endsWith('.js') ? `${to.slice(0, -3)}.ts` : to;
}

/** The driver folder a resolved import lands in (`drivers/s3/x.js` → `s3`), or `undefined`. */
function driverOf(file: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  const m = /^drivers\/([^/]+)\//.exec(target(file, specifier));
  return m?.[1];
}

/** What breaks the driver rules in `file` (see the module comment). */
function violations(file: string): string[] {
  const own = /^drivers\/([^/]+)\//.exec(file)?.[1];
  const out: string[] = [];
  for (const specifier of importsOf(readFileSync(path.join(root, file), 'utf8'))) {
    const driver = driverOf(file, specifier);
    if (own === undefined && driver !== undefined && file !== 'src/store/registry.ts') {
      out.push(`${file} imports the ${driver} driver (${specifier})`);
    }
    if (own !== undefined && driver !== undefined && driver !== own) {
      out.push(`${file} (driver ${own}) imports the ${driver} driver (${specifier})`);
    }
    for (const sdk of SDKS) {
      if (sdk.family.test(specifier) && own !== sdk.driver) {
        out.push(`${file} imports ${specifier}, which belongs in drivers/${sdk.driver}/`);
      }
    }
  }
  return out;
}

/** The import graph: each file to the files of src/ and drivers/ it imports. */
type Graph = Map<string, string[]>;

/** The graph of `files` (a directory import lands on its index.ts). */
function importGraph(files: string[], read: (file: string) => string): Graph {
  const known = new Set(files);
  const graph: Graph = new Map();
  for (const file of files) {
    const to = new Set<string>();
    for (const specifier of importsOf(read(file))) {
      if (!specifier.startsWith('.')) continue;
      const t = target(file, specifier);
      if (known.has(t)) to.add(t);
      else if (known.has(path.join(t, 'index.ts'))) to.add(path.join(t, 'index.ts'));
    }
    graph.set(file, [...to].sort());
  }
  return graph;
}

/**
 * Every import cycle of the graph, one per strongly connected component (Tarjan), each as the
 * path `a → b → … → a` from the component's first file in order.
 */
function cycles(graph: Graph): string[] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop() as string;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) components.push(component);
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return components.map((component) => cyclePath(graph, component).join(' → ')).sort();
}

/** A cycle through a strongly connected component, from its first file back to it (BFS). */
function cyclePath(graph: Graph, component: string[]): string[] {
  const inside = new Set(component);
  const start = [...component].sort()[0] as string;
  const parent = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift() as string;
    for (const w of graph.get(v) ?? []) {
      if (!inside.has(w)) continue;
      if (w === start) {
        const route = [start];
        for (let u: string | undefined = v; u !== undefined && u !== start; u = parent.get(u)) {
          route.splice(1, 0, u);
        }
        return [...route, start];
      }
      if (!parent.has(w)) {
        parent.set(w, v);
        queue.push(w);
      }
    }
  }
  return [start, start];
}

/**
 * The floors, lowest first: a file may import its own floor and those below, never above.
 * `drivers/` and `src/testing/` (the shipped suites) stand on the facade; the CLI on all of it;
 * the loose files of src/ (the package's entry) on top.
 */
const FLOORS: Array<{ floor: string; folders: string[] }> = [
  { floor: 'core', folders: ['src/core/'] },
  { floor: 'contract', folders: ['src/contract/'] },
  { floor: 'driver-kit/net', folders: ['src/driver-kit/', 'src/net/'] },
  {
    floor: 'services',
    folders: [
      'src/cache/',
      'src/logs/',
      'src/commits/',
      'src/folders/',
      'src/upload/',
      'src/lake/',
    ],
  },
  { floor: 'store', folders: ['src/store/'] },
  { floor: 'drivers/testing', folders: ['drivers/', 'src/testing/'] },
  { floor: 'cli', folders: ['src/cli/'] },
  { floor: 'entry', folders: ['src/'] },
];

/**
 * The one upward import the floors allow: the registry loads the built-in drivers by scheme
 * (an `import()` per driver, so `storeFor` needs no registration by the caller).
 */
const UPWARD_ALLOWED = new Set(['src/store/registry.ts → drivers/']);

/** The floor number of a file (the first folder list it falls in). */
function floorOf(file: string): number {
  const i = FLOORS.findIndex((f) => f.folders.some((d) => file.startsWith(d)));
  if (i < 0) throw new Error(`${file} is on no floor`);
  return i;
}

/** Every import of the graph that goes up a floor, as `from → to (floor → floor)`. */
function upward(graph: Graph): string[] {
  const out: string[] = [];
  for (const [from, tos] of graph) {
    for (const to of tos) {
      const a = floorOf(from);
      const b = floorOf(to);
      if (b <= a) continue;
      if (UPWARD_ALLOWED.has(`${from} → ${to.replace(/^(drivers\/).*$/, '$1')}`)) continue;
      out.push(`${from} → ${to} (${FLOORS[a]?.floor} imports ${FLOORS[b]?.floor})`);
    }
  }
  return out.sort();
}

/**
 * The one upward import kept on purpose: the lake's two entry points (a descriptor parsed, a stage
 * built) import the registry for its side effect, so that a descriptor of a built-in kind
 * (`local`, `s3`, `gs`, `az`) resolves without the caller importing a store first. The registry
 * is the one module that names the built-in drivers; it loads each driver's small stage-kind
 * module, never a driver or an SDK.
 */
const UPWARD_REPORTED = new Set([
  'src/lake/descriptor.ts → src/store/registry.ts (services imports store)',
  'src/lake/stage-factory.ts → src/store/registry.ts (services imports store)',
]);

/** The most lines a .ts file of src/ or drivers/ may have. */
const MAX_LINES = 600;

const read = (file: string) => readFileSync(path.join(root, file), 'utf8');
const all = () => [...sources('src'), ...sources('drivers')];

describe('layering', () => {
  it('finds static, type, re-export, side-effect and dynamic imports (the check itself)', () => {
    const text = [
      "import { a } from '../../drivers/s3/index.js';",
      "import '../../registry.js';",
      "const m = await import('@aws-sdk/client-s3');",
      "export { b } from '../b.js';",
      "import type {\n  C,\n} from './c.js';",
      "export * from './d.js';",
      "/** See `import('./not-an-import.js')`. */",
      "// import { e } from './commented-out.js';",
    ].join('\n');
    expect(importsOf(text)).toEqual([
      '../../drivers/s3/index.js',
      '../b.js',
      './c.js',
      './d.js',
      '../../registry.js',
      '@aws-sdk/client-s3',
    ]);
    expect(driverOf('src/lake/x.ts', '../../drivers/s3/index.js')).toBe('s3');
    expect(driverOf('src/lake/x.ts', '../upload/engine.js')).toBeUndefined();
  });

  it('finds a cycle and names its path, type imports and import() included (the check itself)', () => {
    const files: Record<string, string> = {
      'src/a/one.ts': "import type { T } from './two.js';",
      'src/a/two.ts': "export { x } from '../b/three.js';",
      'src/b/three.ts': "const m = await import('../a/one.js');",
      'src/b/four.ts': "import { y } from './three.js';",
    };
    const graph = importGraph(Object.keys(files), (f) => files[f] as string);
    expect(cycles(graph)).toEqual(['src/a/one.ts → src/a/two.ts → src/b/three.ts → src/a/one.ts']);
    const acyclic = importGraph(['src/b/four.ts', 'src/b/three.ts'], (f) =>
      f === 'src/b/four.ts' ? (files[f] as string) : '',
    );
    expect(cycles(acyclic)).toEqual([]);
  });

  it('finds an import up a floor (the check itself)', () => {
    const graph: Graph = new Map([
      ['src/commits/commit.ts', ['src/store/object-store.ts', 'src/core/uri.ts']],
      ['src/store/registry.ts', ['drivers/s3/index.ts']],
      ['src/core/uri.ts', []],
    ]);
    expect(upward(graph)).toEqual([
      'src/commits/commit.ts → src/store/object-store.ts (services imports store)',
    ]);
  });

  it('no file under src/ imports a driver or a cloud SDK (src/store/registry.ts excepted)', () => {
    const found = sources('src').flatMap(violations);
    expect(found).toEqual([]);
  });

  it('a driver imports the core and its own SDK, never another driver or SDK', () => {
    const found = sources('drivers').flatMap(violations);
    expect(found).toEqual([]);
  });

  it('the registry is the only place in src/ that names a driver', () => {
    const naming = sources('src').filter((file) =>
      importsOf(read(file)).some((s) => driverOf(file, s) !== undefined),
    );
    expect(naming).toEqual(['src/store/registry.ts']);
  });

  it('no import cycle in src/ or drivers/, type imports and import() included', () => {
    expect(cycles(importGraph(all(), read))).toEqual([]);
  });

  it('nothing imports up a floor (core → contract → driver-kit/net → services → store → …)', () => {
    expect(upward(importGraph(all(), read)).filter((u) => !UPWARD_REPORTED.has(u))).toEqual([]);
  });

  it('domain code (src/ outside src/cli/) never imports src/cli/', () => {
    const graph = importGraph(all(), read);
    const found = [...graph]
      .filter(([from]) => !from.startsWith('src/cli/'))
      .flatMap(([from, tos]) =>
        tos.filter((t) => t.startsWith('src/cli/')).map((t) => `${from} → ${t}`),
      );
    expect(found).toEqual([]);
  });

  it('at most six loose files in src/', () => {
    const loose = readdirSync(path.join(root, 'src')).filter((name) =>
      statSync(path.join(root, 'src', name)).isFile(),
    );
    expect(loose.length, loose.join(', ')).toBeLessThanOrEqual(6);
  });

  it(`no .ts file in src/ or drivers/ over ${MAX_LINES} lines`, () => {
    const over = all()
      .map((file) => ({ file, lines: read(file).split('\n').length - 1 }))
      .filter(({ lines }) => lines > MAX_LINES)
      .map(({ file, lines }) => `${file}: ${lines} lines`);
    expect(over).toEqual([]);
  });
});
