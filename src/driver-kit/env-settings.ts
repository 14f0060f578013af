/**
 * Reading settings out of environment variables, the same way in every driver's configuration:
 * a variable that is unset, empty or only white space is not set (so `FOO= cmd` falls back to
 * the default, as the cloud SDKs read their own variables), and a switch is on or off by the
 * usual words. Pure functions of the value: each driver's config module stays one function of
 * its options and an environment object.
 *
 * @module
 */

/**
 * The first of `values` that is set, trimmed (`undefined` when none is): pass an option first,
 * then the variables that stand in for it, in the order they win.
 */
export function envText(...values: (string | undefined)[]): string | undefined {
  for (const value of values) {
    const text = value?.trim();
    if (text !== undefined && text !== '') return text;
  }
  return undefined;
}

const ON = new Set(['1', 'true', 'yes', 'on']);
const OFF = new Set(['0', 'false', 'no', 'off']);

/**
 * A switch: `true` for `1`/`true`/`yes`/`on`, `false` for `0`/`false`/`no`/`off` (any case),
 * `fallback` when unset or any other word (a typo never flips a switch).
 */
export function envSwitch(value: string | undefined, fallback: boolean): boolean {
  const word = envText(value)?.toLowerCase();
  if (word !== undefined && ON.has(word)) return true;
  if (word !== undefined && OFF.has(word)) return false;
  return fallback;
}
