import type { ConformanceTarget } from './target.js';

/** The store part of the conformance suite (being written). */
export function storeSuite(_target: ConformanceTarget): void {}
