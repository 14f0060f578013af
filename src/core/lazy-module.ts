/**
 * Things a driver makes on first use and then keeps — its SDK module, its SDK client — made the
 * same way everywhere: concurrent first callers share one promise, and a failure is not kept
 * (the next call tries again). An SDK is imported by the first call that needs it and never at
 * module load: a command that makes no call to that store, or reads on a driver's lean path,
 * does not pay for loading it; elsewhere a driver has only type imports of its SDK, which
 * TypeScript erases. A failed import is a ProvcatError naming the package to install.
 *
 * @module
 */
import { ProvcatError } from './errors.js';

/** A value made by `make` on the first call and kept; a rejection is not kept. */
export interface Lazy<T> {
  (): Promise<T>;
  /** True once the first call was made (and its result not dropped as a failure). */
  readonly made: boolean;
}

/** {@link Lazy} over `make` (see the module comment). */
export function lazy<T>(make: () => Promise<T>): Lazy<T> {
  let value: Promise<T> | undefined;
  const get = () => {
    value ??= make().catch((error: unknown) => {
      value = undefined;
      throw error;
    });
    return value;
  };
  return Object.defineProperty(get, 'made', { get: () => value !== undefined }) as Lazy<T>;
}

/**
 * The module `name` for the `driver` driver, imported on first use; `load` is the driver's own
 * `import(...)` (written there, so bundlers and TypeScript see the literal specifier).
 */
export function lazyModule<T>(driver: string, name: string, load: () => Promise<T>): Lazy<T> {
  return lazy(() =>
    load().catch((cause: unknown) => {
      throw new ProvcatError(
        `the ${driver} driver needs ${name}, which failed to load (npm install ${name}): ${String(cause)}`,
        { cause },
      );
    }),
  );
}
