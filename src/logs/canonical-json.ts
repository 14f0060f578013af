/**
 * Canonical JSON (RFC 8785, JCS) and the one parse-and-check of canonical bytes that every
 * provcat object written as canonical JSON is read with: commits (commits/format.ts), GC plans
 * (lake/gc/plan-format.ts) and reference-set deltas (lake/gc/refs-format.ts).
 *
 * One content has one byte form, so it has one ID (the SHA-256 of the bytes). A reader parses,
 * re-serializes and compares: bytes that are not exactly the canonical form of what they parse
 * to are refused, never read as something else.
 *
 * @module
 */

/** A JSON value as the canonical writer accepts it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * RFC 8785 (JCS) text of a value: members sorted by UTF-16 code units, no whitespace. Only safe
 * integers are accepted as numbers (the formats have no other); `undefined` members are dropped.
 */
export function canonicalJson(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isSafeInteger(value)) {
        throw new TypeError(`canonical JSON holds only safe integers, not ${value}`);
      }
      return String(value);
    case 'string':
      return JSON.stringify(value);
    case 'object': {
      // Built by appending: a commit of 10,000 files is 10,000 small objects, and the
      // entries/filter/map/join version spent ~20 µs on each.
      if (Array.isArray(value)) {
        let out = '[';
        for (let i = 0; i < value.length; i++) {
          if (i > 0) out += ',';
          out += canonicalJson(value[i]);
        }
        return `${out}]`;
      }
      const object = value as Record<string, unknown>;
      // The default sort compares UTF-16 code units, which is what RFC 8785 asks for.
      const keys = Object.keys(object).sort();
      let out = '{';
      for (const key of keys) {
        const v = object[key];
        if (v === undefined) continue;
        if (out.length > 1) out += ',';
        out += `${JSON.stringify(key)}:${canonicalJson(v)}`;
      }
      return `${out}}`;
    }
    default:
      throw new TypeError(`canonical JSON cannot hold a ${typeof value}`);
  }
}

/** What can be wrong with bytes read as canonical JSON, in the order they are checked. */
export type CanonicalProblem = 'not-json' | 'not-object' | 'not-representable' | 'not-canonical';

/** The words {@link parseCanonical} gives each problem (a reader may use its own). */
export const CANONICAL_PROBLEMS: Readonly<Record<CanonicalProblem, string>> = {
  'not-json': 'not UTF-8 JSON',
  'not-object': 'not a JSON object',
  'not-representable': 'holds a value canonical JSON cannot',
  'not-canonical': 'not in canonical form',
};

/** How one reader of canonical bytes reports a problem and checks its own fields. */
export interface CanonicalReader {
  /** The reader's typed error for `problem` (`why` is its {@link CANONICAL_PROBLEMS} text). */
  fail(problem: CanonicalProblem, why: string, cause?: unknown): Error;
  /**
   * Checks the parsed object's fields before the canonical form is compared (so a wrong
   * `format` or field is named, not "not canonical"); throws the reader's own errors.
   */
  validate?: ((record: Record<string, unknown>) => void) | undefined;
}

/**
 * Parse `bytes` as one canonical JSON object: strict UTF-8, JSON, an object (not an array or a
 * scalar), then `reader.validate`, then the bytes must be exactly {@link canonicalJson} of what
 * they parse to. Every refusal is `reader.fail`'s error; the object is returned as parsed.
 */
export function parseCanonical(
  bytes: Uint8Array,
  reader: CanonicalReader,
): Record<string, unknown> {
  const fail = (problem: CanonicalProblem, cause?: unknown) =>
    reader.fail(problem, CANONICAL_PROBLEMS[problem], cause);
  let text: string;
  let value: unknown;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    value = JSON.parse(text);
  } catch (cause) {
    throw fail('not-json', cause);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw fail('not-object');
  }
  const record = value as Record<string, unknown>;
  reader.validate?.(record);
  let canonical: string;
  try {
    canonical = canonicalJson(record);
  } catch (cause) {
    throw fail('not-representable', cause);
  }
  if (canonical !== text) throw fail('not-canonical');
  return record;
}
