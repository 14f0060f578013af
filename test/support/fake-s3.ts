/**
 * A protocol-level fake S3 (node:http) for the stall tests: it answers CreateMultipartUpload,
 * UploadPart, ListParts, CompleteMultipartUpload, AbortMultipartUpload and GetObject of the one
 * upload it holds, and treats each request as the test says — answer it, hold it (read it, never
 * answer), complete the upload and lose the answer, say the upload is gone, stop reading a part
 * mid-body, read a part slowly, or fail a part with a 500. Every request is recorded with what
 * the fake read of it and whether it was answered or cancelled by the client.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import { S3Client } from '@aws-sdk/client-s3';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { afterEach } from 'vitest';
import { listening } from '../fixtures/lake-helpers.js';

/** The operation a request is (`other`: anything else, answered 501). */
export type FakeOp = 'create' | 'part' | 'list' | 'complete' | 'abort' | 'get' | 'other';

/**
 * What the fake does with a request: `answer` it once its body is read; `hang` (read the body
 * fully, never answer); `complete-hang` (a completion: complete the upload, never answer, so the
 * answer is lost); `gone` (404 NoSuchUpload); for a part, also `stop` (read 256 KiB, then stop
 * reading and never answer, until {@link FakeS3.resume}), `slow` (read at about 8 MiB/s, then
 * answer) and `fail` (read the body, then answer 500 InternalError).
 */
export type FakeReply = 'answer' | 'hang' | 'complete-hang' | 'gone' | 'stop' | 'slow' | 'fail';

/** One request the fake received. */
export interface FakeRequest {
  op: FakeOp;
  /** The part number of an UploadPart. */
  number: number | undefined;
  /** 1 for the first request of this operation (of this part number), 2 for the second, ... */
  attempt: number;
  /** ms since the fake started. */
  at: number;
  /** Body bytes the fake read (in `stop` mode: until it stopped). */
  received: number;
  /** Its `x-amz-content-sha256`: the payload hash it was signed with. */
  payload: string;
  /** SHA-256 of the body bytes the fake read. */
  bodySha256: string;
  /** The fake answered it. */
  answered: boolean;
  /** The client closed the connection before an answer. */
  closed: boolean;
}

/** An UploadPart request. */
export interface FakePartRequest extends FakeRequest {
  number: number;
}

/** A running fake. */
export interface FakeS3 {
  endpoint: string;
  /** Every request, in order of arrival. */
  requests: FakeRequest[];
  /** The UploadPart requests. */
  readonly parts: FakePartRequest[];
  /** Every request's operation, in order. */
  readonly ops: FakeOp[];
  count(op: FakeOp): number;
  /** Read on (and discard) the bodies of `stop` requests, so that their closing is seen. */
  resume(): void;
  close(): Promise<void>;
}

/** The id of the one multipart upload the fake holds. */
export const FAKE_UPLOAD_ID = 'fake-upload-1';
const XML = '<?xml version="1.0" encoding="UTF-8"?>\n';

function opOf(method: string | undefined, q: URLSearchParams): FakeOp {
  if (method === 'POST' && q.has('uploads')) return 'create';
  if (method === 'PUT' && q.has('partNumber')) return 'part';
  if (method === 'GET' && q.has('uploadId')) return 'list';
  if (method === 'POST' && q.has('uploadId')) return 'complete';
  if (method === 'DELETE' && q.has('uploadId')) return 'abort';
  if (method === 'GET') return 'get';
  return 'other';
}

/** Start a fake whose answer to each request `reply` decides. */
export async function startFakeS3(
  reply: (op: FakeOp, attempt: number, part?: number) => FakeReply,
): Promise<FakeS3> {
  const started = performance.now();
  const requests: FakeRequest[] = [];
  const stopped: http.IncomingMessage[] = [];
  const parts = new Map<number, Buffer>();
  let completed: Buffer | undefined;
  let uploadOpen = true;
  const server = http.createServer((req, res) => {
    const q = new URL(req.url ?? '/', 'http://fake').searchParams;
    const op = opOf(req.method, q);
    const number = op === 'part' ? Number(q.get('partNumber')) : undefined;
    const record: FakeRequest = {
      op,
      number,
      attempt: requests.filter((r) => r.op === op && r.number === number).length + 1,
      at: performance.now() - started,
      received: 0,
      payload: String(req.headers['x-amz-content-sha256']),
      bodySha256: '',
      answered: false,
      closed: false,
    };
    requests.push(record);
    res.on('close', () => {
      if (!res.writableFinished) record.closed = true;
    });
    const send = (status: number, body: string | Buffer = '', headers = {}) => {
      record.answered = true;
      res.writeHead(status, { 'content-length': Buffer.byteLength(body), ...headers });
      res.end(body);
    };
    const xml = (body: string, status = 200) =>
      send(status, `${XML}${body}`, { 'content-type': 'application/xml' });
    const error = (status: number, code: string) =>
      xml(`<Error><Code>${code}</Code><Message>${code}</Message></Error>`, status);
    const assemble = () => {
      completed = Buffer.concat(
        [...parts.keys()].sort((a, b) => a - b).map((n) => parts.get(n) as Buffer),
      );
      uploadOpen = false;
    };
    const how = op === 'other' ? 'answer' : reply(op, record.attempt, number);
    const chunks: Buffer[] = [];
    const hash = createHash('sha256');
    let window = 0;
    let stop = false;
    req.on('data', (chunk: Buffer) => {
      if (stop) return;
      record.received += chunk.length;
      hash.update(chunk);
      chunks.push(chunk);
      if (how === 'stop' && record.received >= 256 * 1024) {
        // A paused socket is not read, so its closing is noticed only after `resume()`.
        stop = true;
        req.pause();
        stopped.push(req);
      }
      if (how === 'slow') {
        // About 8 MiB/s: after each 400 KiB, pause for 50 ms.
        window += chunk.length;
        if (window >= 400 * 1024) {
          window = 0;
          req.pause();
          setTimeout(() => req.resume(), 50);
        }
      }
    });
    req.on('end', () => {
      record.bodySha256 = hash.digest('hex');
      if (how === 'hang' || how === 'stop') return;
      if (how === 'fail') return error(500, 'InternalError');
      if (op === 'complete' && how === 'complete-hang') return assemble();
      if (op === 'other') return send(501);
      if (how === 'gone' || (!uploadOpen && op !== 'create' && op !== 'get')) {
        return error(404, 'NoSuchUpload');
      }
      switch (op) {
        case 'create':
          uploadOpen = true;
          parts.clear();
          return xml(
            `<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>${FAKE_UPLOAD_ID}</UploadId></InitiateMultipartUploadResult>`,
          );
        case 'part':
          parts.set(number as number, Buffer.concat(chunks));
          return send(200, '', { etag: `"part-${number}"` });
        case 'list': {
          const listed = [...parts]
            .map(
              ([n, b]) =>
                `<Part><PartNumber>${n}</PartNumber><ETag>"part-${n}"</ETag><Size>${b.length}</Size></Part>`,
            )
            .join('');
          return xml(
            `<ListPartsResult><Bucket>b</Bucket><Key>k</Key><UploadId>${FAKE_UPLOAD_ID}</UploadId><IsTruncated>false</IsTruncated>${listed}</ListPartsResult>`,
          );
        }
        case 'complete':
          assemble();
          return xml(
            '<CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><ETag>"done-2"</ETag></CompleteMultipartUploadResult>',
          );
        case 'abort':
          uploadOpen = false;
          return send(204);
        case 'get':
          if (completed === undefined) return error(404, 'NoSuchKey');
          return send(200, completed, {
            etag: '"done-2"',
            'last-modified': 'Thu, 01 Jan 2026 00:00:00 GMT',
          });
      }
    });
  });
  const { endpoint, close } = await listening(server);
  return {
    endpoint,
    requests,
    get parts() {
      return requests.filter((r): r is FakePartRequest => r.op === 'part');
    },
    get ops() {
      return requests.map((r) => r.op);
    },
    count: (op) => requests.filter((r) => r.op === op).length,
    resume: () => {
      for (const req of stopped.splice(0)) req.resume();
    },
    close,
  };
}

/**
 * Fakes and SDK clients for one test file, closed after each test: `fake` starts one,
 * `client` makes an SDK client for it (static credentials, three attempts, quiet; a socket
 * timeout of its own only when given).
 */
export function fakeS3s(): {
  fake(reply: (op: FakeOp, attempt: number, part?: number) => FakeReply): Promise<FakeS3>;
  client(endpoint: string, socketTimeout?: number): S3Client;
  /** Destroy `client` (another server's) after the test too. */
  track<T extends S3Client>(client: T): T;
} {
  const fakes: FakeS3[] = [];
  const clients: S3Client[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy();
    for (const f of fakes.splice(0)) await f.close();
  });
  return {
    async fake(reply) {
      const f = await startFakeS3(reply);
      fakes.push(f);
      return f;
    },
    track(client) {
      clients.push(client);
      return client;
    },
    client(endpoint, socketTimeout) {
      const client = new S3Client({
        endpoint,
        region: 'us-east-1',
        forcePathStyle: true,
        credentials: { accessKeyId: 'AKIDFAKE', secretAccessKey: 'SECRETFAKE' },
        requestChecksumCalculation: 'WHEN_REQUIRED',
        responseChecksumValidation: 'WHEN_REQUIRED',
        maxAttempts: 3,
        requestHandler: new NodeHttpHandler({ socketTimeout }),
        // Quiet: the SDK warns on the console about every failed streamed request otherwise.
        logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {} },
      });
      clients.push(client);
      return client;
    },
  };
}
