/**
 * The fault suite (src/testing/faults.ts) on the embedded local store: the SIGKILL loop over
 * the CLI (the local store has no network), with a local managed-object stage. Short in
 * `npm test`; `npm run soak` runs it long (docs/reliability.md).
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { LocalStore } from '../../../drivers/local/index.js';
import { folderDirName, refOf } from '../../../drivers/local/layout.js';
import { faultSuite } from '../../../src/testing/faults.js';

const BUCKET = 'faults';
const work = mkdtempSync(path.join(tmpdir(), 'provcat-faults-local-'));
const root = path.join(work, 'root');
const stages = path.join(work, 'stages');
mkdirSync(root);
mkdirSync(stages);

faultSuite({
  name: 'local',
  store: (o) => new LocalStore({ root, ...o }),
  bucket: BUCKET,
  flags: { versions: true, createMode: 'atomic', ranges: true, hostileKeys: false },
  env: { PROVCAT_LOCAL_ROOT: root },
  stageUri: (prefix) => {
    const dir = path.join(stages, prefix);
    mkdirSync(dir, { recursive: true });
    return `${pathToFileURL(dir).href.replace(/\/?$/, '/')}`;
  },
  localDirs: [root],
  // A folder of the local store is one directory (drivers/local/layout.ts): drop it whole.
  purge: async (prefix) => {
    const segments = prefix.split('/').filter((s) => s !== '');
    const dir = path.join(root, BUCKET, ...segments.map((s) => folderDirName(refOf(s))));
    await rm(dir, { recursive: true, force: true });
  },
});
