/**
 * The S3 client a store builds for itself ({@link buildS3Client}) and the keep-alive agents its
 * requests share with the lean reader ({@link keepAliveAgents}). Building makes no network call;
 * the SDK is imported here, on first use, not at module load (sdk.ts).
 *
 * @module
 */
import { Agent as HttpAgent } from 'node:http';
import type { Agent as HttpsAgent } from 'node:https';
import type { S3Client } from '@aws-sdk/client-s3';
import { nodeHttps } from '../../src/net/builtins.js';
import type { S3Config } from './config.js';
import { credentialsOf } from './lean-signer.js';
import { loadHttpHandler, loadS3Sdk } from './sdk.js';

/** How long a socket may stay idle (no byte either way) before its transfer counts as dead. */
export const SOCKET_TIMEOUT_MS = 120_000;

/** The HTTP and HTTPS keep-alive agents of one store, and their closing. */
export interface KeepAliveAgents {
  http: HttpAgent;
  /** Made (and node:https loaded) only when an https request needs it. */
  readonly https: HttpsAgent;
  /** Destroy both agents' sockets (the https agent only if it was made). */
  close(): void;
}

/** Keep-alive agents of `maxSockets` sockets each (and as many idle ones). */
export function keepAliveAgents(maxSockets: number): KeepAliveAgents {
  const agent = { keepAlive: true, maxSockets, maxFreeSockets: maxSockets };
  let httpsAgent: HttpsAgent | undefined;
  const https = (): HttpsAgent => {
    httpsAgent ??= new (nodeHttps().Agent)(agent);
    return httpsAgent;
  };
  const http = new HttpAgent(agent);
  return {
    http,
    get https() {
      return https();
    },
    close() {
      http.destroy();
      httpsAgent?.destroy();
    },
  };
}

/**
 * A client from the configuration: the SDK's default credential chain, `agents` for its
 * sockets, checksums as configured, SDK warnings to `debug` rather than stderr.
 */
export async function buildS3Client(
  c: S3Config,
  agents: { http: HttpAgent; https: HttpsAgent },
  debug: (message: string) => void,
): Promise<S3Client> {
  const [sdk, { NodeHttpHandler }] = await Promise.all([loadS3Sdk(), loadHttpHandler()]);
  debug(
    `client: region ${c.region}, endpoint ${c.endpoint ?? '(AWS)'}, path-style ${c.forcePathStyle}, ${agents.http.maxSockets} sockets`,
  );
  // SDK warnings (retries of streamed bodies, socket pressure) go to the debug log, not stderr.
  const logger = {
    trace: () => {},
    debug: () => {},
    info: () => {},
    warn: (...args: unknown[]) => debug(`sdk warning: ${args.map(String).join(' ')}`),
    error: (...args: unknown[]) => debug(`sdk error: ${args.map(String).join(' ')}`),
  };
  return new sdk.S3Client({
    logger,
    credentials: await credentialsOf(c),
    region: c.region,
    endpoint: c.endpoint,
    ignoreConfiguredEndpointUrls: c.ignoreConfiguredEndpointUrls || undefined,
    forcePathStyle: c.forcePathStyle,
    followRegionRedirects: c.endpoint === undefined,
    requestChecksumCalculation: c.requestChecksumCalculation,
    responseChecksumValidation: c.responseChecksumValidation,
    requestHandler: new NodeHttpHandler({
      httpAgent: agents.http,
      httpsAgent: agents.https,
      logger,
      connectionTimeout: 10_000,
      // An idle socket (no byte either way) for 2 minutes is a dead transfer.
      socketTimeout: SOCKET_TIMEOUT_MS,
    }),
  });
}
