// A lower bound for a Node client: the folder fetch of raw-sdk-fetch.mjs without the SDK's
// command stack. Requests are signed by the SDK's own SigV4 signer (@smithy/signature-v4) with
// credentials from the SDK's default provider chain (@aws-sdk/credential-provider-node), and
// sent with node:http on a keep-alive agent; the listing XML is read with the SDK's XML parser.
// Nothing else of @aws-sdk/client-s3 is loaded. This is what "a faster path built on the SDK's
// own pieces" (issue 5) can reach; the benchmark reports it so the S3 driver's per-request cost
// can be judged against it.
//
//   node bench/signer-fetch.mjs --bucket B --prefix P/ --dest DIR [--concurrency 16]
//
// Prints one JSON line: files and bytes written.
import { createHash, createHmac } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import http from 'node:http';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { parseXML } from '@aws-sdk/xml-builder';
import { SignatureV4 } from '@smithy/signature-v4';
import { fetchKeys, listKeys } from './fetch-loop.mjs';

const { values } = parseArgs({
  options: {
    bucket: { type: 'string' },
    prefix: { type: 'string', default: '' },
    dest: { type: 'string' },
    concurrency: { type: 'string', default: '16' },
  },
});
if (!values.bucket || !values.dest) {
  throw new Error('usage: signer-fetch.mjs --bucket B --prefix P/ --dest DIR');
}
const endpoint = new URL(process.env.AWS_ENDPOINT_URL_S3 ?? 'http://127.0.0.1:7480');
const concurrency = Number(values.concurrency);
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });

/** The SDK's Checksum interface over node:crypto (SHA-256, or HMAC-SHA-256 with a secret). */
class Sha256 {
  constructor(secret) {
    this.h = secret === undefined ? createHash('sha256') : createHmac('sha256', secret);
  }
  update(data) {
    this.h.update(data);
  }
  async digest() {
    return this.h.digest();
  }
}

const signer = new SignatureV4({
  credentials: defaultProvider(),
  region: process.env.AWS_REGION ?? 'us-east-1',
  service: 's3',
  sha256: Sha256,
  uriEscapePath: false,
  applyChecksum: true,
});

const EMPTY_SHA256 = createHash('sha256').update('').digest('hex');
const encodeKey = (key) => key.split('/').map(encodeURIComponent).join('/');

/** Sign and send one GET; resolves with the response (status checked). */
async function get(pathname, query = {}) {
  const signed = await signer.sign({
    method: 'GET',
    protocol: endpoint.protocol,
    hostname: endpoint.hostname,
    port: Number(endpoint.port),
    path: pathname,
    query,
    headers: { host: endpoint.host, 'x-amz-content-sha256': EMPTY_SHA256 },
  });
  const search = new URLSearchParams(query).toString().replaceAll('+', '%20');
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: endpoint.hostname,
        port: endpoint.port,
        method: 'GET',
        path: search ? `${pathname}?${search}` : pathname,
        headers: signed.headers,
        agent,
      },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          reject(new Error(`GET ${pathname}: HTTP ${res.statusCode}`));
        } else resolve(res);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

async function text(res) {
  const chunks = [];
  for await (const c of res) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

const keys = await listKeys(async (token) => {
  const query = { 'list-type': '2', prefix: values.prefix };
  if (token) query['continuation-token'] = token;
  const doc = parseXML(await text(await get(`/${values.bucket}`, query))).ListBucketResult;
  const contents = doc.Contents === undefined ? [] : [doc.Contents].flat();
  return {
    keys: contents.map((o) => o.Key),
    next: doc.IsTruncated === 'true' ? doc.NextContinuationToken : undefined,
  };
});

const { files, bytes } = await fetchKeys(keys, {
  prefix: values.prefix,
  dest: values.dest,
  concurrency,
  getTo: async (key, file) => {
    const res = await get(`/${values.bucket}/${encodeKey(key)}`);
    const n = Number(res.headers['content-length']);
    await pipeline(res, createWriteStream(file));
    return n;
  },
});
agent.destroy();
console.log(JSON.stringify({ files, bytes }));
