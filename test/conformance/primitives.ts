import type { ConformanceTarget } from './target.js';

/** The primitives part of the conformance suite (being written). */
export function primitivesSuite(_target: ConformanceTarget): void {}
