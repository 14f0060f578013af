/**
 * Account and container operations of the versions server: List Containers, Get Account
 * Information, Create/Delete Container, Get Container Properties and List Blobs.
 *
 * @module
 */
import { listBlobs, listContainers, MAX_RESULTS, SUPPORTED_INCLUDES } from './listing.js';
import {
  containerOf,
  header,
  metadataHeaders,
  metadataOf,
  type OpContext,
  type Reply,
  ServiceError,
} from './reply.js';
import { etagOf } from './state.js';

/** Container names: 3 to 63 of lower-case letters, digits and single inner hyphens. */
const CONTAINER_NAME = /^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*$/;

function maxResultsOf(ctx: OpContext): number {
  const raw = ctx.params.get('maxresults');
  if (raw === undefined) return MAX_RESULTS;
  if (!/^-?\d+$/.test(raw)) {
    throw new ServiceError(
      400,
      'InvalidQueryParameterValue',
      `maxresults=${raw} is not an integer.`,
    );
  }
  const n = Number(raw);
  if (n <= 0)
    throw new ServiceError(400, 'OutOfRangeInput', `maxresults=${raw} must be at least 1.`);
  return Math.min(n, MAX_RESULTS);
}

function includesOf(ctx: OpContext, supported: Set<string>): Set<string> {
  const raw = ctx.params.get('include');
  const include = new Set(
    (raw ?? '')
      .split(',')
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
  );
  for (const item of include) {
    if (!supported.has(item)) {
      throw new ServiceError(
        501,
        'NotImplemented',
        `include=${item} is not implemented by this test server.`,
      );
    }
  }
  return include;
}

function endpointWithSlash(ctx: OpContext): string {
  return `${ctx.endpoint}/`;
}

/** List Containers. */
export function listContainersOp(ctx: OpContext): Reply {
  const result = listContainers(
    ctx.state.containers.values(),
    {
      prefix: ctx.params.get('prefix') ?? '',
      marker: ctx.params.get('marker') || undefined,
      maxResults: maxResultsOf(ctx),
      include: includesOf(ctx, new Set(['metadata'])),
    },
    endpointWithSlash(ctx),
  );
  if ('invalid' in result)
    throw new ServiceError(400, 'InvalidQueryParameterValue', result.invalid);
  return { status: 200, headers: { 'content-type': 'application/xml' }, body: result.xml };
}

/** Get Account Information: a general-purpose v2 account without a hierarchical namespace. */
export function getAccountInfo(): Reply {
  return {
    status: 200,
    headers: {
      'x-ms-sku-name': 'Standard_LRS',
      'x-ms-account-kind': 'StorageV2',
      'x-ms-is-hns-enabled': 'false',
    },
  };
}

/** Create Container (409 `ContainerAlreadyExists` when it exists). */
export function createContainer(ctx: OpContext): Reply {
  const name = ctx.containerName ?? '';
  if (!CONTAINER_NAME.test(name)) {
    throw new ServiceError(
      400,
      'InvalidResourceName',
      'The specified resource name contains invalid characters.',
    );
  }
  if (header(ctx, 'x-ms-blob-public-access') !== undefined) {
    throw new ServiceError(
      501,
      'NotImplemented',
      'Public access is not implemented by this test server.',
    );
  }
  if (ctx.state.containers.has(name)) {
    throw new ServiceError(
      409,
      'ContainerAlreadyExists',
      'The specified container already exists.',
    );
  }
  const instant = ctx.state.clock.next();
  const c = {
    name,
    etag: etagOf(instant),
    lastModified: instant.date,
    metadata: metadataOf(ctx),
    blobs: new Map(),
  };
  ctx.state.containers.set(name, c);
  return {
    status: 201,
    headers: { etag: `"${c.etag}"`, 'last-modified': c.lastModified.toUTCString() },
  };
}

/** Delete Container, with every blob and version in it. */
export function deleteContainer(ctx: OpContext): Reply {
  const c = containerOf(ctx);
  ctx.state.containers.delete(c.name);
  return { status: 202, headers: {} };
}

/** Get Container Properties (GET or HEAD `?restype=container`). */
export function getContainerProperties(ctx: OpContext): Reply {
  const c = containerOf(ctx);
  return {
    status: 200,
    headers: {
      etag: `"${c.etag}"`,
      'last-modified': c.lastModified.toUTCString(),
      'x-ms-lease-state': 'available',
      'x-ms-lease-status': 'unlocked',
      'x-ms-has-immutability-policy': 'false',
      'x-ms-has-legal-hold': 'false',
      'x-ms-default-encryption-scope': '$account-encryption-key',
      'x-ms-deny-encryption-scope-override': 'false',
      ...metadataHeaders(c.metadata),
    },
  };
}

/** List Blobs (flat, or hierarchical with `delimiter`). */
export function listBlobsOp(ctx: OpContext): Reply {
  const c = containerOf(ctx);
  const result = listBlobs(
    c,
    {
      prefix: ctx.params.get('prefix') ?? '',
      delimiter: ctx.params.get('delimiter') || undefined,
      marker: ctx.params.get('marker') || undefined,
      maxResults: maxResultsOf(ctx),
      include: includesOf(ctx, SUPPORTED_INCLUDES),
    },
    ctx.endpoint,
  );
  if ('invalid' in result)
    throw new ServiceError(400, 'InvalidQueryParameterValue', result.invalid);
  return { status: 200, headers: { 'content-type': 'application/xml' }, body: result.xml };
}
