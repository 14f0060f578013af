/**
 * The one offline guard, through the command users run: offline (`--offline` or
 * `PROVCAT_OFFLINE=1`), every command that would need a network store fails with OfflineMiss
 * (exit 5) and makes no connection at all. The "store" is a TCP listener that counts every
 * connection it accepts; the test fails on any. Commands of every group are covered, an upload to
 * an S3 stage included (it used to send a signed CreateMultipartUpload before failing).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const BIN = path.join(import.meta.dirname, '..', '..', 'dist', 'cli', 'provcat.cjs');

let listener: net.Server;
let accepted = 0;
let endpoint: string;
const dir = mkdtempSync(path.join(tmpdir(), 'provcat-offline-'));
const file = path.join(dir, 'a.bin');
writeFileSync(file, 'x'.repeat(100));
const location = JSON.stringify({
  uri: 's3://bkt/p/ab/abababababababababababababababab',
  contentType: 'application/octet-stream',
  sizeBytes: 100,
  sha256: 'a'.repeat(64),
});

beforeAll(async () => {
  listener = net.createServer((socket) => {
    accepted++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(listener.address() as net.AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => listener.close(resolve));
});

function run(args: string[], how: 'flag' | 'env'): Promise<{ code: number | null; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [BIN, ...args, ...(how === 'flag' ? ['--offline'] : [])],
      {
        env: {
          ...process.env,
          PROVCAT_OFFLINE: how === 'env' ? '1' : '',
          PROVCAT_CACHE_DIR: path.join(dir, 'cache'),
          PROVCAT_LOCAL_ROOT: path.join(dir, 'root'),
          AWS_ENDPOINT_URL_S3: endpoint,
          AWS_ACCESS_KEY_ID: 'AKIDOFFLINE',
          AWS_SECRET_ACCESS_KEY: 'offline',
          AWS_REGION: 'us-east-1',
          PROVCAT_S3_FORCE_PATH_STYLE: '1',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.on('close', (code) => resolve({ code, err }));
  });
}

/** Every command that needs the store, with arguments that would reach it online. */
const COMMANDS: string[][] = [
  ['stat', 's3://bkt/a.bin'],
  ['ls', 's3://bkt/dir/'],
  ['walk', 's3://bkt/dir/'],
  ['fetch', 's3://bkt/dir/'],
  ['fetch', 's3://bkt/a.bin'],
  ['put', file, 's3://bkt/a.bin'],
  ['rm', 's3://bkt/a.bin'],
  ['mb', 's3://bkt2'],
  ['pin', 's3://bkt/a.bin'],
  ['commit', 's3://bkt/dir/', '-m', 'offline'],
  ['log', 's3://bkt/dir/'],
  ['branch', 's3://bkt/copy/', 'dir'],
  ['fetch', `s3://bkt/dir/?at=commit:${'c'.repeat(64)}`],
  ['stat', 's3://bkt/a.bin?at=version:v1'],
  ['upload', file, '--stage', 's3://bkt/p/'],
  ['upload', file, '--stage', 's3://bkt/p/', '--checkpoint-dir', path.join(dir, 'cp')],
  ['cat', location, '--stage', 's3://bkt/p/'],
  ['cat', location, '--stage', 's3://bkt/p/', '--range', '0:10'],
  ['verify', location, '--stage', 's3://bkt/p/'],
  ['push', dir, 's3://bkt/dir/'],
  ['commit', 's3://bkt/dir/', '-m', 'offline', '--from', dir],
  ['diff', `s3://bkt/dir/?at=commit:${'c'.repeat(64)}`],
  ['rm', '-r', 's3://bkt/dir/'],
];

describe('offline: no connection, for every command', () => {
  for (const how of ['flag', 'env'] as const) {
    it.each(COMMANDS)(
      `${how === 'flag' ? '--offline' : 'PROVCAT_OFFLINE=1'}: %s %s`,
      async (...args) => {
        const before = accepted;
        const out = await run(args, how);
        expect(out.err).toContain('OfflineMiss');
        expect(out.code).toBe(5);
        expect(accepted - before).toBe(0);
      },
    );
  }

  it('the listener does count connections (the check itself)', async () => {
    const before = accepted;
    await new Promise<void>((resolve, reject) => {
      const socket = net.connect(Number(new URL(endpoint).port), '127.0.0.1', () => {
        socket.destroy();
        resolve();
      });
      socket.on('error', reject);
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(accepted - before).toBe(1);
  });
});
