// The "hand-written SDK loop" peer of the GCS benchmark case (gcs.mjs): what a user writes
// instead of provcat, with @google-cloud/storage 7.22 and its defaults.
//
//   STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT node bench/raw-gcs-fetch.mjs \
//     --bucket B --prefix P/ --dest DIR [--concurrency 16]
//
// `getFiles` pages under the prefix (the SDK's own paging), then `file.download({ destination })`
// 16 at a time into DIR/<key relative to the prefix> (the loop is fetch-loop.mjs, shared with the
// S3 peers). The SDK validates each download with its CRC32C, as it does by default; no cache,
// no fsync. Prints one JSON line: files and bytes written.
import { stat } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { Storage } from '@google-cloud/storage';
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
  throw new Error('usage: raw-gcs-fetch.mjs --bucket B --prefix P/ --dest DIR');
}
const bucket = new Storage().bucket(values.bucket);
const keys = await listKeys(async (token) => {
  const [files, next] = await bucket.getFiles({
    prefix: values.prefix,
    pageToken: token,
    autoPaginate: false,
  });
  return { keys: files.map((f) => f.name), next: next?.pageToken };
});
const { files, bytes } = await fetchKeys(keys, {
  prefix: values.prefix,
  dest: values.dest,
  concurrency: Number(values.concurrency),
  getTo: async (key, file) => {
    await bucket.file(key).download({ destination: file });
    return (await stat(file)).size;
  },
});
console.log(JSON.stringify({ files, bytes }));
