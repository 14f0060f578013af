/**
 * Fetching a folder or file at `?at=commit:ID` (being written).
 *
 * @module
 */
import { StoreError } from '../errors.js';
import type { FetchOptions, FetchResult, ObjectStore } from '../object-store.js';
import type { Uri } from '../uri.js';

/** Fetch exactly the versions a commit lists for `u` (a folder or file at or below it). */
export async function fetchCommit(
  _store: ObjectStore,
  u: Uri,
  _id: string,
  _options: FetchOptions,
): Promise<FetchResult> {
  throw new StoreError(`fetch at a commit is not available yet: ${u}`);
}
