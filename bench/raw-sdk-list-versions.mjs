// The lower bound of a commit: ONE ListObjectVersions pass over a folder with the plain SDK.
//
//   node bench/raw-sdk-list-versions.mjs --bucket B --prefix P/
//
// A provcat commit lists every version under the folder twice (the two-listing snapshot) and
// writes two small objects, so about 2x this pass plus the writes is its floor. The environment
// gives the endpoint and credentials. Prints one JSON line: versions, delete markers, pages.
import { parseArgs } from 'node:util';
import { ListObjectVersionsCommand, S3Client } from '@aws-sdk/client-s3';

const { values } = parseArgs({
  options: { bucket: { type: 'string' }, prefix: { type: 'string', default: '' } },
});
if (!values.bucket) throw new Error('usage: raw-sdk-list-versions.mjs --bucket B --prefix P/');
const client = new S3Client({
  region: process.env.AWS_REGION ?? 'us-east-1',
  forcePathStyle: true,
});
let versions = 0;
let deleteMarkers = 0;
let pages = 0;
let keyMarker;
let versionIdMarker;
for (;;) {
  const r = await client.send(
    new ListObjectVersionsCommand({
      Bucket: values.bucket,
      Prefix: values.prefix,
      KeyMarker: keyMarker,
      VersionIdMarker: versionIdMarker,
    }),
  );
  pages++;
  versions += r.Versions?.length ?? 0;
  deleteMarkers += r.DeleteMarkers?.length ?? 0;
  if (!r.IsTruncated) break;
  keyMarker = r.NextKeyMarker;
  versionIdMarker = r.NextVersionIdMarker;
}
client.destroy();
console.log(JSON.stringify({ versions, deleteMarkers, pages }));
