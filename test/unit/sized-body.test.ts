/**
 * A download or one-request put that the caller's signal cut: whatever the SDK's stream raised
 * (Node's `Error: aborted` when the socket goes, seen on Azurite under load), the caller gets an
 * AbortError, never a raw error, and never a store fault it did not have.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { isAbort, StoreError } from '../../src/core/errors.js';
import { exactDownload, sendSized } from '../../src/driver-kit/sized-body.js';
import { getText, textAgent } from '../../src/net/text-get.js';

/** Node's error for a response whose socket closed mid-body. */
function socketAborted(): Error {
  return Object.assign(new Error('aborted'), { code: 'ECONNRESET' });
}

async function drain(body: Readable): Promise<unknown> {
  try {
    for await (const _ of body);
    return undefined;
  } catch (error) {
    return error;
  }
}

describe('exactDownload', () => {
  it('a body that drops after the caller aborted rejects with an AbortError', async () => {
    const controller = new AbortController();
    const source = new PassThrough();
    source.write(Buffer.alloc(10));
    const body = exactDownload(source, 100, controller.signal, { op: 'get', uri: 'az://c/k' });
    const got = drain(body);
    await new Promise((r) => setImmediate(r));
    // The SDK's socket goes first; the signal has fired by the time the stream reports it.
    controller.abort(Object.assign(new Error('deadline'), { name: 'TimeoutError' }));
    source.destroy(socketAborted());
    const error = await got;
    expect(isAbort(error)).toBe(true);
    expect((error as Error).message).not.toBe('aborted');
  });

  it('a body that drops without an abort is a StoreError naming the operation', async () => {
    const source = new PassThrough();
    source.write(Buffer.alloc(10));
    const body = exactDownload(source, 100, undefined, { op: 'get', uri: 'az://c/k' });
    const got = drain(body);
    await new Promise((r) => setImmediate(r));
    source.destroy(socketAborted());
    const error = await got;
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toMatch(/^get az:\/\/c\/k: the download failed \(.*aborted\)/);
  });
});

describe('sendSized', () => {
  it('a request that fails raw after the caller aborted rejects with an AbortError', async () => {
    const controller = new AbortController();
    const sent = sendSized(Buffer.alloc(4), 4, controller.signal, async () => {
      controller.abort();
      throw socketAborted();
    });
    const error = await sent.catch((e: unknown) => e);
    expect(isAbort(error)).toBe(true);
  });

  it('a request that fails without an abort keeps its own error', async () => {
    const sent = sendSized(Readable.from([Buffer.alloc(4)]), 4, undefined, async () => {
      throw socketAborted();
    });
    await expect(sent).rejects.toMatchObject({ message: 'aborted', code: 'ECONNRESET' });
  });
});

describe('getText', () => {
  it('an answer whose body stalls, cut by the signal, rejects with an AbortError', async () => {
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/xml' });
      res.write('<?xml');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    const agent = textAgent(url, 1);
    try {
      const signal = AbortSignal.timeout(200);
      const error = await getText(url, { headers: {}, agent, signal }).catch((e: unknown) => e);
      expect(isAbort(error)).toBe(true);
    } finally {
      agent.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
