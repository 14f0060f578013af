/**
 * `provcat cat URI` (a file, `?at=` included, a range, `-o FILE`; a folder refused) and
 * `provcat fetch URI/ --to DIR [--delete] --json`, through the bundled CLI on the local store.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

function sandbox() {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-read-cli-'));
  const env = {
    ...process.env,
    PROVCAT_LOCAL_ROOT: path.join(dir, 'root'),
    PROVCAT_CACHE_DIR: path.join(dir, 'cache'),
    PROVCAT_OFFLINE: '',
  };
  const run = (...args: string[]) => {
    const r = spawnSync(process.execPath, [BIN, ...args], { env, encoding: 'utf8' });
    return { code: r.status, out: r.stdout, err: r.stderr };
  };
  const put = (rel: string, text: string) => {
    const f = path.join(dir, 'src.tmp');
    writeFileSync(f, text);
    const r = run('put', f, `local://b/${rel}`);
    expect(r.code, r.err).toBe(0);
  };
  return { dir, run, put };
}

describe('provcat cat URI', () => {
  it('prints a file now, at ?at=version:, a range of it, or writes it with -o', () => {
    const { dir, run, put } = sandbox();
    put('d/a.csv', 'id,v\n1,one\n');
    const pinned = JSON.parse(run('pin', 'local://b/d/a.csv', '--json').out).uri as string;
    put('d/a.csv', 'id,v\n2,two\n');
    expect(run('cat', 'local://b/d/a.csv')).toMatchObject({ code: 0, out: 'id,v\n2,two\n' });
    expect(run('cat', pinned)).toMatchObject({ code: 0, out: 'id,v\n1,one\n' });
    expect(run('cat', pinned, '--range', '5:10')).toMatchObject({ code: 0, out: '1,one' });
    // Offline, the pin read once comes from the cache.
    expect(run('cat', pinned, '--offline')).toMatchObject({ code: 0, out: 'id,v\n1,one\n' });
    const out = path.join(dir, 'out.csv');
    expect(run('cat', pinned, '-o', out).code).toBe(0);
    expect(readFileSync(out, 'utf8')).toBe('id,v\n1,one\n');
    // The managed cat's output rules: a device is refused before anything is read.
    expect(run('cat', pinned, '-o', '/dev/null').code).toBe(2);
    // A file that is not there is named as given, not as the folder it might have been.
    const missing = run('cat', 'local://b/d/missing.csv');
    expect(missing.code).toBe(3);
    expect(missing.err).toMatch(/NotFound: no file or folder at local:\/\/b\/d\/missing\.csv\n/);
    expect(run('fetch', 'local://b/d/missing.csv').err).toMatch(
      /no file or folder at local:\/\/b\/d\/missing\.csv\n/,
    );
    const reversed = run('cat', pinned, '--range', '9:3');
    expect(reversed.err).toMatch(/InvalidRange: range 9\.\.3 is reversed/);
  });

  it('refuses a folder with a clear error; a LOCATION goes to the managed cat', () => {
    const { run, put } = sandbox();
    put('d/a.csv', 'x');
    const folder = run('cat', 'local://b/d/');
    expect(folder.code).toBe(8);
    expect(folder.err).toMatch(/UriError: cat prints one file; local:\/\/b\/d\/ is a folder/);
    const bare = run('cat', 'local://b/d');
    expect(bare.code).toBe(8);
    expect(bare.err).toMatch(/is a folder/);
    expect(run('cat', 'local://b/d/none.csv').code).toBe(3);
    // A LOCATION (not a URI) is the managed cat's, which reads it first.
    const managed = run('cat', '@no-such-location.json');
    expect(managed.err).not.toMatch(/UriError/);
    expect(managed.code).not.toBe(0);
  });
});

describe('provcat fetch URI --to DIR', () => {
  it('copies a folder out, reruns write nothing, restores edits, --delete removes extras', () => {
    const { dir, run, put } = sandbox();
    put('d/a.csv', 'aaa');
    put('d/s/b.txt', 'bb');
    const to = path.join(dir, 'data');
    const first = run('fetch', 'local://b/d/', '--to', to, '--json');
    expect(first.code, first.err).toBe(0);
    expect(JSON.parse(first.out)).toEqual({ path: to, files: 2, written: 2, deleted: 0, bytes: 5 });
    expect(JSON.parse(run('fetch', 'local://b/d/', '--to', to, '--json').out)).toMatchObject({
      written: 0,
      bytes: 0,
    });
    writeFileSync(path.join(to, 'a.csv'), 'edited');
    writeFileSync(path.join(to, 'extra'), 'x');
    const human = run('fetch', 'local://b/d/', '--to', to);
    expect(human.out).toBe(`${to}\n`);
    expect(human.err).toMatch(/2 file\(s\), 1 written .*0 deleted/);
    expect(readFileSync(path.join(to, 'a.csv'), 'utf8')).toBe('aaa');
    const del = JSON.parse(run('fetch', 'local://b/d/', '--to', to, '--delete', '--json').out);
    expect(del).toMatchObject({ written: 0, deleted: 1 });
    expect(run('fetch', 'local://b/d/', '--delete').code).toBe(2);
    // A DIR that is a file is refused (exit 2), nothing written.
    const file = path.join(dir, 'plain');
    writeFileSync(file, 'p');
    expect(run('fetch', 'local://b/d/', '--to', file).code).toBe(2);
    mkdirSync(path.join(dir, 'empty'));
    expect(run('fetch', 'local://b/d/a.csv', '--to', path.join(dir, 'empty')).code).toBe(0);
    expect(readFileSync(path.join(dir, 'empty', 'a.csv'), 'utf8')).toBe('aaa');
  });

  it("refuses a DIR that is, holds or lies in provcat's cache or store; push too", () => {
    const { dir, run, put } = sandbox();
    put('d/a.csv', 'aaa');
    put('other/keep.txt', 'kept');
    expect(run('commit', 'local://b/other/', '-m', 'keep').code).toBe(0);
    const stored = () => run('cat', 'local://b/other/keep.txt');
    // The sandbox's store (root/) and cache (cache/) are both under `dir`: a --delete of `dir`
    // would have removed them as files the fetched folder lacks.
    for (const to of [dir, path.join(dir, 'root'), path.join(dir, 'cache', 'x', 'new')]) {
      const r = run('fetch', 'local://b/d/', '--to', to, '--delete', '--json');
      expect(r.code, to).toBe(2);
      expect(r.err).toMatch(
        /InvalidArgument: --to .* (holds|is|is inside) (provcat's cache|the embedded store) .*nothing was written/,
      );
    }
    expect(stored()).toMatchObject({ code: 0, out: 'kept' });
    expect(run('log', 'local://b/other/').out).toMatch(/keep/);
    // A link on the way is seen through (DIR itself a link is refused anyway).
    const link = path.join(mkdtempSync(path.join(tmpdir(), 'provcat-link-')), 'up');
    symlinkSync(path.dirname(dir), link);
    const viaLink = run('fetch', 'local://b/d/', '--to', path.join(link, path.basename(dir)));
    expect(viaLink.err).toMatch(/holds provcat's cache/);
    // A push of a folder that holds the cache or the store is refused before any store call.
    mkdirSync(path.join(dir, 'mine'));
    writeFileSync(path.join(dir, 'mine', 'f'), 'f');
    const push = run('push', dir, 'local://b/p/');
    expect(push.code).toBe(1);
    expect(push.err).toMatch(
      /SourceError: cannot push .*: it holds (provcat's cache|the embedded store)/,
    );
    expect(run('ls', 'local://b/p/').code).toBe(3);
    // A folder beside them, or a folder of the cache itself (a fetched path), is pushed.
    expect(run('push', path.join(dir, 'mine'), 'local://b/p/').code).toBe(0);
    const cached = run('fetch', 'local://b/d/').out.trim();
    expect(run('push', cached, 'local://b/q/').code).toBe(0);
    expect(run('cat', 'local://b/q/a.csv')).toMatchObject({ code: 0, out: 'aaa' });
  });
});

describe('provcat --profile NAME', () => {
  it('selects a named endpoint of the config file, before or after the command', () => {
    const { dir, run } = sandbox();
    const config = path.join(dir, 'config');
    const other = path.join(dir, 'other-root');
    mkdirSync(other);
    writeFileSync(config, `[profile other]\nscheme = local\nroot = ${other}\n`);
    const env = { ...process.env, PROVCAT_CONFIG: config, PROVCAT_LOCAL_ROOT: '' };
    const runIn = (...args: string[]) => {
      const r = spawnSync(process.execPath, [BIN, ...args], { env, encoding: 'utf8' });
      return { code: r.status, out: r.stdout, err: r.stderr };
    };
    const src = path.join(dir, 'f.txt');
    writeFileSync(src, 'in other');
    expect(runIn('--profile', 'other', 'put', src, 'local://b/f.txt').code).toBe(0);
    expect(runIn('cat', 'local://b/f.txt', '--profile', 'other')).toMatchObject({
      code: 0,
      out: 'in other',
    });
    // Not in the default root: the profile's root was used.
    expect(run('cat', 'local://b/f.txt').code).toBe(3);
    const bad = runIn('--profile', 'nope', 'cat', 'local://b/f.txt');
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/InvalidArgument: no profile nope in .*config \(profiles: other\)/);
    writeFileSync(config, '[profile other]\nscheme = local\nroot\n');
    const broken = runIn('--profile', 'other', 'cat', 'local://b/f.txt');
    expect(broken.code).toBe(2);
    expect(broken.err).toMatch(/config:3: expected "key = value"/);
  });
});
