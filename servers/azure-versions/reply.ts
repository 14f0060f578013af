/**
 * What an operation of the versions server hands back: a reply (status, headers, body) or a
 * {@link ServiceError} that becomes Azure's error answer (`<Error><Code/><Message/></Error>` and
 * an `x-ms-error-code` header).
 *
 * @module
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { AccountState, ContainerEntry } from './state.js';

/** A successful answer. */
export interface Reply {
  status: number;
  headers: Record<string, string>;
  /** The body; a blob's bytes are a view of the stored version, never a copy. */
  body?: Buffer | string;
}

/** An Azure error answer, thrown by an operation. */
export class ServiceError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ServiceError';
  }
}

/** Settings a test may change while the server runs. */
export interface ServerSettings {
  /**
   * The status of a failed `If-None-Match: *` on Put Blob, Put Block List and copies: 409
   * `BlobAlreadyExists` (Azurite, and most reports of Azure) or 412 `ConditionNotMet` (reported
   * for some operations). A driver must take both as "exists".
   */
  existsStatus: 409 | 412;
}

/** Everything an operation needs about its request. */
export interface OpContext {
  state: AccountState;
  settings: ServerSettings;
  method: string;
  headers: IncomingHttpHeaders;
  /** `[name, value]` pairs of the request headers, names as sent (for metadata case). */
  rawHeaders: string[];
  /** Query parameters, names lower-cased, values decoded. */
  params: Map<string, string>;
  body: Buffer;
  containerName: string | undefined;
  blobName: string | undefined;
  /** `http://host:port/devstoreaccount1` as the client addressed it. */
  endpoint: string;
  /** The port this server listens on (copy sources must point here). */
  port: number;
  account: string;
  key: Buffer;
  remoteAddress: string;
  /** Headers a SAS overrides on read answers. */
  overrides: Record<string, string>;
}

/** A header of the request as one string (the first value of a repeated one). */
export function header(ctx: OpContext, name: string): string | undefined {
  const v = ctx.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The container the request names, or a 404 `ContainerNotFound`. */
export function containerOf(ctx: OpContext): ContainerEntry {
  const c = ctx.containerName ? ctx.state.containers.get(ctx.containerName) : undefined;
  if (!c)
    throw new ServiceError(404, 'ContainerNotFound', 'The specified container does not exist.');
  return c;
}

/** The `x-ms-meta-*` headers of the request, names keeping the case they were sent in. */
export function metadataOf(ctx: OpContext): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i + 1 < ctx.rawHeaders.length; i += 2) {
    const name = ctx.rawHeaders[i] as string;
    if (name.toLowerCase().startsWith('x-ms-meta-')) {
      const key = name.slice('x-ms-meta-'.length);
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
        throw new ServiceError(
          400,
          'InvalidMetadata',
          `The metadata name ${JSON.stringify(key)} is not a C# identifier.`,
        );
      }
      out.push([key, (ctx.rawHeaders[i + 1] as string).trim()]);
    }
  }
  return out;
}

/** `x-ms-meta-*` response headers for `metadata`. */
export function metadataHeaders(metadata: Array<[string, string]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of metadata) out[`x-ms-meta-${k}`] = v;
  return out;
}
