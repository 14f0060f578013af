/**
 * A fetch whose process is stopped (SIGSTOP, a laptop lid) past its lock's stale time loses the
 * lock to another fetch. When it continues it must find that out before it writes anything to
 * the view or its state: the newer fetch's copy and state stay, complete, online and offline.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  utimesSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalStore } from '../../drivers/local/index.js';
import { Cache, hashOf } from '../../src/cache/cache.js';
import { FENCE_TRUST_MS } from '../../src/cache/view-lock.js';
import { StoreError } from '../../src/core/errors.js';

const FIXTURE = path.join(import.meta.dirname, '..', 'fixtures', 'cache-fetch.mjs');

function temp(label: string): string {
  return mkdtempSync(path.join(tmpdir(), `provcat-fence-${label}-`));
}

/** Every regular file below `dir` with its bytes' length and first bytes (links not followed). */
function tree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const full = path.join(e.parentPath, e.name);
    if (e.isDirectory()) continue;
    const rel = path.relative(dir, full);
    out[rel] = e.isFile() ? readFileSync(full).subarray(0, 16).toString('latin1') : '<not a file>';
  }
  return out;
}

function exited(p: ChildProcess): Promise<{ code: number | null; err: string }> {
  let err = '';
  p.stderr?.on('data', (d) => {
    err += d;
  });
  return new Promise((resolve) => p.on('close', (code) => resolve({ code, err })));
}

describe('a fetch stopped past its lock stale time', () => {
  it('finds out it lost the lock when continued and writes nothing; the newer fetch stays', async () => {
    const root = temp('root');
    const cache = temp('cache');
    const store = new LocalStore({ root, cache });
    const big = (fill: string) => Buffer.alloc(24 * 1024 * 1024, fill);
    await store.put('local://b/data/big.bin', big('1'));
    await store.put('local://b/data/a.txt', Buffer.from('a, version 1'));
    await store.put('local://b/data/b.txt', Buffer.from('b, version 1'));

    // The first fetch downloads slowly; it is stopped once bytes flow (it holds the lock).
    const first = spawn(process.execPath, [FIXTURE, root, cache, 'local://b/data/'], {
      env: { ...process.env, THROTTLE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const firstDone = exited(first);
    await new Promise<void>((resolve, reject) => {
      first.stdout?.on('data', (d) => {
        if (String(d).includes('started')) resolve();
      });
      first.on('close', () => reject(new Error('the first fetch ended before it was stopped')));
    });
    first.kill('SIGSTOP');
    try {
      // Meanwhile the folder changes, and a second fetch takes the stale lock and completes.
      await store.put('local://b/data/big.bin', big('2'));
      await store.put('local://b/data/a.txt', Buffer.from('a, version 2'));
      await store.put('local://b/data/c.txt', Buffer.from('c, new'));
      await store.delete('local://b/data/b.txt');
      const second = await store.fetch('local://b/data/');
      const expected = {
        'a.txt': 'a, version 2',
        'big.bin': '2'.repeat(16),
        'c.txt': 'c, new',
      };
      expect(tree(second.path)).toEqual(expected);
      const state = await store.cache.readState('tree:local://b/data/');
      expect(state?.done).toBe(true);

      first.kill('SIGCONT');
      const { code, err } = await firstDone;
      expect(code, err).not.toBe(0);
      expect(err).toMatch(/lost the lock/);

      // Nothing of the stopped fetch landed: the copy, its state and its offline answer are the
      // second fetch's.
      expect(tree(second.path)).toEqual(expected);
      expect(await store.cache.readState('tree:local://b/data/')).toEqual(state);
      const offline = new LocalStore({ root, cache, offline: true });
      expect(tree((await offline.fetch('local://b/data/')).path)).toEqual(expected);
      expect(await store.fetch('local://b/data/')).toMatchObject({ files: 3, downloaded: 0 });
    } finally {
      first.kill('SIGCONT');
      first.kill('SIGKILL');
    }
  }, 60_000);

  it('check() throws once another process took the lock over, and the new lock is left alone', async () => {
    const cache = new Cache({ root: temp('unit') });
    const dir = path.join(cache.root, 'v1', 'locks', `${hashOf('tree:local://b/x/')}.lock`);
    let thrown: unknown;
    await cache.withLock('tree:local://b/x/', async (lock) => {
      lock.check();
      // What a taker does to a stale lock: remove it and make it again (a later mtime).
      rmdirSync(dir);
      mkdirSync(dir);
      const later = new Date(Date.now() + 6000);
      utimesSync(dir, later, later);
      await new Promise((r) => setTimeout(r, FENCE_TRUST_MS + 20));
      try {
        lock.check();
      } catch (error) {
        thrown = error;
      }
      // Lost for good: every later check throws too.
      expect(() => lock.check()).toThrow(StoreError);
    });
    expect(thrown).toBeInstanceOf(StoreError);
    expect(String(thrown)).toMatch(/lost the lock .*another process took the lock over/);
    // The holder that lost the lock did not remove the taker's.
    expect(existsSync(dir)).toBe(true);
  });
});
