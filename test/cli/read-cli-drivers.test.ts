/**
 * `provcat cat URI` and `provcat fetch URI/ --to DIR` on the cloud drivers, through the bundled
 * CLI: S3 on Ceph, GCS on the project's test server, Azure on Azurite (no versions there: the
 * pinned case runs on S3 and GCS).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startGcsServer } from '../../servers/gcs/server.js';
import { azureSkipReason, azureTarget } from '../setup/azure.js';

const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');
const gcs = await startGcsServer();
afterAll(() => gcs.close());

/** A CLI runner with `env` (asynchronous: the GCS server answers from this event loop). */
function cli(env: () => Record<string, string>) {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-read-drivers-'));
  const run = (...args: string[]) =>
    new Promise<{ code: number; out: string; err: string }>((resolve) => {
      const full = {
        ...process.env,
        ...env(),
        PROVCAT_CACHE_DIR: path.join(dir, 'cache'),
        PROVCAT_OFFLINE: '',
        NODE_NO_WARNINGS: '1',
      };
      execFile(process.execPath, [BIN, ...args], { env: full }, (error, out, err) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, out, err }),
      );
    });
  return { dir, run };
}

const targets: {
  name: string;
  scheme: string;
  skip: string | undefined;
  versions: boolean;
  env: () => Record<string, string>;
}[] = [
  {
    name: 's3 (Ceph)',
    scheme: 's3',
    skip: process.env.PROVCAT_TEST_S3 === 'ceph' ? undefined : 'no Ceph (PROVCAT_TEST_S3)',
    versions: true,
    env: () => ({}),
  },
  {
    name: 'gs (test server)',
    scheme: 'gs',
    skip: undefined,
    versions: true,
    env: () => ({ STORAGE_EMULATOR_HOST: gcs.url }),
  },
  {
    name: 'az (Azurite)',
    scheme: 'az',
    skip: azureSkipReason(),
    versions: false,
    env: () => ({ AZURE_STORAGE_CONNECTION_STRING: azureTarget().connectionString }),
  },
];

for (const t of targets) {
  describe.skipIf(t.skip !== undefined)(`cat and fetch --to on ${t.name}`, () => {
    it('cats a file (now, at a pin, a range), refuses a folder, copies a folder out', async () => {
      const { dir, run } = cli(t.env);
      const bucket = `pcread${randomBytes(5).toString('hex')}`;
      const mb = await run(
        'mb',
        `${t.scheme}://${bucket}`,
        ...(t.versions ? ['--versioning'] : []),
      );
      expect(mb.code, mb.err).toBe(0);
      const put = async (rel: string, text: string) => {
        const f = path.join(dir, 'src.tmp');
        writeFileSync(f, text);
        const r = await run('put', f, `${t.scheme}://${bucket}/${rel}`);
        expect(r.code, r.err).toBe(0);
      };
      const file = `${t.scheme}://${bucket}/d/a.csv`;
      await put('d/a.csv', 'id,v\n1,one\n');
      await put('d/s/b.txt', 'bee');
      if (t.versions) {
        const pin = await run('pin', file, '--json');
        expect(pin.code, pin.err).toBe(0);
        const pinned = JSON.parse(pin.out).uri as string;
        await put('d/a.csv', 'id,v\n2,two\n');
        expect(await run('cat', pinned)).toMatchObject({ code: 0, out: 'id,v\n1,one\n' });
        expect(await run('cat', pinned, '--range', '5:10')).toMatchObject({
          code: 0,
          out: '1,one',
        });
        expect(await run('cat', pinned, '--offline')).toMatchObject({
          code: 0,
          out: 'id,v\n1,one\n',
        });
      } else {
        await put('d/a.csv', 'id,v\n2,two\n');
      }
      expect(await run('cat', file)).toMatchObject({ code: 0, out: 'id,v\n2,two\n' });
      expect(await run('cat', file, '--range', '5:10')).toMatchObject({ code: 0, out: '2,two' });
      const out = path.join(dir, 'out.csv');
      expect((await run('cat', file, '-o', out)).code).toBe(0);
      expect(readFileSync(out, 'utf8')).toBe('id,v\n2,two\n');
      const folder = await run('cat', `${t.scheme}://${bucket}/d/`);
      expect(folder.code).toBe(8);
      expect(folder.err).toMatch(/is a folder/);

      const to = path.join(dir, 'data');
      const first = await run('fetch', `${t.scheme}://${bucket}/d/`, '--to', to, '--json');
      expect(first.code, first.err).toBe(0);
      expect(JSON.parse(first.out)).toEqual({
        path: to,
        files: 2,
        written: 2,
        deleted: 0,
        bytes: 14,
      });
      const again = await run('fetch', `${t.scheme}://${bucket}/d/`, '--to', to, '--json');
      expect(JSON.parse(again.out)).toMatchObject({ written: 0, bytes: 0 });
      writeFileSync(path.join(to, 'a.csv'), 'edited');
      writeFileSync(path.join(to, 'extra'), 'x');
      const fix = await run(
        'fetch',
        `${t.scheme}://${bucket}/d/`,
        '--to',
        to,
        '--delete',
        '--json',
      );
      expect(JSON.parse(fix.out)).toMatchObject({ written: 1, deleted: 1 });
      expect(readFileSync(path.join(to, 'a.csv'), 'utf8')).toBe('id,v\n2,two\n');
      await run('rm', '-r', `${t.scheme}://${bucket}/`, '--force');
    });
  });
}
