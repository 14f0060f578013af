/**
 * Small helpers for tests that talk to Azure test servers through `@azure/storage-blob`: read a
 * download's body, catch the error a request must fail with, and read its Azure error code.
 *
 * @module
 */
import type { RestError } from '@azure/storage-blob';

/** The whole body of a download, as bytes. */
export async function bodyBytes(body: NodeJS.ReadableStream | undefined): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body ?? []) chunks.push(Buffer.from(chunk as Buffer));
  return Buffer.concat(chunks);
}

/** The whole body of a download, as UTF-8 text. */
export async function bodyText(body: NodeJS.ReadableStream | undefined): Promise<string> {
  return (await bodyBytes(body)).toString('utf8');
}

/** The error `promise` rejects with; throws (failing the test) when it resolves instead. */
export async function failure(promise: Promise<unknown>): Promise<RestError> {
  try {
    await promise;
  } catch (error) {
    return error as RestError;
  }
  throw new Error('expected the request to fail, and it succeeded');
}

/**
 * The Azure error code of an SDK error: `code` from the XML body, or `x-ms-error-code` (which the
 * SDK puts in `details.errorCode`, the only place it has for HEAD answers, which have no body).
 */
export function errorCode(e: RestError): string | undefined {
  return e.code ?? (e.details as { errorCode?: string } | undefined)?.errorCode;
}

/** `[status, error code]` of an SDK error, for one-line assertions. */
export function statusAndCode(e: RestError): [number | undefined, string | undefined] {
  return [e.statusCode, errorCode(e)];
}
