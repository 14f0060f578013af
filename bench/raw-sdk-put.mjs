// The "SDK upload" peer of the benchmark: `@aws-sdk/lib-storage`'s Upload of one local file with
// 64 MiB parts and 4 parts in flight (the same shape as provcat's multipart defaults).
//
//   node bench/raw-sdk-put.mjs --bucket B --key K --file PATH
//
// The body is a file read stream, as the SDK's documentation shows it; lib-storage cuts it into
// parts itself (it allocates a fresh buffer per part, which is what its peak RSS shows). The
// environment gives the endpoint and credentials. Prints one JSON line: the ETag and bytes.
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { S3Client } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';

const { values } = parseArgs({
  options: {
    bucket: { type: 'string' },
    key: { type: 'string' },
    file: { type: 'string' },
    'part-mib': { type: 'string', default: '64' },
    'queue-size': { type: 'string', default: '4' },
  },
});
if (!values.bucket || !values.key || !values.file) {
  throw new Error('usage: raw-sdk-put.mjs --bucket B --key K --file PATH');
}
const client = new S3Client({
  region: process.env.AWS_REGION ?? 'us-east-1',
  forcePathStyle: true,
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
});
const size = (await stat(values.file)).size;
const upload = new Upload({
  client,
  params: { Bucket: values.bucket, Key: values.key, Body: createReadStream(values.file) },
  partSize: Number(values['part-mib']) * 1024 * 1024,
  queueSize: Number(values['queue-size']),
});
const r = await upload.done();
client.destroy();
console.log(JSON.stringify({ etag: r.ETag, bytes: size }));
