/**
 * A driver's SDK, imported by the first call that needs it and never at module load: a command
 * that makes no call to that store, or reads on a driver's lean path, does not pay for loading
 * it. Elsewhere a driver has only type imports of its SDK, which TypeScript erases. A failed
 * import is a ProvcatError naming the package to install, and the next call tries again.
 *
 * @module
 */
import { ProvcatError } from './errors.js';

/** A module loaded on first use (see the module comment). */
export interface LazyModule<T> {
  /** The module, imported once; a failed import rejects (ProvcatError) and is retried next time. */
  load(): Promise<T>;
  /** True once this process asked for the module (for tests and debugging). */
  requested(): boolean;
}

/**
 * The module `name` for the `driver` driver; `load` is the driver's own `import(...)` (written
 * there, so bundlers and TypeScript see the literal specifier).
 */
export function lazyModule<T>(driver: string, name: string, load: () => Promise<T>): LazyModule<T> {
  let module: Promise<T> | undefined;
  return {
    load() {
      module ??= load().catch((cause: unknown) => {
        module = undefined;
        throw new ProvcatError(
          `the ${driver} driver needs ${name}, which failed to load (npm install ${name}): ${String(cause)}`,
          { cause },
        );
      });
      return module;
    },
    requested: () => module !== undefined,
  };
}
