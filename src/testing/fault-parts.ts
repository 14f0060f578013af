/**
 * Part bodies sent again (part of the fault suite): with the fault proxy between the driver and
 * its server, the first part request of an upload in parts is reset in the middle of its body,
 * and the put must still succeed with exactly the source's bytes — from a file (a part is a range
 * streamed from disk), from a stream (pooled part buffers) and from bytes in memory. Whoever
 * sends the part again (the SDK's own retry, the driver, or the upload engine), the body must be
 * readable again: a part that "cannot be resent" fails a user on a flaky network.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PutSource } from '../contract/primitives.js';
import { ProvcatError } from '../core/errors.js';
import { readObject, sha256 } from './fault-checks.js';
import { closeStore } from './fault-config.js';
import { type FaultProxy, startFaultProxy } from './fault-proxy.js';
import { type ConformanceTarget, randomPrefix } from './target.js';

/** The source kinds a put takes, each cut into parts differently (see src/upload/*-parts.ts). */
const SOURCES = ['file', 'stream', 'bytes'] as const;

/**
 * Register the part-resend checks for `target` (a target with `network.multipartBytes`): one test
 * per source kind, each resetting its first part request mid-body.
 */
export function partResendChecks(target: ConformanceTarget): void {
  const net = target.network;
  const partBytes = net?.multipartBytes;
  if (!net || !partBytes) return;
  describe('a part request reset mid-body is sent again', () => {
    let proxy: FaultProxy;
    let work = '';
    const prefix = randomPrefix('faults-parts');
    beforeAll(async () => {
      proxy = await startFaultProxy({ target: net.endpoint });
      work = await mkdtemp(path.join(tmpdir(), 'provcat-fault-parts-'));
    });
    afterAll(async () => {
      await proxy?.close();
      await target.purge?.(prefix);
      if (work) await rm(work, { recursive: true, force: true });
    });

    for (const kind of SOURCES) {
      it(`from ${kind === 'bytes' ? 'bytes in memory' : `a ${kind}`}: the put completes with exactly its bytes`, async () => {
        // Three whole parts: every part request carries a body of the part size.
        const bytes = randomBytes(3 * partBytes);
        const file = path.join(work, `${kind}.bin`);
        await writeFile(file, bytes);
        const source: PutSource =
          kind === 'file'
            ? file
            : kind === 'stream'
              ? Readable.from(chunks(bytes, 256 * 1024))
              : bytes;
        const uri = `${target.store({ cache: path.join(work, 'scheme') }).scheme}://${target.bucket}/${prefix}${kind}.bin`;
        const via = target.store({ cache: path.join(work, `cache-${kind}`), endpoint: proxy.url });
        const resets = proxy.stats().faults.reset;
        // The first part request (a PUT with a body; creates and completions are POSTs, or come
        // after the parts), reset once its first third is through.
        proxy.set([
          { kind: 'reset', direction: 'request', method: 'PUT', after: partBytes / 3, next: 1 },
        ]);
        try {
          await via.put(uri, source);
        } finally {
          proxy.set([]);
          await closeStore(via);
        }
        expect(proxy.stats().faults.reset - resets, 'the reset fired').toBe(1);
        const direct = target.store({ cache: path.join(work, `direct-${kind}`) });
        try {
          const stored = await readObject(direct, uri);
          expect(stored?.length).toBe(bytes.length);
          expect(stored && sha256(stored)).toBe(sha256(bytes));
        } finally {
          await closeStore(direct);
        }
      }, 60_000);
    }
  });
}

/**
 * Register the stalled-request check for `target` (a target with `network.multipartBytes`): a put
 * in parts whose first request with a body (a session's create, a part) stalls forever ends
 * within its stall timeout's bound with a typed error, and the next put is exact.
 */
export function stalledRequestChecks(target: ConformanceTarget): void {
  const net = target.network;
  const partBytes = net?.multipartBytes;
  if (!net || !partBytes) return;
  describe('a put in parts whose first request stalls forever', () => {
    let proxy: FaultProxy;
    let work = '';
    const prefix = randomPrefix('faults-stall');
    beforeAll(async () => {
      proxy = await startFaultProxy({ target: net.endpoint });
      work = await mkdtemp(path.join(tmpdir(), 'provcat-fault-stall-'));
    });
    afterAll(async () => {
      await proxy?.close();
      await target.purge?.(prefix);
      if (work) await rm(work, { recursive: true, force: true });
    });

    it('ends with a typed error within the stall bound, and the next put is exact', async () => {
      const bytes = randomBytes(2 * partBytes);
      const scheme = target.store({ cache: path.join(work, 'scheme') }).scheme;
      const uri = `${scheme}://${target.bucket}/${prefix}object.bin`;
      const options = { endpoint: proxy.url, stallTimeoutMs: 1000 };
      const via = target.store({ cache: path.join(work, 'cache'), ...options });
      const stall = { kind: 'stall', direction: 'request', ms: Number.POSITIVE_INFINITY } as const;
      proxy.set([{ ...stall, method: /^(PUT|POST)$/, after: 0, next: 1 }]);
      try {
        // 3 attempts of 1 s and their backoff, then at most 30 s for the abort.
        const settled = await Promise.race([
          via.put(uri, bytes).then(
            () => 'ok',
            (e: unknown) => (e instanceof ProvcatError ? 'typed' : `untyped: ${String(e)}`),
          ),
          new Promise<string>((resolve) => setTimeout(() => resolve('hung'), 45_000)),
        ]);
        proxy.set([]);
        expect(proxy.stats().faults.stall, 'the stall fired').toBeGreaterThan(0);
        expect(['ok', 'typed']).toContain(settled);
        await via.put(uri, bytes);
      } finally {
        proxy.set([]);
        await closeStore(via);
      }
      const direct = target.store({ cache: path.join(work, 'direct') });
      try {
        const stored = await readObject(direct, uri);
        expect(stored && sha256(stored)).toBe(sha256(bytes));
      } finally {
        await closeStore(direct);
      }
    }, 90_000);
  });
}

/**
 * Register the reset-answer check for `target` (a target with `network`): a put of one request
 * whose answer's connection is reset after the server wrote the object settles — exactly, or
 * with a typed error — and the object is the one sent; the next put is exact.
 */
export function resetAnswerChecks(target: ConformanceTarget): void {
  const net = target.network;
  if (!net) return;
  describe('a put of one request whose answer is reset', () => {
    let proxy: FaultProxy;
    let work = '';
    const prefix = randomPrefix('faults-answer');
    beforeAll(async () => {
      proxy = await startFaultProxy({ target: net.endpoint });
      work = await mkdtemp(path.join(tmpdir(), 'provcat-fault-answer-'));
    });
    afterAll(async () => {
      await proxy?.close();
      await target.purge?.(prefix);
      if (work) await rm(work, { recursive: true, force: true });
    });

    for (const kind of ['bytes', 'file'] as const) {
      it(`from ${kind === 'bytes' ? 'bytes in memory' : 'a file'}: settles exact or typed, and the next put is exact`, async () => {
        const bytes = randomBytes(64 * 1024);
        const file = path.join(work, `${kind}.bin`);
        await writeFile(file, bytes);
        const source: PutSource = kind === 'file' ? file : bytes;
        const scheme = target.store({ cache: path.join(work, 'scheme') }).scheme;
        const uri = `${scheme}://${target.bucket}/${prefix}${kind}.bin`;
        const via = target.store({ cache: path.join(work, `cache-${kind}`), endpoint: proxy.url });
        const resets = proxy.stats().faults.reset;
        proxy.set([
          { kind: 'reset', direction: 'response', method: /^(PUT|POST)$/, after: 0, next: 1 },
        ]);
        try {
          const settled = await Promise.race([
            via.put(uri, source).then(
              () => 'ok',
              (e: unknown) => (e instanceof ProvcatError ? 'typed' : `untyped: ${String(e)}`),
            ),
            new Promise<string>((resolve) => setTimeout(() => resolve('hung'), 20_000)),
          ]);
          proxy.set([]);
          expect(proxy.stats().faults.reset - resets, 'the reset fired').toBe(1);
          expect(['ok', 'typed']).toContain(settled);
          await via.put(uri, source);
        } finally {
          proxy.set([]);
          await closeStore(via);
        }
        const direct = target.store({ cache: path.join(work, `direct-${kind}`) });
        try {
          const stored = await readObject(direct, uri);
          expect(stored && sha256(stored)).toBe(sha256(bytes));
        } finally {
          await closeStore(direct);
        }
      }, 60_000);
    }
  });
}

function* chunks(bytes: Buffer, size: number): Generator<Buffer> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}
