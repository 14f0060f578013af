/**
 * Azure errors read off the SDK's `RestError` into the one status map (src/driver-kit/service-errors.ts).
 * A failed `If-None-Match: *` is 409 or 412 by operation (both Exists on a create); a `versionid`
 * Azure calls malformed names no version (NotFound). HEAD answers carry the code in a header only.
 *
 * @module
 */
import type { ProvcatError } from '../../src/core/errors.js';
import { uriText } from '../../src/core/uri.js';
import { serviceError } from '../../src/driver-kit/service-errors.js';

/** What an Azure call was about, for messages and for the create rule. */
export interface AzureErrorContext {
  container: string;
  key?: string | undefined;
  /** The version a version primitive was asked for: messages name `az://c/k?at=version:ID`. */
  versionId?: string | undefined;
  /** The operation: `head`, `get`, `put`, `create`, `PutBlock`, `makeBucket`, ... */
  op: string;
}

const CREATE_OPS = new Set(['create', 'makeBucket']);
const NOT_FOUND = new Set(['BlobNotFound', 'ContainerNotFound']);
const VERSION_OPS = new Set(['headVersion', 'getVersion', 'copyVersion']);
const NOT_FOUND_VERSION = new Set([...NOT_FOUND, 'InvalidQueryParameterValue']);

/** The `az://` text of a container and key for messages (every key named, hostile or not). */
export const azUriText = (container: string, key?: string, versionId?: string) =>
  uriText('az', container, key, versionId);

type RestErrorLike = { statusCode?: unknown; code?: unknown; message?: unknown } & {
  details?: { errorCode?: unknown };
};

/**
 * Map an Azure SDK error (or any error thrown during an Azure call) to a provcat error through
 * the shared status map; a {@link ProvcatError} passes through unchanged. Never throws.
 */
export function mapAzureError(error: unknown, context: AzureErrorContext): ProvcatError {
  const e = error as RestErrorLike | null;
  const status = typeof e?.statusCode === 'number' ? e.statusCode : undefined;
  const rawCode = e?.details?.errorCode ?? e?.code;
  const code = typeof rawCode === 'string' ? rawCode : undefined;
  const hint =
    status === 403
      ? ' — check the credentials (AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY or the login) and the role assignments'
      : code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'REQUEST_SEND_ERROR'
        ? ' — is the blob endpoint (PROVCAT_AZURE_ENDPOINT, the connection string) right and the service up?'
        : '';
  return serviceError({
    op: context.op,
    uri: azUriText(context.container, context.key, context.versionId),
    status,
    code,
    message: typeof e?.message === 'string' ? e.message.split('\n')[0] : undefined,
    create: CREATE_OPS.has(context.op),
    notFoundCodes: VERSION_OPS.has(context.op) ? NOT_FOUND_VERSION : NOT_FOUND,
    hint,
    cause: error,
  });
}
