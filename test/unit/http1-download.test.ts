/**
 * The zero-allocation HTTP/1.1 download (src/net/http1-download.ts) and its file sink, against
 * a protocol-level server that writes exact bytes (so every split, fallback and failure is
 * produced on purpose), a TLS server with a certificate made here, and Ceph.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { BodySink } from '../../src/contract/primitives.js';
import { StoreError } from '../../src/core/errors.js';
import { FileSink, pipeToFile } from '../../src/net/file-sink.js';
import {
  DownloadBufferPool,
  type DownloadFallback,
  type DownloadOptions,
  type DownloadSink,
  download,
  fetchWhole,
  Http1Pool,
  isFallback,
  openDownload,
  parseHead,
  type ResponseHead,
  responseReadable,
} from '../../src/net/http1-download.js';
import { createTestBucket, describeS3, dropTestBucket, testS3Client } from '../setup/s3.js';

const MiB = 1024 * 1024;
/** Small buffers, so a few hundred KiB exercise rotation, batching and backpressure. */
const SMALL: DownloadOptions = { bufferBytes: 16 * 1024, buffers: 4 };

interface RequestContext {
  request: string;
  /** 0-based index of the request over the server's life. */
  index: number;
  /** 0-based index of the connection it came on. */
  connection: number;
}

interface RawServer {
  url: string;
  port: number;
  requests: string[];
  sockets: net.Socket[];
  /** Resolves when connection `i` has closed. */
  closed(i: number): Promise<void>;
  close(): Promise<void>;
}

const servers: RawServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

/**
 * A server that reads requests (keep-alive: several per connection) and lets `handler` write
 * whatever bytes it likes to the socket.
 */
async function rawServer(
  handler: (socket: net.Socket, ctx: RequestContext) => void,
  secure?: { key: string; cert: string },
): Promise<RawServer> {
  const requests: string[] = [];
  const sockets: net.Socket[] = [];
  const closings: Promise<void>[] = [];
  const onConnection = (socket: net.Socket) => {
    const connection = sockets.push(socket) - 1;
    closings.push(new Promise((resolve) => socket.on('close', () => resolve())));
    socket.on('error', () => {});
    let pending = '';
    socket.on('data', (data: Buffer) => {
      pending += data.toString('latin1');
      for (let end = pending.indexOf('\r\n\r\n'); end >= 0; end = pending.indexOf('\r\n\r\n')) {
        const request = pending.slice(0, end + 4);
        pending = pending.slice(end + 4);
        const index = requests.push(request) - 1;
        handler(socket, { request, index, connection });
      }
    });
  };
  const server = secure
    ? tls.createServer({ key: secure.key, cert: secure.cert }, onConnection)
    : net.createServer(onConnection);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const raw: RawServer = {
    url: `${secure ? 'https' : 'http'}://127.0.0.1:${port}/bucket/some%20key?versionId=v1`,
    port,
    requests,
    sockets,
    closed: async (i) => {
      await closings[i];
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  servers.push(raw);
  return raw;
}

function head(status: string, headers: string[]): Buffer {
  return Buffer.from(
    `HTTP/1.1 ${status}\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n`,
    'latin1',
  );
}

/** A server answering every request with `status`, `headers` and `body` in one write. */
function serveBody(body: Buffer, extra: string[] = [], status = '200 OK'): Promise<RawServer> {
  return rawServer((socket) => {
    socket.write(Buffer.concat([head(status, [`Content-Length: ${body.length}`, ...extra]), body]));
  });
}

/** A sink that keeps copies of its chunks (they are only valid during the call). */
function collector(options: { delayMs?: number; batchBytes?: number } = {}) {
  const chunks: Buffer[] = [];
  const heads: ResponseHead[] = [];
  let calls = 0;
  const sink: DownloadSink = {
    batchBytes: options.batchBytes,
    head: (h) => {
      heads.push(h);
      return undefined;
    },
    data: (chunk) => {
      calls++;
      expect(chunk.length).toBeGreaterThan(0);
      chunks.push(Buffer.from(chunk));
      if (options.delayMs === undefined) return;
      return new Promise((resolve) => setTimeout(resolve, options.delayMs));
    },
  };
  return {
    sink,
    heads,
    bytes: () => Buffer.concat(chunks),
    get calls() {
      return calls;
    },
  };
}

function expectFallback(
  outcome: ResponseHead | DownloadFallback,
  reason: string,
): DownloadFallback {
  expect(isFallback(outcome) ? outcome.fallback : 'accepted').toBe(reason);
  return outcome as DownloadFallback;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('http1 download: bodies', () => {
  for (const size of [0, 1, 4097, 3 * MiB + 5]) {
    it(`delivers a ${size}-byte 200 body byte for byte, with small and default buffers`, async () => {
      const body = randomBytes(size);
      const server = await serveBody(body, ['ETag: "abc"', 'x-amz-version-id: v1']);
      for (const options of [SMALL, {}]) {
        const c = collector();
        const result = await download({ url: server.url }, c.sink, options);
        expect(isFallback(result)).toBe(false);
        expect(result).toMatchObject({ status: 200, contentLength: size });
        expect((result as ResponseHead).headers.etag).toBe('"abc"');
        expect(c.heads).toHaveLength(1);
        expect(c.bytes().equals(body)).toBe(true);
        if (size === 0) expect(c.calls).toBe(0);
      }
    });
  }

  it('delivers a 206 body and passes Content-Range through for the caller to check', async () => {
    const body = randomBytes(1000);
    const server = await serveBody(
      body,
      ['Content-Range: bytes 100-1099/5000'],
      '206 Partial Content',
    );
    const c = collector();
    const result = await download(
      { url: server.url, headers: { range: 'bytes=100-1099' } },
      c.sink,
    );
    expect(result).toMatchObject({ status: 206, contentLength: 1000 });
    expect((result as ResponseHead).headers['content-range']).toBe('bytes 100-1099/5000');
    expect(c.bytes().equals(body)).toBe(true);
    expect(server.requests[0]).toMatch(/^GET \/bucket\/some%20key\?versionId=v1 HTTP\/1\.1\r\n/);
    expect(server.requests[0]).toContain('\r\nrange: bytes=100-1099\r\n');
    expect(server.requests[0]).toContain(`\r\nhost: 127.0.0.1:${server.port}\r\n`);
    expect(server.requests[0]).toContain('\r\nconnection: close\r\n');
  });

  it('sends the request-target exactly as given, and the headers as signed', async () => {
    const server = await serveBody(Buffer.from('x'));
    const target = '/b/a%2Fb%27c?x-id=GetObject';
    const headers = {
      Host: 'example.test',
      'X-Amz-Date': '20260101T000000Z',
      authorization: 'AWS4 sig',
    };
    await download({ url: server.url, target, headers }, collector().sink);
    expect(server.requests[0]).toBe(
      `GET ${target} HTTP/1.1\r\nHost: example.test\r\nX-Amz-Date: 20260101T000000Z\r\n` +
        'authorization: AWS4 sig\r\nconnection: close\r\n\r\n',
    );
  });

  it('reads a head split across many reads, and body bytes that came with the head', async () => {
    const body = randomBytes(70_000);
    const whole = Buffer.concat([
      head('200 OK', [`Content-Length: ${body.length}`, 'ETag: "e"', 'X-Long: '.padEnd(3000, 'v')]),
      body,
    ]);
    const server = await rawServer(async (socket) => {
      // The head byte by byte (a read may end anywhere, even inside CR LF CR LF), then the
      // rest of the head and the start of the body in one write.
      const headEnd = whole.indexOf('\r\n\r\n') + 4;
      for (let i = 0; i < headEnd - 10; i++) {
        socket.write(whole.subarray(i, i + 1));
        if (i % 500 === 0 || i > headEnd - 14) await sleep(2);
      }
      socket.write(whole.subarray(headEnd - 10, headEnd + 5000));
      await sleep(5);
      socket.write(whole.subarray(headEnd + 5000));
    });
    for (const options of [SMALL, {}]) {
      const c = collector();
      const result = await download({ url: server.url }, c.sink, options);
      expect(result).toMatchObject({ status: 200, contentLength: body.length });
      expect((result as ResponseHead).headers['x-long']).toHaveLength(3000 - 'X-Long: '.length);
      expect(c.bytes().equals(body)).toBe(true);
    }
  });

  it('reads names case-insensitively, joins repeated headers, accepts identical repeated Content-Length', async () => {
    const body = Buffer.from('hello');
    const server = await rawServer((socket) => {
      socket.write(
        Buffer.concat([
          head('200 OK', [
            'CONTENT-length: 5',
            'content-LENGTH: 5, 5',
            'X-A: 1',
            'x-a: 2',
            'Server:  ceph  ',
          ]),
          body,
        ]),
      );
    });
    const c = collector();
    const result = (await download({ url: server.url }, c.sink)) as ResponseHead;
    expect(result.contentLength).toBe(5);
    expect(result.headers['x-a']).toBe('1, 2');
    expect(result.headers.server).toBe('ceph');
    expect(c.bytes().toString()).toBe('hello');
  });

  it('never overwrites a chunk while the sink holds it, and batches what arrives meanwhile', async () => {
    const body = randomBytes(600_000);
    const server = await rawServer(async (socket) => {
      socket.write(head('200 OK', [`Content-Length: ${body.length}`]));
      for (let at = 0; at < body.length; at += 3000) {
        socket.write(body.subarray(at, at + 3000));
        if (at % 60_000 === 0) await sleep(1);
      }
    });
    for (const options of [SMALL, { bufferBytes: 128 * 1024, buffers: 3 }]) {
      const copies: Buffer[] = [];
      let intact = true;
      const sink: BodySink = {
        data: async (chunk) => {
          const copy = Buffer.from(chunk);
          copies.push(copy);
          await sleep(3);
          if (!chunk.equals(copy)) intact = false;
        },
      };
      const response = await openDownload({ url: server.url }, options);
      if (isFallback(response)) throw new Error(response.detail);
      await response.pipeTo(sink);
      expect(intact).toBe(true);
      expect(Buffer.concat(copies).equals(body)).toBe(true);
      // 200 writes of 3,000 bytes arrive as far fewer, larger chunks: a busy sink gets batches.
      expect(copies.length).toBeLessThan(150);
    }
  });

  it('gathers chunks of at least batchBytes when the sink asks for them', async () => {
    const body = randomBytes(200_000);
    const server = await rawServer(async (socket) => {
      socket.write(head('200 OK', [`Content-Length: ${body.length}`]));
      for (let at = 0; at < body.length; at += 1000) {
        socket.write(body.subarray(at, at + 1000));
        await sleep(0);
      }
    });
    const sizes: number[] = [];
    const sink: BodySink = {
      batchBytes: 12_000,
      data: (chunk) => {
        sizes.push(chunk.length);
      },
    };
    await download({ url: server.url }, sink, SMALL);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(body.length);
    // 200 writes of 1,000 bytes; without batching about as many chunks. With it: per 16 KiB
    // buffer one chunk of ≥ 12,000 bytes, plus at most one shorter one cut at the buffer's end.
    expect(sizes.length).toBeLessThanOrEqual(2 * Math.ceil(body.length / 12_000));
    expect(sizes.filter((n) => n >= 12_000).length).toBeGreaterThanOrEqual(
      Math.floor(body.length / 16_384) - 1,
    );
  });

  it('accepts an HTTP/1.0 response with a Content-Length', async () => {
    const server = await rawServer((socket) => {
      socket.end('HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc');
    });
    const c = collector();
    expect(await download({ url: server.url }, c.sink)).toMatchObject({ status: 200 });
    expect(c.bytes().toString()).toBe('abc');
  });
});

describe('http1 download: fallbacks before any body byte', () => {
  const cases: Array<[string, string, string]> = [
    ['no Content-Length', 'HTTP/1.1 200 OK\r\nETag: "x"\r\n\r\nbody', 'no-content-length'],
    [
      'chunked',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n',
      'transfer-encoding',
    ],
    [
      'Transfer-Encoding beside Content-Length',
      'HTTP/1.1 200 OK\r\nContent-Length: 4\r\nTransfer-Encoding: identity\r\n\r\nbody',
      'transfer-encoding',
    ],
    [
      '100 Continue',
      'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody',
      'informational',
    ],
    ['103 Early Hints', 'HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n', 'informational'],
    ['404', 'HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNoSuchKey', 'status'],
    ['304', 'HTTP/1.1 304 Not Modified\r\n\r\n', 'status'],
    ['301', 'HTTP/1.1 301 Moved\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n', 'status'],
    ['503', 'HTTP/1.1 503 Slow Down\r\nContent-Length: 4\r\n\r\nbody', 'status'],
    ['HTTP/2 status line', 'HTTP/2 200\r\nContent-Length: 4\r\n\r\nbody', 'malformed'],
    ['garbage', 'hello there\r\n\r\n', 'malformed'],
    ['bare LF line ends', 'HTTP/1.1 200 OK\nContent-Length: 4\n\n\r\n\r\nbody', 'malformed'],
    [
      'folded header',
      'HTTP/1.1 200 OK\r\nX-A: 1\r\n  2\r\nContent-Length: 4\r\n\r\nbody',
      'malformed',
    ],
    ['space before colon', 'HTTP/1.1 200 OK\r\nContent-Length : 4\r\n\r\nbody', 'malformed'],
    [
      'non-numeric Content-Length',
      'HTTP/1.1 200 OK\r\nContent-Length: 4x\r\n\r\nbody',
      'malformed',
    ],
    ['negative Content-Length', 'HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\nbody', 'malformed'],
    [
      'conflicting Content-Length',
      'HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nbody',
      'malformed',
    ],
    ['Content-Length list', 'HTTP/1.1 200 OK\r\nContent-Length: 4, 5\r\n\r\nbody', 'malformed'],
    [
      'huge Content-Length',
      'HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999\r\n\r\n',
      'malformed',
    ],
    [
      'control character in a value',
      'HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 4\r\n\r\nbody',
      'malformed',
    ],
  ];
  for (const [name, response, reason] of cases) {
    it(`${name} → ${reason}, nothing delivered, connection closed`, async () => {
      const server = await rawServer((socket) => socket.write(response, 'latin1'));
      const c = collector();
      const outcome = await download({ url: server.url }, c.sink, SMALL);
      expectFallback(outcome, reason);
      expect(c.heads).toHaveLength(0);
      expect(c.calls).toBe(0);
      await server.closed(0);
    });
  }

  it('reports the status of a refused response', async () => {
    const server = await rawServer((socket) =>
      socket.write('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n'),
    );
    const outcome = expectFallback(await download({ url: server.url }, collector().sink), 'status');
    expect(outcome.status).toBe(403);
  });

  it('a head over maxHeaderBytes → header-too-large, even before it ends', async () => {
    const server = await rawServer((socket) => {
      socket.write(`HTTP/1.1 200 OK\r\nX-Big: ${'a'.repeat(70_000)}`);
    });
    const outcome = await download({ url: server.url }, collector().sink, { maxHeaderBytes: 8192 });
    expectFallback(outcome, 'header-too-large');
  });

  it('connection refused → network, with the cause', async () => {
    const server = await rawServer(() => {});
    const url = server.url;
    await server.close();
    servers.length = 0;
    const outcome = expectFallback(await download({ url }, collector().sink), 'network');
    expect((outcome.cause as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
  });

  it('the server closing or resetting before the head ends → network', async () => {
    const closing = await rawServer((socket) => socket.end('HTTP/1.1 200 OK\r\nContent-Le'));
    expectFallback(await download({ url: closing.url }, collector().sink), 'network');
    const resetting = await rawServer((socket) => {
      socket.write('HTTP/1.1 200 OK\r\n');
      setTimeout(() => socket.resetAndDestroy(), 20);
    });
    expectFallback(await download({ url: resetting.url }, collector().sink), 'network');
  });

  it('no head within the idle timeout → network', async () => {
    const server = await rawServer(() => {});
    const started = Date.now();
    const outcome = expectFallback(
      await download({ url: server.url }, collector().sink, { idleTimeoutMs: 150 }),
      'network',
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect((outcome.cause as NodeJS.ErrnoException).code).toBe('ETIMEDOUT');
    await server.closed(0);
  });

  it('no connection (TLS handshake included) within connectTimeoutMs → network', async () => {
    // A plain TCP server that never answers the TLS ClientHello: the handshake never ends.
    const server = await rawServer(() => {});
    const started = Date.now();
    const outcome = expectFallback(
      await download({ url: `https://127.0.0.1:${server.port}/x` }, collector().sink, {
        connectTimeoutMs: 200,
        idleTimeoutMs: 60_000,
      }),
      'network',
    );
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(outcome.detail).toContain('not connected after 200 ms');
    expect((outcome.cause as NodeJS.ErrnoException).code).toBe('ETIMEDOUT');
  });

  it('a sink that refuses the head → refused; one that throws → its error', async () => {
    const server = await serveBody(randomBytes(100_000));
    let calls = 0;
    const refusing: DownloadSink = { head: () => false, data: () => void calls++ };
    expectFallback(await download({ url: server.url }, refusing, SMALL), 'refused');
    const failure = new Error('bad etag');
    const throwing: DownloadSink = {
      head: async () => {
        throw failure;
      },
      data: () => void calls++,
    };
    await expect(download({ url: server.url }, throwing, SMALL)).rejects.toBe(failure);
    expect(calls).toBe(0);
    await server.closed(0);
    await server.closed(1);
  });

  it('rejects a URL or header it cannot send, before connecting', async () => {
    await expect(download({ url: 'ftp://x/y' }, collector().sink)).rejects.toThrow(TypeError);
    await expect(
      download(
        { url: 'http://127.0.0.1:1/', headers: { a: 'x\r\nInjected: 1' } },
        collector().sink,
      ),
    ).rejects.toThrow(TypeError);
    await expect(
      download({ url: 'http://127.0.0.1:1/', target: '/a b' }, collector().sink),
    ).rejects.toThrow(TypeError);
  });

  it('parseHead: the parser alone', () => {
    const ok = parseHead('HTTP/1.1 200 \r\nContent-Length: 0\r\nConnection: Close\r\n\r\n');
    expect(ok).toMatchObject({ status: 200, contentLength: 0, keepAlive: false });
    expect(parseHead('HTTP/1.1 206\r\ncontent-length: 7\r\n\r\n')).toMatchObject({
      status: 206,
      keepAlive: true,
    });
    expect(parseHead('HTTP/1.1 200 OK\r\nContent-Length: 1\r\n')).toMatchObject({
      fallback: 'malformed',
    });
    // Blanks around a value go, obs-text stays; repeats are joined.
    const spaced = parseHead(
      'HTTP/1.1 200 OK\r\nX-A: \t a  b \t\r\nX-B:\r\nX-C:   \r\nX-D: caf\xe9\xa0\r\nx-a: c\r\nContent-Length: 1\r\n\r\n',
    );
    expect((spaced as ResponseHead).headers).toEqual({
      'x-a': 'a  b, c',
      'x-b': '',
      'x-c': '',
      'x-d': 'caf\xe9\xa0',
      'content-length': '1',
    });
    const bad = (line: string) =>
      parseHead(`HTTP/1.1 200 OK\r\n${line}\r\nContent-Length: 1\r\n\r\n`);
    const refused: [line: string, detail: string | undefined][] = [
      [' folded: x', 'bad header line " folded: x"'],
      ['no colon', 'bad header line "no colon"'],
      ['a b: x', undefined],
      ['X-Bell: a\x07b', 'bad value of header X-Bell'],
      ['X-Lf: a\nb', 'bad value of header X-Lf'],
    ];
    for (const [line, detail] of refused) {
      expect(bad(line)).toMatchObject({ fallback: 'malformed', ...(detail ? { detail } : {}) });
    }
    expect(parseHead('HTTP/1.1 2000 OK\r\n\r\n')).toMatchObject({ fallback: 'malformed' });
    // A long run of blanks before a bad character is refused at once: a backtracking blow-up
    // would run far past the test's timeout.
    expect(bad(`X-Long:${' '.repeat(60_000)}\x01`)).toMatchObject({ fallback: 'malformed' });
    expect(bad(`X-Long: a${' '.repeat(60_000)}\x01`)).toMatchObject({ fallback: 'malformed' });
    // A header named like an Object.prototype member cannot reach the prototype.
    const proto = parseHead('HTTP/1.1 200 OK\r\n__proto__: x\r\nContent-Length: 1\r\n\r\n');
    const headers = (proto as ResponseHead).headers;
    expect(Object.getPrototypeOf(headers)).toBe(null);
    expect(Object.entries(headers)).toContainEqual(['__proto__', 'x']);
  });
});

describe('http1 download: failures after the head', () => {
  it('the server closing early → StoreError naming the byte counts', async () => {
    const body = randomBytes(50_000);
    const server = await rawServer((socket) => {
      socket.end(Buffer.concat([head('200 OK', [`Content-Length: ${body.length + 10}`]), body]));
    });
    const c = collector();
    const error = await download({ url: server.url }, c.sink, SMALL).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
    expect(String(error)).toContain(`after 50000 of 50010 body bytes`);
    // The message names the object but never the query (a presigned URL's signature).
    expect(String(error)).toContain('/bucket/some%20key');
    expect(String(error)).not.toContain('versionId');
    expect(body.subarray(0, c.bytes().length).equals(c.bytes())).toBe(true);
  });

  it('a reset mid-body → StoreError with the socket error as cause', async () => {
    const server = await rawServer(async (socket) => {
      socket.write(
        Buffer.concat([head('200 OK', ['Content-Length: 100000']), randomBytes(30_000)]),
      );
      await sleep(30);
      socket.resetAndDestroy();
    });
    const error = await download({ url: server.url }, collector().sink, SMALL).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StoreError);
    expect(((error as StoreError).cause as NodeJS.ErrnoException).code).toBe('ECONNRESET');
  });

  it('no byte for idleTimeoutMs mid-body → StoreError (ETIMEDOUT), socket destroyed', async () => {
    const server = await rawServer((socket) => {
      socket.write(Buffer.concat([head('200 OK', ['Content-Length: 100000']), randomBytes(1000)]));
    });
    const error = await download({ url: server.url }, collector().sink, {
      ...SMALL,
      idleTimeoutMs: 150,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
    expect(((error as StoreError).cause as NodeJS.ErrnoException).code).toBe('ETIMEDOUT');
    await server.closed(0);
  });

  it('a slow sink is not an idle server: paused reading does not count toward the timeout', async () => {
    const body = randomBytes(512 * 1024);
    const server = await serveBody(body);
    const c = collector({ delayMs: 60 });
    await download({ url: server.url }, c.sink, {
      bufferBytes: 64 * 1024,
      buffers: 2,
      idleTimeoutMs: 100,
    });
    expect(c.bytes().equals(body)).toBe(true);
    // The download took well over the idle timeout, most of it paused.
    expect(c.calls * 60).toBeGreaterThan(300);
  });

  it('abort before the start → AbortError, no connection', async () => {
    const server = await rawServer(() => {});
    const controller = new AbortController();
    controller.abort();
    const error = await download({ url: server.url }, collector().sink, {
      signal: controller.signal,
    }).catch((e: unknown) => e);
    expect((error as Error).name).toBe('AbortError');
    await sleep(20);
    expect(server.sockets).toHaveLength(0);
  });

  it('abort while waiting for the head → AbortError (not a fallback)', async () => {
    const server = await rawServer(() => {});
    const error = await download({ url: server.url }, collector().sink, {
      signal: AbortSignal.timeout(50),
    }).catch((e: unknown) => e);
    expect((error as Error).name).toBe('AbortError');
    expect((error as Error).cause).toBeInstanceOf(Error);
    await server.closed(0);
  });

  it('abort during the body → AbortError after the sink call in flight ended, no call after', async () => {
    const server = await rawServer((socket) => {
      socket.write(
        Buffer.concat([head('200 OK', ['Content-Length: 1000000']), randomBytes(40_000)]),
      );
    });
    const controller = new AbortController();
    const events: string[] = [];
    const sink: DownloadSink = {
      data: async () => {
        events.push('data');
        if (events.length === 1) controller.abort();
        await sleep(30);
        events.push('data done');
      },
    };
    const error = await download({ url: server.url }, sink, {
      ...SMALL,
      signal: controller.signal,
    }).catch((e: unknown) => e);
    events.push('rejected');
    expect((error as Error).name).toBe('AbortError');
    expect(events).toEqual(['data', 'data done', 'rejected']);
    await server.closed(0);
    await sleep(20);
    expect(events).toHaveLength(3);
  });

  it('many GETs under one signal: no abort listener piles up; an abort rejects those in flight', async () => {
    const controller = new AbortController();
    const { signal } = controller;
    const done = await serveBody(randomBytes(5_000));
    for (let i = 0; i < 5; i++) {
      const got = await fetchWhole({ url: done.url }, { ...SMALL, signal, maxBytes: 10_000 });
      expect(isFallback(got) ? got.fallback : got.body.length).toBe(5_000);
    }
    // No listener left behind per GET (at most the one the signal's GETs share).
    expect(EventEmitter.getEventListeners(signal, 'abort').length).toBeLessThanOrEqual(1);
    const stalled = await rawServer((socket) => {
      socket.write(Buffer.concat([head('200 OK', ['Content-Length: 1000']), randomBytes(10)]));
    });
    const pending = Array.from({ length: 4 }, () =>
      fetchWhole({ url: stalled.url }, { ...SMALL, signal, maxBytes: 10_000 }).catch(
        (e: unknown) => e,
      ),
    );
    await sleep(50);
    controller.abort();
    for (const error of await Promise.all(pending)) {
      expect((error as Error).name).toBe('AbortError');
    }
    await stalled.closed(0);
    await stalled.closed(3);
  });

  it("a sink's error rejects the download with that error; the socket is destroyed", async () => {
    const server = await serveBody(randomBytes(300_000));
    const failure = new Error('ENOSPC');
    let calls = 0;
    const sink: DownloadSink = {
      data: () => {
        calls++;
        if (calls === 2) throw failure;
      },
    };
    await expect(download({ url: server.url }, sink, SMALL)).rejects.toBe(failure);
    expect(calls).toBe(2);
    await server.closed(0);
  });

  it('discard before pipeTo closes the connection; pipeTo afterwards rejects', async () => {
    const server = await serveBody(randomBytes(300_000));
    const response = await openDownload({ url: server.url }, SMALL);
    if (isFallback(response)) throw new Error(response.detail);
    response.discard();
    await expect(response.pipeTo(collector().sink)).rejects.toBeInstanceOf(StoreError);
    await server.closed(0);
  });
});

describe('http1 download: as a Readable', () => {
  it('streams the body (copies), with backpressure, and errors with the transfer error', async () => {
    const body = randomBytes(700_000);
    const server = await serveBody(body);
    const response = await openDownload({ url: server.url }, SMALL);
    if (isFallback(response)) throw new Error(response.detail);
    const chunks: Buffer[] = [];
    for await (const chunk of responseReadable(response)) {
      chunks.push(chunk as Buffer);
      await sleep(1);
    }
    expect(Buffer.concat(chunks).equals(body)).toBe(true);

    const short = await rawServer((socket) => {
      socket.end(Buffer.concat([head('200 OK', ['Content-Length: 100000']), randomBytes(10)]));
    });
    const cut = await openDownload({ url: short.url }, SMALL);
    if (isFallback(cut)) throw new Error(cut.detail);
    const error = await (async () => {
      for await (const _ of responseReadable(cut)) {
        // drain
      }
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
  });

  it('destroying the stream closes the connection', async () => {
    const server = await rawServer((socket) => {
      socket.write(
        Buffer.concat([head('200 OK', ['Content-Length: 10000000']), randomBytes(50_000)]),
      );
    });
    const response = await openDownload({ url: server.url }, SMALL);
    if (isFallback(response)) throw new Error(response.detail);
    const stream = responseReadable(response);
    for await (const _ of stream) break;
    expect(stream.destroyed).toBe(true);
    await server.closed(0);
  });
});

describe('http1 download: bounded memory', () => {
  it('a slow sink holds at most `buffers` buffers; the server is paused, not buffered', async () => {
    const body = randomBytes(4 * MiB);
    const server = await serveBody(body);
    const pool = new DownloadBufferPool();
    let mostOut = 0;
    const chunks: Buffer[] = [];
    const sink: BodySink = {
      data: async (chunk) => {
        mostOut = Math.max(mostOut, pool.outstanding);
        chunks.push(Buffer.from(chunk));
        await sleep(2);
      },
    };
    const result = await download({ url: server.url }, sink, {
      bufferBytes: 64 * 1024,
      buffers: 3,
      bufferPool: pool,
    });
    expect(result).toMatchObject({ contentLength: body.length });
    expect(Buffer.concat(chunks).equals(body)).toBe(true);
    expect(pool.peakOutstanding).toBeLessThanOrEqual(3);
    expect(mostOut).toBeLessThanOrEqual(3);
    expect(pool.allocated).toBeLessThanOrEqual(4);
    await server.closed(0);
    await sleep(10);
    expect(pool.outstanding).toBe(0);
  });

  it('without pipeTo, reads ahead at most `buffers` buffers, then pauses', async () => {
    const body = randomBytes(2 * MiB);
    const server = await serveBody(body);
    const pool = new DownloadBufferPool();
    const response = await openDownload(
      { url: server.url },
      {
        bufferBytes: 64 * 1024,
        buffers: 4,
        bufferPool: pool,
      },
    );
    if (isFallback(response)) throw new Error(response.detail);
    await sleep(200);
    expect(pool.peakOutstanding).toBeLessThanOrEqual(4);
    const c = collector();
    await response.pipeTo(c.sink);
    expect(c.bytes().equals(body)).toBe(true);
    expect(pool.peakOutstanding).toBeLessThanOrEqual(4);
  });

  it('a 5 MiB download with default settings reuses its buffers (no buffer per read)', async () => {
    const body = randomBytes(5 * MiB);
    const server = await rawServer(async (socket) => {
      socket.write(head('200 OK', [`Content-Length: ${body.length}`]));
      for (let at = 0; at < body.length; at += 64 * 1024) {
        socket.write(body.subarray(at, at + 64 * 1024));
        await sleep(0);
      }
    });
    const pool = new DownloadBufferPool();
    const hash = createHash('sha256');
    let calls = 0;
    await download(
      { url: server.url },
      {
        data: (chunk) => {
          calls++;
          hash.update(chunk);
        },
      },
      { bufferPool: pool },
    );
    expect(hash.digest('hex')).toBe(createHash('sha256').update(body).digest('hex'));
    expect(calls).toBeGreaterThan(4);
    expect(pool.allocated).toBeLessThanOrEqual(4);
  });
});

describe('http1 download: keep-alive', () => {
  let pool: Http1Pool;
  beforeAll(() => {
    pool = new Http1Pool({ idleTimeoutMs: 2000 });
  });
  afterEach(() => pool.close());

  it('reuses a complete connection for the next download to the same origin', async () => {
    const bodies = [randomBytes(100_000), randomBytes(7), randomBytes(0), randomBytes(300_000)];
    const server = await rawServer((socket, ctx) => {
      const body = bodies[ctx.index] as Buffer;
      socket.write(Buffer.concat([head('200 OK', [`Content-Length: ${body.length}`]), body]));
    });
    for (const body of bodies) {
      const c = collector();
      await download({ url: server.url }, c.sink, { ...SMALL, pool });
      expect(c.bytes().equals(body)).toBe(true);
    }
    expect(server.requests).toHaveLength(4);
    expect(server.sockets).toHaveLength(1);
    expect(server.requests[0]).not.toContain('connection: close');
    expect(pool.idleCount).toBe(1);
  });

  it('does not reuse after Connection: close, extra bytes, HTTP/1.0 or a failure', async () => {
    const responses = [
      'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab',
      'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabEXTRA',
      'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nab',
      'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n',
      'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab',
    ];
    const server = await rawServer((socket, ctx) => socket.write(responses[ctx.index] as string));
    for (const [i] of responses.entries()) {
      const c = collector();
      const outcome = await download({ url: server.url }, c.sink, { pool });
      if (i === 3) expectFallback(outcome, 'status');
      else expect(c.bytes().toString()).toBe('ab');
    }
    expect(server.sockets).toHaveLength(5);
  });

  it('replaces a pooled connection the server closed meanwhile, transparently', async () => {
    const server = await rawServer((socket, ctx) => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab');
      // The server forgets the first connection right after answering, without saying so.
      if (ctx.connection === 0) setTimeout(() => socket.destroy(), 5);
    });
    await download({ url: server.url }, collector().sink, { pool });
    await server.closed(0);
    const c = collector();
    await download({ url: server.url }, c.sink, { pool });
    expect(c.bytes().toString()).toBe('ab');
    expect(server.sockets).toHaveLength(2);
  });

  it('retries a dead pooled connection once on a new one', async () => {
    const server = await rawServer((socket, ctx) => {
      if (ctx.index === 1) {
        // The second request reaches a connection that dies without a byte.
        socket.destroy();
        return;
      }
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab');
    });
    await download({ url: server.url }, collector().sink, { pool });
    const c = collector();
    await download({ url: server.url }, c.sink, { pool });
    expect(c.bytes().toString()).toBe('ab');
    expect(server.requests).toHaveLength(3);
    expect(server.sockets).toHaveLength(2);
  });

  it('drops idle connections after idleTimeoutMs, or when the server sends unasked bytes', async () => {
    const short = new Http1Pool({ idleTimeoutMs: 100 });
    const server = await rawServer((socket, ctx) => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab');
      if (ctx.connection === 1) setTimeout(() => socket.write('junk'), 20);
    });
    await download({ url: server.url }, collector().sink, { pool: short });
    expect(short.idleCount).toBe(1);
    await server.closed(0);
    expect(short.idleCount).toBe(0);
    await download({ url: server.url }, collector().sink, { pool: short });
    await server.closed(1);
    expect(short.idleCount).toBe(0);
    short.close();
  });

  it('never reuses a connection idle for longer than idleTimeoutMs, even before the sweep closes it', async () => {
    // A long timeout, so the sweep does not run during the test; the clock is moved instead.
    const slow = new Http1Pool({ idleTimeoutMs: 60_000 });
    const server = await rawServer((socket) => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab');
    });
    await download({ url: server.url }, collector().sink, { pool: slow });
    await download({ url: server.url }, collector().sink, { pool: slow });
    expect(server.sockets).toHaveLength(1);
    const now = process.uptime();
    const later = vi.spyOn(process, 'uptime').mockReturnValue(now + 60);
    try {
      await download({ url: server.url }, collector().sink, { pool: slow });
    } finally {
      later.mockRestore();
    }
    // A new connection was made, and the stale one closed.
    expect(server.sockets).toHaveLength(2);
    await server.closed(0);
    slow.close();
  });
});

describe('http1 download: whole small bodies (fetchWhole)', () => {
  let pool: Http1Pool;
  beforeAll(() => {
    pool = new Http1Pool({ idleTimeoutMs: 2000 });
  });
  afterEach(() => pool.close());

  it('reads head and body into one Buffer of its own, split however the bytes arrive', async () => {
    const bodies = Array.from({ length: 4 }, () => randomBytes(20_000));
    const body = bodies[0] as Buffer;
    const server = await rawServer((socket, ctx) => {
      const b = bodies[ctx.index] as Buffer;
      const all = Buffer.concat([head('200 OK', [`Content-Length: ${b.length}`, 'ETag: "e"']), b]);
      // In pieces: part of the head, the rest of the head with some body, the body's tail.
      socket.write(all.subarray(0, 10));
      setTimeout(() => socket.write(all.subarray(10, 5_000)), 5);
      setTimeout(() => socket.write(all.subarray(5_000)), 10);
    });
    const got = await fetchWhole({ url: server.url }, { ...SMALL, maxBytes: 64 * 1024 });
    if (isFallback(got)) throw new Error(`fallback ${got.fallback}`);
    expect(got.status).toBe(200);
    expect(got.contentLength).toBe(body.length);
    expect(got.headers.etag).toBe('"e"');
    expect(got.body.equals(body)).toBe(true);
    // Its own memory, not a view of a reused read buffer: later reads leave it as it was.
    const kept = Buffer.from(got.body);
    for (let i = 0; i < 3; i++) {
      const again = await fetchWhole({ url: server.url }, { ...SMALL, maxBytes: 64 * 1024 });
      if (isFallback(again)) throw new Error(`fallback ${again.fallback}`);
      expect(again.body.equals(bodies[i + 1] as Buffer)).toBe(true);
    }
    expect(got.body.equals(kept)).toBe(true);
  });

  it('memory of released bodies is used again; a body not released is never overwritten', async () => {
    // A different 20 KB body per request: 300 of them are 6 MB, six slabs' worth.
    const bodyFor = (i: number) => Buffer.alloc(20_000, i % 251);
    const server = await rawServer((socket, ctx) => {
      const b = bodyFor(ctx.index);
      socket.write(Buffer.concat([head('200 OK', [`Content-Length: ${b.length}`]), b]));
    });
    const get = async () => {
      const got = await fetchWhole({ url: server.url }, { ...SMALL, pool, maxBytes: 64 * 1024 });
      if (isFallback(got)) throw new Error(`fallback ${got.fallback}`);
      return got;
    };
    // All released once checked (twice: it is idempotent): the same memory serves them all.
    const memory = new Set<ArrayBufferLike>();
    let n = 0;
    for (; n < 300; n++) {
      const got = await get();
      expect(got.body.equals(bodyFor(n))).toBe(true);
      memory.add(got.body.buffer);
      got.release();
      got.release();
    }
    // Without reuse they would span six 1 MiB slabs.
    expect(memory.size).toBeLessThanOrEqual(2);
    // Every tenth kept, the others released: the kept ones stay as they came.
    const kept: { i: number; body: Buffer }[] = [];
    for (; n < 600; n++) {
      const got = await get();
      if (n % 10 === 0) kept.push({ i: n, body: got.body });
      else got.release();
    }
    for (const { i, body } of kept) expect(body.equals(bodyFor(i))).toBe(true);
  });

  it('an empty body is an empty Buffer', async () => {
    const server = await serveBody(Buffer.alloc(0));
    const got = await fetchWhole({ url: server.url }, { maxBytes: 10 });
    if (isFallback(got)) throw new Error(`fallback ${got.fallback}`);
    expect(got.body.length).toBe(0);
  });

  it('a body over maxBytes is refused from its Content-Length, before any body byte is read', async () => {
    const server = await serveBody(randomBytes(5_000));
    const got = await fetchWhole({ url: server.url }, { maxBytes: 4_999, pool });
    expectFallback(got, 'refused');
    expect((got as DownloadFallback).status).toBe(200);
    await server.closed(0);
    expect(pool.idleCount).toBe(0);
  });

  it('hands back what openDownload hands back (a 404, no Content-Length)', async () => {
    const missing = await serveBody(Buffer.from('<Error/>'), [], '404 Not Found');
    expectFallback(await fetchWhole({ url: missing.url }, { maxBytes: 100 }), 'status');
    const chunked = await rawServer((socket) =>
      socket.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n'),
    );
    expectFallback(await fetchWhole({ url: chunked.url }, { maxBytes: 100 }), 'transfer-encoding');
  });

  it('fails after the head like a download: early close → StoreError, abort → AbortError', async () => {
    const early = await rawServer((socket) =>
      socket.end(Buffer.concat([head('200 OK', ['Content-Length: 100']), Buffer.alloc(40)])),
    );
    const error = await fetchWhole({ url: early.url }, { maxBytes: 100 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
    expect(String(error)).toContain('after 40 of 100 body bytes');

    const stalled = await rawServer((socket) =>
      socket.write(Buffer.concat([head('200 OK', ['Content-Length: 100']), Buffer.alloc(40)])),
    );
    const controller = new AbortController();
    const pending = fetchWhole({ url: stalled.url }, { maxBytes: 100, signal: controller.signal });
    setTimeout(() => controller.abort(), 30);
    const aborted = await pending.catch((e: unknown) => e);
    expect((aborted as Error).name).toBe('AbortError');
    await stalled.closed(0);
  });

  it('rejects a maxBytes that is not a whole number ≥ 0', async () => {
    await expect(fetchWhole({ url: 'http://127.0.0.1:1/' }, { maxBytes: -1 })).rejects.toThrow(
      RangeError,
    );
    await expect(fetchWhole({ url: 'http://127.0.0.1:1/' }, { maxBytes: 1.5 })).rejects.toThrow(
      RangeError,
    );
  });

  it('shares keep-alive connections with streamed downloads; reused buffers never leak between them', async () => {
    // Whole reads let the connection read into its buffer from the start again; a streamed
    // download that follows on the same connection must still see only its own bytes, and a
    // sink holding a chunk must keep it intact while later bytes arrive.
    const bodies = Array.from({ length: 12 }, (_, i) =>
      randomBytes(i % 3 === 2 ? 60_000 : 3_000 + i),
    );
    const server = await rawServer((socket, ctx) => {
      const body = bodies[ctx.index] as Buffer;
      socket.write(Buffer.concat([head('200 OK', [`Content-Length: ${body.length}`]), body]));
    });
    for (const [i, body] of bodies.entries()) {
      if (i % 3 === 2) {
        const c = collector({ delayMs: 2 });
        await download({ url: server.url }, c.sink, { ...SMALL, pool });
        expect(c.bytes().equals(body)).toBe(true);
      } else {
        const got = await fetchWhole({ url: server.url }, { ...SMALL, pool, maxBytes: 10_000 });
        if (isFallback(got)) throw new Error(`fallback ${got.fallback}`);
        expect(got.body.equals(body)).toBe(true);
      }
    }
    expect(server.sockets).toHaveLength(1);
  });
});

/** A self-signed certificate for 127.0.0.1 made with openssl, or why there is none. */
function makeCertificate(): { key: string; cert: string } | string {
  const dir = mkdtempSync(path.join(tmpdir(), 'provcat-tls-'));
  try {
    const r = spawnSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        path.join(dir, 'key.pem'),
        '-out',
        path.join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=IP:127.0.0.1,DNS:localhost',
      ],
      { encoding: 'utf8' },
    );
    if (r.error || r.status !== 0) return `openssl failed: ${r.error ?? r.stderr}`;
    return {
      key: readFileSync(path.join(dir, 'key.pem'), 'utf8'),
      cert: readFileSync(path.join(dir, 'cert.pem'), 'utf8'),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const certificate = makeCertificate();
const describeTls = typeof certificate === 'string' ? describe.skip : describe;
describeTls(
  `http1 download over TLS${typeof certificate === 'string' ? ` (skipped: ${certificate})` : ''}`,
  () => {
    const { key, cert } = certificate as { key: string; cert: string };

    it('tls.connect honours onread: a 3 MiB body through reused buffers, byte for byte', async () => {
      const body = randomBytes(3 * MiB + 1);
      const server = await rawServer(
        (socket) => {
          socket.write(Buffer.concat([head('200 OK', [`Content-Length: ${body.length}`]), body]));
        },
        { key, cert },
      );
      const pool = new DownloadBufferPool();
      const c = collector();
      const result = await download({ url: server.url }, c.sink, {
        tls: { ca: cert },
        bufferPool: pool,
      });
      expect(result).toMatchObject({ status: 200, contentLength: body.length });
      expect(c.bytes().equals(body)).toBe(true);
      expect(pool.allocated).toBeLessThanOrEqual(4);
    });

    it('an untrusted certificate fails before the head → network fallback', async () => {
      const server = await rawServer((socket) => socket.write('HTTP/1.1 200 OK\r\n\r\n'), {
        key,
        cert,
      });
      const outcome = expectFallback(
        await download({ url: server.url }, collector().sink),
        'network',
      );
      expect(String(outcome.cause)).toMatch(/self.signed|certificate/i);
    });

    it('reuses a TLS connection with a pool', async () => {
      const pool = new Http1Pool();
      const tlsOptions = { ca: cert };
      const server = await rawServer(
        (socket) => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'),
        { key, cert },
      );
      for (let i = 0; i < 3; i++) {
        const c = collector();
        await download({ url: server.url }, c.sink, { tls: tlsOptions, pool });
        expect(c.bytes().toString()).toBe('ok');
      }
      expect(server.sockets).toHaveLength(1);
      pool.close();
    });
  },
);

describe('file sink', () => {
  let dir = '';
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'provcat-sink-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  for (const direct of [false, true]) {
    it(`pipeToFile writes the exact body with early syncs and a hash (direct: ${direct})`, async () => {
      const body = randomBytes(3 * MiB + 17);
      const server = await serveBody(body);
      const response = await openDownload({ url: server.url }, { bufferBytes: 256 * 1024 });
      if (isFallback(response)) throw new Error(response.detail);
      const file = path.join(dir, `out-${direct}`);
      const fd = openSync(file, 'w');
      const hash = createHash('sha256');
      let progress = 0;
      const written = await pipeToFile(response, fd, {
        direct,
        syncEveryBytes: MiB,
        hash,
        onBytes: (n) => {
          progress += n;
        },
      });
      closeSync(fd);
      expect(written).toBe(body.length);
      expect(progress).toBe(body.length);
      expect(readFileSync(file).equals(body)).toBe(true);
      expect(hash.digest('hex')).toBe(createHash('sha256').update(body).digest('hex'));
    });
  }

  it('a write failure rejects the download with the fs error', async () => {
    const server = await serveBody(randomBytes(200_000));
    const file = path.join(dir, 'readonly');
    closeSync(openSync(file, 'w'));
    const fd = openSync(file, 'r');
    const response = await openDownload({ url: server.url }, SMALL);
    if (isFallback(response)) throw new Error(response.detail);
    const error = await pipeToFile(response, fd).catch((e: unknown) => e);
    closeSync(fd);
    expect((error as NodeJS.ErrnoException).code).toBe('EBADF');
    await server.closed(0);
  });

  it('FileSink asks for 1 MiB chunks by default', () => {
    expect(new FileSink(0).batchBytes).toBe(MiB);
  });
});

describeS3('http1 download against S3 (presigned GetObject)', () => {
  let client: S3Client;
  let bucket = '';
  // On AWS the shared bucket: everything this suite writes stays below `prefix`.
  const prefix = `h1-${randomBytes(4).toString('hex')}/`;
  const key = `${prefix}dir/big file.bin`;
  const body = randomBytes(3 * MiB + 12_345);

  beforeAll(async () => {
    client = testS3Client();
    bucket = await createTestBucket('h1');
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
  });
  afterAll(async () => {
    client.destroy();
    await dropTestBucket(bucket, prefix);
  });

  it('downloads a few MiB byte for byte, a range as 206, and hands a 404 back', async () => {
    const url = await getSignedUrl(client, new GetObjectCommand({ Bucket: bucket, Key: key }), {
      expiresIn: 600,
    });
    const c = collector();
    const result = await download({ url }, c.sink);
    expect(result).toMatchObject({ status: 200, contentLength: body.length });
    expect((result as ResponseHead).headers.etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect(c.bytes().equals(body)).toBe(true);

    const ranged = collector();
    const r206 = await download({ url, headers: { range: 'bytes=1000-1999999' } }, ranged.sink);
    expect(r206).toMatchObject({ status: 206, contentLength: 1_999_000 });
    expect((r206 as ResponseHead).headers['content-range']).toBe(
      `bytes 1000-1999999/${body.length}`,
    );
    expect(ranged.bytes().equals(body.subarray(1000, 2_000_000))).toBe(true);

    const missing = await getSignedUrl(
      client,
      new GetObjectCommand({ Bucket: bucket, Key: `${prefix}nope` }),
    );
    const outcome = expectFallback(await download({ url: missing }, collector().sink), 'status');
    expect(outcome.status).toBe(404);
  });
});
