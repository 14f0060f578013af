// The "hand-written SDK loop" peer of the benchmark: what a user writes instead of provcat.
//
//   node test/bench/raw-sdk-fetch.mjs --bucket B --prefix P/ --dest DIR [--concurrency 16]
//   node test/bench/raw-sdk-fetch.mjs --bucket B --key K --dest FILE
//
// Folder mode: ListObjectsV2 pages under the prefix, then GetObject 16 at a time, each body
// streamed to DIR/<key relative to the prefix>. File mode: one GetObject streamed to FILE. It is
// deliberately plain @aws-sdk/client-s3 with its defaults plus a keep-alive agent sized for the
// concurrency, as the SDK's documentation shows it: no cache, no fsync, no integrity check. The
// environment gives the endpoint and credentials (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ...).
// Prints one JSON line: files and bytes written.
import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { NodeHttpHandler } from '@smithy/node-http-handler';

const { values } = parseArgs({
  options: {
    bucket: { type: 'string' },
    prefix: { type: 'string', default: '' },
    key: { type: 'string' },
    dest: { type: 'string' },
    concurrency: { type: 'string', default: '16' },
  },
});
if (!values.bucket || !values.dest) {
  throw new Error('usage: raw-sdk-fetch.mjs --bucket B (--prefix P/ | --key K) --dest PATH');
}
const concurrency = Number(values.concurrency);
const client = new S3Client({
  region: process.env.AWS_REGION ?? 'us-east-1',
  forcePathStyle: true,
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
  requestHandler: new NodeHttpHandler({
    httpAgent: new http.Agent({ keepAlive: true, maxSockets: concurrency }),
  }),
});

async function getTo(key, file) {
  const r = await client.send(new GetObjectCommand({ Bucket: values.bucket, Key: key }));
  await pipeline(r.Body, createWriteStream(file));
  return r.ContentLength ?? 0;
}

let files = 0;
let bytes = 0;
if (values.key !== undefined) {
  await mkdir(path.dirname(values.dest), { recursive: true });
  bytes = await getTo(values.key, values.dest);
  files = 1;
} else {
  const keys = [];
  let token;
  do {
    const page = await client.send(
      new ListObjectsV2Command({
        Bucket: values.bucket,
        Prefix: values.prefix,
        ContinuationToken: token,
      }),
    );
    for (const o of page.Contents ?? []) if (o.Key && !o.Key.endsWith('/')) keys.push(o.Key);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  const made = new Set();
  let next = 0;
  async function worker() {
    while (next < keys.length) {
      const key = keys[next++];
      const file = path.join(values.dest, key.slice(values.prefix.length));
      const dir = path.dirname(file);
      if (!made.has(dir)) {
        await mkdir(dir, { recursive: true });
        made.add(dir);
      }
      const n = await getTo(key, file);
      bytes += n;
      files++;
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
}
client.destroy();
console.log(JSON.stringify({ files, bytes }));
