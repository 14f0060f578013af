/**
 * `provcat tour`: the story a new user should see, run for real on the embedded store under a
 * temporary root (nothing outside it is touched; it is removed at the end).
 *
 * @module
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Cache } from '../../cache/cache.js';
import type { ObjectStore } from '../../store/object-store.js';
import { storeFor } from '../../store/registry.js';
import type { Command } from '../command.js';

export const tourCommand: Command = {
  name: 'tour',
  summary: 'a guided run on the embedded store in a temporary folder',
  usage: 'provcat tour [--keep]',
  options: { keep: { type: 'boolean' } },
  positionals: [0, 0],
  async run({ values }, ctx) {
    const tmp = await mkdtemp(path.join(tmpdir(), 'provcat-tour-'));
    const say = (text: string) => ctx.stdout.write(`${text}\n`);
    const step = (n: number, text: string) => say(`\n${n}. ${text}`);
    try {
      const root = path.join(tmp, 'store');
      const cache = new Cache({ root: path.join(tmp, 'cache') });
      const open = (offline = false): Promise<ObjectStore> =>
        storeFor('local://tour/', { root, cache, offline });
      const store = await open();
      say(`provcat tour: an embedded store in ${root}, a cache in ${cache.root}`);

      step(1, 'put three files into local://tour/data/');
      const files: Record<string, string> = {
        'a.csv': 'id,value\n1,10\n2,20\n',
        'b.csv': 'id,value\n3,30\n',
        'notes/readme.txt': 'measurements from the first run\n',
      };
      for (const [name, text] of Object.entries(files)) {
        const local = path.join(tmp, name.replace('/', '-'));
        await writeFile(local, text);
        const e = await store.put(`local://tour/data/${name}`, local);
        say(`   put ${e.uri}  (${e.size} bytes, version ${e.version})`);
      }

      step(2, 'fetch the folder into the cache');
      let r = await store.fetch('local://tour/data/');
      say(`   ${r.path}`);
      say(`   ${r.files} files, ${r.downloaded} transferred`);

      step(3, 'fetch again: one listing shows nothing changed, nothing is transferred');
      r = await store.fetch('local://tour/data/');
      say(`   ${r.files} files, ${r.downloaded} transferred`);

      step(4, 'change one file, fetch: exactly that file is transferred');
      await store.put('local://tour/data/a.csv', Buffer.from('id,value\n1,11\n2,22\n'));
      r = await store.fetch('local://tour/data/');
      say(`   ${r.files} files, ${r.downloaded} transferred`);

      step(5, 'go offline (PROVCAT_OFFLINE=1 or --offline): no network, the cache answers');
      const offline = await open(true);
      r = await offline.fetch('local://tour/data/');
      const a = await readFile(path.join(r.path, 'a.csv'), 'utf8');
      say(`   ${r.path}/a.csv:`);
      for (const line of a.trimEnd().split('\n')) say(`     ${line}`);
      try {
        await offline.stat('local://tour/data/a.csv');
      } catch (error) {
        say(`   stat without a pin offline: ${(error as Error).name}, as it should`);
      }
      step(6, "commit the folder: every file's version, recorded under one ID");
      const pinned = await store.commit('local://tour/data/', 'first results', {
        metadata: { run: '1' },
      });
      say(`   ${pinned}`);
      for (const c of await store.log('local://tour/data/')) {
        say(`   commit ${c.number}  ${c.id.slice(0, 12)}  ${c.files} files  "${c.message}"`);
      }

      step(7, 'change a.csv and delete b.csv; the folder moves on');
      await store.put('local://tour/data/a.csv', Buffer.from('id,value\n1,99\n'));
      await store.delete('local://tour/data/b.csv');
      r = await store.fetch('local://tour/data/');
      const now = await readFile(path.join(r.path, 'a.csv'), 'utf8');
      say(`   a.csv now: ${now.trimEnd().split('\n').slice(1).join(' ')}; files: ${r.files}`);

      step(8, 'offline, fetch the pinned commit: the committed bytes, exactly');
      const atCommit = await offline.fetch(pinned);
      const old = await readFile(path.join(atCommit.path, 'a.csv'), 'utf8');
      say(`   ${atCommit.path}`);
      say(`   a.csv at the commit: ${old.trimEnd().split('\n').slice(1).join(' ')}`);
      say(
        `   b.csv at the commit: ${(await readFile(path.join(atCommit.path, 'b.csv'), 'utf8')).trimEnd().split('\n').slice(1).join(' ')}`,
      );
      say(
        `   ${atCommit.files} files, ${atCommit.downloaded} transferred (the cache already held these versions)`,
      );
      say('\nDone. Next: docs/guide.md, docs/pins.md, and `provcat --help`.');
      return 0;
    } finally {
      if (values.keep) say(`(kept ${tmp})`);
      else await rm(tmp, { recursive: true, force: true });
    }
  },
};
