/**
 * Azure errors read off the SDK's `RestError` (or the lean path's answer) and handed to the one
 * status map of every driver (src/service-errors.ts): 404 and `BlobNotFound`/`ContainerNotFound`
 * are NotFound, 401/403 PermissionDenied, 409 and 412 on a create Exists (Azure answers a failed
 * `If-None-Match: *` with either, depending on the operation), any other 412
 * PreconditionFailed, everything else StoreError with `status`. A `versionid` the service calls
 * malformed (400 `InvalidQueryParameterValue`) names no version: NotFound on version reads.
 *
 * HEAD answers have no body; the service's code is then only in `x-ms-error-code`, which the SDK
 * puts in `details.errorCode`: both are read.
 *
 * @module
 */
import type { ProvcatError } from '../../src/errors.js';
import { serviceError } from '../../src/service-errors.js';
import { encodeSegment } from '../../src/uri.js';

/** What an Azure call was about, for messages and for the create rule. */
export interface AzureErrorContext {
  container: string;
  key?: string | undefined;
  /** The operation: `head`, `get`, `put`, `create`, `PutBlock`, `makeBucket`, ... */
  op: string;
}

const CREATE_OPS = new Set(['create', 'makeBucket']);
const NOT_FOUND = new Set(['BlobNotFound', 'ContainerNotFound']);
/** A malformed `versionid` names no version: NotFound for the operations that take one. */
const VERSION_OPS = new Set(['headVersion', 'getVersion', 'copyVersion']);
const NOT_FOUND_VERSION = new Set([...NOT_FOUND, 'InvalidQueryParameterValue']);

/** The `az://` text of a container and key for messages (every key named, hostile or not). */
export function azUriText(container: string, key?: string): string {
  return `az://${container}/${key === undefined ? '' : key.split('/').map(encodeSegment).join('/')}`;
}

interface RestErrorLike {
  statusCode?: unknown;
  code?: unknown;
  message?: unknown;
  details?: { errorCode?: unknown };
}

/** The HTTP status of an SDK error, when the service answered. */
export function statusOf(error: unknown): number | undefined {
  const s = (error as RestErrorLike | null)?.statusCode;
  return typeof s === 'number' ? s : undefined;
}

function codeOf(error: unknown): string | undefined {
  const e = error as RestErrorLike | null;
  const code = e?.details?.errorCode ?? e?.code;
  return typeof code === 'string' ? code : undefined;
}

function hint(status: number | undefined, code: string | undefined): string {
  if (status === 403) {
    return ' — check the credentials (AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY or the login) and the role assignments';
  }
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'REQUEST_SEND_ERROR') {
    return ' — is the blob endpoint (PROVCAT_AZURE_ENDPOINT, the connection string) right and the service up?';
  }
  return '';
}

/**
 * Map an Azure SDK error (or any error thrown during an Azure call) to a provcat error through
 * the shared status map; a {@link ProvcatError} passes through unchanged. Never throws.
 */
export function mapAzureError(error: unknown, context: AzureErrorContext): ProvcatError {
  const status = statusOf(error);
  const code = codeOf(error);
  const raw = (error as RestErrorLike | null)?.message;
  return serviceError({
    op: context.op,
    uri: azUriText(context.container, context.key),
    status,
    code,
    message: typeof raw === 'string' ? raw.split('\n')[0] : undefined,
    create: CREATE_OPS.has(context.op),
    notFoundCodes: VERSION_OPS.has(context.op) ? NOT_FOUND_VERSION : NOT_FOUND,
    hint: hint(status, code),
    cause: error,
  });
}
