/**
 * The layering rules, held by a test: the core (src/) imports no driver and no cloud SDK — the
 * one registry that loads the built-in drivers by scheme (src/store/registry.ts) excepted — and each
 * driver imports only the core and its own SDK, never another driver.
 */
import { readdirSync, readFileSync } from 'node:fs';
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

/** Every module specifier a file imports: static `from '…'`, `import '…'` and `import('…')`. */
function importsOf(text: string): string[] {
  const found: string[] = [];
  const patterns = [
    /\bfrom\s+['"]([^'"]+)['"]/g,
    /\bimport\s+['"]([^'"]+)['"]/g,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  for (const pattern of patterns) {
    for (const m of text.matchAll(pattern)) found.push(m[1] as string);
  }
  return found;
}

/** The cloud SDK families and the one driver folder each may be imported from. */
const SDKS: Array<{ family: RegExp; driver: string }> = [
  { family: /^@aws-sdk\/|^@smithy\//, driver: 's3' },
  { family: /^@google-cloud\//, driver: 'gcs' },
  { family: /^@azure\//, driver: 'azure' },
];

/** The driver folder a resolved import lands in (`drivers/s3/x.js` → `s3`), or `undefined`. */
function driverOf(file: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  const target = path.relative(root, path.resolve(root, path.dirname(file), specifier));
  const m = /^drivers\/([^/]+)\//.exec(target);
  return m?.[1];
}

/** What breaks the rules in `file` (see the module comment). */
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

describe('layering', () => {
  it('finds static, side-effect and dynamic imports (the check itself)', () => {
    const text = [
      "import { a } from '../drivers/s3/index.js';",
      "import '../registry.js';",
      "const m = await import('@aws-sdk/client-s3');",
      "export { b } from './b.js';",
    ].join('\n');
    expect(importsOf(text)).toEqual([
      '../drivers/s3/index.js',
      './b.js',
      '../registry.js',
      '@aws-sdk/client-s3',
    ]);
    expect(driverOf('src/lake/x.ts', '../../drivers/s3/index.js')).toBe('s3');
    expect(driverOf('src/lake/x.ts', '../upload/engine.js')).toBeUndefined();
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
      importsOf(readFileSync(path.join(root, file), 'utf8')).some(
        (s) => driverOf(file, s) !== undefined,
      ),
    );
    expect(naming).toEqual(['src/store/registry.ts']);
  });
});
