// The folder fetch that the benchmark's hand-written peers share (raw-sdk-fetch.mjs with the
// SDK's commands, signer-fetch.mjs with its signer and node:http): list every key under the
// prefix page by page, then download them `concurrency` at a time into the destination folder.
// Only the two requests differ between the peers, so they pass those in; the loops stay the
// same for both and what each measures is its own requests.
import { mkdir } from 'node:fs/promises';
import path from 'node:path';

/**
 * Every key under a prefix, in listing order, folder markers (keys ending in `/`) left out.
 * `listPage(token)` fetches one page (`token` undefined for the first) and resolves with
 * `{ keys, next }`, `next` being the continuation token or undefined on the last page.
 */
export async function listKeys(listPage) {
  const keys = [];
  let token;
  do {
    const page = await listPage(token);
    for (const key of page.keys) if (!key.endsWith('/')) keys.push(key);
    token = page.next;
  } while (token);
  return keys;
}

/**
 * Download `keys` into `dest` (each at its path relative to `prefix`), `concurrency` at a time;
 * each folder is made once. `getTo(key, file)` writes one object and resolves with its byte
 * count. Resolves with `{ files, bytes }`.
 */
export async function fetchKeys(keys, { prefix, dest, concurrency, getTo }) {
  let files = 0;
  let bytes = 0;
  const made = new Set();
  let next = 0;
  async function worker() {
    while (next < keys.length) {
      const key = keys[next++];
      const file = path.join(dest, key.slice(prefix.length));
      const dir = path.dirname(file);
      if (!made.has(dir)) {
        await mkdir(dir, { recursive: true });
        made.add(dir);
      }
      // Not `bytes += await …`: that reads `bytes` before the await and loses other workers' adds.
      const n = await getTo(key, file);
      bytes += n;
      files++;
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { files, bytes };
}
