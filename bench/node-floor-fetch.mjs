// What a Node client could reach at best on the cold folder fetch, with the cache's file work:
// the yardstick behind docs/performance.md's "Targets not met". Nothing of the SDK is loaded.
// - requests: SigV4 computed here with node:crypto (a cached signing key, three hashes per
//   request), sent over raw keep-alive `net` sockets with a minimal HTTP/1.1 reader (status
//   line, Content-Length bodies only): no node:http, no SDK signer. The SDK's signer and
//   node:http are what provcat uses (issue 5 keeps the SDK the source of truth for signing),
//   so this is below anything provcat may do, not a design to copy;
// - files: exactly the cache's work per file (a blob in one of 256 fan-out folders through
//   temp + write + fsync + rename, a hard link into the folder copy, an lstat).
// It only knows Ceph's ListObjectsV2 XML well enough for the benchmark's own keys (no escaping).
//
//   node bench/node-floor-fetch.mjs --bucket B --prefix P/ --dest DIR --blobs DIR2
//     [--concurrency 16]
//
// Credentials and endpoint from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION and
// AWS_ENDPOINT_URL_S3 (http only). Prints one JSON line: files and bytes written.
import { createHash, createHmac } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fetchKeys, listKeys } from './fetch-loop.mjs';

const { values } = parseArgs({
  options: {
    bucket: { type: 'string' },
    prefix: { type: 'string', default: '' },
    dest: { type: 'string' },
    blobs: { type: 'string' },
    concurrency: { type: 'string', default: '16' },
  },
});
if (!values.bucket || !values.dest || !values.blobs) {
  throw new Error('usage: node-floor-fetch.mjs --bucket B --prefix P/ --dest DIR --blobs DIR2');
}
const endpoint = new URL(process.env.AWS_ENDPOINT_URL_S3 ?? 'http://127.0.0.1:7480');
if (endpoint.protocol !== 'http:') throw new Error('node-floor-fetch.mjs speaks http only');
const accessKey = process.env.AWS_ACCESS_KEY_ID ?? '';
const secretKey = process.env.AWS_SECRET_ACCESS_KEY ?? '';
const region = process.env.AWS_REGION ?? 'us-east-1';
const host = endpoint.host;
const EMPTY_SHA256 = createHash('sha256').update('').digest('hex');

let signingKey = { day: '', key: Buffer.alloc(0) };
/** SigV4 headers of one GET of `target` (path and canonical query). */
function signedHeaders(pathname, query) {
  const amzDate = new Date().toISOString().replace(/[-:]|\.\d{3}/g, '');
  const day = amzDate.slice(0, 8);
  if (signingKey.day !== day) {
    let k = createHmac('sha256', `AWS4${secretKey}`).update(day).digest();
    for (const part of [region, 's3', 'aws4_request'])
      k = createHmac('sha256', k).update(part).digest();
    signingKey = { day, key: k };
  }
  const names = 'host;x-amz-content-sha256;x-amz-date';
  const canonical = `GET\n${pathname}\n${query}\nhost:${host}\nx-amz-content-sha256:${EMPTY_SHA256}\nx-amz-date:${amzDate}\n\n${names}\n${EMPTY_SHA256}`;
  const scope = `${day}/${region}/s3/aws4_request`;
  const toSign = `AWS4-HMAC-SHA256\n${amzDate}\n${scope}\n${createHash('sha256').update(canonical).digest('hex')}`;
  const signature = createHmac('sha256', signingKey.key).update(toSign).digest('hex');
  return `host: ${host}\r\nx-amz-content-sha256: ${EMPTY_SHA256}\r\nx-amz-date: ${amzDate}\r\nauthorization: AWS4-HMAC-SHA256 Credential=${accessKey}/${scope}, SignedHeaders=${names}, Signature=${signature}\r\n`;
}

const idle = [];
/**
 * The body of a chunked response if `buf` holds all of it: `{ body, used }`, else undefined.
 * (radosgw sends listings chunked; objects come with a Content-Length.)
 */
function dechunk(buf, from) {
  const parts = [];
  let at = from;
  for (;;) {
    const eol = buf.indexOf('\r\n', at);
    if (eol < 0) return undefined;
    const size = Number.parseInt(buf.subarray(at, eol).toString('latin1'), 16);
    if (size === 0) {
      const end = buf.indexOf('\r\n', eol + 2);
      return end < 0 ? undefined : { body: Buffer.concat(parts), used: end + 2 };
    }
    if (buf.length < eol + 2 + size + 2) return undefined;
    parts.push(buf.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

/** A keep-alive connection that answers one request at a time. */
function connection() {
  const socket = net.connect(Number(endpoint.port || 80), endpoint.hostname);
  socket.setNoDelay(true);
  const c = { socket, waiting: undefined, buf: Buffer.alloc(0), head: undefined };
  socket.on('data', (d) => {
    c.buf = c.buf.length === 0 ? d : Buffer.concat([c.buf, d]);
    const w = c.waiting;
    if (!w) return;
    if (!c.head) {
      const end = c.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const text = c.buf.subarray(0, end).toString('latin1');
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(text);
      const chunked = /\r\ntransfer-encoding:\s*chunked/i.test(text);
      if (!length && !chunked) {
        w.reject(new Error(`unsupported response: ${text.split('\r\n')[0]}`));
        return;
      }
      c.head = { status: Number(text.slice(9, 12)), start: end + 4, length: Number(length?.[1]) };
      c.head.chunked = chunked;
    }
    const { status, start, length, chunked } = c.head;
    let body;
    let used;
    if (chunked) {
      const got = dechunk(c.buf, start);
      if (!got) return;
      ({ body, used } = got);
    } else {
      if (c.buf.length < start + length) return;
      body = c.buf.subarray(start, start + length);
      used = start + length;
    }
    c.buf = c.buf.subarray(used);
    c.head = undefined;
    c.waiting = undefined;
    idle.push(c);
    if (status === 200) w.resolve(body);
    else w.reject(new Error(`HTTP ${status}: ${body.toString('utf8').slice(0, 200)}`));
  });
  socket.on('error', (error) => c.waiting?.reject(error));
  return c;
}

/** One signed GET; resolves with the whole body (status 200 only). */
function get(pathname, query = '') {
  const c = idle.pop() ?? connection();
  return new Promise((resolve, reject) => {
    c.waiting = { resolve, reject };
    const target = query === '' ? pathname : `${pathname}?${query}`;
    c.socket.write(`GET ${target} HTTP/1.1\r\n${signedHeaders(pathname, query)}\r\n`);
  });
}

const q = (v) =>
  encodeURIComponent(v).replace(
    /[!'()*]/g,
    (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`,
  );
const keys = await listKeys(async (token) => {
  const params = [
    ['list-type', '2'],
    ['prefix', values.prefix],
  ];
  if (token) params.push(['continuation-token', token]);
  params.sort(([a], [b]) => (a < b ? -1 : 1));
  const xml = (
    await get(`/${values.bucket}`, params.map(([k, v]) => `${q(k)}=${q(v)}`).join('&'))
  ).toString('utf8');
  return {
    keys: [...xml.matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1]),
    next: /<IsTruncated>true</.test(xml)
      ? /<NextContinuationToken>([^<]*)</.exec(xml)?.[1]
      : undefined,
  };
});

const blobs = values.blobs;
const madeBlobDirs = new Set();
let counter = 0;
const { files, bytes } = await fetchKeys(keys, {
  prefix: values.prefix,
  dest: values.dest,
  concurrency: Number(values.concurrency),
  getTo: async (key, file) => {
    const body = await get(`/${values.bucket}/${key.split('/').map(q).join('/')}`);
    const h = createHash('sha256').update(key).digest('hex');
    const dir = path.join(blobs, h.slice(0, 2));
    if (!madeBlobDirs.has(dir)) {
      fs.mkdirSync(dir, { recursive: true });
      madeBlobDirs.add(dir);
    }
    const blob = path.join(dir, h);
    fs.statSync(blob, { throwIfNoEntry: false });
    const temp = path.join(dir, `.tmp-${process.pid}-${counter++}`);
    const { O_WRONLY, O_CREAT, O_EXCL } = fs.constants;
    const fd = fs.openSync(temp, O_WRONLY | O_CREAT | O_EXCL, 0o444);
    fs.writeSync(fd, body);
    await new Promise((resolve, reject) => fs.fsync(fd, (e) => (e ? reject(e) : resolve())));
    fs.closeSync(fd);
    fs.renameSync(temp, blob);
    fs.linkSync(blob, file);
    fs.lstatSync(file);
    return body.length;
  },
});
for (const c of idle) c.socket.destroy();
console.log(JSON.stringify({ files, bytes }));
