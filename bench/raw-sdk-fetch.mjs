// The "hand-written SDK loop" peer of the benchmark: what a user writes instead of provcat.
//
//   node bench/raw-sdk-fetch.mjs --bucket B --prefix P/ --dest DIR [--concurrency 16]
//   node bench/raw-sdk-fetch.mjs --bucket B --key K --dest FILE
//
// Folder mode: ListObjectsV2 pages under the prefix, then GetObject 16 at a time, each body
// streamed to DIR/<key relative to the prefix> (the loops are fetch-loop.mjs, which
// signer-fetch.mjs shares). File mode: one GetObject streamed to FILE. It is
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
import { fetchKeys, listKeys } from './fetch-loop.mjs';

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
  const keys = await listKeys(async (token) => {
    const page = await client.send(
      new ListObjectsV2Command({
        Bucket: values.bucket,
        Prefix: values.prefix,
        ContinuationToken: token,
      }),
    );
    return {
      keys: (page.Contents ?? []).flatMap((o) => (o.Key ? [o.Key] : [])),
      next: page.IsTruncated ? page.NextContinuationToken : undefined,
    };
  });
  ({ files, bytes } = await fetchKeys(keys, {
    prefix: values.prefix,
    dest: values.dest,
    concurrency,
    getTo,
  }));
}
client.destroy();
console.log(JSON.stringify({ files, bytes }));
