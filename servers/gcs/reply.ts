/**
 * What a route handler answers, before it is written to the socket. Handlers build replies;
 * the HTTP layer (http-layer.ts) writes them, which is where response faults (a dropped
 * connection, a mangled download) are applied, in one place for every route.
 *
 * @module
 */
import type { ObjectVersion } from './store.js';

/** A handler's answer. */
export type Reply =
  | { kind: 'json'; status: number; body: unknown; headers?: Record<string, string> }
  | { kind: 'empty'; status: number; headers?: Record<string, string> }
  | {
      kind: 'text';
      status: number;
      body: string;
      contentType: string;
      headers?: Record<string, string>;
    }
  | {
      kind: 'media';
      /** 200 for the whole object, 206 for a range. */
      status: 200 | 206;
      version: ObjectVersion;
      /** First byte served. */
      start: number;
      /** One past the last byte served. */
      end: number;
      /** XML API (signed URL) rather than JSON `alt=media`: changes the ETag form. */
      xml: boolean;
    };

/** A JSON reply. */
export function json(status: number, body: unknown, headers?: Record<string, string>): Reply {
  return headers === undefined
    ? { kind: 'json', status, body }
    : { kind: 'json', status, body, headers };
}

/** A reply with no body. */
export function empty(status: number, headers?: Record<string, string>): Reply {
  return headers === undefined ? { kind: 'empty', status } : { kind: 'empty', status, headers };
}
