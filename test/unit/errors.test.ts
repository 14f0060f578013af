/**
 * The one status map (src/driver-kit/service-errors.ts), the exit codes and the one retry policy
 * (src/core/retry.ts), without a server.
 */
import { describe, expect, it } from 'vitest';
import {
  Exists,
  exitCodeOf,
  NotFound,
  NotSupported,
  ObjectIntegrityError,
  OfflineMiss,
  PartLimitExceeded,
  PermissionDenied,
  PreconditionFailed,
  ProvcatError,
  SourceChanged,
  SourceError,
  StoreError,
  UriError,
} from '../../src/core/errors.js';
import { backoffMs, isRetryable, RETRY_CAP_MS, withRetries } from '../../src/core/retry.js';
import { serviceError } from '../../src/driver-kit/service-errors.js';

const base = { op: 'head', uri: 's3://b/k' };

describe('the status map', () => {
  it.each([
    [{ status: 404 }, NotFound],
    [{ status: 400, code: 'NoSuchKey', notFoundCodes: new Set(['NoSuchKey']) }, NotFound],
    [{ status: 401 }, PermissionDenied],
    [{ status: 403, code: 'AccessDenied' }, PermissionDenied],
    [{ status: 412, create: true }, Exists],
    [{ status: 409, code: 'BlobAlreadyExists', create: true }, Exists],
    [{ status: 412 }, PreconditionFailed],
    [{ status: 409 }, StoreError],
    [{ status: 501 }, NotSupported],
    [
      {
        status: 400,
        code: 'FeatureNotSupported',
        unsupportedCodes: new Set(['FeatureNotSupported']),
      },
      NotSupported,
    ],
    [{ status: 500 }, StoreError],
    [{ status: 503, code: 'SlowDown' }, StoreError],
    [{}, StoreError],
  ])('%o → %s', (failure, kind) => {
    const cause = new Error('sdk');
    const error = serviceError({ ...base, ...failure, cause });
    expect(error).toBeInstanceOf(kind);
    expect(error.constructor).toBe(kind);
    expect(error.cause).toBe(cause);
    expect(error.uri).toBe('s3://b/k');
  });

  it('a 403 is never NotFound, and keeps its status; the message names op, URI, code, status and hint', () => {
    const error = serviceError({
      ...base,
      status: 403,
      code: 'SignatureDoesNotMatch',
      message: 'the signature does not match',
      hint: ' — check the credentials',
      cause: new Error('x'),
    });
    expect(error).not.toBeInstanceOf(NotFound);
    expect((error as StoreError).status).toBe(403);
    expect(error.message).toBe(
      'head s3://b/k: permission denied: SignatureDoesNotMatch (HTTP 403): the signature does not match — check the credentials',
    );
  });

  it('a provcat error passes through unchanged', () => {
    const inner = new OfflineMiss('offline');
    expect(serviceError({ ...base, status: 500, cause: inner })).toBe(inner);
  });
});

describe('exit codes', () => {
  it.each([
    [new NotFound('x'), 3],
    [new Exists('x'), 4],
    [new OfflineMiss('x'), 5],
    [new ObjectIntegrityError('DigestMismatch', 'x'), 6],
    [new StoreError('x'), 7],
    [new UriError('x'), 8],
    [new PermissionDenied('x'), 9],
    [new PreconditionFailed('x'), 10],
    [new NotSupported('x'), 11],
    [new SourceError('x'), 1],
    [new SourceChanged('x'), 1],
    [new PartLimitExceeded('x'), 1],
    [new ProvcatError('x'), 1],
    [new Error('x'), 1],
  ])('%s exits %d', (error, code) => {
    expect(exitCodeOf(error)).toBe(code);
  });

  it('the three new classes are StoreErrors with their own code', () => {
    for (const error of [
      new PermissionDenied('x'),
      new PreconditionFailed('x'),
      new NotSupported('x'),
    ]) {
      expect(error).toBeInstanceOf(StoreError);
      expect(error.code).toBe(error.constructor.name);
    }
  });
});

describe('the retry policy', () => {
  it.each([
    [new StoreError('x', { status: 503 }), true],
    [new StoreError('x', { status: 500 }), true],
    [new StoreError('x', { status: 429 }), true],
    [new StoreError('x', { status: 408 }), true],
    [new StoreError('x', { status: 400 }), false],
    [new PermissionDenied('x', { status: 403 }), false],
    [new NotFound('x'), false],
    [new PreconditionFailed('x', { status: 412 }), false],
    [new SourceError('x'), false],
    [
      new StoreError('x', { cause: Object.assign(new Error('reset'), { code: 'ECONNRESET' }) }),
      true,
    ],
    [new StoreError('x', { cause: new Error('weird') }), false],
    [Object.assign(new Error('t'), { name: 'TimeoutError' }), true],
    [Object.assign(new Error('hang'), { message: 'socket hang up' }), true],
    [{ $metadata: { httpStatusCode: 502 } }, true],
    [{ $retryable: {} }, true],
    [Object.assign(new Error('aborted'), { name: 'AbortError' }), false],
  ])('%s retryable: %s', (error, retryable) => {
    expect(isRetryable(error)).toBe(retryable);
  });

  it('backoff is full jitter below min(cap, base × 2^attempt)', () => {
    expect(backoffMs(1, () => 0.999)).toBeLessThan(200);
    expect(backoffMs(3, () => 0.5)).toBe(400);
    expect(backoffMs(30, () => 1)).toBe(RETRY_CAP_MS);
    expect(backoffMs(2, () => 0)).toBe(0);
  });

  it('retries what the policy retries, up to the attempt count, and stops on a refusal', async () => {
    let calls = 0;
    await expect(
      withRetries(
        async () => {
          calls++;
          throw new StoreError('busy', { status: 503 });
        },
        { attempts: 3 },
      ),
    ).rejects.toMatchObject({ status: 503 });
    expect(calls).toBe(3);

    calls = 0;
    await expect(
      withRetries(async () => {
        calls++;
        throw new PermissionDenied('no', { status: 403 });
      }),
    ).rejects.toBeInstanceOf(PermissionDenied);
    expect(calls).toBe(1);

    calls = 0;
    const value = await withRetries(async (n) => {
      calls++;
      if (n < 2) throw new StoreError('once', { status: 500 });
      return 'ok';
    });
    expect(value).toBe('ok');
    expect(calls).toBe(2);
  });

  it('an abort stops at once, during the backoff too', async () => {
    const controller = new AbortController();
    const run = withRetries(
      async () => {
        setTimeout(() => controller.abort(), 5);
        throw new StoreError('busy', { status: 503 });
      },
      { attempts: 10, signal: controller.signal },
    );
    await expect(run).rejects.toMatchObject({ name: 'AbortError' });
  });
});
