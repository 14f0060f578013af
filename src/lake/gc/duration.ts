/**
 * {@link parseDuration}: the DURATION of `gc plan --older-than` and of the library's callers,
 * read once here (the CLI imports it; domain code raises the core's errors, not the CLI's).
 *
 * @module
 */
import { InvalidArgument } from '../../core/errors.js';
import { MAX_OLDER_THAN_MS } from './plan.js';

const UNITS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * Milliseconds of a DURATION (`0s`, `36h`, `7d`, `90m`, `500ms`), at most
 * {@link MAX_OLDER_THAN_MS} (100 years: a cutoff further back than any store's times);
 * `InvalidArgument` (exit status 2) otherwise.
 */
export function parseDuration(text: string): number {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text);
  const ms = m ? Number(m[1]) * (UNITS[m[2] as string] as number) : Number.NaN;
  if (!Number.isSafeInteger(ms)) {
    if (m) throw tooLong(text);
    throw new InvalidArgument(
      `a duration is a whole number and a unit (ms, s, m, h, d), not '${text}'`,
    );
  }
  if (ms > MAX_OLDER_THAN_MS) throw tooLong(text);
  return ms;
}

function tooLong(text: string): InvalidArgument {
  return new InvalidArgument(`a duration is at most 36525d (100 years), not '${text}'`);
}
