/**
 * One GET whose whole answer is read as text (an XML or JSON listing), over `node:http` or
 * `node:https` with a keep-alive agent: unlike the HTTP/1.1 download client (http1-download.ts),
 * which takes only bodies with a Content-Length, it reads any transfer encoding, as services send
 * listings chunked (Azurite does). For a driver's lean listing path: what the answer means is the
 * caller's, so every status comes back as it is.
 *
 * @module
 */
import http from 'node:http';
import { asAbort } from '../core/errors.js';
import { nodeHttps } from './builtins.js';

/** A keep-alive agent for `url`'s protocol with at most `sockets` sockets per origin. */
export function textAgent(url: URL, sockets: number): http.Agent {
  const Agent = url.protocol === 'https:' ? nodeHttps().Agent : http.Agent;
  return new Agent({ keepAlive: true, maxSockets: sockets });
}

/**
 * GET `url` with `headers` through `agent`: the status and the body as UTF-8 text. Rejects for a
 * network failure, a body cut off, or an abort of `signal`.
 */
export async function getText(
  url: URL,
  o: { headers: Record<string, string>; agent: http.Agent; signal?: AbortSignal | undefined },
): Promise<{ status: number; text: string }> {
  try {
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      (url.protocol === 'https:' ? nodeHttps() : http)
        .request(url, { agent: o.agent, headers: o.headers, signal: o.signal }, resolve)
        .on('error', reject)
        .end();
    });
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    if (!res.complete) throw new Error(`GET ${url.origin}: the answer ended before its last byte`);
    return { status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') };
  } catch (error) {
    // Cut mid-body by the signal, the answer rejects with `Error: aborted`: the abort stands.
    throw o.signal?.aborted ? asAbort(error, o.signal) : error;
  }
}
