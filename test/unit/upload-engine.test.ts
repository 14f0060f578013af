/**
 * The one upload engine (src/upload/engine.ts) against an in-memory part protocol, the way every
 * driver's protocol is driven: parts assembled in number order whatever order they are
 * acknowledged in, the in-flight bound, one part at a time for a sequential protocol, and a
 * trusted part that changed — sent again where parts can be replaced, refused where committed
 * bytes are final; a refused part whose abort fails too keeps its class, and every driver's
 * protocol says in one sentence what removes an upload left behind.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { AzureStore } from '../../drivers/azure/azure-store.js';
import { AzureBlocks } from '../../drivers/azure/blocks.js';
import { GcsResumable } from '../../drivers/gcs/resumable.js';
import { StageFiles } from '../../drivers/local/stage-files.js';
import { S3Multipart } from '../../drivers/s3/multipart.js';
import type {
  CompletedPart,
  ObjectInfo,
  PartProtocol,
  PartUpload,
} from '../../src/contract/primitives.js';
import { exitCodeOf, PermissionDenied, SourceChanged } from '../../src/core/errors.js';
import { PartBufferPool } from '../../src/upload/buffer-pool.js';
import { BufferedParts } from '../../src/upload/buffered-parts.js';
import { uploadParts } from '../../src/upload/engine.js';
import { BytesReader } from '../../src/upload/stream-readers.js';

async function bodyBytes(body: Uint8Array | Readable): Promise<Buffer> {
  if (body instanceof Uint8Array) return Buffer.from(body);
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** An in-memory protocol that records what it was sent, with a configurable answer delay. */
function memoryProtocol(options: { sequential?: boolean; delay?: (n: number) => number } = {}) {
  const parts = new Map<number, Buffer>();
  let inFlight = 0;
  let most = 0;
  const objects = new Map<string, Buffer>();
  const protocol: PartProtocol = {
    name: 'memory upload',
    maxParts: 1000,
    minPartSize: 1,
    maxPartSize: 1 << 30,
    sequential: options.sequential,
    leftover: 'the test removes it',
    resumable: true,
    async create() {
      return 'u1';
    },
    async putPart(_key: string, _upload: string, part: PartUpload) {
      inFlight++;
      most = Math.max(most, inFlight);
      try {
        const bytes = await bodyBytes(part.body);
        await new Promise((r) => setTimeout(r, options.delay?.(part.number) ?? 0));
        parts.set(part.number, bytes);
        return `t${part.number}`;
      } finally {
        inFlight--;
      }
    },
    async listParts() {
      return new Map([...parts].map(([n, b]) => [n, { token: `t${n}`, size: b.length }]));
    },
    async complete(key: string, _u: string, done: readonly CompletedPart[]): Promise<ObjectInfo> {
      const body = Buffer.concat(done.map((p) => parts.get(p.number) as Buffer));
      objects.set(key, body);
      return { key, size: body.length, version: 'v1' };
    },
    async abort() {},
    async *listUploads() {},
  };
  return { protocol, objects, parts, most: () => most };
}

const target = (protocol: PartProtocol) => ({
  protocol,
  key: 'k',
  uri: 'mem://b/k',
  debug: () => {},
});

function source(data: Buffer, partSize: number) {
  return new BufferedParts(new BytesReader(data), {
    partSize,
    pool: new PartBufferPool(),
    digest: true,
    partDigests: true,
  });
}

describe('the upload engine over any part protocol', () => {
  it('assembles parts in number order whatever order they are acknowledged in, within the window', async () => {
    const mem = memoryProtocol({ delay: (n) => (10 - n) * 4 });
    const data = randomBytes(9 * 100 + 7);
    const result = await uploadParts(target(mem.protocol), source(data, 100), {
      partSize: 100,
      partsInFlight: 3,
    });
    expect(mem.objects.get('k')?.equals(data)).toBe(true);
    expect(result.parts.map((p) => p.number)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(result.sha256).toBe(createHash('sha256').update(data).digest('hex'));
    expect(mem.most()).toBe(3);
  });

  it('a sequential protocol gets one part at a time, in order', async () => {
    const order: number[] = [];
    const mem = memoryProtocol({ sequential: true, delay: (n) => (5 - n) * 3 });
    const put = mem.protocol.putPart.bind(mem.protocol);
    mem.protocol.putPart = async (key, upload, part) => {
      order.push(part.number);
      return put(key, upload, part);
    };
    const data = randomBytes(5 * 64);
    await uploadParts(target(mem.protocol), source(data, 64), { partSize: 64, partsInFlight: 8 });
    expect(order).toEqual([1, 2, 3, 4, 5]);
    expect(mem.most()).toBe(1);
    expect(mem.objects.get('k')?.equals(data)).toBe(true);
  });

  it('a trusted part that changed is sent again, unless committed bytes are final', async () => {
    const data = randomBytes(3 * 50);
    const wrong = new Map([[2, { token: 't2', sha256: '0'.repeat(64) }]]);
    const replaceable = memoryProtocol();
    await uploadParts(target(replaceable.protocol), source(data, 50), {
      partSize: 50,
      partsInFlight: 1,
      upload: 'u1',
      trusted: wrong,
    });
    expect(replaceable.objects.get('k')?.equals(data)).toBe(true);

    const sequential = memoryProtocol({ sequential: true });
    await expect(
      uploadParts(target(sequential.protocol), source(data, 50), {
        partSize: 50,
        partsInFlight: 1,
        upload: 'u1',
        trusted: wrong,
      }),
    ).rejects.toBeInstanceOf(SourceChanged);
    expect(sequential.objects.has('k')).toBe(false);
  });

  it('a refused part whose abort is refused too stays PermissionDenied (exit 9), said in one sentence', async () => {
    const mem = memoryProtocol();
    const refused = (op: string) =>
      new PermissionDenied(`${op} mem://b/k: permission denied (HTTP 403)`, { status: 403 });
    mem.protocol.putPart = async () => {
      throw refused('put part');
    };
    mem.protocol.abort = async () => {
      throw refused('abort');
    };
    const error = await uploadParts(target(mem.protocol), source(randomBytes(300), 100), {
      partSize: 100,
      partsInFlight: 2,
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(PermissionDenied);
    expect(exitCodeOf(error)).toBe(9);
    expect((error as PermissionDenied).status).toBe(403);
    expect((error as Error).message).toBe(
      'put part mem://b/k: permission denied (HTTP 403); aborting memory upload u1 failed too, so it remains until the test removes it',
    );
  });

  it("every driver's protocol says what removes an upload left behind as the end of one sentence", () => {
    const protocols: PartProtocol[] = [
      new S3Multipart(async () => Promise.reject(new Error('unused')), 'b'),
      new GcsResumable(
        'b',
        async () => Promise.reject(new Error('unused')),
        () => {},
      ),
      new AzureBlocks('c', {} as AzureStore),
      new StageFiles('/nonexistent-stage', '', (key) => `file:///nonexistent-stage/${key}`).parts,
    ];
    for (const protocol of protocols) {
      // "... so it remains until <a clause with its own verb>", never "until nothing: ...".
      expect(protocol.leftover, protocol.name).toMatch(/\b(removes it|drops|discards)\b/);
      expect(protocol.leftover, protocol.name).not.toMatch(/^nothing|:/);
    }
  });
});
