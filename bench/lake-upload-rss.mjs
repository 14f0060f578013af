// Peak memory of one managed-object upload: uploads 1 GiB to the S3 test server through an S3
// stage (64 MiB parts, 4 in flight by default) and prints the process's peak resident set size.
// From a file no part is held in memory (each part streams its range from disk), so peak RSS
// should stay near the runtime's baseline; from a stream (`--stream`) the part buffers are
// bounded by parts in flight × part size (256 MiB by default). Either way, whatever the size.
//
//   npm run build && node bench/lake-upload-rss.mjs [--size-mib 1024] [--parts-in-flight 4]
//     [--stream] [--file PATH] [--checkpoint-dir DIR] [--dist DIR]
//
// Needs the S3 server's environment (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY; path style is used). `--file` uploads an existing file instead of
// writing a fresh one of `--size-mib` (its digest is then checked against one computed here);
// `--checkpoint-dir` makes the upload resumable; `--dist` loads another build (an A/B
// comparison with another checkout). The bucket and object are deleted afterwards.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { parseArgs } from 'node:util';
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';

const MiB = 1024 * 1024;
const { values } = parseArgs({
  options: {
    'size-mib': { type: 'string', default: '1024' },
    'parts-in-flight': { type: 'string', default: '4' },
    stream: { type: 'boolean', default: false },
    file: { type: 'string' },
    'checkpoint-dir': { type: 'string' },
    dist: { type: 'string', default: new URL('../dist', import.meta.url).pathname },
  },
});
const { stageFromDescriptor } = await import(
  path.join(path.resolve(values.dist), 'src/lake/index.js')
);
const size = values.file ? (await stat(values.file)).size : Number(values['size-mib']) * MiB;
const partsInFlight = Number(values['parts-in-flight']);
const endpoint = process.env.AWS_ENDPOINT_URL_S3 ?? 'http://127.0.0.1:7480';
const region = process.env.AWS_REGION ?? 'us-east-1';

// One random MiB repeated with a changing counter: cheap to produce, no two parts alike.
const block = randomBytes(MiB);
function blockAt(i) {
  const b = Buffer.from(block);
  b.writeUInt32LE(i, 0);
  return b;
}

const dir = await mkdtemp(path.join(tmpdir(), 'lake-bench-'));
const file = values.file ?? path.join(dir, 'source.bin');
if (!values.stream && !values.file) {
  const handle = await open(file, 'w');
  for (let i = 0; i < size / MiB; i++) await handle.write(blockAt(i));
  await handle.close();
}
const rssBefore = process.resourceUsage().maxRSS;

const admin = new S3Client({ region, endpoint, forcePathStyle: true });
const bucket = `lake-bench-${randomBytes(4).toString('hex')}`;
await admin.send(new CreateBucketCommand({ Bucket: bucket }));
const stage = stageFromDescriptor({
  version: 1,
  kind: 's3',
  bucket,
  prefix: 'bench',
  region,
  endpoint,
  forcePathStyle: true,
});

const source = values.stream
  ? Readable.from(
      (function* () {
        for (let i = 0; i < size / MiB; i++) yield blockAt(i);
      })(),
    )
  : file;
const started = process.hrtime.bigint();
let location;
try {
  location = await stage.upload(source, { partsInFlight, checkpointDir: values['checkpoint-dir'] });
} finally {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const maxRssMiB = process.resourceUsage().maxRSS / 1024;
  if (location) {
    const expected = createHash('sha256');
    if (values.file)
      for await (const chunk of createReadStream(values.file)) expected.update(chunk);
    else for (let i = 0; i < size / MiB; i++) expected.update(blockAt(i));
    console.log(
      JSON.stringify({
        benchmark: 'lake-upload-rss',
        source: values.stream ? 'stream' : 'file',
        resumable: values['checkpoint-dir'] !== undefined,
        bytes: location.sizeBytes,
        partSizeMiB: 64,
        partsInFlight,
        seconds: Number(seconds.toFixed(2)),
        mibPerSecond: Number((size / MiB / seconds).toFixed(1)),
        peakRssMiB: Number(maxRssMiB.toFixed(1)),
        rssBeforeUploadMiB: Number((rssBefore / 1024).toFixed(1)),
        sha256Ok: expected.digest('hex') === location.sha256,
      }),
    );
    await admin.send(
      new DeleteObjectCommand({
        Bucket: bucket,
        Key: location.uri.slice(`s3://${bucket}/`.length),
      }),
    );
  }
  await admin.send(new DeleteBucketCommand({ Bucket: bucket }));
  admin.destroy();
  await rm(dir, { recursive: true, force: true });
}
