/**
 * The fault proxy (src/testing/fault-proxy.ts) in front of a tiny node:http server, driven
 * by plain node:http clients: it forwards keep-alive connections, chunked bodies and
 * `Expect: 100-continue` unchanged, and each knob does exactly what it says at the offset it
 * says, on the requests it matches.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type FaultProxy, startFaultProxy } from '../../src/testing/fault-proxy.js';

/** The bytes the server sends for `/bytes/N` and `/chunked/N`: a pattern, so offsets show. */
function pattern(n: number): Buffer {
  const out = Buffer.alloc(n);
  for (let i = 0; i < n; i++) out[i] = (i * 7 + 3) & 0xff;
  return out;
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

interface Seen {
  requests: number;
  /** Body bytes the server received for each PUT, and whether it completed. */
  puts: Array<{ bytes: number; complete: boolean }>;
}

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** The response ended with every byte its framing announced. */
  complete: boolean;
  error?: Error | undefined;
  ms: number;
}

interface Ask {
  method?: string;
  path: string;
  body?: Buffer;
  /** Send the body as chunked instead of with a Content-Length. */
  chunked?: boolean;
  expectContinue?: boolean;
  agent?: http.Agent;
  timeoutMs?: number;
}

describe('fault proxy', () => {
  const seen: Seen = { requests: 0, puts: [] };
  let server: http.Server;
  let proxy: FaultProxy;

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      seen.requests++;
      const [, route, size] = (req.url ?? '').split('/');
      if (req.method === 'PUT') {
        const put = { bytes: 0, complete: false };
        seen.puts.push(put);
        const hash = createHash('sha256');
        req.on('data', (c: Buffer) => {
          put.bytes += c.length;
          hash.update(c);
        });
        req.on('end', () => {
          put.complete = true;
          res.end(JSON.stringify({ bytes: put.bytes, sha256: hash.digest('hex') }));
        });
        return;
      }
      const body = pattern(Number(size));
      if (route === 'chunked') {
        for (let at = 0; at < body.length; at += 1000) res.write(body.subarray(at, at + 1000));
        res.end();
      } else {
        res.setHeader('Content-Length', body.length);
        res.end(req.method === 'HEAD' ? undefined : body);
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    proxy = await startFaultProxy({ target: `http://127.0.0.1:${port}` });
  });

  afterEach(() => proxy.set([]));

  afterAll(async () => {
    await proxy.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  function ask(a: Ask): Promise<Reply> {
    const started = performance.now();
    return new Promise((resolve) => {
      const headers: http.OutgoingHttpHeaders = {};
      if (a.body && !a.chunked) headers['content-length'] = a.body.length;
      if (a.expectContinue) headers.expect = '100-continue';
      const req = http.request(`${proxy.url}${a.path}`, {
        method: a.method ?? 'GET',
        headers,
        agent: a.agent ?? new http.Agent({ keepAlive: false }),
      });
      const chunks: Buffer[] = [];
      let status = 0;
      let replyHeaders: http.IncomingHttpHeaders = {};
      let complete = false;
      let settled = false;
      const done = (error?: Error) => {
        if (settled) return;
        settled = true;
        const body = Buffer.concat(chunks);
        resolve({
          status,
          headers: replyHeaders,
          body,
          complete,
          error,
          ms: performance.now() - started,
        });
      };
      if (a.timeoutMs) req.setTimeout(a.timeoutMs, () => req.destroy(new Error('client timeout')));
      req.on('error', done);
      req.on('response', (res) => {
        status = res.statusCode ?? 0;
        replyHeaders = res.headers;
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', done);
        res.on('close', () => {
          complete = res.complete;
          done(res.complete ? undefined : new Error('response incomplete'));
        });
      });
      const send = () => {
        if (a.chunked && a.body) {
          for (let at = 0; at < a.body.length; at += 4096)
            req.write(a.body.subarray(at, at + 4096));
          req.end();
        } else req.end(a.body);
      };
      if (a.expectContinue) req.on('continue', send);
      else send();
    });
  }

  it("forwards a keep-alive connection's many requests, chunked bodies and 100-continue unchanged", async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const before = proxy.stats();
    let count = 0;
    for (let i = 0; i < 10; i++) {
      const n = 1 + i * 9973;
      const get = await ask({ path: `/bytes/${n}`, agent });
      expect(get.status).toBe(200);
      expect(sha(get.body)).toBe(sha(pattern(n)));
      const head = await ask({ method: 'HEAD', path: `/bytes/${n}`, agent });
      expect(head.headers['content-length']).toBe(String(n));
      expect(head.body.length).toBe(0);
      const chunked = await ask({ path: `/chunked/${n}`, agent });
      expect(chunked.headers['transfer-encoding']).toBe('chunked');
      expect(sha(chunked.body)).toBe(sha(pattern(n)));
      const body = pattern(n + 5);
      const put = await ask({
        method: 'PUT',
        path: `/echo/${i}`,
        body,
        chunked: i % 2 === 0,
        expectContinue: i % 3 === 0,
        agent,
      });
      expect(JSON.parse(put.body.toString())).toEqual({ bytes: body.length, sha256: sha(body) });
      count += 4;
    }
    agent.destroy();
    const after = proxy.stats();
    expect(after.connections - before.connections).toBe(1);
    expect(after.requests - before.requests).toBe(count);
    expect(Object.values(after.faults).every((n) => n === 0)).toBe(true);
    expect(after.unreadable).toBe(0);
  });

  it('adds the latency it is given each way: 10 ms each way is at least 20 ms per round trip', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const median = async () => {
      const times: number[] = [];
      for (let i = 0; i < 25; i++) times.push((await ask({ path: '/bytes/100', agent })).ms);
      return times.sort((a, b) => a - b)[12] as number;
    };
    await ask({ path: '/bytes/1', agent });
    const base = await median();
    proxy.set([{ kind: 'latency', ms: 10 }]);
    const slow = await median();
    agent.destroy();
    const added = slow - base;
    process.stdout.write(
      `fault proxy: 10 ms each way added ${added.toFixed(1)} ms to the median round trip (${base.toFixed(1)} → ${slow.toFixed(1)} ms)\n`,
    );
    // Never less than asked (a timer never fires early). Not twice it either: latency applied
    // to a message's head and again to its body would add 40 ms; the median of 25 round trips
    // keeps the machine's own noise (up to 15 ms seen beside a loaded run) below that.
    expect(added).toBeGreaterThanOrEqual(20);
    expect(added).toBeLessThan(40);
    expect(proxy.stats().faults.latency).toBeGreaterThanOrEqual(25);
  });

  it('resets the connection after K bytes of a response body, once', async () => {
    proxy.set([{ kind: 'reset', direction: 'response', after: 5000, next: 1 }]);
    const before = proxy.stats().faults.reset;
    const cut = await ask({ path: '/bytes/200000' });
    expect(cut.error).toBeDefined();
    expect(cut.complete).toBe(false);
    expect(cut.body.length).toBeLessThanOrEqual(5000);
    expect(sha(cut.body)).toBe(sha(pattern(200000).subarray(0, cut.body.length)));
    expect(proxy.stats().faults.reset).toBe(before + 1);
    const whole = await ask({ path: '/bytes/200000' });
    expect(whole.complete).toBe(true);
    expect(whole.body.length).toBe(200000);
  });

  it('resets the connection after K bytes of a request body: the server gets no more than K', async () => {
    proxy.set([{ kind: 'reset', direction: 'request', after: 10_000, method: 'PUT' }]);
    const puts = seen.puts.length;
    const r = await ask({ method: 'PUT', path: '/echo/r', body: pattern(300_000) });
    expect(r.error).toBeDefined();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const put = seen.puts[puts];
    expect(put?.complete).toBe(false);
    expect(put?.bytes).toBeLessThanOrEqual(10_000);
  });

  it('resets at the head of a response without a body: the server did the work, the client hears nothing', async () => {
    let applied = 0;
    const server2 = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        applied++;
        res.statusCode = 204;
        res.end();
      });
    });
    await new Promise<void>((resolve) => server2.listen(0, '127.0.0.1', resolve));
    const local = await startFaultProxy({
      target: `http://127.0.0.1:${(server2.address() as AddressInfo).port}`,
      faults: [{ kind: 'reset', direction: 'response', method: 'PUT', next: 1 }],
    });
    try {
      const put = await new Promise<{ status?: number; error?: Error }>((resolve) => {
        const req = http.request(`${local.url}/x`, { method: 'PUT', agent: false });
        req.on('response', (res) => resolve({ status: res.statusCode }));
        req.on('error', (error) => resolve({ error }));
        req.end(pattern(1000));
      });
      expect(put.status).toBeUndefined();
      expect(put.error).toBeDefined();
      expect(applied).toBe(1);
      expect(local.stats().faults.reset).toBe(1);
      // A request without a body is reset before the server sees it.
      local.set([{ kind: 'reset', direction: 'request', method: 'GET', next: 1 }]);
      const get = await new Promise<{ status?: number; error?: Error }>((resolve) => {
        http
          .get(`${local.url}/y`, { agent: false }, (res) => resolve({ status: res.statusCode }))
          .on('error', (error) => resolve({ error }));
      });
      expect(get.error).toBeDefined();
      expect(applied).toBe(1);
      expect(local.stats()).toMatchObject({ requests: 2, faults: { reset: 2 } });
    } finally {
      await local.close();
      server2.closeAllConnections();
      await new Promise((resolve) => server2.close(resolve));
    }
  });

  it('stalls a response for S seconds and then goes on, or forever', async () => {
    proxy.set([{ kind: 'stall', direction: 'response', after: 1000, ms: 400, next: 1 }]);
    const slow = await ask({ path: '/bytes/50000' });
    expect(slow.ms).toBeGreaterThanOrEqual(400);
    expect(sha(slow.body)).toBe(sha(pattern(50000)));
    proxy.set([
      { kind: 'stall', direction: 'response', after: 1000, ms: Number.POSITIVE_INFINITY },
    ]);
    const stuck = await ask({ path: '/bytes/50000', timeoutMs: 500 });
    expect(stuck.error?.message).toMatch(/client timeout|incomplete/);
    expect(stuck.body.length).toBeLessThanOrEqual(1000);
    expect(stuck.ms).toBeGreaterThanOrEqual(500);
    expect(proxy.stats().faults.stall).toBeGreaterThanOrEqual(2);
  });

  it('stalls a request body: the server waits, then gets every byte', async () => {
    proxy.set([{ kind: 'stall', direction: 'request', after: 2000, ms: 300, next: 1 }]);
    const body = pattern(40_000);
    const r = await ask({ method: 'PUT', path: '/echo/s', body });
    expect(r.ms).toBeGreaterThanOrEqual(300);
    expect(JSON.parse(r.body.toString())).toEqual({ bytes: body.length, sha256: sha(body) });
  });

  it('truncates a response body: a clean close after K bytes, fixed-length or chunked', async () => {
    proxy.set([{ kind: 'truncate', after: 3000, next: 2 }]);
    const fixed = await ask({ path: '/bytes/100000' });
    expect(fixed.complete).toBe(false);
    expect(fixed.body.length).toBe(3000);
    expect(sha(fixed.body)).toBe(sha(pattern(3000)));
    const chunked = await ask({ path: '/chunked/100000' });
    expect(chunked.complete).toBe(false);
    expect(chunked.body.length).toBe(3000);
    expect(proxy.stats().faults.truncate).toBeGreaterThanOrEqual(2);
  });

  it('flips bytes of a response body at the offset given, counting payload bytes only', async () => {
    proxy.set([{ kind: 'flip', after: 1234, count: 2, next: 2 }]);
    for (const route of ['bytes', 'chunked']) {
      const r = await ask({ path: `/${route}/10000` });
      expect(r.complete).toBe(true);
      const want = pattern(10000);
      expect(r.body.length).toBe(want.length);
      const differ = [...r.body.keys()].filter((i) => r.body[i] !== want[i]);
      expect(differ).toEqual([1234, 1235]);
      expect(r.body[1234]).toBe((want[1234] as number) ^ 0xff);
    }
    // A random offset when none is given: still exactly one byte, inside the body.
    proxy.set([{ kind: 'flip', next: 1 }]);
    const r = await ask({ path: '/bytes/777' });
    const want = pattern(777);
    expect([...r.body.keys()].filter((i) => r.body[i] !== want[i])).toHaveLength(1);
  });

  it('answers a burst of N 503s itself, and the server never sees those requests', async () => {
    proxy.set([{ kind: 'status', status: 503, next: 2, method: 'GET' }]);
    const before = seen.requests;
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await ask({ path: '/bytes/10' })).status);
    expect(statuses).toEqual([503, 503, 200]);
    expect(seen.requests - before).toBe(1);

    // A PUT: answered after its body (or at once with 100-continue), never forwarded.
    proxy.set([{ kind: 'status', status: 500, method: 'PUT', next: 2 }]);
    const puts = seen.puts.length;
    const plain = await ask({ method: 'PUT', path: '/echo/x', body: pattern(100_000) });
    const waiting = await ask({
      method: 'PUT',
      path: '/echo/y',
      body: pattern(100_000),
      expectContinue: true,
    });
    expect([plain.status, waiting.status]).toEqual([500, 500]);
    expect(plain.headers.connection).toBe('close');
    expect(seen.puts.length).toBe(puts);
    expect(proxy.stats().faults.status).toBeGreaterThanOrEqual(4);
  });

  it('drops and counts a connection whose bytes are not HTTP/1.1 as it reads them', async () => {
    const before = proxy.stats().unreadable;
    const socket = net.connect(proxy.port, '127.0.0.1');
    socket.on('error', () => {});
    socket.end('PUT /echo/z HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n');
    await new Promise((resolve) => socket.on('close', resolve));
    expect(proxy.stats().unreadable).toBe(before + 1);
    expect(proxy.stats().lastUnreadable?.message).toMatch(/chunk size/);
  });

  it('matches rules on method and path, fires with the probability given, and counts requests', async () => {
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const local = await startFaultProxy({
      target: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      random,
    });
    const get = async (path: string) =>
      new Promise<number>((resolve, reject) => {
        http
          .get(`${local.url}${path}`, { agent: false }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          })
          .on('error', reject);
      });
    try {
      local.set([{ kind: 'status', status: 503, path: /^\/bytes\/7/ }]);
      expect(await get('/bytes/7')).toBe(503);
      expect(await get('/bytes/8')).toBe(200);
      expect(await get('/chunked/7')).toBe(200);
      local.set([{ kind: 'status', status: 503, probability: 0 }]);
      for (let i = 0; i < 10; i++) expect(await get('/bytes/1')).toBe(200);
      local.set([{ kind: 'status', status: 503, probability: 0.5 }]);
      let injected = 0;
      for (let i = 0; i < 100; i++) if ((await get('/bytes/1')) === 503) injected++;
      expect(injected).toBeGreaterThan(30);
      expect(injected).toBeLessThan(70);
      const stats = local.stats();
      expect(stats.requests).toBe(113);
      expect(stats.connections).toBe(113);
      expect(stats.faults.status).toBe(1 + injected);
    } finally {
      await local.close();
    }
  });
});
