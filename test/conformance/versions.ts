import type { ConformanceTarget } from './target.js';

/** The versions part of the conformance suite (being written). */
export function versionsSuite(_target: ConformanceTarget): void {}
