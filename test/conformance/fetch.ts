import type { ConformanceTarget } from './target.js';

/** The fetch part of the conformance suite (being written). */
export function fetchSuite(_target: ConformanceTarget): void {}
