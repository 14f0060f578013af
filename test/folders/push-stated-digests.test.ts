/**
 * A push takes a file as unchanged only when its digests equal every digest the listing states
 * for the object (src/folders/file-pusher.ts): a SHA-256 record is metadata that another client
 * may have written wrong, and where the listing also states the MD5 the service computed of the
 * bytes, both must agree — on a first push (the file hashed) and on a later one (the digests
 * taken from the push index).
 */
import { createHash } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import type { ListPage, PagesOptions } from '../../src/contract/primitives.js';
import { RACY_WINDOW_MS } from '../../src/folders/push-index.js';
import { writeTree } from '../support/folder-flows.js';

const tmp = (label: string) => mkdtempSync(path.join(tmpdir(), `provcat-stated-${label}-`));
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** A local store whose listing states a SHA-256 record for some keys, as Azure's does. */
class RecordedSha extends LocalStore {
  records = new Map<string, string>();
  override async *_pages(
    bucket: string,
    prefix: string,
    options?: PagesOptions,
  ): AsyncIterable<ListPage> {
    for await (const page of super._pages(bucket, prefix, options)) {
      yield {
        ...page,
        objects: page.objects.map((o) => {
          const recorded = this.records.get(o.key);
          return recorded === undefined ? o : { ...o, sha256: recorded };
        }),
      };
    }
  }
}

describe('push against the digests a listing states', () => {
  it('sends a file whose SHA-256 record agrees but whose MD5 does not', async () => {
    const store = new RecordedSha({ root: tmp('root'), cache: tmp('cache') });
    await store.makeBucket('b', { versioning: true });
    // Another client wrote other bytes of the same size, with the SHA-256 of the local file.
    await store.put('local://b/d/f.txt', Buffer.from('HELLO\n'));
    store.records.set('d/f.txt', sha256('hello\n'));
    const dir = tmp('local');
    writeTree(dir, { 'f.txt': 'hello\n', 'g.txt': 'same\n' });
    // Files changed within the racy window of their read are hashed again: wait it out.
    await sleep(RACY_WINDOW_MS + 100);
    await store.put('local://b/d/g.txt', Buffer.from('same\n'));
    store.records.set('d/g.txt', sha256('same\n'));

    const first = await store.push(dir, 'local://b/d/');
    expect(first).toMatchObject({ uploaded: 1, skipped: 1 });
    expect(first.actions).toEqual([{ action: 'upload', path: 'f.txt', size: 6 }]);
    expect(await store.readText('local://b/d/f.txt')).toBe('hello\n');

    // Again, unchanged: both digests agree, and the index answers for the files (no read).
    const again = await store.push(dir, 'local://b/d/');
    expect(again).toMatchObject({ uploaded: 0, skipped: 2, hashed: 0 });

    // Another client replaces g.txt with other bytes of its size and leaves the record: the
    // push index still holds the file's digests, but the listing's MD5 is of the new bytes.
    await store.put('local://b/d/g.txt', Buffer.from('SAME\n'));
    const third = await store.push(dir, 'local://b/d/');
    expect(third).toMatchObject({ uploaded: 1, skipped: 1, hashed: 1 });
    expect(third.actions).toEqual([{ action: 'upload', path: 'g.txt', size: 5 }]);
    expect(await store.readText('local://b/d/g.txt')).toBe('same\n');
    await store.close();
  });
});
